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
// (edgespec/kernels/plan.py) through the C functions at the end of this file: one records the
// shapes a program's forward calls the op with, `edgespec_bench_*` time those shapes with
// random weights under a candidate choice, and `edgespec_set_choice` installs the winner.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <chrono>
#include <mutex>
#include <random>
#include <vector>

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/kernel_includes.h>

#include "block_linear.h"
#include "glue.h"
#include "threadpool.h"
#include "vec8.h"

namespace edgespec {
namespace {

namespace B = edgespec::blocks;
using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::KernelRuntimeContext;

B::Choice g_plan[B::kRegimes] = {B::default_choice(), B::default_choice(), B::default_choice()};

std::mutex g_record_mutex;
bool g_recording = false;
std::vector<int64_t> g_recorded;  // (n, K, format) of each call while recording

enum Prologue : int64_t { kNone = 0, kRmsNorm = 1, kSwiGlu = 2 };  // edgespec/kernels/ops.py's PROLOGUES

// out_features as a tensor's last size: 0 .. SizesType's maximum (the output's sizes are SizesType)
bool is_size(int64_t n) { return n >= 0 && n <= std::numeric_limits<SizesType>::max(); }

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
// as `choice` says: the one computation of the op and of the plan's timing passes.
void linear_rows(const B::Choice& choice, const Input& in, int64_t M, int64_t K, const uint8_t* w, int64_t format, int64_t n, float* o,
                 const float* residual = nullptr) {
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
  if (g_recording) {
    std::lock_guard<std::mutex> lock(g_record_mutex);
    g_recorded.insert(g_recorded.end(), {n, K, format});
  }
  Input in{x.const_data_ptr<float>(), X, static_cast<Prologue>(prologue), norm_weight.has_value() ? norm_weight.value().const_data_ptr<float>() : nullptr,
           static_cast<float>(eps)};
  linear_rows(g_plan[B::regime_of(M)], in, M, K, weight.const_data_ptr<uint8_t>(), format, n, out.mutable_data_ptr<float>(),
              residual.has_value() ? residual.value().const_data_ptr<float>() : nullptr);
  return out;
}

// Row r of x [M, K] -> the index of its largest output over the packed weight's n rows
// (torch.argmax's rule: first largest, first NaN), for each r: out [M]. Without a screen, the
// full outputs and a scan. With one (S8H weights, screen.h): the screen's interval per output,
// the exact outputs (the same path and bits as block_linear's) of the pairs of tiles holding a
// row whose interval reaches the best lower bound, and the argmax among those rows. A bound
// that is not finite (an input or a scale beyond range) sends the call to the full path, as
// does a CPU without a SIMD screen. Returns how many outputs were computed exactly.
int64_t argmax_rows_of(const B::Choice& choice, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t format, int64_t n,
                       const uint8_t* screen, int64_t* out) {
  const int64_t G = K / B::kBlock, NT = B::tile_rows(n), pairs = NT / 2;
  static thread_local std::vector<float> logits, hi, d, s, a;
  static thread_local std::vector<int8_t> q;
  static thread_local std::vector<int32_t> c;
  static thread_local std::vector<int64_t> picked;
  logits.resize(NT * B::kTileRows);
  const B::Path screen_path = B::best_path();  // the widest the CPU runs (the plan times block_linear's paths, not the screen's)
  int64_t exact = 0;
  for (int64_t r = 0; r < M; ++r) {
    const float* xr = x + r * K;
    auto full = [&] {
      linear_rows(choice, Input{xr, K}, 1, K, w, format, n, logits.data());
      exact += n;
      return glue::argmax_row(logits.data(), n);
    };
    if (screen == nullptr || !B::screen_has_simd(screen_path)) {
      out[r] = full();
      continue;
    }
    q.resize(K), d.resize(G), s.resize(G), c.resize(G), a.resize(G), hi.resize(NT * B::kTileRows);
    B::quantize_rows(xr, 1, K, q.data(), d.data(), s.data());
    B::screen_row_sums(q.data(), d.data(), G, c.data(), a.data());
    const B::ScreenRow sr{q.data(), d.data(), c.data(), a.data(), G};
    float* ph = hi.data();
    std::mutex merge;
    B::ScreenBest best;
    const int64_t grain = pairs * G * B::kScreenPairBytes < choice.min_parallel_bytes ? std::max<int64_t>(pairs, 1) : 1;
    pool::parallel_for(0, pairs, grain, [&](int64_t p0, int64_t p1) {
      const B::ScreenBest part = B::screen_pairs(screen_path, screen, sr, n, p0, p1, ph);
      std::lock_guard<std::mutex> lock(merge);
      best.finite = best.finite && part.finite;
      best.lo = part.lo > best.lo ? part.lo : best.lo;
    });
    if (!best.finite) {
      out[r] = full();
      continue;
    }
    // the pairs holding a row whose upper bound reaches the best lower one (the row that set it at least)
    picked.clear();
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t v0 = p * B::kPairRows, v1 = std::min(v0 + B::kPairRows, n);
      bool any = false;
      for (int64_t v = v0; v < v1; ++v) any |= ph[v] >= best.lo;
      if (any) picked.push_back(p);
    }
    B::QuantizedRows rows{q.data(), d.data(), s.data(), K, G};
    rows.prefetch = choice.prefetch;
    const int64_t* pk = picked.data();
    float* lg = logits.data();
    const int64_t count = static_cast<int64_t>(picked.size());
    pool::parallel_for(0, count, count < 64 ? std::max<int64_t>(count, 1) : 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) B::linear_tile_rows(choice.path, format, w, rows, 1, n, 2 * pk[i], 2 * pk[i] + 2, lg);
    });
    // the first largest (or first NaN) among the candidates, in ascending order: every row that
    // can equal or beat the argmax is among them, so this is the full head's argmax
    int64_t arg = -1;
    float m = 0.f;
    for (int64_t i = 0; i < count && !(arg >= 0 && m != m); ++i) {
      const int64_t v1 = std::min((pk[i] + 1) * B::kPairRows, n);
      for (int64_t v = pk[i] * B::kPairRows; v < v1; ++v) {
        if (!(ph[v] >= best.lo)) continue;
        if (lg[v] != lg[v]) {
          arg = v, m = lg[v];
          break;
        }
        if (arg < 0 || lg[v] > m) arg = v, m = lg[v];
      }
    }
    exact += count * B::kPairRows;
    out[r] = arg >= 0 ? arg : full();  // (no candidate: not possible with finite bounds)
  }
  return exact;
}

