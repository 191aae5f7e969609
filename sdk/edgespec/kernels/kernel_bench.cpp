// The block kernel's timing passes, for ctypes: edgespec/kernels/plan.py times a program's
// recorded shapes under candidate choices with them, bench/linear_bandwidth.py sets them
// against a plain read of the same bytes, bench/head_screen.py times the head screen's
// intervals. A pass computes each call as the op does (block_ops.h's `linear_rows`).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "block_ops.h"
#include "threadpool.h"
#include "vec8.h"

namespace edgespec {
namespace {

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

}  // namespace
}  // namespace edgespec

extern "C" {

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

void edgespec_bench_free(void* handle) { delete static_cast<edgespec::Bench*>(handle); }
}
