// An exact argmax over an 8-bit (S8H, Q8_0) head that reads a 5-bit screen of its codes
// instead of the codes: every output row gets an interval that provably holds its value, and
// only rows whose interval reaches the best lower bound are computed exactly (block_argmax.cpp's
// `edgespec::block_argmax`, docs/gemma3.md).
//
// Each code q in -128..127 is 8 (u - 16) + l with u = (q >> 3) + 16 in 0..31 (the screen keeps
// u) and l in 0..7 (dropped). With the activation's codes q_x and scale d_x (the contract's
// quantizer), a block's exact term d_w d_x dot(q, q_x) is within
//     d_w d_x dot(8 u - 124.5, q_x)  +-  3.5 |d_w| d_x sum |q_x|
// (l - 3.5 is within +-3.5). Summed over blocks: the screen value S and its half-width B. The
// screen computes 2 S per block as (d_w d_x) * (16 dot(u, q_x) - 249 sum q_x) (integers, exact
// in fp32), and widens B by 2^-7 of itself for the rounding of both sums (each below ~5e-5 B:
// 20-odd roundings of terms whose absolute sum is under 37 B), so
//     S - B <= exact value (as the kernel computes it) <= S + B.
// The argmax is among the rows with S + B >= max over rows of (S - B); ties and NaN follow
// torch.argmax (first largest; a non-finite interval sends the call to the full head).
//
// Screen layout: pairs of 8-row tiles as the head's (16 rows, lane k = row k of the pair),
// block after block, one contiguous stream per pair: pair p's block g at (p G + g) * 352 bytes,
// laid out so the 512-bit path loads each part whole (kScreenPairBytes = 352):
//   bytes 0..255:   u's low 4 bits: group c (0..3) at 64c, tile t (0, 1) at 64c + 32t, row r,
//                   byte e at 64c + 32t + 4r + e: element 4c + e in the low nibble, 16 + 4c + e
//                   in the high one (U4H's order, the pair's two tiles side by side)
//   bytes 256..319: u's fifth bit: uint64 j (0..7) bit 32t + 4r + e = tile t row r's element 4j + e
//   bytes 320..351: d fp16[16], the head's own scales, row k of the pair at 320 + 2k
// edgespec/kernels/block_linear.py's `pack_screen` writes it.

#pragma once

#include <limits>

#include "dispatch.h"

