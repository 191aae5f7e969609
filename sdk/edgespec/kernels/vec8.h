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
inline void store8(float* p, v8f x) { *reinterpret_cast<v8f*>(p) = x; }
inline v8f splat(float x) { return v8f{x, x, x, x, x, x, x, x}; }
inline float lane_total(v8f a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

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
  const v8i bits = (__builtin_convertvector(k, v8i) + 127) << 23;
  return p * (v8f)bits;  // a vector cast reinterprets the bits
}

}  // namespace vec
}  // namespace edgespec
