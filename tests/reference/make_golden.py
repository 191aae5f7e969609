"""Dev-time cross-check against a trusted implementation (Hugging Face transformers).

transformers loads the same GGUF file (dequantizing it with the `gguf` package, undoing
llama.cpp's q/k permutation) into its own LlamaForCausalLM. We feed it the token ids of
edgespec's tokenizer (transformers' GGUF tokenizer lacks SmolLM2's digit pre-split) and
record its greedy continuation and last-position logits. The result is pinned in
tests/golden/smollm2_135m.json and checked by tests/test_integration.py without
transformers installed.

    pip install transformers   # dev only, not a dependency of edgespec
    python tests/reference/make_golden.py
"""

import json
from pathlib import Path

import torch

from edgespec.models.load import EMBEDDED, embedded_path, read_source, tokenizer_of

PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that returns the square of a number.",
    "List three colors of the rainbow.",
    "What is 12+35?",
]
NEW_TOKENS = 24
TOP_K = 8


def main() -> None:
    from transformers import AutoModelForCausalLM

    name = next(iter(EMBEDDED))
    path = embedded_path(name)
    ref = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, torch_dtype=torch.float32).eval()
    tok = tokenizer_of(read_source(name, 1024))
    cases = []
    for prompt in PROMPTS:
        ids = tok.encode(tok.apply_chat_template(prompt))
        with torch.no_grad():
            last = ref(torch.tensor([ids])).logits[0, -1]
            out = ref.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=list(tok.eos_ids))
        completion = out[0, len(ids) :].tolist()
        top = torch.topk(last, TOP_K)
        cases.append(
            {
                "prompt": prompt,
                "prompt_ids": ids,
                "greedy_ids": completion,
                "last_logits_topk_ids": top.indices.tolist(),
                "last_logits_topk_values": [round(v, 5) for v in top.values.tolist()],
            }
        )
        print(prompt, "->", repr(tok.decode(completion)))
    out_path = Path(__file__).resolve().parents[1] / "golden" / "smollm2_135m.json"
    meta = {"reference": f"transformers LlamaForCausalLM from {path.name}, fp32, greedy", "new_tokens": NEW_TOKENS, "cases": cases}
    out_path.write_text(json.dumps(meta, indent=1) + "\n")
    print("wrote", out_path)


if __name__ == "__main__":
    main()