namespace edgespec {
namespace blocks {

constexpr int64_t kScreenPairBytes = 352;
constexpr int64_t kScreenBits = 256, kScreenScales = 320;

// Row v's interval is [S - W, S + W] with S = s2 / 2 and W = half_width(b) (b = B / 3.5 as
// summed): the bound widened by 2^-7 of itself for rounding, plus a floor for subnormal products.
inline float half_width(float b) { return b * (3.5f * (1.f + 1.f / 128.f)) + 1e-30f; }

// One activation row's per-block integers the screen needs: 249 * sum(q_x) and sum |q_x|.
struct ScreenRow {
  const int8_t* q;    // [G * 32]
  const float* d;     // [G]
  const int32_t* c;   // [G]: 249 * sum(q_x)
  const float* a;     // [G]: d_x * sum |q_x|
  int64_t g;
};

inline void screen_row_sums(const int8_t* q, const float* d, int64_t G, int32_t* c, float* a) {
  for (int64_t g = 0; g < G; ++g) {
    int32_t s = 0, t = 0;
    for (int j = 0; j < kBlock; ++j) s += q[g * kBlock + j], t += q[g * kBlock + j] < 0 ? -q[g * kBlock + j] : q[g * kBlock + j];
    c[g] = 249 * s;
    a[g] = d[g] * static_cast<float>(t);
  }
}

// Portable: pair p's 16 rows (w: its block 0): s2[k] += 2 S, b[k] += B / 3.5 (unwidened).
inline void screen_pair_portable(const uint8_t* w, const ScreenRow& x, float* s2, float* b) {
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + g * kScreenPairBytes;
    const int8_t* xq = x.q + g * kBlock;
    for (int k = 0; k < 16; ++k) {
      const int tile = k / 8, r = k % 8;
      int32_t dot = 0;
      for (int j = 0; j < kBlock; ++j) {
        const uint8_t byte = t[64 * ((j % 16) / 4) + 32 * tile + 4 * r + j % 4];
        uint64_t bits;
        std::memcpy(&bits, t + kScreenBits + 8 * (j / 4), 8);
        const int32_t u = (j < 16 ? byte & 0x0f : byte >> 4) | static_cast<int32_t>(((bits >> (32 * tile + 4 * r + j % 4)) & 1u) << 4);
        dot += u * xq[j];
      }
      uint16_t h;
      std::memcpy(&h, t + kScreenScales + 2 * k, 2);
      const float dw = half_to_float(h);
      s2[k] = s2[k] + (dw * x.d[g]) * static_cast<float>(16 * dot - x.c[g]);
      b[k] = b[k] + std::fabs(dw) * x.a[g];
    }
  }
}

#if EDGESPEC_X86
// 256-bit: the pair's two tiles one after the other per block (8 rows per register), AVX2's
// maddubs or AVX-VNNI's vpdpbusd.
template <Dot D>
__attribute__((target("avx2,fma,f16c"))) inline void screen_pair_avx2(const uint8_t* w, const ScreenRow& x, float* s2, float* b) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), five = _mm256_set1_epi8(0x10);
  // byte k of a lane group selects bit k % 8 of the uint32's byte k / 8
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 S[2] = {_mm256_loadu_ps(s2), _mm256_loadu_ps(s2 + 8)}, Bv[2] = {_mm256_loadu_ps(b), _mm256_loadu_ps(b + 8)};
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + g * kScreenPairBytes;
    const int8_t* xq = x.q + g * kBlock;
    __m256i xb[8];
    for (int c = 0; c < 8; ++c) {
      int32_t four;
      std::memcpy(&four, xq + 4 * c, 4);
      xb[c] = _mm256_set1_epi32(four);
    }
    const __m256 dx = _mm256_set1_ps(x.d[g]), ax = _mm256_set1_ps(x.a[g]);
    const __m256i cx = _mm256_set1_epi32(x.c[g]);
    for (int tile = 0; tile < 2; ++tile) {
      __m256i wv[8];
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 64 * c + 32 * tile));
        wv[c] = _mm256_and_si256(v, low4);
        wv[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      }
      for (int c = 0; c < 8; ++c) {
        int32_t bits;
        std::memcpy(&bits, t + kScreenBits + 8 * c + 4 * tile, 4);
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(bits), spread), bit), bit);
        wv[c] = _mm256_or_si256(wv[c], _mm256_and_si256(set, five));
      }
      __m256i dot;
      if constexpr (D == Dot::kMaddubs) {  // 4 pair sums of u (<= 31) by q_x stay within int16: 4 * 2 * 31 * 127 < 2^15
        __m256i h[2];
        for (int half = 0; half < 2; ++half) {
          __m256i s16 = _mm256_setzero_si256();
          for (int c = 4 * half; c < 4 * half + 4; ++c) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wv[c], xb[c]));
          h[half] = _mm256_madd_epi16(s16, ones);
        }
        dot = _mm256_add_epi32(h[0], h[1]);
      } else {
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        for (int c = 0; c < 8; c += 2) s0 = dpbusd_vex(s0, wv[c], xb[c]), s1 = dpbusd_vex(s1, wv[c + 1], xb[c + 1]);
        dot = _mm256_add_epi32(s0, s1);
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + kScreenScales + 16 * tile)));
      const __m256i ival = _mm256_sub_epi32(_mm256_slli_epi32(dot, 4), cx);
      S[tile] = _mm256_add_ps(S[tile], _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(ival)));
      Bv[tile] = _mm256_add_ps(Bv[tile], _mm256_mul_ps(_mm256_and_ps(dw, abs_mask), ax));
    }
  }
  for (int tile = 0; tile < 2; ++tile) _mm256_storeu_ps(s2 + 8 * tile, S[tile]), _mm256_storeu_ps(b + 8 * tile, Bv[tile]);
}

