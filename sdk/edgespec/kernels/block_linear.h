// edgespec's linear kernels over GGUF-style weight blocks: the arithmetic, with no
// ExecuTorch dependency (block_linear.cpp wraps it as the op `edgespec::block_linear`;
// block_linear_selftest.cpp checks every SIMD path against the portable one, natively and
// under qemu-aarch64).
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "vec8.h"

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
      v8i ci = __builtin_convertvector(r, v8i);
      if (!all_finite) ci = v8i{};
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

#if EDGESPEC_X86
// How a 256-bit x86 path forms the integer dots of unsigned 8-bit by signed 8-bit codes, 4
// products per int32 lane: AVX2's maddubs + madd (int16 pair sums, then pairs of those), or
// AVX-VNNI's `vpdpbusd`. Both are exact, so both give the same bits.
enum class Dot { kMaddubs, kVnni };

// acc + the dots of u (unsigned) and s (signed) by groups of 4 bytes: AVX-VNNI's `vpdpbusd`
// as inline assembly in its VEX encoding (`%{`, `%}`: literal braces in GCC extended asm), so
// the function around it stays plain AVX2
__attribute__((target("avx2"))) inline __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i s) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
  return acc;
}

// 8 scales of a tile (fp32 or fp16 in the tile) as fp32
template <bool Fp32>
__attribute__((target("avx2,fma,f16c"))) inline __m256 scales8(const uint8_t* p) {
  if constexpr (Fp32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// x86: per tile and activation row, the 8 rows' exact integer dots with one activation block
// in one __m256i (lane r = row r: each 4-byte group of the block broadcast to every lane), then
// the epilogue on 8 float lanes. M: the activation rows (1..kRowChunk), known at compile time
// so every row's accumulator stays in a register. Tiles: 1, or 2 for both tiles of a pair
// block after block (one stream of reads).
template <int64_t F, Dot D, int64_t M, int64_t Tiles>
__attribute__((target("avx2,fma,f16c"))) inline void tile_row_x86(const uint8_t* w, const QuantizedRows& x, int64_t, float* acc) {
  constexpr int64_t tb = tile_bytes(F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 a[Tiles][M];
  for (int64_t i = 0; i < M; ++i)
    for (int64_t u = 0; u < Tiles; ++u) a[u][i] = _mm256_loadu_ps(acc + 8 * (i * Tiles + u));
  for (int64_t g = 0; g < x.g; ++g) {
    for (int64_t off = 0; off < Tiles * tb; off += 64) _mm_prefetch(reinterpret_cast<const char*>(w + 2 * (g + x.prefetch) * tb + off), _MM_HINT_T0);
    for (int64_t u = 0; u < Tiles; ++u) {
      const uint8_t* t = w + (2 * g + u) * tb;
      const __m256 d8 = scales8<fp32_scales(F)>(t + code_bytes(F));
      // wv[c]: elements 4c..4c+3 of the 8 rows (c = 0..7)
      __m256i wv[8];
      if constexpr (is_s8(F)) {
        for (int c = 0; c < 8; ++c) wv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 32 * c));
      } else {
        for (int c = 0; c < 4; ++c) {
          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 32 * c));
          wv[c] = _mm256_and_si256(b, low4);
          wv[c + 4] = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
        }
      }
      for (int64_t i = 0; i < M; ++i) {
        const int8_t* xq = x.q + i * x.k + g * kBlock;
        __m256i xb[8];
        for (int c = 0; c < 8; ++c) {
          int32_t four;
          std::memcpy(&four, xq + 4 * c, 4);
          xb[c] = _mm256_set1_epi32(four);
        }
        const __m256 dx = _mm256_set1_ps(x.d[i * x.g + g]);
        __m256i dot;
        __m256 tt;
        if constexpr (is_s8(F)) {
          // signed x signed: |w| (unsigned) times x with w's sign; the halves apart (S8F scales each)
          __m256i half[2];
          for (int h = 0; h < 2; ++h) {
            __m256i s = _mm256_setzero_si256();
            for (int c = 4 * h; c < 4 * h + 4; ++c) {
              const __m256i xs = _mm256_sign_epi8(xb[c], wv[c]);
              const __m256i wa = _mm256_abs_epi8(wv[c]);
              // pmaddubsw pairs stay within int16 (|w| <= 128, |x| <= 127: 2 * 128 * 127 < 2^15)
              s = D == Dot::kMaddubs ? _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xs), ones)) : dpbusd_vex(s, wa, xs);
            }
            half[h] = s;
          }
          if constexpr (F == kS8F) {
            const __m256 dh8 = scales8<true>(t + second_scales(F));
            tt = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(d8, dx), _mm256_cvtepi32_ps(half[0])), _mm256_mul_ps(_mm256_mul_ps(dh8, dx), _mm256_cvtepi32_ps(half[1])));
          } else {
            dot = _mm256_add_epi32(half[0], half[1]);
          }
        } else {
          if constexpr (D == Dot::kMaddubs) {
            // eight int16 pair sums of 4-bit x int8 stay below 8 * 2 * 15 * 127 < 2^15: sum, then widen once
            __m256i s16 = _mm256_maddubs_epi16(wv[0], xb[0]);
            for (int c = 1; c < 8; ++c) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wv[c], xb[c]));
            dot = _mm256_madd_epi16(s16, ones);
          } else {
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();  // two chains: half the latency
            for (int c = 0; c < 8; c += 2) s0 = dpbusd_vex(s0, wv[c], xb[c]), s1 = dpbusd_vex(s1, wv[c + 1], xb[c + 1]);
            dot = _mm256_add_epi32(s0, s1);
          }
        }
        if constexpr (F != kS8F) {
          tt = _mm256_mul_ps(_mm256_mul_ps(d8, dx), _mm256_cvtepi32_ps(dot));
          if constexpr (has_min(F)) tt = _mm256_add_ps(tt, _mm256_mul_ps(scales8<fp32_scales(F)>(t + second_scales(F)), _mm256_set1_ps(x.s[i * x.g + g])));
        }
        a[u][i] = _mm256_add_ps(a[u][i], tt);
      }
    }
  }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t u = 0; u < Tiles; ++u) _mm256_storeu_ps(acc + 8 * (i * Tiles + u), a[u][i]);
}

