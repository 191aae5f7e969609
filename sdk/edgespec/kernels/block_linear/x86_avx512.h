// The 512-bit x86 path (AVX-512 VNNI + BW): a pair of tiles (16 output rows) per register,
// up to kRowChunkWide activation rows per read of a tile.

#pragma once

#include "x86_avx2.h"

#if EDGESPEC_X86
namespace edgespec {
namespace blocks {

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
      if constexpr (is_s8(F)) {
        __m512i half[2];  // the exact dots of elements 0..15 and 16..31
        for (int h = 0; h < 2; ++h) {
          __m512i s;
          if constexpr (Unsigned) s = start[h];
          else s = _mm512_setzero_si512();
          for (int c = 4 * h; c < 4 * h + 4; ++c) {
            if constexpr (Unsigned) s = _mm512_dpbusd_epi32(s, xb[c], wv[c]);  // (x + 128) w, from -128 sum(w)
            else s = _mm512_dpbusd_epi32(s, wv[c], _mm512_mask_sub_epi8(xb[c], neg[c], _mm512_setzero_si512(), xb[c]));  // |w| (x with w's sign)
          }
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

inline bool cpu_has_avx512_vnni() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

}  // namespace blocks
}  // namespace edgespec
#endif
