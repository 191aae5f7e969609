// edgespec's linear kernels over GGUF-style weight blocks: the arithmetic, with no
// ExecuTorch dependency (block_linear.cpp wraps it as the op `edgespec::block_linear`;
// tests/kernels/block_linear_selftest.cpp checks every SIMD path against the portable one,
// natively and under qemu-aarch64). This file: the contract, the layout's constants, the one
// activation quantizer and the scalar helpers every path shares; portable.h is the reference
// path, x86_avx2.h / x86_avx512.h / neon.h the SIMD paths, dispatch.h picks one per call.
//
// y[i, n] = sum over blocks g of 32 input channels, in ascending order, of
//     t = (d_w[n, g] * d_x[i, g]) * dot(q_w[n, g], q_x[i, g])   (integer dot, exact)
//     t = t + m_w[n, g] * s_x[i, g]                              (formats with a min)
//     acc = acc + t
// where the activation row x[i] is quantized once per call to int8 per block of 32 with its
// own scale (llama.cpp's q8_1): d_x = amax / 127, q_x = round-half-even(x / d_x),
// s_x = d_x * sum(q_x). Weights: w = d_w * q_w + m_w (U4*: 4-bit q_w in 0..15; S8M: 8-bit q_w)
// or w = d_w * q_w (S8H, S8F); 8-bit q_w is any int8, -128..127. Every path evaluates exactly
// these float operations in this order on every output, one row of x at a time, and the
// library is compiled without floating-point contraction: a row's result is bitwise
// independent of how many rows a call carries (M), of the thread count and of the SIMD path
// (verification stays exact).
//
// Packed weights: output rows in tiles of 8 (kTileRows), tile rows in pairs (rows padded with
// zeros to a multiple of 16), the two tiles of a pair side by side block after block, so a
// thread streams one contiguous range whether it reads 8 or 16 rows at a time:
//   tile(rg, g), rows 8rg..8rg+7 of block g, at byte ((rg / 2) * G * 2 + 2 g + rg % 2) * tile_bytes.
// Codes are interleaved by groups of 4 elements: group c is 32 bytes, 4 of each row in row
// order, so one 32-bit lane of a SIMD dot product (x86 vpdpbusd / pmaddubsw + pmaddwd, Arm
// sdot) is one row's partial dot, and the 8 rows' dots land in row order with no horizontal add:
//   U4H (Q4_0, Q4_1): codes: group c (0..3), row r, byte e at 32c + 4r + e holds element
//                     4c + e in the low nibble and 16 + 4c + e in the high one (GGUF pairs j
//                     with j + 16 too), then d fp16[8] and m fp16[8] in row order   (160 bytes)
//   U4F (Q4_K's sub-blocks, rounded fp32 sources): the same with fp32 d and m       (192 bytes)
//   S8H (Q8_0): codes: group c (0..7), row r, byte e at 32c + 4r + e = element 4c + e
//               (int8), then d fp16[8]                                              (272 bytes)
//   S8F (Q6_K): codes as S8H (q - 32), then fp32 scales [8] of elements 0..15 and [8] of
//               elements 16..31 (d * sc per 16: exact)                               (320 bytes)
//               its term is (d_lo d_x) dot_lo + (d_hi d_x) dot_hi
//   S8M (Q5_1, Q5_K's sub-blocks): codes as S8H (GGUF's q in 0..31), then fp32 d[8] and
//               m[8]                                                                (320 bytes)
// edgespec/kernels/block_linear.py writes this layout; the two must agree.

#pragma once

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../vec8.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define EDGESPEC_X86 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#if defined(__linux__)  // Linux and Android
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#define EDGESPEC_ARM 1
#endif