// tile_row_x86 with the row count (1..kRowChunk) as its template argument
template <int64_t F, Dot D, int64_t Tiles>
inline void tile_row_x86_rows(const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  switch (m) {
    case 1: return tile_row_x86<F, D, 1, Tiles>(w, x, m, acc);
    case 2: return tile_row_x86<F, D, 2, Tiles>(w, x, m, acc);
    case 3: return tile_row_x86<F, D, 3, Tiles>(w, x, m, acc);
    case 4: return tile_row_x86<F, D, 4, Tiles>(w, x, m, acc);
    case 5: return tile_row_x86<F, D, 5, Tiles>(w, x, m, acc);
    case 6: return tile_row_x86<F, D, 6, Tiles>(w, x, m, acc);
    case 7: return tile_row_x86<F, D, 7, Tiles>(w, x, m, acc);
    default: return tile_row_x86<F, D, kRowChunk, Tiles>(w, x, m, acc);
  }
}

// AVX-512 (VNNI, BW): the two tiles of a pair at once, lane r = row r of the first tile, lane
// 8 + r = row r of the second, each lane the same operations as tile_row_x86's: the same bits
// with half the instructions per output row. M: the activation rows, as in tile_row_x86.
// (tile_row_x86's steps at twice the width: GCC compiles a function for one instruction set,
// so the 512-bit path cannot be the same template.)
#define EDGESPEC_AVX512 "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
__attribute__((target(EDGESPEC_AVX512))) inline __m512i cat256(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// 16 scales: 8 of the tile at a, 8 of the tile at b (fp32 or fp16 in the tile)
template <bool Fp32>
__attribute__((target(EDGESPEC_AVX512))) inline __m512 scales16(const uint8_t* a, const uint8_t* b) {
  if constexpr (Fp32) return _mm512_castsi512_ps(cat256(a, b));
  const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  return _mm512_cvtph_ps(h);
}

// Unsigned (8-bit formats, x.qu set): `vpdpbusd` of the activation as unsigned bytes x + 128
// (x.qu) by the signed codes, from an accumulator that starts at -128 * sum(w) (one
// `vpdpbusd` of 128s per code vector, once per block for all rows): the same exact integer
// dot, without negating the activation per row where w < 0 (8 fewer instructions per row and
// block; worth it from two rows on).
template <int64_t F, int64_t M, bool Unsigned = false>
__attribute__((target(EDGESPEC_AVX512))) inline void tile_pair_avx512(const uint8_t* w, const QuantizedRows& x, int64_t, float* acc) {
  static_assert(!Unsigned || is_s8(F), "the unsigned activation is for the 8-bit formats");
  constexpr int64_t tb = tile_bytes(F), cb = code_bytes(F), cb2 = second_scales(F);
  constexpr bool fp32 = fp32_scales(F);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i u128 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 a[M];
#pragma GCC unroll 16
  for (int64_t i = 0; i < M; ++i) a[i] = _mm512_loadu_ps(acc + 16 * i);
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t0 = w + 2 * g * tb;
    const uint8_t* t1 = t0 + tb;  // the pair's second tile
    for (int64_t off = 0; off < 2 * tb; off += 64) _mm_prefetch(reinterpret_cast<const char*>(t0 + 2 * x.prefetch * tb + off), _MM_HINT_T0);
    const __m512 d16 = scales16<fp32>(t0 + cb, t1 + cb);
    __m512i wv[8];
    __mmask64 neg[8];
    __m512i start[2];  // Unsigned: -128 * the sum of each half's codes, per output row
    if constexpr (Unsigned) {
      for (int h = 0; h < 2; ++h) {
        __m512i sum = _mm512_setzero_si512();
        for (int c = 4 * h; c < 4 * h + 4; ++c) {
          wv[c] = cat256(t0 + 32 * c, t1 + 32 * c);
          sum = _mm512_dpbusd_epi32(sum, u128, wv[c]);
        }
        start[h] = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
      }
    } else if constexpr (is_s8(F)) {
      for (int c = 0; c < 8; ++c) {
        const __m512i v = cat256(t0 + 32 * c, t1 + 32 * c);
        neg[c] = _mm512_movepi8_mask(v);  // w < 0: x is negated, |w| multiplies it
        wv[c] = _mm512_abs_epi8(v);
      }
    } else {
      for (int c = 0; c < 4; ++c) {
        const __m512i b = cat256(t0 + 32 * c, t1 + 32 * c);
        wv[c] = _mm512_and_si512(b, low4);
        wv[c + 4] = _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
      }
    }
    // every row unrolled: the accumulators stay in registers across the blocks
#pragma GCC unroll 16
    for (int64_t i = 0; i < M; ++i) {
      const uint8_t* xq = Unsigned ? x.qu + i * x.k + g * kBlock : reinterpret_cast<const uint8_t*>(x.q + i * x.k + g * kBlock);
      __m512i xb[8];
      for (int c = 0; c < 8; ++c) {
        int32_t four;
        std::memcpy(&four, xq + 4 * c, 4);
        xb[c] = _mm512_set1_epi32(four);
      }
      const __m512 dx = _mm512_set1_ps(x.d[i * x.g + g]);
      __m512i dot;
      __m512 tt;
      if constexpr (Unsigned) {
        __m512i half[2];
        for (int h = 0; h < 2; ++h) {
          __m512i s = start[h];
          for (int c = 4 * h; c < 4 * h + 4; ++c) s = _mm512_dpbusd_epi32(s, xb[c], wv[c]);
          half[h] = s;
        }
        if constexpr (F == kS8F) {
          const __m512 dh16 = scales16<true>(t0 + cb2, t1 + cb2);
          tt = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(d16, dx), _mm512_cvtepi32_ps(half[0])), _mm512_mul_ps(_mm512_mul_ps(dh16, dx), _mm512_cvtepi32_ps(half[1])));
        } else {
          dot = _mm512_add_epi32(half[0], half[1]);
        }
      } else if constexpr (is_s8(F)) {
        __m512i half[2];
        for (int h = 0; h < 2; ++h) {
          __m512i s = _mm512_setzero_si512();
          for (int c = 4 * h; c < 4 * h + 4; ++c) s = _mm512_dpbusd_epi32(s, wv[c], _mm512_mask_sub_epi8(xb[c], neg[c], _mm512_setzero_si512(), xb[c]));
          half[h] = s;
        }
        if constexpr (F == kS8F) {
          const __m512 dh16 = scales16<true>(t0 + cb2, t1 + cb2);
          tt = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(d16, dx), _mm512_cvtepi32_ps(half[0])), _mm512_mul_ps(_mm512_mul_ps(dh16, dx), _mm512_cvtepi32_ps(half[1])));
        } else {
          dot = _mm512_add_epi32(half[0], half[1]);
        }
      } else {
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int c = 0; c < 8; c += 2) s0 = _mm512_dpbusd_epi32(s0, wv[c], xb[c]), s1 = _mm512_dpbusd_epi32(s1, wv[c + 1], xb[c + 1]);
        dot = _mm512_add_epi32(s0, s1);
      }
      if constexpr (F != kS8F) {
        tt = _mm512_mul_ps(_mm512_mul_ps(d16, dx), _mm512_cvtepi32_ps(dot));
        if constexpr (has_min(F)) tt = _mm512_add_ps(tt, _mm512_mul_ps(scales16<fp32>(t0 + cb2, t1 + cb2), _mm512_set1_ps(x.s[i * x.g + g])));
      }
      a[i] = _mm512_add_ps(a[i], tt);
    }
  }
