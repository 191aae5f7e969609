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
// s_x = d_x * sum(q_x). Weights: w = d_w * q_w + m_w (4-bit q_w in 0..15) or w = d_w * q_w
// (8-bit q_w in -128..127). Every path evaluates exactly these float operations in this
// order on every output, one row of x at a time, and the library is compiled without
// floating-point contraction: a row's result is bitwise independent of how many rows a call
// carries (M), of the thread count and of the SIMD path (verification stays exact).
//
// Packed weights: output rows in tiles of 8 (kTileRows; the last tile zero-padded), a tile
// row's blocks consecutive in memory, so a thread streams one contiguous range:
//   tile(rg, g) at byte (rg * G + g) * tile_bytes(format), holding rows 8rg..8rg+7, block g:
//   U4H (Q4_0, Q4_1): codes [8][16] bytes, slot s holding row kU4SlotRow[s] = 0 4 1 5 2 6 3 7
//                     (byte j: element j in the low nibble, element j + 16 in the high one:
//                     GGUF's order), then d fp16[8] and m fp16[8] in row order       (160 bytes)
//   U4F (Q4_K's sub-blocks, rounded fp32 sources): the same with fp32 d and m       (192 bytes)
//   S8H (Q8_0): codes [8][32] int8 in row order, then d fp16[8]                     (272 bytes)
//   S8F (Q6_K): codes [8][32] int8 (q - 32) in row order, then fp32 scales [8] of
//               elements 0..15 and [8] of elements 16..31 (d * sc per 16: exact)  (320 bytes)
//               its term is (d_lo d_x) dot_lo + (d_hi d_x) dot_hi
// The U4 slot order makes AVX2's three hadds of four two-row products land in row order.
// edgespec/kernels/block_linear.py writes this layout; the two must agree.

#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define EDGESPEC_X86 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif
#define EDGESPEC_ARM 1
#endif

namespace edgespec {
namespace blocks {

constexpr int64_t kBlock = 32;    // input channels per block
constexpr int64_t kTileRows = 8;  // output rows per tile
constexpr int64_t kRowChunk = 8;  // activation rows that share one read of a tile

enum Format : int64_t { kU4H = 1, kU4F = 2, kS8H = 3, kS8F = 4 };

constexpr int64_t tile_bytes(int64_t format) {
  return format == kU4H ? 128 + 16 + 16 : format == kU4F ? 128 + 32 + 32 : format == kS8H ? 256 + 16 : format == kS8F ? 256 + 64 : 0;
}
constexpr bool is_s8(int64_t format) { return format == kS8H || format == kS8F; }
constexpr int64_t code_bytes(int64_t format) { return is_s8(format) ? 256 : 128; }
constexpr int kU4SlotRow[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // the row in each 16-byte code slot
constexpr int kU4RowSlot[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // its inverse

// Activation rows quantized per block: row i's codes at q + i * k, scales at d + i * g.
struct QuantizedRows {
  const int8_t* q;
  const float* d;
  const float* s;  // d * sum of the block's codes
  int64_t k;
  int64_t g;
};

// The one activation quantizer (every path reads its output). x [m, k], k a multiple of 32.
inline void quantize_rows(const float* x, int64_t m, int64_t k, int8_t* q, float* d, float* s) {
  const int64_t G = k / kBlock;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t g = 0; g < G; ++g) {
      const float* xb = x + i * k + g * kBlock;
      float amax = 0.f;
      for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
      const float dd = amax / 127.f;
      const float id = dd > 0.f ? 1.f / dd : 0.f;
      int32_t sum = 0;
      int8_t* qb = q + i * k + g * kBlock;
      for (int j = 0; j < kBlock; ++j) {
        const float v = std::nearbyint(xb[j] * id);  // ties to even (the default rounding mode)
        const int32_t c = static_cast<int32_t>(v > 127.f ? 127.f : (v < -127.f ? -127.f : v));
        qb[j] = static_cast<int8_t>(c);
        sum += c;
      }
      d[i * G + g] = dd;
      s[i * G + g] = dd * static_cast<float>(sum);
    }
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
    if (format == kU4F || format == kS8F) {
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
  if (is_s8(format)) {
    for (int j = 0; j < 32; ++j) c[j] = static_cast<int8_t>(t[32 * r + j]);
    return;
  }
  const uint8_t* b = t + 16 * kU4RowSlot[r];
  for (int j = 0; j < 16; ++j) {
    c[j] = b[j] & 0x0f;
    c[j + 16] = b[j] >> 4;
  }
}

// Portable path: tile row rg's blocks [0, G), activation rows [0, m) (m <= kRowChunk);
// acc[i * 8 + r] accumulates output row r of the tile for activation row i.
inline void tile_row_portable(int64_t format, const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  const int64_t tb = tile_bytes(format);
  int32_t codes[8][32];
  float d[8], mn[8];
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + g * tb;
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
          if (format != kS8H) t = t + mn[r] * sx;
        }
        acc[i * 8 + r] = acc[i * 8 + r] + t;
      }
    }
  }
}

