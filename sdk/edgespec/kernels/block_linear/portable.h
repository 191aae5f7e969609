// The portable path: block_linear's contract (contract.h) in plain C++, every float
// operation in the contract's order. The reference every SIMD path is tested against, and the
// path of a CPU without one.

#pragma once

#include "contract.h"

namespace edgespec {
namespace blocks {

// Portable path: tile row rg's blocks [0, G), activation rows [0, m) (m <= kRowChunk);
// acc[i * 8 + r] accumulates output row r of the tile for activation row i.
inline void tile_row_portable(int64_t format, const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  const int64_t tb = tile_bytes(format);
  int32_t codes[8][32];
  float d[8], mn[8];
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + 2 * g * tb;
    tile_scales(format, t, d, mn);
    for (int r = 0; r < 8; ++r) tile_codes(format, t, r, codes[r]);
    for (int64_t i = 0; i < m; ++i) {
      const int8_t* xq = x.q + i * x.k + g * kBlock;
      const float dx = x.d[i * x.g + g], sx = x.s[i * x.g + g];
      for (int r = 0; r < 8; ++r) {
        int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; ++j) lo += codes[r][j] * xq[j];
        for (int j = 16; j < 32; ++j) hi += codes[r][j] * xq[j];
        float t;
        if (format == kS8F) {
          t = (d[r] * dx) * static_cast<float>(lo) + (mn[r] * dx) * static_cast<float>(hi);
        } else {
          t = (d[r] * dx) * static_cast<float>(lo + hi);
          if (has_min(format)) t = t + mn[r] * sx;
        }
        acc[i * 8 + r] = acc[i * 8 + r] + t;
      }
    }
  }
}

}  // namespace blocks
}  // namespace edgespec
