"""The bundle's autoregressive decoding beside llama.cpp's on the same GGUF, side by side.

For --rounds rounds, at each thread count in turn: `edgespec bench --mode ar` on the bundle
(128 new tokens, its own warm-up and median of --runs), the same with the CPU's flags' kernel
choice (`EDGESPEC_KERNEL_PLAN=default`, what the kernel ran before it was chosen by
measurement), then llama.cpp's `llama-bench -p 0 -n 128 -r --runs` on the GGUF the bundle came
from. With --prefill N (64 by default), also a prompt of N tokens: one `forward` call of the
bundle beside `llama-bench -p N`. A bundle whose program has `next_token` (quant.head_screen)
decodes through it; its full head (`--mode ar-logits`, forward's logits) is measured beside it. Each program in a fresh process. Medians over rounds of
tokens/s, and the ratios to llama.cpp and 2 threads over 1; each process's peak RSS beside
the program's and the GGUF's bytes. A tool that fails (llama.cpp's native build dies on
prompts on some Xeons) is named with its exit status and last words under "failures", and
every other figure is still reported. llama.cpp is built outside the project (from the
`llama-cpp-python` sdist's vendored source, `cmake -DGGML_NATIVE=ON`, target llama-bench).

    python bench/vs_llama_cpp.py --bundle bundles/default --llama-bench /path/llama-bench \\
        --threads 1 2 --rounds 3 > docs/results/vs_llama_cpp.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# Runs a command as its only child and prints the child's peak RSS (KB) last on stderr: the
# same measurement for edgespec's processes and llama.cpp's tools.
PEAK_RSS_WRAPPER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
print(f"peak_rss_kb {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}", file=sys.stderr)
sys.exit(code if code >= 0 else 128 - code)
"""


class Failed(Exception):
    """A tool that did not give its figure: what ran and why (exit status, its last words)."""


def run_measured(cmd: list[str], env: dict | None = None) -> tuple[str, float]:
    """(stdout, peak RSS in MB) of `cmd`; Failed naming the command and why when it fails."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS_WRAPPER, *cmd], capture_output=True, text=True, env=env)
    lines = done.stderr.rstrip().splitlines()
    peak = float(lines.pop().split()[1]) / 1024 if lines and lines[-1].startswith("peak_rss_kb ") else float("nan")
    if done.returncode != 0:
        status = f"killed by signal {done.returncode - 128}" if done.returncode > 128 else f"exit status {done.returncode}"
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no output on stderr")
        tool = Path(cmd[0]).name if cmd[0] != sys.executable else " ".join(cmd[1:3])[:60]  # llama-bench, or "-m edgespec.cli"
        raise Failed(f"{tool}: {status}: {last[-300:]}")
    return done.stdout, peak


def edgespec_tok_s(bundle: Path, threads: int, runs: int, new_tokens: int, flags_only: bool, mode: str = "ar") -> tuple[float, float]:
    """(tokens/s, peak RSS MB) of `edgespec bench --mode MODE`."""
    env = dict(os.environ, **({"EDGESPEC_KERNEL_PLAN": "default"} if flags_only else {}))
    cmd = [sys.executable, "-m", "edgespec.cli", "bench", "--bundle", str(bundle), "--mode", mode, "--threads", str(threads)]
    out, peak = run_measured([*cmd, "--runs", str(runs), "--max-new-tokens", str(new_tokens), "--json"], env)
    return json.loads(out)[mode]["tokens_per_s"], peak


# A prompt of N tokens through the bundle's `forward` in one call, in a fresh process: the
# median of `runs` calls after two warm-up calls, as tokens/s (the ids are arbitrary, as
# llama-bench's are).
PREFILL_CHILD = """
import statistics, sys, time
import edgespec
import torch
from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
from edgespec.runtime.runner import ProgramRunner
pte, threads, tokens, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
_unsafe_reset_threadpool(threads)
runner = ProgramRunner(pte)
ids = torch.arange(1000, 1000 + tokens, dtype=torch.long).reshape(1, tokens)
times = []
for i in range(runs + 2):
    t0 = time.perf_counter()
    runner.forward(ids, 0)
    times.append(time.perf_counter() - t0)
