// edgespec::block_linear.out — a linear layer over GGUF-style weight blocks (block_linear.h
// holds the arithmetic and the packed layout; the op schema is in edgespec/kernels/ops.py).
//
//   x [..., X] fp32, weight uint8 [2 ceil(N / 16) * K / 32 * tile_bytes] (edgespec/kernels/
//   block_linear.py packs it), format (block_linear.h's Format), N, prologue, norm_weight,
//   eps, residual: out [..., N] fp32 = residual + prologue(x) W^T.
// The prologue is what the linear's input is made of, computed row by row right before that
// row is quantized (glue.h's arithmetic, the bits of the separate op it replaces): kNone the
// input itself (K = X), kRmsNorm rms_norm(x, norm_weight, eps) (K = X), kSwiGlu x = [gate | up]
// side by side and the input silu(gate) * up (K = X / 2). An optional residual [..., N] is
// added to the output by the thread that wrote it. Each saves an op call (and a serial pass)
// per token: export/fusion.py folds the graph's norms, gates and residual adds into the linears.
// The activation rows are quantized once per call (int8 per block of 32, Q8_1-style); the
// tile rows are split among the threads (threadpool.h: as many as ExecuTorch's) in contiguous
// ranges; every thread reads a tile once for all rows of the call (kRowChunk at a time).
//
// How a call computes (SIMD path, prefetch distance, whether it is split among threads) is
// the plan's choice for its regime of row counts. The plan is chosen by measurement
// (edgespec/kernels/plan.py) through kernel_plan.cpp's C functions, which record the shapes a
// program's forward calls the op with and install the winner, and kernel_bench.cpp's
// `edgespec_bench_*`, which time those shapes with random weights under a candidate choice
// through this file's `linear_rows` (block_ops.h).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "op_api.h"

#include "block_ops.h"
#include "threadpool.h"

namespace edgespec {

namespace B = edgespec::blocks;

// (block_ops.h) the op's computation, which block_argmax.cpp and kernel_bench.cpp share
void linear_rows(const B::Choice& choice, const Input& in, int64_t M, int64_t K, const uint8_t* w, int64_t format, int64_t n, float* o,
                 const float* residual) {
  const int64_t G = K / B::kBlock, NT = B::tile_rows(n);
  static thread_local std::vector<int8_t> q;
  static thread_local std::vector<float> d, s;
  q.resize(M * K);
  d.resize(M * G);
  s.resize(M * G);
  int8_t* qd = q.data();  // (pointers: inside the tasks `q` would name the worker's own thread_local)
  float *dd = d.data(), *sd = s.data();
  // the activations' prologue and quantization, row by row: on the threadpool, rows split among
  // threads, once there are enough blocks to pay for waking it (prefill, long verifications)
  constexpr int64_t kParallelQuantBlocks = 512;
  pool::parallel_for(0, M, M * G < kParallelQuantBlocks ? std::max<int64_t>(M, 1) : 1, [&](int64_t r0, int64_t r1) {
    static thread_local std::vector<float> tmp;
    tmp.resize(K);
    for (int64_t r = r0; r < r1; ++r) B::quantize_rows(in.row(r, K, tmp.data()), 1, K, qd + r * K, dd + r * G, sd + r * G);
  });
  B::QuantizedRows rows{qd, dd, sd, K, G};
  rows.prefetch = choice.prefetch;
  // equal contiguous shares of whole pairs of tiles per thread (one contiguous range each), or
  // one task for a call too small to pay for waking the pool
  const int64_t pairs = NT / 2;
  const int64_t bytes = NT * G * B::tile_bytes(format) * std::min(M, B::kRowChunk);
  const int64_t grain = bytes < choice.min_parallel_bytes ? std::max<int64_t>(pairs, 1) : 1;
  pool::parallel_for(0, pairs, grain, [&](int64_t begin, int64_t end) {
    B::linear_tile_rows(choice.path, format, w, rows, M, n, 2 * begin, 2 * end, o);
    if (residual == nullptr) return;
    const int64_t c0 = begin * B::kPairRows, c1 = std::min(end * B::kPairRows, n);  // this task's output columns
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = c0; c < c1; ++c) o[i * n + c] = residual[i * n + c] + o[i * n + c];
  });
}

