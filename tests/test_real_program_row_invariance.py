"""On the real SmolLM2-135M program of edgespec's block kernel (8da4w, edgespec's exact
attention: the `q_bundle` export), R rows in one `forward` call give the bits of R one-row
calls over the same tokens, after held-out prompts: the last row's logits, and the logits of
the next one-row call, which reads the cache rows the two wrote. Greedy speculative decoding
is lossless only if a verified row is the row decoded alone (docs/speculative-program.md).

The same property on tiny programs (fp32 and 8da4w, random prompts): tests/test_exact_attention.py;
here on the real model's shapes, weights and prompts. (Formerly the script exact_rows.py under bench/.)"""

import pytest
import torch

pytestmark = pytest.mark.slow

ROWS = range(2, 9)  # the rows of a speculative step's verify call, and more


def test_rows_in_one_call_give_the_bits_of_one_row_calls(q_bundle):
    from edgespec.corpus.prompts import mixed_prompts
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.session import open_bundle

    manifest, tokenizer, runner = open_bundle(q_bundle)
    assert manifest.recipe.quant.block_kernel  # edgespec's kernels end to end: its attention is the exact one
    prompts = [encode_prompt(tokenizer, p.text, True) for p in mixed_prompts("heldout", 12)]
    prompts = [ids for ids in prompts if len(ids) + max(ROWS) + 1 <= runner.max_seq_len][:6]
    assert len(prompts) >= 4  # held-out prompts that leave room for the rows
    g = torch.Generator().manual_seed(0)
    differ = []
    for ids in prompts:
        P = len(ids)
        runner.forward(torch.tensor([ids]), 0)
        for R in ROWS:
            rows = torch.randint(0, runner.vocab_size, (1, R), generator=g)
            block = runner.forward(rows, P).clone()  # (an output buffer the next call may reuse)
            after_block = runner.forward(rows[:, :1], P + R).clone()  # reads the block's cache rows
            for i in range(R):
                one = runner.forward(rows[:, i : i + 1], P + i).clone()
            after_one = runner.forward(rows[:, :1], P + R).clone()
            if not (torch.equal(block, one) and torch.equal(after_block, after_one)):
                diff = max(float((block - one).abs().max()), float((after_block - after_one).abs().max()))
                differ.append(f"prompt of {P} tokens, {R} rows: max |logit difference| {diff:.3g}")
    assert not differ, "rows in one call are not the one-row calls' bits:\n" + "\n".join(differ)