std::atomic<int64_t> g_exact_rows{0};  // outputs computed exactly by block_argmax calls (edgespec_argmax_exact_rows)

Tensor& block_argmax_out(KernelRuntimeContext& ctx, const Tensor& x, const Tensor& weight, int64_t format, int64_t n,
                         const executorch::aten::optional<Tensor>& screen, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, x.scalar_type() == ScalarType::Float && x.dim() >= 1 && x.dim() <= 8, InvalidArgument, out,
                      "edgespec::block_argmax: x must be fp32 [..., K]");
  const int64_t tb = B::tile_bytes(format), K = x.size(x.dim() - 1), G = K / B::kBlock;
  ET_KERNEL_CHECK_MSG(ctx, tb > 0 && K > 0 && K % B::kBlock == 0, InvalidArgument, out,
                      "edgespec::block_argmax: a known format and K a multiple of 32");
  ET_KERNEL_CHECK_MSG(ctx, n > 0 && is_size(n), InvalidArgument, out, "edgespec::block_argmax: out_features must be 1 to 2^31 - 1");
  ET_KERNEL_CHECK_MSG(ctx, weight.scalar_type() == ScalarType::Byte && weight.numel() == B::packed_bytes(n, G, format), InvalidArgument, out,
                      "edgespec::block_argmax: packed weight size does not match N, K and the format");
  // (n and G fit 32 bits: the screen's size, NT / 2 * G * 352 bytes, fits int64)
  ET_KERNEL_CHECK_MSG(ctx,
                      !screen.has_value() || (format == B::kS8H && screen.value().scalar_type() == ScalarType::Byte &&
                                              screen.value().numel() == B::tile_rows(n) / 2 * G * B::kScreenPairBytes),
                      InvalidArgument, out, "edgespec::block_argmax: a screen is for S8H weights, 352 bytes per 16 rows and block of 32");
  ET_KERNEL_CHECK_MSG(ctx, out.scalar_type() == ScalarType::Long, InvalidArgument, out, "edgespec::block_argmax: int64 out");
  SizesType sizes[8];
  for (int64_t i = 0; i + 1 < x.dim(); ++i) sizes[i] = static_cast<SizesType>(x.size(i));
  ET_KERNEL_CHECK(ctx, executorch::runtime::resize_tensor(out, {sizes, static_cast<size_t>(x.dim() - 1)}) == executorch::runtime::Error::Ok,
                  InvalidArgument, out);
  const int64_t M = x.numel() / K;
  g_exact_rows += argmax_rows_of(g_plan[B::regime_of(1)], x.const_data_ptr<float>(), M, K, weight.const_data_ptr<uint8_t>(), format, n,
                                 screen.has_value() ? screen.value().const_data_ptr<uint8_t>() : nullptr, out.mutable_data_ptr<int64_t>());
  return out;
}