namespace {


Tensor& block_linear_out(KernelRuntimeContext& ctx, const Tensor& x, const Tensor& weight, int64_t format, int64_t n, int64_t prologue,
                         const executorch::aten::optional<Tensor>& norm_weight, double eps, const executorch::aten::optional<Tensor>& residual,
                         Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, x.scalar_type() == ScalarType::Float && x.dim() >= 1 && x.dim() <= 8, InvalidArgument, out,
                      "edgespec::block_linear: x must be fp32 [..., K]");
  const int64_t tb = B::tile_bytes(format);
  ET_KERNEL_CHECK_MSG(ctx, tb > 0, InvalidArgument, out, "edgespec::block_linear: unknown weight format %d", static_cast<int>(format));
  ET_KERNEL_CHECK_MSG(ctx, prologue >= kNone && prologue <= kSwiGlu, InvalidArgument, out, "edgespec::block_linear: unknown prologue %d",
                      static_cast<int>(prologue));
  const int64_t X = x.size(x.dim() - 1), K = prologue == kSwiGlu ? X / 2 : X;
  ET_KERNEL_CHECK_MSG(ctx, K > 0 && K % B::kBlock == 0 && (prologue != kSwiGlu || X == 2 * K), InvalidArgument, out,
                      "edgespec::block_linear: K must be a multiple of 32 (x's last size, or half of it for swiglu)");
  ET_KERNEL_CHECK_MSG(ctx,
                      prologue != kRmsNorm || (norm_weight.has_value() && norm_weight.value().scalar_type() == ScalarType::Float &&
                                               norm_weight.value().numel() == K),
                      InvalidArgument, out, "edgespec::block_linear: the rms_norm prologue needs an fp32 norm_weight of K elements");
  ET_KERNEL_CHECK_MSG(ctx, is_size(n), InvalidArgument, out, "edgespec::block_linear: out_features must be 0 to 2^31 - 1");
  const int64_t G = K / B::kBlock;
  ET_KERNEL_CHECK_MSG(ctx, weight.scalar_type() == ScalarType::Byte && weight.numel() == B::packed_bytes(n, G, format), InvalidArgument, out,
                      "edgespec::block_linear: packed weight size does not match N, K and the format");
  ET_KERNEL_CHECK_MSG(ctx, out.scalar_type() == ScalarType::Float, InvalidArgument, out, "edgespec::block_linear: out must be fp32");
  SizesType sizes[8];
  for (int64_t i = 0; i + 1 < x.dim(); ++i) sizes[i] = static_cast<SizesType>(x.size(i));
  sizes[x.dim() - 1] = static_cast<SizesType>(n);
  ET_KERNEL_CHECK(ctx, executorch::runtime::resize_tensor(out, {sizes, static_cast<size_t>(x.dim())}) == executorch::runtime::Error::Ok,
                  InvalidArgument, out);
  ET_KERNEL_CHECK_MSG(ctx, !residual.has_value() || (residual.value().scalar_type() == ScalarType::Float && executorch::runtime::tensors_have_same_shape(residual.value(), out)),
                      InvalidArgument, out, "edgespec::block_linear: the residual must be fp32 of the output's sizes");
  const int64_t M = x.numel() / X;
  if (g_recording) record_call(n, K, format);
  Input in{x.const_data_ptr<float>(), X, static_cast<Prologue>(prologue), norm_weight.has_value() ? norm_weight.value().const_data_ptr<float>() : nullptr,
           static_cast<float>(eps)};
  linear_rows(g_plan[B::regime_of(M)], in, M, K, weight.const_data_ptr<uint8_t>(), format, n, out.mutable_data_ptr<float>(),
              residual.has_value() ? residual.value().const_data_ptr<float>() : nullptr);
  return out;
}

// Boxed by hand: a program exported before `prologue`, `norm_weight`, `eps` and `residual` were
// in the schema (commit f626355, 2026-12-04) calls the op with x, weight, format, out_features
// and out; a later one with all eight arguments and out. Both run. (The stack: the arguments,
// out, and out again as the returned value.) The 4-argument form stays because such programs
// still call it: a program holds each call's arguments as its export's schema had them, and
// a bundle of those days still loads and decodes today (the same manifest schema_version, op
// name, format ids and packed layout), so one on a user's disk would fail here without it.
void block_linear_boxed(KernelRuntimeContext& ctx, executorch::runtime::Span<executorch::runtime::EValue*> stack) {
  static constexpr const char kName[] = "edgespec::block_linear.out";
  executorch::runtime::internal::EventTracerProfileOpScope profile(ctx.internal_event_tracer(), kName);  // ETDump's per-op time, as
  EXECUTORCH_SCOPE_PROF(kName);                                                                           // EXECUTORCH_LIBRARY's kernels
  const size_t args = stack.size() - 2;
  if (args != 4 && args != 8) {
    ET_LOG(Error, "edgespec::block_linear: called with %zu arguments (4 or 8 expected)", args);
    ctx.fail(executorch::runtime::Error::InvalidArgument);
    return;
  }
  const bool full = args == 8;
  const executorch::aten::optional<Tensor> none;
  block_linear_out(ctx, stack[0]->toTensor(), stack[1]->toTensor(), stack[2]->toInt(), stack[3]->toInt(), full ? stack[4]->toInt() : kNone,
                   full ? stack[5]->toOptional<Tensor>() : none, full ? stack[6]->toDouble() : 0.0, full ? stack[7]->toOptional<Tensor>() : none,
                   stack[args]->toTensor());
}

}  // namespace
}  // namespace edgespec

static auto edgespec_block_linear_registered =
    executorch::runtime::register_kernel(executorch::runtime::Kernel("edgespec::block_linear.out", edgespec::block_linear_boxed));