#if EDGESPEC_X86
// AVX2: per tile, the exact integer dots of its 8 rows with one activation block in one
// __m256i (maddubs + madd, then hadds), then the epilogue on 8 float lanes.
// FixedM > 0: the row count known at compile time (one row: accumulators stay in registers).
template <int64_t F, int64_t FixedM = 0>
__attribute__((target("avx2,fma,f16c"))) inline void tile_row_avx2(const uint8_t* w, const QuantizedRows& x, int64_t m_, float* acc) {
  constexpr int64_t tb = tile_bytes(F);
  const int64_t m = FixedM > 0 ? FixedM : m_;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 a[kRowChunk];
  for (int64_t i = 0; i < m; ++i) a[i] = _mm256_loadu_ps(acc + 8 * i);
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + g * tb;
    _mm_prefetch(reinterpret_cast<const char*>(t + 4 * tb), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t + 4 * tb + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t + 4 * tb + 128), _MM_HINT_T0);
    if constexpr (F == kU4F) {
      _mm_prefetch(reinterpret_cast<const char*>(t + 4 * tb + 191), _MM_HINT_T0);
    } else if constexpr (is_s8(F)) {
      _mm_prefetch(reinterpret_cast<const char*>(t + 4 * tb + 192), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(t + 4 * tb + 256), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(t + 4 * tb + tb - 1), _MM_HINT_T0);
    }
    const __m256 d8 = F == kU4F || F == kS8F ? _mm256_loadu_ps(reinterpret_cast<const float*>(t + code_bytes(F)))
                                             : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + code_bytes(F))));
    if constexpr (is_s8(F)) {
      __m256i wa[8], ws[8];
      for (int r = 0; r < 8; ++r) {
        ws[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 32 * r));
        wa[r] = _mm256_abs_epi8(ws[r]);
      }
      for (int64_t i = 0; i < m; ++i) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + i * x.k + g * kBlock));
        __m256i p[8];
        for (int r = 0; r < 8; ++r) p[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[r], _mm256_sign_epi8(xv, ws[r])), ones);
        const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));  // rows 0-3: low | high halves
        const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
        const __m256i lo = _mm256_permute2x128_si256(h0, h1, 0x20), hi = _mm256_permute2x128_si256(h0, h1, 0x31);  // elements 0..15, 16..31
        const __m256 dx = _mm256_set1_ps(x.d[i * x.g + g]);
        if constexpr (F == kS8F) {
          const __m256 dh8 = _mm256_loadu_ps(reinterpret_cast<const float*>(t + 288));
          const __m256 tt = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(d8, dx), _mm256_cvtepi32_ps(lo)), _mm256_mul_ps(_mm256_mul_ps(dh8, dx), _mm256_cvtepi32_ps(hi)));
          a[i] = _mm256_add_ps(a[i], tt);
        } else {
          a[i] = _mm256_add_ps(a[i], _mm256_mul_ps(_mm256_mul_ps(d8, dx), _mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi))));
        }
      }
    } else {
      const __m256 m8 = F == kU4F ? _mm256_loadu_ps(reinterpret_cast<const float*>(t + 160))
                                  : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 144)));
      // four loads of two rows each (rows 0|4, 1|5, 2|6, 3|7), low and high nibbles
      __m256i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 32 * j));
        lo[j] = _mm256_and_si256(b, low4);
        hi[j] = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
      }
      for (int64_t i = 0; i < m; ++i) {
        const int8_t* xq = x.q + i * x.k + g * kBlock;
        const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq)));        // x0..15 twice
        const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16)));   // x16..31 twice
        __m256i p[4];  // int16 pair sums of two maddubs stay below 4 * 15 * 127 (no saturation)
        for (int j = 0; j < 4; ++j) p[j] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo[j], xlo), _mm256_maddubs_epi16(hi[j], xhi)), ones);
        // p[j] = [row j: 4 partials | row j+4: 4 partials] -> [r0 r1 r2 r3 | r4 r5 r6 r7]
        const __m256i dot = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
        __m256 tt = _mm256_mul_ps(_mm256_mul_ps(d8, _mm256_set1_ps(x.d[i * x.g + g])), _mm256_cvtepi32_ps(dot));
        tt = _mm256_add_ps(tt, _mm256_mul_ps(m8, _mm256_set1_ps(x.s[i * x.g + g])));
        a[i] = _mm256_add_ps(a[i], tt);
      }
    }
  }
  for (int64_t i = 0; i < m; ++i) _mm256_storeu_ps(acc + 8 * i, a[i]);
}

