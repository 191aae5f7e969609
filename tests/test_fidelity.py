"""Fidelity against the source model (edgespec.harness.fidelity) and the gates it feeds."""

import math

import pytest
import torch

from edgespec.config import GatesConfig, QuantConfig
from edgespec.harness.fidelity import compare, heldout_chunks, program_logits, reference_logits, scored_targets
from edgespec.harness.gates import check_gates


def test_compare_on_known_distributions():
    ref = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    same = compare(ref, ref.clone(), torch.tensor([0, 1]))
    assert same.kl_mean == 0 and same.top1_agreement == 1 and same.perplexity_ratio == 1
    flipped = compare(ref, torch.tensor([[0.0, 2.0, 0.0], [0.0, 3.0, 0.0]]), torch.tensor([0, 1]))
    assert flipped.top1_agreement == 0.5 and flipped.perplexity_ratio > 1 and flipped.kl_mean > 0
    p = ref[0].log_softmax(-1)
    q = torch.tensor([0.0, 2.0, 0.0]).log_softmax(-1)
    assert flipped.kl_mean == pytest.approx(float((p.exp() * (p - q)).sum()) / 2, rel=1e-5)
    assert flipped.perplexity == pytest.approx(math.exp((-q[0] - ref[1].log_softmax(-1)[1]).item() / 2), rel=1e-4)


def test_teacher_forcing_scores_each_chunks_second_half(tiny_model):
    """The program path (prefill half, then one token per call) predicts the same tokens as
    one eager pass over the chunk: same logits, agreement 1."""
    from edgespec.runtime.generate import eager_step

    chunks = [list(range(5, 21)), list(range(30, 46))]
    ref = reference_logits(tiny_model, chunks)
    got = program_logits(eager_step(tiny_model), chunks)
    targets = scored_targets(chunks)
    assert ref.shape == got.shape == (16, tiny_model.args.vocab_size) and targets.tolist() == list(range(13, 21)) + list(range(38, 46))
    assert torch.allclose(ref, got, atol=1e-4)
    assert compare(ref, got, targets).top1_agreement == 1.0


@pytest.mark.slow
def test_default_gates_fail_a_re_rounded_8da4w_and_pass_the_carried_blocks():
    """The real model, eager (the programs' numerics: torchao's dynamic int8 activations, or
    the block kernel's reference, and the same weights). Re-rounding the Q4_1 file onto
    torchao's int4 grid fails the three fidelity gates; carrying the file's blocks passes them,
    on XNNPACK (int8 lm head) and on edgespec's block kernel (the default)."""
    from edgespec.models.load import build_model, read_source, tokenizer_of
    from edgespec.quant import plan_quantization, quantize_

    src = read_source("smollm2-135m-instruct", 1024)
    chunks = heldout_chunks(tokenizer_of(src), 2, 512)
    targets = scored_targets(chunks)
    ref = reference_logits(build_model(src), chunks)
    results = {}
    variants = {
        "re-rounded": QuantConfig(carry_blocks=False, head_bits=4, kernel="xnnpack"),
        "carried": QuantConfig(kernel="xnnpack"),
        "block kernel": QuantConfig(),
    }
    for name, cfg in variants.items():
        model = build_model(src)
        quantize_(model, plan_quantization(model, cfg, src.blocks))
        fid = compare(ref, reference_logits(model, chunks), targets).to_dict()
        judged = check_gates({"overall": {}, "fidelity": fid}, GatesConfig(min_score_ratio=0, max_answer_nll_increase=0)).judged  # fidelity alone
        results[name] = {g.name: g.passed for g in judged}, fid
    gates = ("min_top1_agreement", "max_perplexity_ratio", "max_kl_mean")
    assert results["re-rounded"][0] == dict.fromkeys(gates, False), results["re-rounded"][1]
    assert results["carried"][0] == dict.fromkeys(gates, True), results["carried"][1]
    assert results["block kernel"][0] == dict.fromkeys(gates, True), results["block kernel"][1]
    assert results["block kernel"][1]["top1_agreement"] > results["carried"][1]["top1_agreement"]  # per-block activations: llama.cpp's fidelity


class _WordTokenizer:
    """Words as ids, with or without a chat template (what heldout_chunks reads of a tokenizer)."""

    def __init__(self, chat_template: str | None):
        self.chat_template = chat_template

    def encode(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]

    def render_chat(self, messages) -> str:
        return "".join(f"<turn {m['role']}> {m['content']} </turn>\n" for m in messages)


def test_the_heldout_text_takes_prose_and_chat_in_turn_and_names_them():
    from edgespec.errors import EdgespecError
    from edgespec.harness.fidelity import heldout_domains, heldout_source

    templated = _WordTokenizer("{{ messages }}")
    prose, chat = (templated.encode(t) for t, _ in heldout_domains(templated).values())
    chunks = heldout_chunks(templated, 4, 64)
    assert chunks == [prose[:64], chat[:64], prose[64:128], chat[64:128]]
    assert "<turn" in heldout_domains(templated)["chat"][0]  # the model's own template
    assert heldout_source(templated).startswith("prose: ") and "chat: 12 conversations in the model's chat template" in heldout_source(templated)
    plain = _WordTokenizer(None)
    assert "User: " in heldout_domains(plain)["chat"][0] and "no chat template" in heldout_source(plain)
    with pytest.raises(EdgespecError, match="held-out prose text has .* fewer than"):
        heldout_chunks(plain, 2 * (len(prose) // 512 + 1) + 1, 512)
