"""Attention for a few query rows in a `.pte`: which path is cheapest on this CPU.

Probe programs of 30 attention layers shaped like SmolLM2-135M (9 query heads, 3 KV heads,
head size 64, a 1024-slot cache per layer), R query rows at cache position c:

  rows         one `llama::custom_sdpa` call per row (the kernel path of one-token decoding)
  custom_sdpa  one `llama::custom_sdpa` call for all R rows, causal from c
  ops          plain tensor ops (bmm, softmax) over the cache slice [0, c + R), grouped-query
               reshaped, lowered to XNNPACK where it takes them
  exact        one `edgespec::attention` call for all R rows (edgespec's kernel: each row's
               arithmetic independent of R)

Each probe is exported and lowered here (about a minute each), then timed by ExecuTorch's
runtime: median ms per layer over 35 calls after 5 warm-ups, 1 and 2 threads, c = 8, 200,
500. Each variant runs in its own process (loading several probe programs in one process
crashed the runtime). Prints one JSON object.

    python bench/attention_paths.py > docs/results/attention_paths.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep instead of spinning, edgespec.host.passive_openmp)

# isort: split
import torch
from torch import nn

H, HKV, DH, S, L = 9, 3, 64, 1024, 30


class Probe(nn.Module):
    def __init__(self, variant: str, R: int):
        super().__init__()
        self.variant, self.R = variant, R
        for i in range(L):
            self.register_buffer(f"k{i}", torch.randn(1, S, HKV, DH) * 0.3)
            self.register_buffer(f"v{i}", torch.randn(1, S, HKV, DH))

    def _ops(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos) -> torch.Tensor:
        R, G, n = self.R, H // HKV, pos + self.R
        keys = k.narrow(1, 0, n)[0].permute(1, 2, 0)  # [Hkv, D, n]
        values = v.narrow(1, 0, n)[0].transpose(0, 1)  # [Hkv, n, D]
        qq = q[0].reshape(R, HKV, G, DH).permute(1, 0, 2, 3).reshape(HKV, R * G, DH)  # row r*G + g
        scores = torch.bmm(qq, keys) * DH**-0.5  # [Hkv, R*G, n]
        row = (torch.arange(R * G) // G)[:, None]
        mask = torch.zeros(R * G, n).masked_fill(torch.arange(n)[None, :] - pos > row, float("-inf"))
        out = torch.bmm(torch.softmax(scores + mask, -1), values)  # [Hkv, R*G, D]
        return out.reshape(HKV, R, G, DH).permute(1, 0, 2, 3).reshape(1, R, H, DH)

    def forward(self, q: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        from edgespec.export.swaps import EXPORT_ATTENTION

        pos = input_pos[0].item()
        torch._check(pos >= 0)
        torch._check(pos + self.R <= S)
        outs = []
        for i in range(L):
            k, v, qi = getattr(self, f"k{i}"), getattr(self, f"v{i}"), q * (1 + 0.01 * i)
            if self.variant == "ops":
                outs.append(self._ops(qi, k, v, pos))
            else:
                outs.append(EXPORT_ATTENTION[self.variant]()(qi, k, v, pos, None))
        return torch.stack(outs).sum(0)


def worker(variant: str, R: int, contexts: list[int], threads: list[int]) -> dict:
    import executorch.extension.pybindings.portable_lib as pl
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass
    from executorch.runtime import Runtime

    import edgespec.kernels.ops  # noqa: F401
    from edgespec.export.swaps import load_executorch_llm_ops
    from edgespec.kernels import library

    load_executorch_llm_ops()
    library.load()
    torch.manual_seed(0)
    q = torch.randn(1, R, H, DH)
    with torch.no_grad():
        ep = torch.export.export(Probe(variant, R).eval(), (q, torch.tensor([200])), strict=False)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True))
    buf = edge.to_executorch(ExecutorchBackendConfig(sym_shape_eval_pass=ConstraintBasedSymShapeEvalPass())).buffer
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "probe.pte"
        path.write_bytes(buf)
        out = {}
        for th in threads:
            pl._unsafe_reset_threadpool(th)  # before loading: XNNPACK keeps the pool it loads with
            method = Runtime.get().load_program(path).load_method("forward")
            for c in contexts:
                inputs = [q, torch.tensor([c])]
                ts = []
                for _ in range(40):
                    t = time.perf_counter()
                    method.execute(inputs)
                    ts.append(time.perf_counter() - t)
                out[f"threads={th} ctx={c}"] = round(1000 * statistics.median(ts[5:]) / L, 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--contexts", type=int, nargs="+", default=[8, 200, 500])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--worker", nargs=2, metavar=("VARIANT", "R"))
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.contexts, args.threads)))
        return
    cases = [("rows", 1), ("exact", 1)] + [(v, R) for R in args.rows for v in ("rows", "custom_sdpa", "ops", "exact")]
    result: dict = {"unit": "ms per layer (one attention call site, all rows)", "layers": L, "results": {}}
    for variant, R in cases:
        print(f"[attention_paths] {variant} R={R}", file=sys.stderr)
        cmd = [sys.executable, __file__, "--worker", variant, str(R), "--contexts", *map(str, args.contexts), "--threads", *map(str, args.threads)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        key = f"{variant}_R{R}"
        result["results"][key] = json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 else {"error": f"exit {run.returncode}"}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
