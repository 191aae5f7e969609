"""How much memory `edgespec generate` takes beyond the Python runtime it starts from, against the
program's size. Prints JSON.

Each figure is a fresh process (its peak RSS, VmHWM / ru_maxrss):
- `import_baseline_mb`: a process that loads what `edgespec generate` loads before it reads
  a bundle (edgespec's runtime, torch, ExecuTorch's bindings and the kernel libraries a
  program may call: `edgespec.runtime.runner.load_runtime_kernels`), and nothing else;
- `tokenizer_mb`: the bundle's tokenizer loaded on top of that baseline (VmRSS after loading
  minus before, so a transient while parsing is not counted; `tokenizer_peak_mb` is the peak
  over the same baseline);
- `generate_peak_mb`: `edgespec generate --bundle B --prompt P --max-new-tokens N` itself,
  greedy, in the bundle's default mode; `over_baseline_mb` = that minus the baseline, and
  `over_baseline_per_program` = that over model.pte's size (issue 69's bar: <= 1.2).
Runs: the median of `--runs` processes per figure.

    python bench/generate_memory.py bundles/default bundles/gemma3 --threads 2 > docs/results/generate_memory_NAME.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from edgespec.host import cpu_name

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

_BASELINE = """
import edgespec.runtime.runner as runner
from edgespec.runtime.speed import peak_rss_mb
runner.load_runtime_kernels()  # torch, ExecuTorch's bindings and the kernel libraries a program may call
print(peak_rss_mb())
"""

_TOKENIZER = """
import sys
import edgespec.runtime.runner as runner
from edgespec.runtime.session import bundle_tokenizer
from edgespec.runtime.speed import peak_rss_mb

def rss():
    return next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))

runner.load_runtime_kernels()
before, hwm = rss(), peak_rss_mb()
tk = bundle_tokenizer(sys.argv[1])
tk.decode(tk.encode("warm: the tokenizer's first call"))
print(rss() - before, peak_rss_mb() - hwm)
"""

_CHILD_PEAK = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if done.returncode:
    sys.exit(done.stderr[-2000:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def _python(code: str, *args: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"measurement failed: {out.stderr.strip()[-2000:]}")
    return [float(x) for x in out.stdout.split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundles", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=0, help="ExecuTorch threads of edgespec generate (0: its default)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3, help="processes per figure (the median is reported)")
    args = ap.parse_args()
    exe = shutil.which("edgespec") or sys.exit("edgespec is not on PATH (pip install -e .)")
    med = statistics.median
    baseline = med(_python(_BASELINE)[0] for _ in range(args.runs))
    rows = []
    for b in args.bundles:
        tok = [_python(_TOKENIZER, str(b)) for _ in range(args.runs)]
        cmd = [exe, "generate", "--bundle", str(b), "--prompt", PROMPT, "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads), "--json"]
        _python(_CHILD_PEAK, *cmd)  # warm-up: the kernel plan and checksums cached, as on a machine that ran it before
        peak = med(_python(_CHILD_PEAK, *cmd)[0] for _ in range(args.runs))
        program_mb = (b / "model.pte").stat().st_size / 2**20
        rows.append(
            {
                "bundle": str(b),
                "program_mb": round(program_mb, 1),
                "tokenizer_mb": round(med(t[0] for t in tok), 1),
                "tokenizer_peak_mb": round(med(t[1] for t in tok), 1),
                "generate_peak_mb": round(peak, 1),
                "over_baseline_mb": round(peak - baseline, 1),
                "over_baseline_per_program": round((peak - baseline) / program_mb, 3),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    report = {
        "cpu": cpu_name(),
        "threads": args.threads or None,
        "max_new_tokens": args.max_new_tokens,
        "runs": args.runs,
        "import_baseline_mb": round(baseline, 1),
        "rows": rows,
        "command": " ".join(["python", "bench/generate_memory.py", *sys.argv[1:]]),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
