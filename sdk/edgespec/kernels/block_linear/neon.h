// The Arm paths: NEON with the dot-product extension (`sdot`, Armv8.2) and with the int8
// matrix-multiply extension (`smmla`, Armv8.6 i8mm), enabled per function so the library stays
// baseline armv8-a, and the CPU feature checks that pick them at run time.

#pragma once

#include "contract.h"

#if EDGESPEC_ARM
namespace edgespec {
namespace blocks {

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

}  // namespace blocks
}  // namespace edgespec
#endif
