"""Decode prompts greedily with a bundle and print JSON lines: first the block kernel's paths
(those this CPU runs and the one each row regime uses), then per prompt the completion's token
ids. test_aarch64.py runs it natively and under qemu (tests/aarch64_env.py), where pytest is
not installed.

    python tests/decode_ids.py BUNDLE MODE MAX_NEW_TOKENS [--raw] PROMPT...
"""

import json
import sys

from edgespec.kernels import plan
from edgespec.models.tokenizer import encode_prompt
from edgespec.runtime.session import decoder, open_bundle


def main(bundle: str, mode: str, max_new_tokens: str, *prompts: str) -> None:
    chat = prompts[:1] != ("--raw",)
    prompts = prompts if chat else prompts[1:]
    manifest, tokenizer, runner = open_bundle(bundle)
    mode, run = decoder(runner, mode, None, manifest)
    paths = {regime: plan.current(regime).path for regime in plan.REGIMES}
    print(json.dumps({"supported": plan.supported_paths(), "used": paths}), flush=True)
    for prompt in prompts:
        ids = encode_prompt(tokenizer, prompt, chat)
        res = run(ids, max_new_tokens=int(max_new_tokens), max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
        print(json.dumps({"mode": mode, "ids": res.completion_ids, "tokens_per_call": round(res.mean_tokens_per_call, 3)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
