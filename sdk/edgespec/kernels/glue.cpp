// The small ops between the linear layers of a block-kernel program (`quant.kernel: edgespec`),
// fused so a layer's glue is a handful of op calls instead of XNNPACK delegate segments
// (each delegate call costs ~9 us on this CPU: more than the arithmetic it does).
// Schemas and eager references in edgespec/kernels/ops.py.
//
//   rms_norm(x [..., D], weight [D], eps) = x * (1 / sqrt(mean(x^2) + eps)) * weight
//   rope(x [B, T, H, D], cos [T, D], sin [T, D]): interleaved pairs (x0, x1) of each head
//       -> (x0 cos - x1 sin, x1 cos + x0 sin)         (edgespec.models.llama.apply_rope)
//   silu_mul(a, b) = a * sigmoid(a) * b               (SwiGLU's gate; vec8.h's exp)
//   argmax_rows(x [R, N]) -> [R] int64: each row's first largest value (its first NaN if it
//       holds one: torch.argmax's rule), a vectorized max then a scan for its first index
// Every op is per row (and per element but for rms_norm's sum, reduced in a fixed order), so
// a row's result does not depend on how many rows a call carries.

#include <cstdint>
#include <limits>

#include "op_api.h"

#include "glue.h"
#include "vec8.h"

namespace edgespec {
namespace {


bool resize_like(const Tensor& x, Tensor& out) { return executorch::runtime::resize_tensor(out, x.sizes()) == executorch::runtime::Error::Ok; }

Tensor& rms_norm_out(KernelRuntimeContext& ctx, const Tensor& x, const Tensor& weight, double eps, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, x.scalar_type() == ScalarType::Float && weight.scalar_type() == ScalarType::Float && x.dim() >= 1, InvalidArgument,
                      out, "edgespec::rms_norm: fp32 x [..., D] and weight [D]");
  const int64_t D = x.size(x.dim() - 1);
  ET_KERNEL_CHECK_MSG(ctx, D >= 1, InvalidArgument, out, "edgespec::rms_norm: x's rows must hold D >= 1 elements");
  ET_KERNEL_CHECK_MSG(ctx, weight.numel() == D, InvalidArgument, out, "edgespec::rms_norm: weight must have D elements");
  ET_KERNEL_CHECK_MSG(ctx, out.scalar_type() == ScalarType::Float, InvalidArgument, out, "edgespec::rms_norm: out must be fp32");
  ET_KERNEL_CHECK(ctx, resize_like(x, out), InvalidArgument, out);
  const float* xd = x.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t r = 0, rows = x.numel() / D; r < rows; ++r) glue::rms_norm_row(xd + r * D, weight.const_data_ptr<float>(), D, static_cast<float>(eps), o + r * D);
  return out;
}

Tensor& rope_out(KernelRuntimeContext& ctx, const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, x.scalar_type() == ScalarType::Float && x.dim() == 4 && cos.dim() == 2 && sin.dim() == 2, InvalidArgument, out,
                      "edgespec::rope: fp32 x [B, T, H, D], cos and sin [T, D]");
  ET_KERNEL_CHECK_MSG(ctx, cos.scalar_type() == ScalarType::Float && sin.scalar_type() == ScalarType::Float, InvalidArgument, out,
                      "edgespec::rope: cos and sin must be fp32");
  ET_KERNEL_CHECK_MSG(ctx, out.scalar_type() == ScalarType::Float, InvalidArgument, out, "edgespec::rope: out must be fp32");
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  ET_KERNEL_CHECK_MSG(ctx, D % 2 == 0 && cos.size(0) == T && cos.size(1) == D && sin.size(0) == T && sin.size(1) == D, InvalidArgument, out,
                      "edgespec::rope: cos and sin must be [T, D] with D even");
  ET_KERNEL_CHECK(ctx, resize_like(x, out), InvalidArgument, out);
  const float* xd = x.const_data_ptr<float>();
  const float* c = cos.const_data_ptr<float>();
  const float* s = sin.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = ((b * T + t) * H + h) * D;
        const float* ct = c + t * D;
        const float* st = s + t * D;
        for (int64_t i = 0; i < D; i += 2) {
          const float x0 = xd[base + i], x1 = xd[base + i + 1];
          o[base + i] = x0 * ct[i] + (-x1) * st[i];
          o[base + i + 1] = x1 * ct[i + 1] + x0 * st[i + 1];
        }
      }
  return out;
}

Tensor& silu_mul_out(KernelRuntimeContext& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, a.scalar_type() == ScalarType::Float && b.scalar_type() == ScalarType::Float && a.numel() == b.numel(),
                      InvalidArgument, out, "edgespec::silu_mul: fp32 a and b of one shape");
  ET_KERNEL_CHECK_MSG(ctx, out.scalar_type() == ScalarType::Float, InvalidArgument, out, "edgespec::silu_mul: out must be fp32");
  ET_KERNEL_CHECK(ctx, resize_like(a, out), InvalidArgument, out);
  glue::silu_mul_span(a.const_data_ptr<float>(), b.const_data_ptr<float>(), a.numel(), out.mutable_data_ptr<float>());
  return out;
}

Tensor& argmax_rows_out(KernelRuntimeContext& ctx, const Tensor& x, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, x.scalar_type() == ScalarType::Float && x.dim() == 2 && x.size(1) > 0 && out.scalar_type() == ScalarType::Long,
                      InvalidArgument, out, "edgespec::argmax_rows: fp32 x [R, N > 0], int64 out");
  const executorch::aten::SizesType rows[1] = {static_cast<executorch::aten::SizesType>(x.size(0))};
  ET_KERNEL_CHECK(ctx, executorch::runtime::resize_tensor(out, {rows, 1}) == executorch::runtime::Error::Ok, InvalidArgument, out);
  const float* xd = x.const_data_ptr<float>();
  int64_t* od = out.mutable_data_ptr<int64_t>();
  for (int64_t r = 0; r < x.size(0); ++r) od[r] = glue::argmax_row(xd + r * x.size(1), x.size(1));
  return out;
}

}  // namespace
}  // namespace edgespec

EXECUTORCH_LIBRARY(edgespec, "argmax_rows.out", edgespec::argmax_rows_out);
EXECUTORCH_LIBRARY(edgespec, "rms_norm.out", edgespec::rms_norm_out);
EXECUTORCH_LIBRARY(edgespec, "rope.out", edgespec::rope_out);
EXECUTORCH_LIBRARY(edgespec, "silu_mul.out", edgespec::silu_mul_out);
