"""The bundle's autoregressive decoding beside llama.cpp's on the same GGUF, side by side.

For --rounds rounds, at each thread count in turn: `edgespec bench --mode ar` on the bundle
(128 new tokens, its own warm-up and median of --runs), the same with the CPU's flags' kernel
choice (`EDGESPEC_KERNEL_PLAN=default`, what the kernel ran before it was chosen by
measurement), then llama.cpp's `llama-bench -p 0 -n 128 -r --runs` on the GGUF the bundle came
from. With --prefill N (64 by default), also a prompt of N tokens: one `forward` call of the
bundle beside `llama-bench -p N`. A bundle whose program has `next_token` (quant.head_screen)
decodes through it; its full head (`--mode ar-logits`, forward's logits) is measured beside it. Each program in a fresh process. Medians over rounds of
tokens/s, and the ratios to llama.cpp and 2 threads over 1. llama.cpp is built outside the project (from the
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


def edgespec_tok_s(bundle: Path, threads: int, runs: int, new_tokens: int, flags_only: bool, mode: str = "ar") -> float:
    env = dict(os.environ, **({"EDGESPEC_KERNEL_PLAN": "default"} if flags_only else {}))
    cmd = [sys.executable, "-m", "edgespec.cli", "bench", "--bundle", str(bundle), "--mode", mode, "--threads", str(threads)]
    done = subprocess.run([*cmd, "--runs", str(runs), "--max-new-tokens", str(new_tokens), "--json"], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    return json.loads(done.stdout)[mode]["tokens_per_s"]


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


def edgespec_prefill_tok_s(bundle: Path, threads: int, runs: int, tokens: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PREFILL_CHILD, str(bundle / "model.pte"), str(threads), str(tokens), str(runs)], capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    return float(done.stdout.split()[-1])


def llama_tok_s(llama_bench: Path, gguf: Path, threads: int, runs: int, new_tokens: int, prompt: int = 0) -> float:
    """llama-bench's tokens/s: decoding `new_tokens`, or (prompt > 0) a prompt of that many tokens."""
    cmd = [str(llama_bench), "-m", str(gguf), "-p", str(prompt), "-n", str(0 if prompt else new_tokens), "-t", str(threads), "-r", str(runs), "-o", "json"]
    from edgespec.host import foreign_environ

    done = subprocess.run(cmd, capture_output=True, text=True, env=foreign_environ())  # llama.cpp's OpenMP workers spin as it intends
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    return json.loads(done.stdout)[0]["avg_ts"]


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
    for _ in range(a.rounds):
        for t in a.threads:
            samples["edgespec"][t].append(edgespec_tok_s(a.bundle, t, a.runs, a.new_tokens, False))
            samples["edgespec_flags"][t].append(edgespec_tok_s(a.bundle, t, a.runs, a.new_tokens, True))
            samples["llama_cpp"][t].append(llama_tok_s(a.llama_bench, gguf, t, a.runs, a.new_tokens))
            if screened:
                samples["edgespec_full_head"][t].append(edgespec_tok_s(a.bundle, t, a.runs, a.new_tokens, False, mode="ar-logits"))
            if a.prefill:
                samples["edgespec_prefill"][t].append(edgespec_prefill_tok_s(a.bundle, t, a.runs, a.prefill))
                samples["llama_cpp_prefill"][t].append(llama_tok_s(a.llama_bench, gguf, t, a.runs, a.new_tokens, prompt=a.prefill))
    med = {k: {t: round(statistics.median(v), 2) for t, v in per.items()} for k, per in samples.items()}
    from edgespec.host import cpu_name

    cpu = cpu_name()
    out = {
        "cpu": cpu,
        "bundle": str(a.bundle),
        "gguf": str(gguf),
        "rounds": a.rounds,
        "tokens_per_s": med,
        "samples": samples,
        "vs_llama_cpp": {t: round(med["edgespec"][t] / med["llama_cpp"][t], 3) for t in a.threads},
        "flags_vs_llama_cpp": {t: round(med["edgespec_flags"][t] / med["llama_cpp"][t], 3) for t in a.threads},
    }
    if screened:
        out["full_head_vs_llama_cpp"] = {t: round(med["edgespec_full_head"][t] / med["llama_cpp"][t], 3) for t in a.threads}
    if a.prefill:
        out["prefill_tokens"] = a.prefill
        out["prefill_vs_llama_cpp"] = {t: round(med["edgespec_prefill"][t] / med["llama_cpp_prefill"][t], 3) for t in a.threads}
    if 1 in a.threads and 2 in a.threads:
        out["two_over_one"] = {k: round(v[2] / v[1], 3) for k, v in med.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
