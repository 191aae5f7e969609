// Which path computes a call, and the walk over tile rows and activation rows that every path
// shares: `linear_tile_rows` is block_linear's entry point (block_linear.cpp, the self-test and
// bench/block_linear_rows.py call it).

#pragma once

#include "contract.h"
#include "neon.h"
#include "portable.h"
#include "x86_amx.h"
#include "x86_avx512.h"

namespace edgespec {
namespace blocks {

enum class Path : int64_t { kPortable = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3, kDotprod = 4, kI8mm = 5, kAmxInt8 = 6 };
constexpr int64_t kPaths = 7;

inline const char* path_name(Path p) {
  switch (p) {
    case Path::kAvx2: return "avx2";
    case Path::kAvxVnni: return "avx-vnni";
    case Path::kAvx512Vnni: return "avx512-vnni";
    case Path::kDotprod: return "neon-dotprod";
    case Path::kI8mm: return "neon-i8mm";
    case Path::kAmxInt8: return "amx-int8";
    default: return "portable";
  }
}

// Whether this CPU runs `p` (checked at run time).
inline bool path_supported(Path p) {
  switch (p) {
#if EDGESPEC_X86
    case Path::kAvx2: return cpu_has_avx2();
    case Path::kAvxVnni: return cpu_has_avx_vnni();
    case Path::kAvx512Vnni: return cpu_has_avx512_vnni();
    case Path::kAmxInt8: return cpu_has_amx_int8();
#endif
#if EDGESPEC_ARM
    case Path::kDotprod: return cpu_has_dotprod();
    case Path::kI8mm: return cpu_has_i8mm();
#endif
    case Path::kPortable: return true;
    default: return false;
  }
}

// The fastest path this CPU runs for one row (checked once): the one with the most work per
// instruction. (AMX pays for several rows only: the plan chooses it by measurement.)
inline Path best_path() {
  static const Path best = [] {
    for (Path p : {Path::kAvx512Vnni, Path::kAvxVnni, Path::kAvx2, Path::kI8mm, Path::kDotprod})
      if (path_supported(p)) return p;
    return Path::kPortable;
  }();
  return best;
}

// How a call computes, per regime of row counts: chosen by timing the model's own shapes on
// this CPU (edgespec/kernels/plan.py), else `default_choice`. Every choice gives the same bits.
struct Choice {
  Path path;
  int64_t prefetch;            // pair blocks the weight stream is prefetched ahead
  int64_t min_parallel_bytes;  // a call whose tiles (times its rows, up to a chunk) are fewer bytes runs on one thread
};
enum Regime : int64_t { kOneRow = 0, kFewRows = 1, kManyRows = 2 };  // 1 row; 2..16 (verification); more (prefill)
constexpr int64_t kRegimes = 3;
constexpr int64_t regime_of(int64_t m) { return m <= 1 ? kOneRow : (m <= 2 * kRowChunk ? kFewRows : kManyRows); }
// Before any measurement: the path with the most work per instruction, small matrices (the k/v
// projections, whose read is shorter than waking the pool's threads) on one thread.
inline Choice default_choice() { return {best_path(), kPrefetchBlocks, 128 << 10}; }

// Tile rows [rg0, rg1) through `tile_row(w, x, m, acc)`, Tiles tile rows per call (w the
// first's block 0; acc row i's Tiles * 8 outputs at acc + i * Tiles * 8), all m activation
// rows, kRowChunk at a time: out [m, n] (row stride n). With Tiles = 2, rg0 and rg1 are even.
template <int64_t Tiles = 1, int64_t Chunk = kRowChunk, typename TileRow>
inline void for_tile_rows(int64_t format, const uint8_t* packed, const QuantizedRows& x, int64_t m, int64_t n, int64_t rg0, int64_t rg1,
                          float* out, TileRow tile_row) {
  constexpr int64_t W = Tiles * kTileRows;
  const int64_t tb = tile_bytes(format);
  float acc[Chunk * W];
  for (int64_t rg = rg0; rg < rg1; rg += Tiles) {
    const uint8_t* w = tile_row_start(packed, rg, x.g, tb);
    const int64_t rows = std::min(n - rg * kTileRows, W);
    if (rows <= 0) break;  // tiles wholly past n (padding): no outputs
    for (int64_t i0 = 0; i0 < m; i0 += Chunk) {
      const int64_t mm = m - i0 < Chunk ? m - i0 : Chunk;
      QuantizedRows xi = x;
      xi.q += i0 * x.k;
      if (xi.qu != nullptr) xi.qu += i0 * x.k;
      xi.d += i0 * x.g;
      xi.s += i0 * x.g;
      for (int64_t j = 0; j < W * mm; ++j) acc[j] = 0.f;
      tile_row(w, xi, mm, acc);
      for (int64_t i = 0; i < mm; ++i) std::memcpy(out + (i0 + i) * n + rg * kTileRows, acc + i * W, rows * sizeof(float));
    }
  }
}

// Tile rows [rg0, rg1): whole pairs of tiles through `pair` (one stream of reads), a tile
// outside a whole pair (a range split inside a pair) through `single`; `pair` takes up to
// PairChunk activation rows per call, `single` kRowChunk.
template <int64_t PairChunk = kRowChunk, typename Pair, typename Single>
inline void by_pairs(int64_t format, const uint8_t* packed, const QuantizedRows& x, int64_t m, int64_t n, int64_t rg0, int64_t rg1, float* out,
                     Pair pair, Single single) {
  const int64_t p0 = std::min((rg0 + 1) / 2 * 2, rg1), p1 = std::max(p0, rg1 / 2 * 2);
  if (rg0 < p0) for_tile_rows(format, packed, x, m, n, rg0, p0, out, single);
  if (p0 < p1) for_tile_rows<2, PairChunk>(format, packed, x, m, n, p0, p1, out, pair);
  if (p1 < rg1) for_tile_rows(format, packed, x, m, n, p1, rg1, out, single);
}

template <int64_t F>
inline void linear_tile_rows_as(Path path, const uint8_t* packed, const QuantizedRows& x, int64_t m, int64_t n, int64_t rg0, int64_t rg1, float* out) {
#if EDGESPEC_X86
  if (path == Path::kAvx2) return by_pairs(F, packed, x, m, n, rg0, rg1, out, tile_row_x86_rows<F, Dot::kMaddubs, 2>, tile_row_x86_rows<F, Dot::kMaddubs, 1>);
  if (path == Path::kAvxVnni) return by_pairs(F, packed, x, m, n, rg0, rg1, out, tile_row_x86_rows<F, Dot::kVnni, 2>, tile_row_x86_rows<F, Dot::kVnni, 1>);
  // a pair of tiles per 512-bit vector; a lone tile (a range split inside a pair: never by the
  // op, whose threads take whole pairs) through the AVX2 path every AVX-512 CPU has
  if (path == Path::kAvx512Vnni) {
    QuantizedRows xu = x;
    if (is_s8(F) && m >= 2) {  // the 8-bit codes' unsigned activation (tile_pair_avx512), per call
      static thread_local std::vector<uint8_t> shifted;
      shifted.resize(m * x.k);
      for (int64_t j = 0; j < m * x.k; ++j) shifted[j] = static_cast<uint8_t>(x.q[j]) ^ 0x80u;
      xu.qu = shifted.data();
    }
    return by_pairs<kRowChunkWide>(F, packed, xu, m, n, rg0, rg1, out, tile_pair_avx512_rows<F>, tile_row_x86_rows<F, Dot::kMaddubs, 1>);
  }
#endif
#if EDGESPEC_HAS_AMX
  // a pair of tiles per tile product, up to 16 rows; a lone tile through AVX2 as above
  if (path == Path::kAmxInt8) {
    AmxCall amx;  // this thread's tiles, released when the call's range is done
    return by_pairs<kRowChunkWide>(
        F, packed, x, m, n, rg0, rg1, out, [&amx](const uint8_t* w, const QuantizedRows& xr, int64_t mm, float* acc) { tile_pair_amx_rows<F>(amx, w, xr, mm, acc); },
        tile_row_x86_rows<F, Dot::kMaddubs, 1>);
  }
#endif
#if EDGESPEC_ARM
  if (path == Path::kDotprod) return by_pairs(F, packed, x, m, n, rg0, rg1, out, tile_row_dotprod<F, 2>, tile_row_dotprod<F, 1>);
  if (path == Path::kI8mm) return by_pairs(F, packed, x, m, n, rg0, rg1, out, tile_row_i8mm<F, 2>, tile_row_i8mm<F, 1>);
#endif
  for_tile_rows(F, packed, x, m, n, rg0, rg1, out, [](const uint8_t* w, const QuantizedRows& xr, int64_t mm, float* acc) { tile_row_portable(F, w, xr, mm, acc); });
}

// Output tile rows [rg0, rg1) for all m activation rows through `path`: out [m, n].
inline void linear_tile_rows(Path path, int64_t format, const uint8_t* packed, const QuantizedRows& x, int64_t m, int64_t n, int64_t rg0,
                             int64_t rg1, float* out) {
  switch (format) {
    case kU4H: return linear_tile_rows_as<kU4H>(path, packed, x, m, n, rg0, rg1, out);
    case kU4F: return linear_tile_rows_as<kU4F>(path, packed, x, m, n, rg0, rg1, out);
    case kS8H: return linear_tile_rows_as<kS8H>(path, packed, x, m, n, rg0, rg1, out);
    case kS8F: return linear_tile_rows_as<kS8F>(path, packed, x, m, n, rg0, rg1, out);
    case kS8M: return linear_tile_rows_as<kS8M>(path, packed, x, m, n, rg0, rg1, out);
    default: return;
  }
}

}  // namespace blocks
}  // namespace edgespec