// Random weights of given shapes (fp16 or fp32 scales of a normal size: the speed does not
// depend on the values) and random activations, for timing passes.
struct Bench {
  struct Layer {
    int64_t n, k, format;
    std::vector<uint8_t> w;
  };
  std::vector<Layer> layers;
  std::vector<float> x, out;
};

// Boxed by hand: a program exported before `prologue`, `norm_weight`, `eps` and `residual` were
// in the schema (2026-12-04) calls the op with x, weight, format, out_features and out; a later
// one with all eight arguments and out. Both run. (The stack: the arguments, out, and out again
// as the returned value.)
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

EXECUTORCH_LIBRARY(edgespec, "block_argmax.out", edgespec::block_argmax_out);

static auto edgespec_block_linear_registered =
    executorch::runtime::register_kernel(executorch::runtime::Kernel("edgespec::block_linear.out", edgespec::block_linear_boxed));

// The plan's C interface (ctypes, edgespec/kernels/plan.py). Paths and regimes by their
// block_linear.h integer values.
extern "C" {

// Whether this CPU runs path `p`.
int64_t edgespec_path_supported(int64_t p) { return p >= 0 && p < edgespec::blocks::kPaths && edgespec::blocks::path_supported(static_cast<edgespec::blocks::Path>(p)); }

// The choice the CPU's flags alone make (block_linear.h's default_choice): path, prefetch,
// min_parallel_bytes into out[0..2].
void edgespec_default_choice(int64_t* out) {
  const auto c = edgespec::blocks::default_choice();
  out[0] = static_cast<int64_t>(c.path), out[1] = c.prefetch, out[2] = c.min_parallel_bytes;
}

const char* edgespec_path_name(int64_t p) { return edgespec::blocks::path_name(static_cast<edgespec::blocks::Path>(p)); }

// The choice in force for `regime`: path, prefetch, min_parallel_bytes into out[0..2].
void edgespec_get_choice(int64_t regime, int64_t* out) {
  const auto& c = edgespec::g_plan[regime];
  out[0] = static_cast<int64_t>(c.path), out[1] = c.prefetch, out[2] = c.min_parallel_bytes;
}

// Install a choice for `regime` (0 one row, 1 two to 16 rows, 2 more); returns 0 when the path
// does not run on this CPU (nothing changed).
int64_t edgespec_set_choice(int64_t regime, int64_t path, int64_t prefetch, int64_t min_parallel_bytes) {
  if (regime < 0 || regime >= edgespec::blocks::kRegimes || !edgespec_path_supported(path) || prefetch < 0 || min_parallel_bytes < 0) return 0;
  edgespec::g_plan[regime] = {static_cast<edgespec::blocks::Path>(path), prefetch, min_parallel_bytes};
  return 1;
}

// Start (1) or stop (0) recording the op's calls; starting clears what was recorded.
void edgespec_record_calls(int64_t on) {
  std::lock_guard<std::mutex> lock(edgespec::g_record_mutex);
  if (on) edgespec::g_recorded.clear();
  edgespec::g_recording = on != 0;
}

// The recorded calls as (n, K, format) triples into out (room for max triples); returns how many were recorded.
int64_t edgespec_recorded_calls(int64_t* out, int64_t max) {
  std::lock_guard<std::mutex> lock(edgespec::g_record_mutex);
  const int64_t count = static_cast<int64_t>(edgespec::g_recorded.size() / 3);
  std::copy_n(edgespec::g_recorded.begin(), 3 * std::min(count, max), out);
  return count;
}

// Random weights for `count` layers given as (n, K, format) triples, activations for up to
// `max_rows` rows.
void* edgespec_bench_new(const int64_t* shapes, int64_t count, int64_t max_rows) {
  namespace B = edgespec::blocks;
  auto* bench = new edgespec::Bench;
  std::mt19937 rng(1);
  int64_t kmax = 0, nmax = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = shapes[3 * i], k = shapes[3 * i + 1], f = shapes[3 * i + 2], tb = B::tile_bytes(f);
    edgespec::Bench::Layer l{n, k, f, std::vector<uint8_t>(B::tile_rows(n) * (k / B::kBlock) * tb)};
    for (auto& b : l.w) b = static_cast<uint8_t>(rng());
    for (size_t t = 0; t < l.w.size() / tb; ++t) {
      uint8_t* sc = l.w.data() + t * tb + B::code_bytes(f);
      const int64_t bytes = tb - B::code_bytes(f);
      if (B::fp32_scales(f)) {
        const float v = 1e-3f;
        for (int64_t j = 0; j < bytes; j += 4) std::memcpy(sc + j, &v, 4);
      } else {
        for (int64_t j = 0; j < bytes; j += 2) sc[j] = 0, sc[j + 1] = 0x20;  // fp16 2^-7
      }
    }
    kmax = std::max(kmax, k), nmax = std::max(nmax, n);
    bench->layers.push_back(std::move(l));
  }
  std::normal_distribution<float> normal(0.f, 1.f);
  bench->x.resize(max_rows * kmax);
  for (auto& v : bench->x) v = normal(rng);
  bench->out.resize(max_rows * nmax);
  return bench;
}

