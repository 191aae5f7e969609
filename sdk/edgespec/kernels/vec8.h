// 8-float vectors shared by edgespec's kernels (attention.cpp, glue.cpp): GCC/Clang vector
// extensions, so every lane is one IEEE operation whatever the ISA, and an exp whose lanes
// are independent of each other.

#pragma once

#include <cstdint>

namespace edgespec {
namespace vec {

// 8 floats, unaligned loads allowed: GCC/Clang vector extensions, one IEEE operation per
// lane on any ISA (AVX, NEON as two halves). Reduction lanes: element i of a sequence goes
// to lane i % 8 and the lanes are combined in a fixed tree.
typedef float v8f __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32), aligned(4)));
constexpr int kLanes = 8;

inline v8f load8(const float* p) { return *reinterpret_cast<const v8f*>(p); }

// 16 floats, the same rules (AVX-512 as one register, AVX as two, NEON as four): attention's
// dot products and weighted sums over head sizes that are multiples of 16.
typedef float v16f __attribute__((vector_size(64), aligned(4)));
inline v16f load16(const float* p) { return *reinterpret_cast<const v16f*>(p); }
inline void store16(float* p, v16f x) { *reinterpret_cast<v16f*>(p) = x; }
inline v16f splat16(float x) { return v16f{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
// lanes l and l + 8 added: the 8 lanes lane_total reduces
inline v8f fold16(v16f a) {
  return __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
}
inline void store8(float* p, v8f x) { *reinterpret_cast<v8f*>(p) = x; }
inline v8f splat(float x) { return v8f{x, x, x, x, x, x, x, x}; }
inline float lane_total(v8f a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

// lane_total of four vectors at once, the same tree on each (the same bits): halves added
// two vectors per add, then pairs, then the last pair.
inline void lane_totals4(v8f a, v8f b, v8f c, v8f d, float* out) {
  const v8f ab = __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
  const v8f cd = __builtin_shufflevector(c, d, 0, 1, 2, 3, 8, 9, 10, 11) + __builtin_shufflevector(c, d, 4, 5, 6, 7, 12, 13, 14, 15);
  // lanes: x0 + x4, x1 + x5, x2 + x6, x3 + x7 for x = a, b | c, d
  const v8f p = __builtin_shufflevector(ab, cd, 0, 1, 4, 5, 8, 9, 12, 13) + __builtin_shufflevector(ab, cd, 2, 3, 6, 7, 10, 11, 14, 15);
  // lanes: (x0 + x4) + (x2 + x6), (x1 + x5) + (x3 + x7) for x = a, b, c, d
  const v8f t = __builtin_shufflevector(p, p, 0, 2, 4, 6, 0, 2, 4, 6) + __builtin_shufflevector(p, p, 1, 3, 5, 7, 1, 3, 5, 7);
  for (int j = 0; j < 4; ++j) out[j] = t[j];
}

// exp(x) for x <= 0, 8 at a time: 2^k * p(r), x = k ln2 + r, |r| <= ln2 / 2, p of degree 6
// (relative error ~2e-7); each lane independent of the others.
inline v8f exp_nonpositive(v8f x) {
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  const v8f shifter = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const v8f k = (x * splat(1.44269504088896341f) + shifter) - shifter;
  v8f r = x - k * splat(0.693145751953125f);  // ln2, high part (k * it is exact for |k| < 2^11)
  r = r - k * splat(1.428606765330187045e-06f);  // ln2, low part
  v8f p = splat(1.0f / 720.0f);
  p = p * r + splat(1.0f / 120.0f);
  p = p * r + splat(1.0f / 24.0f);
  p = p * r + splat(1.0f / 6.0f);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  // a NaN lane (x NaN) takes k = 0 before the conversion (converting a NaN to an integer is
  // undefined behaviour); its p is NaN, hence its result
  const v8i bits = (__builtin_convertvector(k == k ? k : splat(0.f), v8i) + 127) << 23;
  return p * (v8f)bits;  // a vector cast reinterprets the bits
}

}  // namespace vec
}  // namespace edgespec
