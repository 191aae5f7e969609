// edgespec::block_argmax.out — the index of each row's largest output of a linear over GGUF-style
// weight blocks, exact, optionally reading a 5-bit screen of the head instead of its codes (the
// op schema is in edgespec/kernels/ops.py; the screen's arithmetic in block_linear/screen.h):
//
//   x [..., K] fp32, weight uint8 (block_linear's packed matrix), format, N, screen uint8
//   [ceil(N / 16) * K / 32 * 352] or None (S8H weights only; edgespec/kernels/block_linear.py's
//   pack_screen): out [...] int64 = block_linear(x, weight, format, N).argmax(-1).
//
// Its exact outputs are block_linear's (block_ops.h's `linear_rows`, the same path and bits) under
// the plan's one-row choice; `edgespec_argmax_exact_rows` tells bench/head_screen.py how many it
// computed.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "op_api.h"

#include "block_ops.h"
#include "glue.h"
#include "threadpool.h"

namespace edgespec {
namespace {

namespace B = edgespec::blocks;

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

}  // namespace
}  // namespace edgespec

EXECUTORCH_LIBRARY(edgespec, "block_argmax.out", edgespec::block_argmax_out);

// Outputs computed exactly by edgespec::block_argmax since the last call (reset to 0): n per
// row without a screen, 16 per re-scored pair of tiles with one (bench/head_screen.py reads it).
extern "C" int64_t edgespec_argmax_exact_rows() { return edgespec::g_exact_rows.exchange(0); }