#pragma GCC unroll 16
  for (int64_t i = 0; i < M; ++i) _mm512_storeu_ps(acc + 16 * i, a[i]);
}

// tile_pair_avx512 for M rows: the unsigned activation where x.qu is given (8-bit formats, M >= 2)
template <int64_t F, int64_t M>
inline void tile_pair_avx512_m(const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  if constexpr (is_s8(F) && M >= 2)
    if (x.qu != nullptr) return tile_pair_avx512<F, M, true>(w, x, m, acc);
  tile_pair_avx512<F, M>(w, x, m, acc);
}

// tile_pair_avx512 with the row count (1..kRowChunkWide) as its template argument
template <int64_t F>
inline void tile_pair_avx512_rows(const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  switch (m) {
    case 1: return tile_pair_avx512_m<F, 1>(w, x, m, acc);
    case 2: return tile_pair_avx512_m<F, 2>(w, x, m, acc);
    case 3: return tile_pair_avx512_m<F, 3>(w, x, m, acc);
    case 4: return tile_pair_avx512_m<F, 4>(w, x, m, acc);
    case 5: return tile_pair_avx512_m<F, 5>(w, x, m, acc);
    case 6: return tile_pair_avx512_m<F, 6>(w, x, m, acc);
    case 7: return tile_pair_avx512_m<F, 7>(w, x, m, acc);
    case 8: return tile_pair_avx512_m<F, 8>(w, x, m, acc);
    case 9: return tile_pair_avx512_m<F, 9>(w, x, m, acc);
    case 10: return tile_pair_avx512_m<F, 10>(w, x, m, acc);
    case 11: return tile_pair_avx512_m<F, 11>(w, x, m, acc);
    case 12: return tile_pair_avx512_m<F, 12>(w, x, m, acc);
    case 13: return tile_pair_avx512_m<F, 13>(w, x, m, acc);
    case 14: return tile_pair_avx512_m<F, 14>(w, x, m, acc);
    case 15: return tile_pair_avx512_m<F, 15>(w, x, m, acc);
    default: return tile_pair_avx512_m<F, kRowChunkWide>(w, x, m, acc);
  }
}

