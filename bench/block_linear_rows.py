"""edgespec's block kernel alone: every linear layer of one token of the default model, for
M = 1..16 activation rows per call (--rows), through every path this CPU runs.

Builds a small C++ driver over `sdk/edgespec/kernels/block_linear.h` (no ExecuTorch, one
thread) that calls the kernel on the embedded SmolLM2-135M's 211 linear shapes (30 blocks of
q, k, v, o as Q4_1-style U4H tiles, gate, up, down; the Q8_0 head as S8H), random codes (the
speed does not depend on the values), the weights read from DRAM as in decoding (the model's
~96 MB of tiles is larger than the caches). Per path and M: the median of --reps passes over
all layers, in thread CPU time (what this process spent, not what other processes on the
machine took), and its ratio to M = 1 of the same path. The paths and M are interleaved
per repetition, so every ratio is measured side by side.

    python bench/block_linear_rows.py --reps 15 > docs/results/block_linear_rows.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from edgespec.kernels import library

KERNELS = Path(library.__file__).parent  # the installed package's kernel sources (block_linear.h)

DRIVER = r"""
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>
#include "block_linear.h"
namespace B = edgespec::blocks;

static double cpu_ms() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }

struct Layer { int64_t n, k, format; std::vector<uint8_t> w; };

int main(int argc, char** argv) {
  const int reps = std::atoi(argv[1]);
  const int64_t dim = std::atoll(argv[2]), kv = std::atoll(argv[3]), hidden = std::atoll(argv[4]), vocab = std::atoll(argv[5]), layers = std::atoll(argv[6]);
  std::vector<int> row_counts;  // argv[7..]: the M to time
  for (int a = 7; a < argc; ++a) row_counts.push_back(std::atoi(argv[a]));
  const int64_t mmax = *std::max_element(row_counts.begin(), row_counts.end());
  std::mt19937 rng(1);
  std::vector<Layer> ls;
  auto add = [&](int64_t n, int64_t k, int64_t f) {
    Layer l{n, k, f, std::vector<uint8_t>(B::tile_rows(n) * (k / 32) * B::tile_bytes(f))};
    for (auto& b : l.w) b = rng() & 0xff;
    const int64_t tb = B::tile_bytes(f), scales = f == B::kU4H ? 16 : 8;
    for (size_t t = 0; t < l.w.size() / tb; ++t)  // fp16 scales of a normal size (0x2000 = 2^-7)
      for (int r = 0; r < scales; ++r) { l.w[t * tb + B::code_bytes(f) + 2 * r] = 0; l.w[t * tb + B::code_bytes(f) + 2 * r + 1] = 0x20; }
    ls.push_back(std::move(l));
  };
  for (int64_t i = 0; i < layers; ++i) {
    add(dim, dim, B::kU4H); add(kv, dim, B::kU4H); add(kv, dim, B::kU4H); add(dim, dim, B::kU4H);
    add(hidden, dim, B::kU4H); add(hidden, dim, B::kU4H); add(dim, hidden, B::kU4H);
  }
  add(vocab, dim, B::kS8H);
  const int64_t kmax = std::max(dim, hidden), nmax = std::max(vocab, hidden);
  std::vector<float> x(mmax * kmax), out(mmax * nmax);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& v : x) v = normal(rng);
  std::vector<int8_t> q(mmax * kmax);
  std::vector<float> d(mmax * kmax / 32), s(mmax * kmax / 32);
  std::vector<B::Path> paths;
  for (B::Path p : {B::Path::kAmxInt8, B::Path::kAvx512Vnni, B::Path::kAvxVnni, B::Path::kAvx2, B::Path::kI8mm, B::Path::kDotprod, B::Path::kPortable})
    if (B::path_supported(p)) paths.push_back(p);
  std::vector<std::vector<std::vector<double>>> ms(paths.size(), std::vector<std::vector<double>>(row_counts.size()));
  for (int rep = 0; rep < reps + 1; ++rep)  // the first pass warms up
    for (size_t pi = 0; pi < paths.size(); ++pi)
      for (size_t mi = 0; mi < row_counts.size(); ++mi) {
        const int m = row_counts[mi];
        const double t0 = cpu_ms();
        for (const Layer& l : ls) {
          B::quantize_rows(x.data(), m, l.k, q.data(), d.data(), s.data());
          const B::QuantizedRows rows{q.data(), d.data(), s.data(), l.k, l.k / 32};
          B::linear_tile_rows(paths[pi], l.format, l.w.data(), rows, m, l.n, 0, B::tile_rows(l.n), out.data());
        }
        if (rep > 0) ms[pi][mi].push_back(cpu_ms() - t0);
      }
  for (size_t pi = 0; pi < paths.size(); ++pi) {
    std::printf("%s%s", pi ? " " : "", B::path_name(paths[pi]));
    for (auto& v : ms[pi]) { std::sort(v.begin(), v.end()); std::printf(" %.4f", v[v.size() / 2]); }
  }
  std::printf("\n");
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8, 16],
        help="activation rows per call to time (the first is the ratios' base; 1 unless you mean otherwise)",
    )
    ap.add_argument("--dim", type=int, default=576)
    ap.add_argument("--kv-dim", type=int, default=192)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--layers", type=int, default=30)
    args = ap.parse_args()
    cxx = library.compiler()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "driver.cpp", Path(tmp) / "driver"
        src.write_text(DRIVER)
        # the library's own code generation: -O3, no contraction, built for this CPU
        subprocess.run([cxx, *library.codegen(), f"-I{KERNELS}", str(src), "-o", str(exe)], check=True)
        shape = [args.dim, args.kv_dim, args.hidden, args.vocab, args.layers]
        cmd = [str(exe), str(args.reps), *map(str, shape), *map(str, args.rows)]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    report = {"shape": dict(zip(("dim", "kv_dim", "hidden", "vocab", "layers"), shape)), "reps": args.reps, "ms_per_token_all_linears": {}}
    width = 1 + len(args.rows)
    for i in range(0, len(line), width):
        path, ms = line[i], [float(v) for v in line[i + 1 : i + width]]
        report["ms_per_token_all_linears"][path] = {str(m): {"ms": t, "ratio_to_one_row": round(t / ms[0], 3)} for m, t in zip(args.rows, ms)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
