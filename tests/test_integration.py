"""The real SmolLM2-135M-Instruct: eager vs the pinned reference, and real .pte programs.

Golden values come from transformers loading the same GGUF (tests/reference/make_golden.py).
Tolerance for last-position logits vs the reference: |diff| <= 2e-3 on the reference's
top-8 logits (fp32 both sides; the difference is summation order only).
"""

import json
from pathlib import Path

import pytest
import torch

from edgespec.runtime.generate import eager_step, generate

pytestmark = pytest.mark.slow

GOLDEN = json.loads((Path(__file__).parent / "golden" / "smollm2_135m.json").read_text())
LOGIT_ATOL = 2e-3


def _with_eos(res, eos):
    return res.completion_ids + ([eos[0]] if res.stopped_by_eos else [])


@pytest.fixture(scope="session")
def smollm2():
    from edgespec.models.load import build_model, read_source, tokenizer_of

    src = read_source("smollm2-135m-instruct", 256)
    return src, build_model(src), tokenizer_of(src)


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: c["prompt"][:20])
def test_tokenizer_and_eager_model_match_reference(smollm2, case):
    src, model, tok = smollm2
    ids = tok.encode(tok.apply_chat_template(case["prompt"]))
    assert ids == case["prompt_ids"]
    step = eager_step(model)
    last = step(torch.tensor([ids]), 0)
    top_ids = torch.tensor(case["last_logits_topk_ids"])
    torch.testing.assert_close(last[top_ids], torch.tensor(case["last_logits_topk_values"]), atol=LOGIT_ATOL, rtol=0)
    res = generate(step, ids, max_new_tokens=GOLDEN["new_tokens"], max_seq_len=256, eos_ids=src.eos_ids)
    assert _with_eos(res, src.eos_ids) == case["greedy_ids"]


def test_digits_are_split_one_by_one(smollm2):
    _, _, tok = smollm2
    ids = tok.encode("12345")
    assert len(ids) == 5 and tok.decode(ids) == "12345"


def test_stock_tokenizer_reads_our_tokenizer_json(smollm2, tmp_path):
    from pytorch_tokenizers import get_tokenizer

    src, _, tok = smollm2
    path = tmp_path / "tokenizer.json"
    path.write_text(src.tokenizer_json)
    stock = get_tokenizer(str(path))
    for text in ["Hello, world!", "naïve café — 東京 🚀", "x = 12345 + 0.5\n\tdef f():", GOLDEN["cases"][0]["prompt"]]:
        assert stock.encode(text, bos=0, eos=0) == tok.encode(text), text