inline bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
inline bool cpu_has_avx_vnni() { return cpu_has_avx2() && __builtin_cpu_supports("avxvnni"); }
inline bool cpu_has_avx512_vnni() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}
#endif

#if EDGESPEC_ARM
// A tile's scales of rows 4h..4h+3 as fp32 (tile_scales' values): d, and m (the min; for S8F
// the scales of elements 16..31; zero for S8H). fp16 scales converted by `vcvt_f32_f16`, exact
// as half_to_float.
template <int64_t F>
inline void scales4(const uint8_t* t, int h, float32x4_t& d, float32x4_t& m) {
  const uint8_t* p = t + code_bytes(F);
  if constexpr (fp32_scales(F)) {
    d = vld1q_f32(reinterpret_cast<const float*>(p) + 4 * h);
    m = vld1q_f32(reinterpret_cast<const float*>(p + 32) + 4 * h);
  } else {
    d = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p) + 4 * h)));
    m = F == kU4H ? vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p + 16) + 4 * h))) : vdupq_n_f32(0.f);
  }
}

// A tile's codes as int8 lanes: wv[c][h] holds group c (elements 4c..4c+3) of rows 4h..4h+3,
// 4 bytes per row (the 4-bit formats' low nibbles are groups 0..3, high nibbles 4..7).
template <int64_t F>
inline void tile_codes4(const uint8_t* t, int8x16_t (&wv)[8][2]) {
  for (int h = 0; h < 2; ++h) {
    if constexpr (is_s8(F)) {
      for (int c = 0; c < 8; ++c) wv[c][h] = vld1q_s8(reinterpret_cast<const int8_t*>(t + 32 * c + 16 * h));
    } else {
      for (int c = 0; c < 4; ++c) {
        const uint8x16_t b = vld1q_u8(t + 32 * c + 16 * h);
        wv[c][h] = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0f)));
        wv[c + 4][h] = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
      }
    }
  }
}

