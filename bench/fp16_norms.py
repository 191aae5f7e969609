"""fp16 program with searched pre-normalizers vs fp32, and its cost vs plain RMSNorm.

1. Agreement: fp32 eager greedy continuations of held-out prompts are the reference; the
   fp16 program is teacher-forced along them and its argmax compared at every position
   (top-1 token agreement), plus the last-position logits error of each prompt.
2. Cost: decode tokens/s of the fp16 program with the chosen normalizers vs the same
   program with plain RMSNorm (fp32 upcast inside the norm), side by side, medians.

    python bench/fp16_norms.py --fp16 bundles/fp16 --plain bundles/fp16-plain --prompts 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import edgespec  # noqa: F401  (before torch: its OpenMP workers sleep instead of spinning, edgespec.host.passive_openmp)

# isort: split
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp16", required=True, help="bundle exported with quant.scheme fp16 and normsearch")
    ap.add_argument("--plain", help="the same with numerics.search false (plain RMSNorm), for the cost")
    ap.add_argument("--prompts", type=int, default=50)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from edgespec.corpus.prompts import mixed_prompts
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.runtime.generate import eager_step, generate
    from edgespec.runtime.runner import ProgramRunner

    torch.set_grad_enabled(False)
    src = read_source("smollm2-135m-instruct", 1024)
    ref_model = build_model(src)
    tok = tokenizer_of(src)
    prog = ProgramRunner(f"{args.fp16}/model.pte")
    agree = total = 0
    logit_err, logit_rel, nonfinite = [], [], 0
    t0 = time.time()
    for i, p in enumerate(mixed_prompts("heldout", args.prompts)):
        ids = tok.encode(tok.apply_chat_template(p.text))[:400]
        ref = generate(eager_step(ref_model), ids, max_new_tokens=args.new_tokens, max_seq_len=1024, eos_ids=src.eos_ids).completion_ids
        ref_last = eager_step(ref_model)(torch.tensor([ids]), 0)
        out = prog.forward(torch.tensor([ids]), 0)
        nonfinite += int(~torch.isfinite(out).all())
        logit_err.append(float((out - ref_last).abs().max()))
        logit_rel.append(float((out - ref_last).norm() / ref_last.norm()))
        pos = len(ids)
        for t in ref:
            agree += int(out.argmax()) == t
            total += 1
            out = prog.forward(torch.tensor([[t]]), pos)
            nonfinite += int(~torch.isfinite(out).all())
            pos += 1
        print(f"[{i + 1}] agreement so far {agree}/{total} ({time.time() - t0:.0f}s)", file=sys.stderr)
    report = {
        "prompts": args.prompts,
        "tokens": total,
        "top1_agreement_fp16_vs_fp32": round(agree / total, 5),
        "last_logits_max_abs_err_median": round(statistics.median(logit_err), 4),
        "last_logits_max_abs_err_max": round(max(logit_err), 4),
        "last_logits_rel_l2_err_median": round(statistics.median(logit_rel), 5),
        "nonfinite_logit_calls": nonfinite,
    }
    if args.plain:
        ids = tok.encode(tok.apply_chat_template("Write a short story about a robot who learns to paint."))
        runners = {"chosen": prog, "plain_rmsnorm": ProgramRunner(f"{args.plain}/model.pte")}
        speeds: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(args.rounds + 1):  # first round is warm-up
            for name, r in runners.items():
                res = generate(r.forward, ids, max_new_tokens=64, max_seq_len=r.max_seq_len, eos_ids=())
                speeds[name].append(res.decode_tokens_per_s)
        med = {k: round(statistics.median(v[1:]), 2) for k, v in speeds.items()}
        report["decode_tokens_per_s"] = med
        report["cost_chosen_over_plain"] = round(med["plain_rmsnorm"] / med["chosen"], 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
