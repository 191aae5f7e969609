// The block kernel's plan (edgespec/kernels/plan.py chooses it by measurement): the choice in
// force per regime of row counts, which block_linear.cpp and block_argmax.cpp compute under, and
// the recording of the shapes a program's forward calls edgespec::block_linear with. Its C
// interface is for ctypes (plan.py); the timing passes are kernel_bench.cpp's.

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "block_ops.h"

namespace edgespec {

namespace B = edgespec::blocks;

B::Choice g_plan[B::kRegimes] = {B::default_choice(), B::default_choice(), B::default_choice()};
bool g_recording = false;

namespace {

std::mutex g_record_mutex;
std::vector<int64_t> g_recorded;  // (n, K, format) of each call while recording

}  // namespace

void record_call(int64_t n, int64_t K, int64_t format) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_recorded.insert(g_recorded.end(), {n, K, format});
}

}  // namespace edgespec

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
}