// A tile's scales (`scales4`, rows 0-3 and 4-7) and codes (`tile_codes4`).
template <int64_t F>
inline void tile_block4(const uint8_t* t, float32x4_t (&d)[2], float32x4_t (&m)[2], int8x16_t (&wv)[8][2]) {
  for (int h = 0; h < 2; ++h) scales4<F>(t, h, d[h], m[h]);
  tile_codes4<F>(t, wv);
}

// The Arm paths' float accumulators of `rows` activation rows (acc row i's Tiles * 8 outputs at
// acc + i * Tiles * 8): loaded into a, or (store) a written back.
template <int64_t Tiles>
inline void accumulators(float* acc, int64_t rows, float32x4_t (&a)[Tiles][kRowChunk][2], bool store) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t u = 0; u < Tiles; ++u)
      for (int h = 0; h < 2; ++h) {
        float* p = acc + 8 * (i * Tiles + u) + 4 * h;
        if (store) vst1q_f32(p, a[u][i][h]);
        else a[u][i][h] = vld1q_f32(p);
      }
}

// One block's term for 4 output rows of one activation row, from the exact integer dots of
// elements 0..15 (lo) and 16..31 (hi): (d dx) lo + (m dx) hi for S8F (m: its second scales),
// else (d dx) (lo + hi) [+ m sx]; the one order of float operations of every Arm path.
template <int64_t F>
inline float32x4_t block_term4(float32x4_t d, float32x4_t m, float32x4_t dx, float32x4_t sx, int32x4_t lo, int32x4_t hi) {
  if constexpr (F == kS8F) return vaddq_f32(vmulq_f32(vmulq_f32(d, dx), vcvtq_f32_s32(lo)), vmulq_f32(vmulq_f32(m, dx), vcvtq_f32_s32(hi)));
  const float32x4_t tt = vmulq_f32(vmulq_f32(d, dx), vcvtq_f32_s32(vaddq_s32(lo, hi)));
  if constexpr (has_min(F)) return vaddq_f32(tt, vmulq_f32(m, sx));
  return tt;
}

