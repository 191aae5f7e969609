// The elementwise arithmetic between linear layers, one row (or span) at a time: the ops of
// glue.cpp and the prologues of block_linear.cpp (a norm or a gate fused into the linear that
// reads it) call these same functions, so fusing an op into a linear never changes a bit.

#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "vec8.h"

namespace edgespec {
namespace glue {

// o [D] = x * (1 / sqrt(mean(x^2) + eps)) * w; x^2 summed with element i in lane i % 8 and the
// lanes added in a fixed tree (the same bits however many rows a call carries).
inline void rms_norm_row(const float* x, const float* w, int64_t D, float eps, float* o) {
  float lanes[8] = {};
  for (int64_t i = 0; i < D; ++i) lanes[i % 8] += x[i] * x[i];
  const float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(D) + eps);
  for (int64_t i = 0; i < D; ++i) o[i] = (x[i] * inv) * w[i];
}

// o [n] = a * sigmoid(a) * b (SwiGLU's gate). sigmoid from e = exp(-|a|) <= 1: 1 / (1 + e) for
// a >= 0, e / (1 + e) below (vec8.h's exp); the tail through the same lanes.
inline void silu_mul_span(const float* a, const float* b, int64_t n, float* o) {
  using namespace edgespec::vec;
  auto eight = [](const float* pa, const float* pb, float* po) {
    const v8f x = load8(pa);
    const v8f e = exp_nonpositive(x < splat(0.f) ? x : -x);
    const v8f den = splat(1.f) + e;
    const v8f sig = x < splat(0.f) ? e / den : splat(1.f) / den;
    store8(po, x * sig * load8(pb));
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) eight(a + i, b + i, o + i);
  if (i < n) {
    float ta[kLanes] = {}, tb[kLanes] = {}, to[kLanes];
    for (int64_t j = i; j < n; ++j) ta[j - i] = a[j], tb[j - i] = b[j];
    eight(ta, tb, to);
    for (int64_t j = i; j < n; ++j) o[j] = to[j - i];
  }
}

// x's first largest value's index over n > 0 values (its first NaN if it holds one: torch.argmax's
// rule): a vectorized max, then a scan for its first index.
inline int64_t argmax_row(const float* x, int64_t n) {
  using namespace edgespec::vec;
  v8f mv = splat(-std::numeric_limits<float>::infinity());
  v8i nan = v8i{0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const v8f v = load8(x + i);
    mv = v > mv ? v : mv;  // a NaN never wins a comparison: found below
    nan = nan | (v8i)(v != v);
  }
  float m = mv[0];
  bool has_nan = false;
  for (int j = 0; j < kLanes; ++j) {
    m = mv[j] > m ? mv[j] : m;
    has_nan = has_nan || nan[j] != 0;
  }
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    has_nan = has_nan || x[i] != x[i];
  }
  for (int64_t j = 0; j < n; ++j)
    if (has_nan ? x[j] != x[j] : x[j] == m) return j;
  return 0;
}

}  // namespace glue
}  // namespace edgespec