#define EDGESPEC_SCREEN_AVX512 "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
// 512-bit: the pair's 16 rows in one register (lane k = row k): each part one load.
__attribute__((target(EDGESPEC_SCREEN_AVX512))) inline void screen_pair_avx512(const uint8_t* w, const ScreenRow& x, float* s2, float* b) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), five = _mm512_set1_epi8(0x10);
  __m512 S = _mm512_loadu_ps(s2), Bv = _mm512_loadu_ps(b);
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + g * kScreenPairBytes;
    const int8_t* xq = x.q + g * kBlock;
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(t + 64 * c);
      const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      uint64_t blo, bhi;
      std::memcpy(&blo, t + kScreenBits + 8 * c, 8);
      std::memcpy(&bhi, t + kScreenBits + 8 * (c + 4), 8);
      const __m512i ulo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(blo), lo, five);  // + 16 where the fifth bit is set
      const __m512i uhi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(bhi), hi, five);
      int32_t f0, f1;
      std::memcpy(&f0, xq + 4 * c, 4);
      std::memcpy(&f1, xq + 16 + 4 * c, 4);
      s0 = _mm512_dpbusd_epi32(s0, ulo, _mm512_set1_epi32(f0));
      s1 = _mm512_dpbusd_epi32(s1, uhi, _mm512_set1_epi32(f1));
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + kScreenScales)));
    const __m512i ival = _mm512_sub_epi32(_mm512_slli_epi32(_mm512_add_epi32(s0, s1), 4), _mm512_set1_epi32(x.c[g]));
    S = _mm512_add_ps(S, _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x.d[g])), _mm512_cvtepi32_ps(ival)));
    Bv = _mm512_add_ps(Bv, _mm512_mul_ps(_mm512_abs_ps(dw), _mm512_set1_ps(x.a[g])));
  }
  _mm512_storeu_ps(s2, S);
  _mm512_storeu_ps(b, Bv);
}
#endif

#if EDGESPEC_ARM
// NEON with the dot-product extension (`sdot`, as neon.h): a 128-bit register holds a group's 4
// elements of 4 rows (pair rows 4q..4q+3 at 64c + 16q); their fifth bits, bytes 2q, 2q + 1 of a
// uint64, spread to a lane each by a table lookup. A lane holds u - 16 (-16..15): u's low 4
// bits under a high nibble of ones where the fifth bit is clear, zeros where it is set (one
// bit select or shift-insert); dot(u, q_x) = dot(u - 16, q_x) + 16 sum(q_x), folded into c.
__attribute__((target("arch=armv8.2-a+dotprod"))) inline void screen_pair_dotprod(const uint8_t* w, const ScreenRow& x, float* s2, float* b) {
  static constexpr uint8_t kLaneBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};  // lane i: bit i % 8
  const uint8x16_t low4 = vdupq_n_u8(0x0f), lane_bit = vld1q_u8(kLaneBit);
  float32x4_t S[4], Bv[4];
  for (int q = 0; q < 4; ++q) S[q] = vld1q_f32(s2 + 4 * q), Bv[q] = vld1q_f32(b + 4 * q);
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + g * kScreenPairBytes;
    const int8_t* xq = x.q + g * kBlock;
    int8x16_t xb[8];  // the activation's groups of 4, broadcast
    for (int c = 0; c < 8; ++c) {
      int32_t four;
      std::memcpy(&four, xq + 4 * c, 4);
      xb[c] = vreinterpretq_s8_s32(vdupq_n_s32(four));
    }
    uint8x16_t clear[4];  // the fifth bits inverted, uint64s 2i and 2i + 1
    for (int i = 0; i < 4; ++i) clear[i] = vmvnq_u8(vld1q_u8(t + kScreenBits + 16 * i));
    const int32_t sum = vaddlvq_s8(vld1q_s8(xq)) + vaddlvq_s8(vld1q_s8(xq + 16));
    const int32x4_t cx = vdupq_n_s32(x.c[g] - 256 * sum);  // 16 dot(u, q_x) - c = 16 dot(u - 16, q_x) - (c - 256 sum(q_x))
    const float32x4_t dx = vdupq_n_f32(x.d[g]), ax = vdupq_n_f32(x.a[g]);
    for (int q = 0; q < 4; ++q) {
      const uint8x16_t sel = vcombine_u8(vdup_n_u8(2 * q), vdup_n_u8(2 * q + 1)), sel_odd = vaddq_u8(sel, vdupq_n_u8(8));
      int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);  // elements 0..15, 16..31
      for (int c = 0; c < 4; ++c) {  // the low nibbles' fifth bits in uint64 c, the high ones' in c + 4
        const uint8x16_t v = vld1q_u8(t + 64 * c + 16 * q), idx = c % 2 ? sel_odd : sel;
        const uint8x16_t ones_lo = vtstq_u8(vqtbl1q_u8(clear[c / 2], idx), lane_bit), ones_hi = vtstq_u8(vqtbl1q_u8(clear[2 + c / 2], idx), lane_bit);
        lo = vdotq_s32(lo, vreinterpretq_s8_u8(vbslq_u8(low4, v, ones_lo)), xb[c]);
        hi = vdotq_s32(hi, vreinterpretq_s8_u8(vsriq_n_u8(ones_hi, v, 4)), xb[4 + c]);
      }
      const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(t + kScreenScales) + 4 * q)));
      const int32x4_t ival = vsubq_s32(vshlq_n_s32(vaddq_s32(lo, hi), 4), cx);
      S[q] = vaddq_f32(S[q], vmulq_f32(vmulq_f32(dw, dx), vcvtq_f32_s32(ival)));
      Bv[q] = vaddq_f32(Bv[q], vmulq_f32(vabsq_f32(dw), ax));
    }
  }
  for (int q = 0; q < 4; ++q) vst1q_f32(s2 + 4 * q, S[q]), vst1q_f32(b + 4 * q, Bv[q]);
}
#endif

