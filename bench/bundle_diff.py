"""Are two bundles' programs the same computation? Bitwise, on the same inputs.

A refactor of export code (swaps, kernel modules, quantization plumbing) must not change a bit
of what a program computes. This loads two bundles' programs and compares, for random token
prompts: every logit of a prefill and of tokens fed one at a time after it (`forward`), the
greedy `next_token` where both have it, and for speculative programs every `spec_step` call
of a decode (emitted tokens and the next draft), greedy and sampled with the same seed.

    python bench/bundle_diff.py BUNDLE_A BUNDLE_B [--prompts 3] [--decode 20]

Prints JSON: each comparison's verdict and how many values it compared; exits 1 when any
differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edgespec.runtime.generate import generate  # edgespec before torch: its OpenMP workers stay quiet
from edgespec.runtime.runner import ProgramRunner


class _Recorded:
    """A runner whose spec_step calls are recorded (the emitted tokens and the next draft)."""

    def __init__(self, runner: ProgramRunner):
        self.runner, self.calls = runner, []
        self.depth, self.topk, self.tree_size, self.vocab_size = runner.depth, runner.topk, runner.tree_size, runner.vocab_size

    def forward(self, tokens, start_pos):
        return self.runner.forward(tokens, start_pos)

    def spec_step(self, *args):
        out = self.runner.spec_step(*args)
        self.calls.append(out)
        return out


def _forward_logits(runner: ProgramRunner, prompt, decode: int):
    import torch

    T = prompt.shape[1]
    out = [runner.forward(prompt, 0)]
    out += [runner.forward(prompt[:, i : i + 1], T + i) for i in range(decode)]
    return torch.cat([x.reshape(-1) for x in out])


def _spec_calls(runner: ProgramRunner, prompt: list[int], decode: int, temperature: float) -> tuple[list[int], list]:
    rec = _Recorded(runner)
    res = generate(rec.forward, prompt, max_new_tokens=decode, max_seq_len=runner.max_seq_len, eos_ids=(), temperature=temperature, seed=7, spec=rec)
    return res.completion_ids, rec.calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs=2, type=Path, help="two bundle directories (or .pte files)")
    ap.add_argument("--prompts", type=int, default=3, help="random prompts (default 3)")
    ap.add_argument("--prompt-tokens", type=int, default=40)
    ap.add_argument("--decode", type=int, default=20, help="tokens fed or decoded after each prompt (default 20)")
    args = ap.parse_args()
    import torch

    a, b = (ProgramRunner(p / "model.pte" if p.is_dir() else p) for p in args.bundles)
    vocab = min(a.vocab_size, b.vocab_size)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (1, args.prompt_tokens), generator=g) for _ in range(args.prompts)]
    report: dict = {"bundles": [str(p) for p in args.bundles]}

    pairs = [(_forward_logits(a, p, args.decode), _forward_logits(b, p, args.decode)) for p in prompts]
    report["forward"] = {"equal": all(torch.equal(x, y) for x, y in pairs), "values": sum(x.numel() for x, _ in pairs)}
    if a.has_next_token and b.has_next_token:
        same = [a.next_token(p, 0) == b.next_token(p, 0) for p in prompts]
        report["next_token"] = {"equal": all(same), "values": len(same)}
    if a.has_spec and b.has_spec:
        for temperature in (0.0, 0.8):
            runs = [(_spec_calls(a, p[0].tolist(), args.decode, temperature), _spec_calls(b, p[0].tolist(), args.decode, temperature)) for p in prompts]
            equal = all(ta == tb and len(ca) == len(cb) and all(x[0] == y[0] and x[1].equal(y[1]) for x, y in zip(ca, cb)) for (ta, ca), (tb, cb) in runs)
            report[f"spec_step_t{temperature}"] = {"equal": equal, "calls": sum(len(ca) for (_, ca), _ in runs)}
    print(json.dumps(report, indent=1))
    return 0 if all(v["equal"] for v in report.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