print(tokens / statistics.median(times[2:]))
"""


def edgespec_prefill_tok_s(bundle: Path, threads: int, runs: int, tokens: int) -> tuple[float, float]:
    out, peak = run_measured([sys.executable, "-c", PREFILL_CHILD, str(bundle / "model.pte"), str(threads), str(tokens), str(runs)])
    return float(out.split()[-1]), peak


def llama_tok_s(llama_bench: Path, gguf: Path, threads: int, runs: int, new_tokens: int, prompt: int = 0) -> tuple[float, float]:
    """(llama-bench's tokens/s, its peak RSS MB): decoding `new_tokens`, or (prompt > 0) a prompt
    of that many tokens."""
    cmd = [str(llama_bench), "-m", str(gguf), "-p", str(prompt), "-n", str(0 if prompt else new_tokens), "-t", str(threads), "-r", str(runs), "-o", "json"]
    from edgespec.host import foreign_environ

    out, peak = run_measured(cmd, foreign_environ())  # llama.cpp's OpenMP workers spin as it intends
    return json.loads(out)[0]["avg_ts"], peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=Path("bundles/default"))
    ap.add_argument("--gguf", type=Path, help="default: the bundle's model source (the embedded SmolLM2 file)")
    ap.add_argument("--llama-bench", type=Path, required=True)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prefill", type=int, default=64, help="also a prompt of this many tokens in one call beside llama-bench -p (0: skip)")
    a = ap.parse_args()
    gguf = a.gguf
    if gguf is None:
        from edgespec.models.load import embedded_path, is_embedded

        source = json.loads((a.bundle / "manifest.json").read_text())["recipe"]["model"]["source"]
        gguf = embedded_path(source) if is_embedded(source) else Path(source)
    # a program with next_token (quant.head_screen) decodes greedily through it; also measured: its full head (forward's logits)
    screened = "next_token" in json.loads((a.bundle / "manifest.json").read_text())["methods"]
    kinds = (
        ("edgespec", "edgespec_flags", "llama_cpp")
        + (("edgespec_full_head",) if screened else ())
        + (("edgespec_prefill", "llama_cpp_prefill") if a.prefill else ())
    )
    samples: dict[str, dict[int, list[float]]] = {k: {t: [] for t in a.threads} for k in kinds}
    rss: dict[str, dict[int, list[float]]] = {k: {t: [] for t in a.threads} for k in kinds}
    failures: list[str] = []

    def sample(kind: str, t: int, measure, *args, **kw) -> None:
        """One figure of `kind` at `t` threads; a tool that fails is named in `failures` and the
        rest of the comparison goes on (llama.cpp's native build dies on prompts on some Xeons)."""
        try:
            tok_s, peak = measure(*args, **kw)
        except Failed as e:
            failures.append(f"{kind}, {t} threads: {e}")
            return
        samples[kind][t].append(tok_s)
        rss[kind][t].append(peak)

    for _ in range(a.rounds):
        for t in a.threads:
            sample("edgespec", t, edgespec_tok_s, a.bundle, t, a.runs, a.new_tokens, False)
            sample("edgespec_flags", t, edgespec_tok_s, a.bundle, t, a.runs, a.new_tokens, True)
            sample("llama_cpp", t, llama_tok_s, a.llama_bench, gguf, t, a.runs, a.new_tokens)
            if screened:
                sample("edgespec_full_head", t, edgespec_tok_s, a.bundle, t, a.runs, a.new_tokens, False, mode="ar-logits")
            if a.prefill:
                sample("edgespec_prefill", t, edgespec_prefill_tok_s, a.bundle, t, a.runs, a.prefill)
                sample("llama_cpp_prefill", t, llama_tok_s, a.llama_bench, gguf, t, a.runs, a.new_tokens, prompt=a.prefill)
    med = {k: {t: round(statistics.median(v), 2) for t, v in per.items() if v} for k, per in samples.items()}
    peak = {k: {t: round(max(v), 1) for t, v in per.items() if v} for k, per in rss.items()}

    def ratio(a_kind: str, b_kind: str) -> dict[int, float]:  # where both were measured
        return {t: round(med[a_kind][t] / med[b_kind][t], 3) for t in a.threads if t in med[a_kind] and t in med[b_kind]}

    from edgespec.host import cpu_name

    out = {
        "cpu": cpu_name(),
        "bundle": str(a.bundle),
        "gguf": str(gguf),
        "program_mb": round((a.bundle / "model.pte").stat().st_size / 1e6, 2),
        "gguf_mb": round(gguf.stat().st_size / 1e6, 2),
        "rounds": a.rounds,
        "tokens_per_s": med,
        "samples": samples,
        "peak_rss_mb": peak,  # each process's peak (the largest over rounds): a whole edgespec bench or llama-bench run
        "vs_llama_cpp": ratio("edgespec", "llama_cpp"),
        "flags_vs_llama_cpp": ratio("edgespec_flags", "llama_cpp"),
        "failures": failures,
    }
    if screened:
        out["full_head_vs_llama_cpp"] = ratio("edgespec_full_head", "llama_cpp")
    if a.prefill:
        out["prefill_tokens"] = a.prefill
        out["prefill_vs_llama_cpp"] = ratio("edgespec_prefill", "llama_cpp_prefill")
    if 1 in a.threads and 2 in a.threads:
        out["two_over_one"] = {k: round(v[2] / v[1], 3) for k, v in med.items() if 1 in v and 2 in v}
    print(json.dumps(out, indent=1))
    for f in failures:
        print(f"not measured: {f}", file=sys.stderr)
    if not any(med.values()):
        sys.exit("nothing was measured")


if __name__ == "__main__":
    main()
