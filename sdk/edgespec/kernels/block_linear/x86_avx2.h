// The 256-bit x86 paths: AVX2 (`vpmaddubsw` + `vpmaddwd`) and AVX-VNNI (`vpdpbusd`, VEX), one
// tile of 8 output rows per 256-bit register, the contract's float epilogue on 8 lanes.

#pragma once

#include "contract.h"

#if EDGESPEC_X86
namespace edgespec {
namespace blocks {

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

inline bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
inline bool cpu_has_avx_vnni() { return cpu_has_avx2() && __builtin_cpu_supports("avxvnni"); }

}  // namespace blocks
}  // namespace edgespec
#endif