// Wall milliseconds of one pass over layers [first, last) with `rows` activation rows (at most
// the bench's max_rows) under the given choice, each call as the op makes it.
double edgespec_bench_pass(void* handle, int64_t rows, int64_t path, int64_t prefetch, int64_t min_parallel_bytes, int64_t first, int64_t last) {
  auto* bench = static_cast<edgespec::Bench*>(handle);
  const edgespec::blocks::Choice c{static_cast<edgespec::blocks::Path>(path), prefetch, min_parallel_bytes};
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = first; i < last; ++i) {
    const auto& l = bench->layers[i];
    edgespec::linear_rows(c, edgespec::Input{bench->x.data(), l.k}, rows, l.k, l.w.data(), l.format, l.n, bench->out.data());
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Wall milliseconds of a plain streaming read of the same layers' weight bytes (the physical
// limit a one-row pass approaches): the pool's threads each read an equal contiguous share of
// every layer, 32 bytes at a time, prefetching ahead; one parallel section per pass.
double edgespec_bench_read(void* handle, int64_t first, int64_t last) {
  using namespace edgespec::vec;
  auto* bench = static_cast<edgespec::Bench*>(handle);
  const int64_t tasks = std::max<int64_t>(edgespec::pool::threads(), 1);
  std::vector<v8i> sums(tasks, v8i{});
  const auto t0 = std::chrono::steady_clock::now();
  edgespec::pool::parallel_for(0, tasks, 1, [&](int64_t t0_, int64_t t1_) {
    for (int64_t t = t0_; t < t1_; ++t) {
      v8i acc = v8i{};
      for (int64_t i = first; i < last; ++i) {
        const auto& w = bench->layers[i].w;
        const int64_t chunks = static_cast<int64_t>(w.size()) / 32, c0 = chunks * t / tasks, c1 = chunks * (t + 1) / tasks;
        const uint8_t* p = w.data();
        for (int64_t c = c0; c < c1; ++c) {
          __builtin_prefetch(p + 32 * c + 4096);
          v8i v;
          std::memcpy(&v, p + 32 * c, 32);
          acc ^= v;
        }
      }
      sums[t] = acc;
    }
  });
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  volatile int32_t sink = 0;
  for (const auto& v : sums) sink = sink + v[0];
  return ms;
}

// The screen's interval [lo, hi] of each of the n outputs for one row x [K] through path `p`
// (screen.h; every path gives the same bits), single-threaded; 0 when the CPU lacks the path.
int64_t edgespec_screen_intervals(int64_t p, const float* x, int64_t K, const uint8_t* screen, int64_t n, float* lo, float* hi) {
  namespace B = edgespec::blocks;
  if (!edgespec_path_supported(p)) return 0;
  const int64_t G = K / B::kBlock, NT = B::tile_rows(n);
  std::vector<int8_t> q(K);
  std::vector<float> d(G), s(G), a(G), h(NT * B::kTileRows), l(NT * B::kTileRows);
  std::vector<int32_t> c(G);
  B::quantize_rows(x, 1, K, q.data(), d.data(), s.data());
  B::screen_row_sums(q.data(), d.data(), G, c.data(), a.data());
  B::screen_pairs(static_cast<B::Path>(p), screen, B::ScreenRow{q.data(), d.data(), c.data(), a.data(), G}, n, 0, NT / 2, h.data(), l.data());
  std::copy_n(l.begin(), n, lo);
  std::copy_n(h.begin(), n, hi);
  return 1;
}

// Outputs computed exactly by edgespec::block_argmax since the last call (reset to 0): n per
// row without a screen, 16 per re-scored pair of tiles with one (bench/head_screen.py reads it).
int64_t edgespec_argmax_exact_rows() { return edgespec::g_exact_rows.exchange(0); }

void edgespec_bench_free(void* handle) { delete static_cast<edgespec::Bench*>(handle); }
}
