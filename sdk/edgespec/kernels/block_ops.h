// What the block-kernel sources share, one concern a file: block_linear.cpp the op
// `edgespec::block_linear` and `linear_rows`, its one computation; block_argmax.cpp the
// screened argmax `edgespec::block_argmax`, which computes its exact rows with it;
// kernel_plan.cpp the plan's C interface and state (the choice per regime, the recorded
// calls); kernel_bench.cpp the timing passes the plan and bench/ run through `linear_rows`.

#pragma once

#include <cstdint>
#include <limits>

#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include "block_linear.h"
#include "glue.h"

namespace edgespec {

enum Prologue : int64_t { kNone = 0, kRmsNorm = 1, kSwiGlu = 2 };  // edgespec/kernels/ops.py's PROLOGUES

// out_features as a tensor's last size: 0 .. SizesType's maximum (the output's sizes are SizesType)
inline bool is_size(int64_t n) { return n >= 0 && n <= std::numeric_limits<executorch::aten::SizesType>::max(); }

// What row r of a call feeds the linear, for rows of x that are `stride` floats apart.
struct Input {
  const float* x;
  int64_t stride;
  Prologue prologue = kNone;
  const float* norm_weight = nullptr;
  float eps = 0.f;

  // row r's K input values: x's own row, or the prologue's output written into `tmp`
  const float* row(int64_t r, int64_t K, float* tmp) const {
    const float* xr = x + r * stride;
    if (prologue == kRmsNorm) glue::rms_norm_row(xr, norm_weight, K, eps, tmp);
    if (prologue == kSwiGlu) glue::silu_mul_span(xr, xr + K, K, tmp);
    return prologue == kNone ? xr : tmp;
  }
};

// out [M, n] (+ residual [M, n] when given) = the input's M rows [K] through the packed weight,
// as `choice` says: the one computation of the op and of the plan's timing passes (block_linear.cpp).
void linear_rows(const blocks::Choice& choice, const Input& in, int64_t M, int64_t K, const uint8_t* w, int64_t format, int64_t n, float* o,
                 const float* residual = nullptr);

// The plan's state (kernel_plan.cpp): the choice in force per regime (block_linear.h's Regime),
// and whether the op's calls are being recorded; `record_call` adds one call's (n, K, format).
extern blocks::Choice g_plan[blocks::kRegimes];
extern bool g_recording;
void record_call(int64_t n, int64_t K, int64_t format);

}  // namespace edgespec

// Whether this CPU runs path `p` (kernel_plan.cpp; the plan's C interface, which the bench's
// interval check shares).
extern "C" int64_t edgespec_path_supported(int64_t p);
