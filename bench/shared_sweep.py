"""A short sweep of Shared mode's depth weights: one `edgespec train` run per weight set, the
same recipe, start and budget, and each run's dev curve side by side, as JSON.

What a Shared run trades: the streams' losses pull on the adapters the main stream uses too.
Each run logs, at every checkpoint, the dev split's main-stream loss (the fine-tune's
quality) and each draft depth's top-1 (what the drafts will accept). The sweep puts them in
one table, so the long run's weights are chosen from measurements.

    python bench/shared_sweep.py recipes/smollm2-135m-shared-sql.yaml --root runs/sweep \\
        --weights 0.1,0.1,0.1,0.1 --weights 0.03,0.03,0.03,0.03 --weights 0.01,0.01,0.01,0.01 \\
        --features-from runs/sql-lora-b2 -- train.init=runs/sql-lora-b2/streams.pt train.steps=100 \\
        drafter.f_rank=64 train.lr=1e-4 train.entry_lr=1e-3 > docs/results/shared_sweep_sql.json

Runs go to ROOT/w<i> (resumed when there, as `edgespec train` resumes); `--features-from`
copies a finished run's frozen features (features.pt, dev_features.pt: the same base, data
and layer give the same file) instead of computing them again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from edgespec.host import cpu_name, usable_cpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe")
    ap.add_argument("--root", type=Path, required=True, help="where the runs go: ROOT/w0, ROOT/w1, ...")
    ap.add_argument("--weights", action="append", required=True, help="depth weights, comma-separated (repeatable: one run each)")
    ap.add_argument("--features-from", type=Path, help="a run directory whose features.pt / dev_features.pt the runs reuse")
    ap.add_argument("overrides", nargs="*", help="FIELD=VALUE overrides every run shares, after --")
    a = ap.parse_intermixed_args()  # the recipe, the options, then the overrides after --
    rows = []
    for i, w in enumerate(a.weights):
        out = a.root / f"w{i}"
        out.mkdir(parents=True, exist_ok=True)
        for name in ("features.pt", "dev_features.pt"):
            if a.features_from and (a.features_from / name).is_file() and not (out / name).exists():
                shutil.copy2(a.features_from / name, out / name)
        weights = [float(x) for x in w.split(",")]
        cmd = ["edgespec", "train", a.recipe, *a.overrides, f"train.out_dir={out}", f"train.depth_weights={json.dumps(weights)}"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        log = json.loads((out / "log.json").read_text())
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "depth_weights": weights,
                "out_dir": str(out),
                "dev_steps": log["dev_steps"],
                "dev_main_loss": log.get("dev_main_loss", []),
                "dev_depth_acc": log["dev_depth_acc"],
                "train_main_loss_last20": summary.get("final_main_loss"),
                "best": summary.get("dev"),
                "wall_s": round(time.perf_counter() - t0, 1),
            }
        )
    print(json.dumps({"cpu": cpu_name(), "cpus": usable_cpus(), "recipe": a.recipe, "overrides": a.overrides, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