inline bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#endif

#if EDGESPEC_ARM
// NEON with the dot-product extension (Armv8.2 sdot): per row the integer dot of a block in
// 4 lanes, rows reduced pairwise four at a time (exact), then the epilogue on float lanes.
template <int64_t F>
__attribute__((target("arch=armv8.2-a+dotprod"))) inline void tile_row_dotprod(const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  constexpr int64_t tb = tile_bytes(F);
  float32x4_t a[kRowChunk][2];
  for (int64_t i = 0; i < m; ++i) a[i][0] = vld1q_f32(acc + 8 * i), a[i][1] = vld1q_f32(acc + 8 * i + 4);
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  for (int64_t g = 0; g < x.g; ++g) {
    const uint8_t* t = w + g * tb;
    __builtin_prefetch(t + 4 * tb);
    __builtin_prefetch(t + 4 * tb + 128);
    int8x16_t lo[8], hi[8];
    float d[8], mn[8];
    tile_scales(F, t, d, mn);  // exact conversions
    for (int r = 0; r < 8; ++r) {
      if constexpr (is_s8(F)) {
        lo[r] = vld1q_s8(reinterpret_cast<const int8_t*>(t + 32 * r));
        hi[r] = vld1q_s8(reinterpret_cast<const int8_t*>(t + 32 * r + 16));
      } else {
        const uint8x16_t b = vld1q_u8(t + 16 * kU4RowSlot[r]);
        lo[r] = vreinterpretq_s8_u8(vandq_u8(b, low4));
        hi[r] = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      const int8_t* xq = x.q + i * x.k + g * kBlock;
      const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
      const float32x4_t dx = vdupq_n_f32(x.d[i * x.g + g]), sx = vdupq_n_f32(x.s[i * x.g + g]);
      for (int h = 0; h < 2; ++h) {
        int32x4_t pl[4], ph[4];
        for (int r = 0; r < 4; ++r) {
          pl[r] = vdotq_s32(vdupq_n_s32(0), lo[4 * h + r], x0);
          ph[r] = vdotq_s32(vdupq_n_s32(0), hi[4 * h + r], x1);
        }
        // rows 4h..4h+3: dots of elements 0..15 and of 16..31
        const int32x4_t dl = vpaddq_s32(vpaddq_s32(pl[0], pl[1]), vpaddq_s32(pl[2], pl[3]));
        const int32x4_t dh = vpaddq_s32(vpaddq_s32(ph[0], ph[1]), vpaddq_s32(ph[2], ph[3]));
        float32x4_t tt;
        if constexpr (F == kS8F) {
          tt = vaddq_f32(vmulq_f32(vmulq_f32(vld1q_f32(d + 4 * h), dx), vcvtq_f32_s32(dl)), vmulq_f32(vmulq_f32(vld1q_f32(mn + 4 * h), dx), vcvtq_f32_s32(dh)));
        } else {
          tt = vmulq_f32(vmulq_f32(vld1q_f32(d + 4 * h), dx), vcvtq_f32_s32(vaddq_s32(dl, dh)));
          if constexpr (F != kS8H) tt = vaddq_f32(tt, vmulq_f32(vld1q_f32(mn + 4 * h), sx));
        }
        a[i][h] = vaddq_f32(a[i][h], tt);
      }
    }
  }
  for (int64_t i = 0; i < m; ++i) vst1q_f32(acc + 8 * i, a[i][0]), vst1q_f32(acc + 8 * i + 4, a[i][1]);
}

inline bool cpu_has_dotprod() {
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
  return false;
#endif
}
#endif

enum class Path { kPortable, kAvx2, kDotprod };

inline const char* path_name(Path p) {
  switch (p) {
    case Path::kAvx2: return "avx2";
    case Path::kDotprod: return "neon-dotprod";
    default: return "portable";
  }
}

// The fastest path this CPU runs (checked at run time, once).
inline Path best_path() {
#if EDGESPEC_X86
  static const Path p = cpu_has_avx2() ? Path::kAvx2 : Path::kPortable;
  return p;
#elif EDGESPEC_ARM
  static const Path p = cpu_has_dotprod() ? Path::kDotprod : Path::kPortable;
  return p;
#else
  return Path::kPortable;
#endif
}

// Tile rows [rg0, rg1) through `tile_row(w, x, m, acc)`, all m activation rows, kRowChunk at a
// time: out [m, n] (row stride n).
template <typename TileRow>
inline void for_tile_rows(int64_t format, const uint8_t* packed, const QuantizedRows& x, int64_t m, int64_t n, int64_t rg0, int64_t rg1,
                          float* out, TileRow tile_row) {
  const int64_t tb = tile_bytes(format);
  float acc[kRowChunk * kTileRows];
  for (int64_t rg = rg0; rg < rg1; ++rg) {
    const uint8_t* w = packed + rg * x.g * tb;
    const int64_t rows = n - rg * kTileRows < kTileRows ? n - rg * kTileRows : kTileRows;
    for (int64_t i0 = 0; i0 < m; i0 += kRowChunk) {
      const int64_t mm = m - i0 < kRowChunk ? m - i0 : kRowChunk;
      QuantizedRows xi = x;
      xi.q += i0 * x.k;
      xi.d += i0 * x.g;
      xi.s += i0 * x.g;
      for (int64_t j = 0; j < kTileRows * mm; ++j) acc[j] = 0.f;
      tile_row(w, xi, mm, acc);
      for (int64_t i = 0; i < mm; ++i) std::memcpy(out + (i0 + i) * n + rg * kTileRows, acc + i * kTileRows, rows * sizeof(float));
    }
  }
}

template <int64_t F>
inline void linear_tile_rows_as(Path path, const uint8_t* packed, const QuantizedRows& x, int64_t m, int64_t n, int64_t rg0, int64_t rg1, float* out) {
#if EDGESPEC_X86
  if (path == Path::kAvx2) return for_tile_rows(F, packed, x, m, n, rg0, rg1, out, m == 1 ? tile_row_avx2<F, 1> : tile_row_avx2<F>);
#endif
#if EDGESPEC_ARM
  if (path == Path::kDotprod) return for_tile_rows(F, packed, x, m, n, rg0, rg1, out, tile_row_dotprod<F>);
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
    default: return;
  }
}

}  // namespace blocks
}  // namespace edgespec