// Whether `path` screens with SIMD code (x86's paths; Arm's, both through the dot-product
// screen); elsewhere block_argmax computes the full head (the portable screen is the paths'
// reference, slower than the full head's SIMD path).
constexpr bool screen_has_simd(Path path) {
  return path == Path::kAvx2 || path == Path::kAvxVnni || path == Path::kAvx512Vnni || path == Path::kAmxInt8 || path == Path::kDotprod || path == Path::kI8mm;
}

// What a range of pairs' screen found: the best lower bound, and whether every bound was finite.
struct ScreenBest {
  float lo = -std::numeric_limits<float>::infinity();
  bool finite = true;
};

// The intervals of pairs [p0, p1)'s rows through `path`: each row v's upper bound into hi[v]
// (and its lower one into lo[v] where lo is given); returns the best lower bound of the range.
inline ScreenBest screen_pairs(Path path, const uint8_t* screen, const ScreenRow& x, int64_t n, int64_t p0, int64_t p1, float* hi, float* lo = nullptr) {
  ScreenBest best;
  float ts[16], tbnd[16];
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t rows = std::min<int64_t>(n - p * kPairRows, kPairRows);
    if (rows <= 0) break;
    const uint8_t* w = screen + p * x.g * kScreenPairBytes;
    std::fill(ts, ts + 16, 0.f);
    std::fill(tbnd, tbnd + 16, 0.f);
#if EDGESPEC_X86
    if (path == Path::kAvx512Vnni || path == Path::kAmxInt8) screen_pair_avx512(w, x, ts, tbnd);  // AMX CPUs have AVX-512
    else if (path == Path::kAvxVnni) screen_pair_avx2<Dot::kVnni>(w, x, ts, tbnd);
    else if (path == Path::kAvx2) screen_pair_avx2<Dot::kMaddubs>(w, x, ts, tbnd);
    else
#endif
#if EDGESPEC_ARM
    if (path == Path::kDotprod || path == Path::kI8mm) screen_pair_dotprod(w, x, ts, tbnd);
    else
#endif
      screen_pair_portable(w, x, ts, tbnd);
    for (int64_t k = 0; k < rows; ++k) {
      const float half = half_width(tbnd[k]), l = 0.5f * ts[k] - half, h = 0.5f * ts[k] + half;
      best.finite = best.finite && std::isfinite(l) && std::isfinite(h);
      best.lo = l > best.lo ? l : best.lo;
      hi[p * kPairRows + k] = h;
      if (lo != nullptr) lo[p * kPairRows + k] = l;
    }
  }
  return best;
}

}  // namespace blocks
}  // namespace edgespec
