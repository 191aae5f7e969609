"""Run-time cost of the chosen normalizers vs plain RMSNorm, measured on ExecuTorch programs.

Two programs, each a stack of the model's 61 norm layers (d = 576) on fp16 activations:
  plain   llama RMSNorm (upcast to fp32 inside, the usual safe-but-slow form)
  naive   RMSNorm computed in fp16 (no pre-normalizer: overflows on real activations)
  chosen  StableNorm with the searched max-abs pre-normalizer (log2 k = 2)
Timed in one process, alternating, for T = 1 (decode) and T = 64 (prefill) rows.

    python bench/norm_cost.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep instead of spinning, edgespec.host.passive_openmp)

# isort: split
import torch
from torch import nn


class Stack(nn.Module):
    def __init__(self, norms: list[nn.Module]):
        super().__init__()
        self.norms = nn.ModuleList(norms)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for n in self.norms:
            x = n(x) + x  # keep every layer live
        return x


def lower(module: nn.Module, path: Path) -> Path:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    seq = torch.export.Dim("t", min=1, max=256)
    ep = torch.export.export(module, (torch.zeros(1, 4, 576, dtype=torch.float16),), dynamic_shapes=({1: seq},), strict=False)
    path.write_bytes(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    return path


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # no flags; --help prints the docstring
    from executorch.runtime import Runtime

    from edgespec.models.llama import RMSNorm
    from edgespec.numerics.stable_norm import NormChoice, StableNorm

    w = torch.ones(576)
    variants = {
        "plain": Stack([RMSNorm(576, 1e-5) for _ in range(61)]).half(),
        "naive": Stack([StableNorm(w, 1e-5, 2.0, NormChoice("none")) for _ in range(61)]).half(),
        "chosen": Stack([StableNorm(w, 1e-5, 2.0, NormChoice("linf", 2)) for _ in range(61)]).half(),
    }
    tmp = Path(tempfile.mkdtemp())
    methods = {k: Runtime.get().load_program(lower(m, tmp / f"{k}.pte")).load_method("forward") for k, m in variants.items()}
    out = {}
    for T in (1, 64):
        x = (torch.randn(1, T, 576) * 3).half()
        times: dict[str, list[float]] = {k: [] for k in methods}
        for r in range(60):
            for k, m in methods.items():
                t0 = time.perf_counter()
                m.execute([x])
                if r >= 10:
                    times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        out[f"T={T}"] = {
            "ms_for_61_norms": {k: round(v, 4) for k, v in med.items()},
            "chosen_over_plain": round(med["chosen"] / med["plain"], 3),
            "chosen_over_naive": round(med["chosen"] / med["naive"], 3),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
