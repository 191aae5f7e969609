// edgespec::block_linear.out — a linear layer over GGUF-style weight blocks (block_linear.h
// holds the arithmetic and the packed layout; the op schema is in edgespec/kernels/ops.py).
//
//   x [..., K] fp32 (K a multiple of 32), weight uint8 [2 ceil(N / 16) * K / 32 * tile_bytes]
//   (edgespec/kernels/block_linear.py packs it), format (block_linear.h's Format), N:
//   out [..., N] fp32.
// The activation rows are quantized once per call (int8 per block of 32, Q8_1-style); the
// tile rows are split among ExecuTorch's threads in contiguous ranges; every thread reads a
// tile once for all rows of the call (kRowChunk at a time).

#include <vector>

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/kernel_includes.h>
#include <executorch/runtime/kernel/thread_parallel_interface.h>

#include "block_linear.h"

namespace edgespec {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::KernelRuntimeContext;

Tensor& block_linear_out(KernelRuntimeContext& ctx, const Tensor& x, const Tensor& weight, int64_t format, int64_t n, Tensor& out) {
  namespace B = edgespec::blocks;
  ET_KERNEL_CHECK_MSG(ctx, x.scalar_type() == ScalarType::Float && x.dim() >= 1 && x.dim() <= 8, InvalidArgument, out,
                      "edgespec::block_linear: x must be fp32 [..., K]");
  const int64_t tb = B::tile_bytes(format);
  ET_KERNEL_CHECK_MSG(ctx, tb > 0, InvalidArgument, out, "edgespec::block_linear: unknown weight format %d", static_cast<int>(format));
  const int64_t K = x.size(x.dim() - 1);
  ET_KERNEL_CHECK_MSG(ctx, K > 0 && K % B::kBlock == 0, InvalidArgument, out, "edgespec::block_linear: K must be a multiple of 32");
  const int64_t G = K / B::kBlock, NT = B::tile_rows(n);
  ET_KERNEL_CHECK_MSG(ctx, weight.scalar_type() == ScalarType::Byte && weight.numel() == NT * G * tb, InvalidArgument, out,
                      "edgespec::block_linear: packed weight size does not match N, K and the format");
  SizesType sizes[8];
  for (int64_t i = 0; i + 1 < x.dim(); ++i) sizes[i] = static_cast<SizesType>(x.size(i));
  sizes[x.dim() - 1] = static_cast<SizesType>(n);
  ET_KERNEL_CHECK(ctx, executorch::runtime::resize_tensor(out, {sizes, static_cast<size_t>(x.dim())}) == executorch::runtime::Error::Ok,
                  InvalidArgument, out);
  const int64_t M = x.numel() / K;

  static thread_local std::vector<int8_t> q;
  static thread_local std::vector<float> d, s;
  q.resize(M * K);
  d.resize(M * G);
  s.resize(M * G);
  B::quantize_rows(x.const_data_ptr<float>(), M, K, q.data(), d.data(), s.data());
  const B::QuantizedRows rows{q.data(), d.data(), s.data(), K, G};

  const uint8_t* w = weight.const_data_ptr<uint8_t>();
  float* o = out.mutable_data_ptr<float>();
  const B::Path path = B::best_path();
  // equal contiguous shares per thread, or one task for a small matrix (k/v projections),
  // whose read is shorter than waking the pool's threads
  constexpr int64_t kMinParallelBytes = 128 << 10;
  const int64_t pairs = NT / 2;  // a thread's share is whole pairs of tiles (one contiguous range)
  const int64_t grain = NT * G * tb * (M < B::kRowChunk ? M : B::kRowChunk) < kMinParallelBytes ? pairs : 1;
  executorch::extension::parallel_for(0, pairs, grain, [&](int64_t begin, int64_t end) { B::linear_tile_rows(path, format, w, rows, M, n, 2 * begin, 2 * end, o); });
  return out;
}

}  // namespace
}  // namespace edgespec

EXECUTORCH_LIBRARY(edgespec, "block_linear.out", edgespec::block_linear_out);