namespace edgespec {
namespace blocks {

constexpr int64_t kBlock = 32;    // input channels per block
constexpr int64_t kTileRows = 8;  // output rows per tile
constexpr int64_t kPairRows = 2 * kTileRows;  // rows per pair of tiles (the padding unit)
// How far ahead a thread prefetches its stream, in pair blocks, unless the plan chosen by
// measurement says otherwise (16: ~5 KB of Q4 tiles, about a DRAM latency's worth at one
// core's bandwidth on the EPYC it was tuned on; QuantizedRows::prefetch carries the choice)
constexpr int64_t kPrefetchBlocks = 16;

// 8-row tiles of an [n, K] matrix (a whole number of pairs)
constexpr int64_t tile_rows(int64_t n) { return 2 * ((n + kPairRows - 1) / kPairRows); }
// The first block of tile row rg, G blocks per row; block g is 2 g tiles further on.
inline const uint8_t* tile_row_start(const uint8_t* packed, int64_t rg, int64_t G, int64_t tb) { return packed + ((rg / 2) * G * 2 + rg % 2) * tb; }
constexpr int64_t kRowChunk = 8;  // activation rows that share one read of a tile (256-bit and Arm paths)
constexpr int64_t kRowChunkWide = 16;  // the same for AVX-512: 32 vector registers hold 16 rows' accumulators

enum Format : int64_t { kU4H = 1, kU4F = 2, kS8H = 3, kS8F = 4, kS8M = 5 };

constexpr bool is_s8(int64_t format) { return format == kS8H || format == kS8F || format == kS8M; }
constexpr bool fp32_scales(int64_t format) { return format == kU4F || format == kS8F || format == kS8M; }
constexpr bool has_min(int64_t format) { return format == kU4H || format == kU4F || format == kS8M; }
constexpr int64_t code_bytes(int64_t format) { return is_s8(format) ? 256 : 128; }
// Codes, then d[8], then m[8] (S8F: the second half's scales; S8H: none)
constexpr int64_t tile_bytes(int64_t format) {
  return format < kU4H || format > kS8M ? 0 : code_bytes(format) + (fp32_scales(format) ? 4 : 2) * 8 * (format == kS8H ? 1 : 2);
}
// Where a tile's second 8 scales (m, or S8F's second half's d) start
constexpr int64_t second_scales(int64_t format) { return code_bytes(format) + (fp32_scales(format) ? 32 : 16); }

// Activation rows quantized per block: row i's codes at q + i * k, scales at d + i * g.
struct QuantizedRows {
  const int8_t* q;
  const float* d;
  const float* s;  // d * sum of the block's codes
  int64_t k;
  int64_t g;
  int64_t prefetch = kPrefetchBlocks;  // how far ahead the weight stream is prefetched (pair blocks)
  const uint8_t* qu = nullptr;  // q + 128 as unsigned bytes, row i at qu + i * k (AVX-512's 8-bit formats over rows), or null
};

// The one activation quantizer (every path reads its output). x [m, k], k a multiple of 32.
// Per block: amax = max |x_j|, d = amax / 127, id = 1 / d (0 when d is 0, or when 1 / d
// overflows: amax below ~3.7e-37, a block of nothing that quantizes to zero codes),
// q_j = clamp(round-half-even(x_j * id), -127, 127), s = d * sum q. A block holding a NaN or
// an infinity gets d = s = NaN and zero codes, so its outputs are NaN (as the float product
// would be). 8 lanes of GCC/Clang vector extensions (vec8.h): AVX2 or NEON, one IEEE
// operation per lane, the same bits as a scalar loop.
inline void quantize_rows(const float* x, int64_t m, int64_t k, int8_t* q, float* d, float* s) {
  using namespace edgespec::vec;
  typedef int8_t v8c __attribute__((vector_size(8)));
  const int64_t G = k / kBlock;
  const v8f round_shift = splat(12582912.0f);  // 1.5 * 2^23: (v + it) - it rounds |v| < 2^22 half to even
  const v8i abs_mask = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
  for (int64_t b = 0; b < m * G; ++b) {
    const float* xb = x + b * kBlock;
    v8f v[4], amax = splat(0.f), probe = splat(0.f);  // probe: NaN iff an element is NaN or infinite
    for (int c = 0; c < 4; ++c) {
      v[c] = load8(xb + 8 * c);
      const v8f a = (v8f)((v8i)v[c] & abs_mask);
      probe = probe + (v[c] - v[c]);
      amax = a > amax ? a : amax;
    }
    probe = probe + __builtin_shufflevector(probe, probe, 4, 5, 6, 7, 0, 1, 2, 3);
    probe = probe + __builtin_shufflevector(probe, probe, 2, 3, 0, 1, 6, 7, 4, 5);
    probe = probe + __builtin_shufflevector(probe, probe, 1, 0, 3, 2, 5, 4, 7, 6);
    v8f t = __builtin_shufflevector(amax, amax, 4, 5, 6, 7, 0, 1, 2, 3);  // max is exact in any order
    amax = t > amax ? t : amax;
    t = __builtin_shufflevector(amax, amax, 2, 3, 0, 1, 6, 7, 4, 5);
    amax = t > amax ? t : amax;
    t = __builtin_shufflevector(amax, amax, 1, 0, 3, 2, 5, 4, 7, 6);
    amax = t > amax ? t : amax;
    const bool all_finite = probe[0] == 0.f;
    const float dd = all_finite ? amax[0] / 127.f : std::numeric_limits<float>::quiet_NaN();
    float id = dd > 0.f ? 1.f / dd : 0.f;
    if (!(id <= 3.4028234663852886e38f)) id = 0.f;  // 1 / d overflowed; NaN d: the codes are zero
    v8i sum = v8i{};
    int8_t* qb = q + b * kBlock;
    for (int c = 0; c < 4; ++c) {
      v8f r = (v[c] * splat(id) + round_shift) - round_shift;
      r = r > splat(127.f) ? splat(127.f) : r;
      r = r < splat(-127.f) ? splat(-127.f) : r;
      if (!all_finite) r = splat(0.f);  // zero codes, chosen before the conversion: a NaN lane's would be undefined behaviour
      const v8i ci = __builtin_convertvector(r, v8i);
      sum += ci;
      const v8c c8 = __builtin_convertvector(ci, v8c);
      std::memcpy(qb + 8 * c, &c8, 8);
    }
    sum += __builtin_shufflevector(sum, sum, 4, 5, 6, 7, 0, 1, 2, 3);
    sum += __builtin_shufflevector(sum, sum, 2, 3, 0, 1, 6, 7, 4, 5);
    sum += __builtin_shufflevector(sum, sum, 1, 0, 3, 2, 5, 4, 7, 6);
    const int32_t total = sum[0];
    d[b] = dd;
    s[b] = dd * static_cast<float>(total);
  }
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    float f = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal: exact
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A tile's 8 scales and mins in row order, as fp32 (m zero for S8H; for S8F, d and m are the
// scales of elements 0..15 and 16..31).
inline void tile_scales(int64_t format, const uint8_t* t, float* d, float* m) {
  const uint8_t* p = t + code_bytes(format);
  for (int r = 0; r < 8; ++r) {
    if (fp32_scales(format)) {
      std::memcpy(d + r, p + 4 * r, 4);
      std::memcpy(m + r, p + 32 + 4 * r, 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * r, 2);
    d[r] = half_to_float(h);
    if (format == kU4H) std::memcpy(&h, p + 16 + 2 * r, 2);
    m[r] = format == kU4H ? half_to_float(h) : 0.f;
  }
}

// The bytes of a packed weight of n rows over G blocks in `format` (tile_rows(n) * G tiles of
// tile_bytes(format)), or -1 where the product does not fit int64 (no tensor's size equals it:
// an out_features far past the weight's cannot wrap to its size).
inline int64_t packed_bytes(int64_t n, int64_t G, int64_t format) {
  int64_t tiles, bytes;
  if (__builtin_mul_overflow(tile_rows(n), G, &tiles) || __builtin_mul_overflow(tiles, tile_bytes(format), &bytes)) return -1;
  return bytes;
}

// Row r of a packed weight over G blocks as floats o [32 G]: w = d q, then + m where the format
// has a min, each rounded as written (the file's values: BlockCodes.dequantize's arithmetic).
// An embedding table read from the blocks a tied lm head computes with (edgespec::block_embedding).
inline void dequantize_row(const uint8_t* packed, int64_t format, int64_t r, int64_t G, float* o) {
  const int64_t tb = tile_bytes(format), j = r % kTileRows;
  const uint8_t* t = tile_row_start(packed, r / kTileRows, G, tb);
  for (int64_t g = 0; g < G; ++g, t += 2 * tb) {
    float d[8], m[8];
    tile_scales(format, t, d, m);
    int q[kBlock];
    for (int c = 0; c < (is_s8(format) ? 8 : 4); ++c)  // group c: 4 bytes per row, row j's at 4 j
      for (int e = 0; e < 4; ++e) {
        const uint8_t b = t[32 * c + 4 * j + e];
        if (is_s8(format)) {
          q[4 * c + e] = static_cast<int8_t>(b);
        } else {
          q[4 * c + e] = b & 0x0F;
          q[16 + 4 * c + e] = b >> 4;
        }
      }
    float* og = o + g * kBlock;
    for (int e = 0; e < kBlock; ++e) {
      const float scale = format == kS8F && e >= 16 ? m[j] : d[j];  // S8F: the halves' own scales
      const float w = static_cast<float>(q[e]) * scale;
      og[e] = has_min(format) ? w + m[j] : w;
    }
  }
}

// Row r's 32 codes of a tile as integers.
inline void tile_codes(int64_t format, const uint8_t* t, int r, int32_t* c) {
  for (int j = 0; j < (is_s8(format) ? 32 : 16); ++j) {
    const uint8_t b = t[32 * (j / 4) + 4 * r + j % 4];
    if (is_s8(format)) {
      c[j] = static_cast<int8_t>(b);
    } else {
      c[j] = b & 0x0f;
      c[j + 16] = b >> 4;
    }
  }
}

}  // namespace blocks
}  // namespace edgespec