// NEON with the dot-product extension (Armv8.2 sdot): a 128-bit register holds 4 rows' groups
// of 4 codes, so `vdotq_laneq_s32` with the activation's group c as its lane gives 4 rows'
// exact partial dots in row order; then the epilogue on float lanes.
// Tiles: 1, or 2 for both tiles of a pair block after block (one stream of reads).
template <int64_t F, int64_t Tiles>
__attribute__((target("arch=armv8.2-a+dotprod"))) inline void tile_row_dotprod(const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  constexpr int64_t tb = tile_bytes(F);
  float32x4_t a[Tiles][kRowChunk][2];
  accumulators<Tiles>(acc, m, a, false);
  for (int64_t g = 0; g < x.g; ++g) {
    for (int64_t off = 0; off < Tiles * tb; off += 64) __builtin_prefetch(w + 2 * (g + x.prefetch) * tb + off);
    for (int64_t u = 0; u < Tiles; ++u) {
      float32x4_t d[2], mn[2];
      int8x16_t wv[8][2];  // [group c: elements 4c..4c+3][rows 0-3 | 4-7]
      tile_block4<F>(w + (2 * g + u) * tb, d, mn, wv);
      for (int64_t i = 0; i < m; ++i) {
        const int8_t* xq = x.q + i * x.k + g * kBlock;
        const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);  // groups 0..3, 4..7
        const float32x4_t dx = vdupq_n_f32(x.d[i * x.g + g]), sx = vdupq_n_f32(x.s[i * x.g + g]);
        for (int h = 0; h < 2; ++h) {
          int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);  // elements 0..15, 16..31
          lo = vdotq_laneq_s32(lo, wv[0][h], x0, 0);
          lo = vdotq_laneq_s32(lo, wv[1][h], x0, 1);
          lo = vdotq_laneq_s32(lo, wv[2][h], x0, 2);
          lo = vdotq_laneq_s32(lo, wv[3][h], x0, 3);
          hi = vdotq_laneq_s32(hi, wv[4][h], x1, 0);
          hi = vdotq_laneq_s32(hi, wv[5][h], x1, 1);
          hi = vdotq_laneq_s32(hi, wv[6][h], x1, 2);
          hi = vdotq_laneq_s32(hi, wv[7][h], x1, 3);
          a[u][i][h] = vaddq_f32(a[u][i][h], block_term4<F>(d[h], mn[h], dx, sx, lo, hi));
        }
      }
    }
  }
  accumulators<Tiles>(acc, m, a, true);
}

// NEON with the int8 matrix-multiply extension (Armv8.6 i8mm, `smmla`): one `vmmlaq_s32` takes
// 8 codes of two activation rows and 8 of two weight rows and adds their four exact dots, twice
// the multiply-adds of an `sdot`. A tile's groups c and c + 1 (4 codes of rows 0..3 each) zipped
// by 32-bit lanes are rows (0, 1) and (2, 3) with 8 codes each; two activation rows' same 8
// elements side by side are the other operand. Activation rows go in pairs (a last odd row
// through the dot-product path, which gives the same bits): each int32 is one row's exact dot,
// and the float epilogue is the dot-product path's, operation for operation.
template <int64_t F, int64_t Tiles>
__attribute__((target("arch=armv8.2-a+dotprod+i8mm"))) inline void tile_row_i8mm(const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  constexpr int64_t tb = tile_bytes(F);
  const int64_t pairs = m / 2;
  if (m % 2) {  // the last row alone
    QuantizedRows last = x;
    last.q += (m - 1) * x.k, last.d += (m - 1) * x.g, last.s += (m - 1) * x.g;
    tile_row_dotprod<F, Tiles>(w, last, 1, acc + (m - 1) * Tiles * kTileRows);
  }
  if (pairs == 0) return;
  float32x4_t a[Tiles][kRowChunk][2];
  accumulators<Tiles>(acc, 2 * pairs, a, false);
  for (int64_t g = 0; g < x.g; ++g) {
    for (int64_t off = 0; off < Tiles * tb; off += 64) __builtin_prefetch(w + 2 * (g + x.prefetch) * tb + off);
    for (int64_t u = 0; u < Tiles; ++u) {
      float32x4_t d[2], mn[2];
      int8x16_t wv[8][2];  // [group c][rows 0-3 | 4-7], as the dot-product path
      tile_block4<F>(w + (2 * g + u) * tb, d, mn, wv);
      int8x16_t wp[4][4];  // [8-element chunk j][row pair p: rows 2p, 2p + 1]
      for (int j = 0; j < 4; ++j)
        for (int h = 0; h < 2; ++h) {
          const int32x4_t e = vreinterpretq_s32_s8(wv[2 * j][h]), o = vreinterpretq_s32_s8(wv[2 * j + 1][h]);
          wp[j][2 * h] = vreinterpretq_s8_s32(vzip1q_s32(e, o));
          wp[j][2 * h + 1] = vreinterpretq_s8_s32(vzip2q_s32(e, o));
        }
      for (int64_t ip = 0; ip < pairs; ++ip) {
        const int8_t* x0 = x.q + 2 * ip * x.k + g * kBlock;
        const int8_t* x1 = x0 + x.k;
        int32x4_t lo[4], hi[4];  // per row pair: [x0 . w(2p), x0 . w(2p+1), x1 . w(2p), x1 . w(2p+1)]; elements 0..15, 16..31
        for (int p = 0; p < 4; ++p) lo[p] = hi[p] = vdupq_n_s32(0);
        for (int j = 0; j < 4; ++j) {
          const int8x16_t xa = vcombine_s8(vld1_s8(x0 + 8 * j), vld1_s8(x1 + 8 * j));
          for (int p = 0; p < 4; ++p) {
            if (j < 2) lo[p] = vmmlaq_s32(lo[p], xa, wp[j][p]);
            else hi[p] = vmmlaq_s32(hi[p], xa, wp[j][p]);
          }
        }
        for (int r = 0; r < 2; ++r) {  // activation row 2 ip + r
          const int64_t i = 2 * ip + r;
          const float32x4_t dx = vdupq_n_f32(x.d[i * x.g + g]), sx = vdupq_n_f32(x.s[i * x.g + g]);
          for (int h = 0; h < 2; ++h) {  // output rows 4h..4h+3: row pairs 2h, 2h + 1
            auto rows4 = [&](const int32x4_t* v) {
              const int64x2_t p0 = vreinterpretq_s64_s32(v[2 * h]), p1 = vreinterpretq_s64_s32(v[2 * h + 1]);
              return vreinterpretq_s32_s64(r == 0 ? vzip1q_s64(p0, p1) : vzip2q_s64(p0, p1));
            };
            a[u][i][h] = vaddq_f32(a[u][i][h], block_term4<F>(d[h], mn[h], dx, sx, rows4(lo), rows4(hi)));
          }
        }
      }
    }
  }
  accumulators<Tiles>(acc, 2 * pairs, a, true);
}

// Whether the CPU has an Arm feature: on Linux and Android from the kernel's hardware
// capability words (AT_HWCAP = 16, AT_HWCAP2 = 26; bits as <asm/hwcap.h> numbers them, spelled
// out for C libraries whose headers lack them), on macOS and iOS from sysctl. Elsewhere false:
// the portable path, which the plan names (`edgespec info`, `bench --json`).
inline bool arm_feature(unsigned long hwcap_word, unsigned long bit, const char* sysctl_name) {
#if defined(__linux__)
  (void)sysctl_name;
  return (getauxval(hwcap_word) & bit) != 0;
#elif defined(__APPLE__)
  (void)hwcap_word, (void)bit;
  int value = 0;
  size_t size = sizeof(value);
  return sysctlbyname(sysctl_name, &value, &size, nullptr, 0) == 0 && value != 0;
#else
  (void)hwcap_word, (void)bit, (void)sysctl_name;
  return false;
#endif
}
inline bool cpu_has_dotprod() { return arm_feature(16, 1ul << 20, "hw.optional.arm.FEAT_DotProd"); }         // HWCAP_ASIMDDP
inline bool cpu_has_i8mm() { return cpu_has_dotprod() && arm_feature(26, 1ul << 13, "hw.optional.arm.FEAT_I8MM"); }  // HWCAP2_I8MM
#endif

enum class Path : int64_t { kPortable = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3, kDotprod = 4, kI8mm = 5 };
constexpr int64_t kPaths = 6;

inline const char* path_name(Path p) {
  switch (p) {
    case Path::kAvx2: return "avx2";
    case Path::kAvxVnni: return "avx-vnni";
    case Path::kAvx512Vnni: return "avx512-vnni";
    case Path::kDotprod: return "neon-dotprod";
    case Path::kI8mm: return "neon-i8mm";
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
#endif
#if EDGESPEC_ARM
    case Path::kDotprod: return cpu_has_dotprod();
    case Path::kI8mm: return cpu_has_i8mm();
#endif
    case Path::kPortable: return true;
    default: return false;
  }
}

// The fastest path this CPU runs (checked once): the one with the most work per instruction.
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
