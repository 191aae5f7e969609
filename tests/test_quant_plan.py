"""Quantization as one pass (`edgespec.quant`): the plan of a speculative program gives each part
what it declares, and applying it gives each module the weights written out here."""

import pytest
import torch
from torch import nn

from edgespec.config import DrafterConfig, QuantConfig
from edgespec.kernels.block_linear import BlockLinear
from edgespec.models.llama import LlamaArgs
from edgespec.quant import QuantPlan, QuantPolicy, Rounded, Unquantized, plan_quantization, quantize_
from edgespec.speculative.drafters import new_drafter
from edgespec.speculative.step import SpecProgram
from edgespec.speculative.tree import Tree
from tiny_models import random_transformer

ARGS = LlamaArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, max_seq_len=64)  # lm head tied
BASE_LINEARS = [
    f"layers.{i}.{m}" for i in range(2) for m in ("attention.wq", "attention.wk", "attention.wv", "attention.wo", *(f"feed_forward.w{j}" for j in (1, 3, 2)))
]
EAGLE_LINEARS = ["fuse", "inp", *(f"block.{n.removeprefix('layers.0.')}" for n in BASE_LINEARS[:7])]
KINDS = ("streams", "medusa", "hydra", "eagle")
U4, S8 = Rounded(4, 32, "edgespec"), Rounded(8, 32, "edgespec")  # the default recipe's roundings (edgespec's kernel)


def _program(kind: str) -> tuple[SpecProgram, dict[str, torch.Tensor]]:
    """A tiny base with a `kind` drafter (random parameters) and a 40-token draft vocabulary,
    and a copy of every float weight before quantization, by name in the program."""
    base = random_transformer(ARGS)
    torch.manual_seed(3)
    drafter = new_drafter(base, DrafterConfig(kind=kind, draft_depth=3, n_layers=1, lora_rank=4, f_rank=4, tree=(1, 1, 1)))
    with torch.no_grad():
        for p in drafter.params.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    program = SpecProgram(drafter, Tree((1, 1, 1)), torch.arange(0, 97, 2)[:40]).eval()
    return program, {k: v.detach().clone() for k, v in program.state_dict().items()}


def _u4h(w: torch.Tensor) -> torch.Tensor:
    """Q4_1-style max-abs blocks of 32, dequantized: d = fp16((max - min) / 15), m = fp16(min), q = round((w - m) / d) in 0..15."""
    wb = w.view(w.shape[0], -1, 32)
    lo, hi = wb.amin(-1), wb.amax(-1)
    d, m = ((hi - lo) / 15).half().float(), lo.half().float()
    q = ((wb - m[..., None]) / d[..., None]).round().clamp(0, 15)
    return (q * d[..., None] + m[..., None]).view(w.shape)


def _s8h(w: torch.Tensor) -> torch.Tensor:
    """Q8_0-style blocks of 32, dequantized: d = fp16(max|w| / 127), q = round(w / d)."""
    wb = w.view(w.shape[0], -1, 32)
    d = (wb.abs().amax(-1) / 127).half().float()
    return ((wb / d[..., None]).round().clamp(-127, 127) * d[..., None]).view(w.shape)


def _torchao_symmetric(w: torch.Tensor, bits: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torchao's symmetric max-abs codes and scales: s = max|w| / (qmax + 1/2), q = round(w * (1 / s))."""
    qmax = 2 ** (bits - 1) - 1
    wb = w.view(w.shape[0], -1, block)
    s = wb.abs().amax(-1) / (qmax + 0.5)
    return (wb * (1.0 / s[..., None])).round().clamp(-qmax - 1, qmax).to(torch.int8).view(w.shape), s


@pytest.mark.parametrize("kind", KINDS)
def test_plan_gives_each_part_what_it_declares(kind):
    program, _ = _program(kind)
    plan = plan_quantization(program, QuantConfig(), base=program.base)
    # the draft layer: the scheme's; Hydra's heads: 8-bit blocks (QuantPolicy "int8"); Medusa's heads and stream adapters: float
    drafter = {"eagle": {f"streams.{n}": U4 for n in EAGLE_LINEARS}, "hydra": {f"streams.blocks.{j}": S8 for j in range(3)}}.get(kind, {})
    assert dict(plan.rules) == {**{f"base.{n}": U4 for n in BASE_LINEARS}, "base.output": S8, **drafter, "draft_head.output": U4}
    assert plan.half == () and plan.base == "base"
    summary = plan.summary()  # the base model's linears only, by their names in it
    assert (summary.carried, summary.rounded, summary.unquantized, summary.rounded_from) == ([], [*BASE_LINEARS, "output"], [], {})
    # XNNPACK: the lm head int8 per output channel, the draft head 4-bit in blocks of 32
    plan = plan_quantization(program, QuantConfig(kernel="xnnpack", embedding_bits=8), base=program.base)
    assert plan.rules["base.output"] == Rounded(8, 64, "xnnpack") and plan.rules["draft_head.output"] == Rounded(4, 32, "xnnpack")
    assert plan.rules["base.tok_embeddings"] == Rounded(8, 32, "lookup")
    assert ("streams.fuse" in plan.rules) == (kind == "eagle")
    assert plan.rules.get("streams.blocks.0") == (Rounded(8, 2 * ARGS.dim, "xnnpack") if kind == "hydra" else None)  # 8da8w: per channel
    # fp16: no weight rule; every part cast, the base model first
    plan = plan_quantization(program, QuantConfig(scheme="fp16"), base=program.base)
    assert dict(plan.rules) == {} and plan.half == ("base", "streams", "draft_head")


@pytest.mark.parametrize("kind", KINDS)
def test_applying_the_plan_gives_each_module_its_weights(kind):
    program, w0 = _program(kind)
    summary = quantize_(program, plan_quantization(program, QuantConfig(), base=program.base))
    assert len(summary.rounded) == 15
    for name, m in program.named_modules():
        if name in [f"base.{n}" for n in BASE_LINEARS] + [f"streams.{n}" for n in EAGLE_LINEARS if kind == "eagle"] + ["draft_head.output"]:
            assert isinstance(m, BlockLinear) and torch.equal(m.blocks.dequantize(), _u4h(w0[f"{name}.weight"])), name
    assert torch.equal(program.base.output.blocks.dequantize(), _s8h(w0["base.output.weight"]))  # the head's 8 bits (quant.head_bits)
    assert isinstance(program.base.tok_embeddings, nn.Embedding) and torch.equal(program.base.tok_embeddings.weight, w0["base.tok_embeddings.weight"])
    if kind == "hydra":  # the heads' linears: Q8_0-style blocks, their biases kept
        for j, m in enumerate(program.streams.blocks):
            assert isinstance(m, BlockLinear) and torch.equal(m.blocks.dequantize(), _s8h(w0[f"streams.blocks.{j}.weight"]))
            assert torch.equal(m.bias, w0[f"streams.blocks.{j}.bias"])
    elif kind != "eagle":  # Medusa's heads and stream adapters untouched
        assert all(torch.equal(v, w0[f"streams.{k}"]) for k, v in program.streams.state_dict().items())
        assert not any(isinstance(m, BlockLinear) for m in program.streams.modules())


def test_xnnpack_and_embedding_weights():
    program, w0 = _program("eagle")
    quantize_(program, plan_quantization(program, QuantConfig(kernel="xnnpack", embedding_bits=8), base=program.base))
    for name, bits, block, per_token in (
        ("draft_head.output", 4, 32, True),
        ("streams.block.feed_forward.w2", 4, 32, True),
        ("base.output", 8, 64, True),
        ("base.tok_embeddings", 8, 32, False),  # weight-only
    ):
        t = program.get_submodule(name).weight
        q, s = _torchao_symmetric(w0[f"{name}.weight"], bits, block)
        assert torch.equal(t.qdata, q) and torch.equal(t.scale, s), name
        assert (t.activation_quantization is not None) == per_token, name
    assert program.base.output.weight is not program.base.tok_embeddings.weight  # the tied head untied


def test_an_embedding_keeps_the_files_blocks_where_the_block_kernel_carries_them():
    """embedding_bits 0: a table whose file blocks edgespec's kernel carries is read from them
    (`Carried` lookup, not counted among the linears); fp32 where they are not carried (XNNPACK,
    carry_blocks false, no blocks); embedding_bits rounds it whatever the file holds."""
    from edgespec.kernels.block_linear import BlockEmbedding
    from edgespec.models.blocks import BlockWeights
    from edgespec.quant import Carried

    model = random_transformer(LlamaArgs(dim=64, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=64, vocab_size=50, max_seq_len=32))
    w = model.tok_embeddings.weight.detach()
    d = (w.view(50, 2, 32).abs().amax(-1) / 127).half().float()
    codes = (w.view(50, 2, 32) / d[..., None]).round().clamp(-127, 127).to(torch.int8).view(50, 64)
    q8 = {"tok_embeddings.weight": BlockWeights("Q8_0", 8, codes, d)}
    rule = lambda cfg, blocks=q8: plan_quantization(model, cfg, blocks).rules.get("tok_embeddings")  # noqa: E731
    assert rule(QuantConfig()) == Carried("Q8_0", "lookup", q8["tok_embeddings.weight"])
    assert rule(QuantConfig(kernel="xnnpack")) is None and rule(QuantConfig(carry_blocks=False)) is None and rule(QuantConfig(), {}) is None
    assert rule(QuantConfig(embedding_bits=8)) == Rounded(8, 32, "lookup")
    plan = plan_quantization(model, QuantConfig(), q8)
    summary = quantize_(model, plan)
    assert "tok_embeddings" not in summary.carried + summary.rounded + summary.unquantized  # linears only
    assert isinstance(model.tok_embeddings, BlockEmbedding)
    ids = torch.tensor([3, 49, 0])
    assert torch.equal(model.tok_embeddings(ids), q8["tok_embeddings.weight"].dequantize()[ids])


def test_fp16_casts_every_part():
    program, w0 = _program("eagle")
    quantize_(program, plan_quantization(program, QuantConfig(scheme="fp16"), base=program.base))
    assert program.base.layers[0].attention.wq.weight.dtype == torch.float16 and program.base.rope_cos.dtype == torch.float32  # Transformer.to_half_
    assert all(p.dtype == torch.float16 for p in (*program.streams.parameters(), *program.draft_head.parameters()))
    assert program.streams.g_store.k_cache.dtype == torch.float16  # nn.Module.half: the part's buffers too
    assert torch.equal(program.draft_head.output.weight, w0["draft_head.output.weight"].half())


def test_an_undeclared_part_and_bad_policies_are_refused():
    program, _ = _program("medusa")
    program.extra = nn.Linear(4, 4)  # weights outside the base model in no declared part
    with pytest.raises(ValueError, match="extra .* declares a quant_policy"):
        plan_quantization(program, QuantConfig(), base=program.base)
    with pytest.raises(ValueError, match="head_bits"):
        QuantPolicy(head_bits=6)
    with pytest.raises(ValueError, match="edgespec's kernel rounds blocks of 32"):
        Rounded(4, 64, "edgespec")
    with pytest.raises(ValueError, match="no rule"):
        QuantPlan({"x": "int4"})
    assert QuantPlan({"x": Unquantized()}).summary().unquantized == ["x"]


def test_the_summary_names_every_linears_format_and_the_plan_screens_the_head():
    """The summary (what the manifest records) accounts for every linear of the base model, by
    format and in full (no list cut short), the head and the table by name; with
    quant.head_screen the plan screens the Q8_0-style head and quantize_ stores its screen, and
    a head that would not be Q8_0-style is refused when the plan is made."""
    from edgespec.errors import EdgespecError

    model = random_transformer(ARGS)
    plan = plan_quantization(model, QuantConfig(head_screen=True))
    assert plan.screened == ("output",)
    summary = quantize_(model, plan)
    assert model.output.screen is not None and summary.screened_head
    assert summary.formats == {"Q4_1-style (rounded from float)": 14, "Q8_0-style (rounded from float)": 1}
    assert summary.head == "Q8_0-style (rounded from float)" and summary.embedding == "float"
    assert sorted(summary.as_dict()["rounded_layers"]) == sorted([*BASE_LINEARS, "output"])  # all 15, not the first 8
    assert summary.as_dict()["unquantized_layers"] == [] and summary.as_dict()["carried"] == 0
    narrow = random_transformer(LlamaArgs(dim=48, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab_size=97, max_seq_len=64))
    with pytest.raises(EdgespecError, match="head_screen screens a Q8_0-style .* head would be float"):
        plan_quantization(narrow, QuantConfig(head_screen=True))  # 48 inputs: no whole block of 32, the head stays float


def test_a_recipe_screening_the_head_of_a_speculative_program_is_refused_when_read():
    from edgespec.config import recipe_from_args
    from edgespec.errors import EdgespecError

    assert recipe_from_args(["quant.head_screen=true"]).quant.head_screen
    with pytest.raises(EdgespecError, match="quant.head_screen.*drafter"):
        recipe_from_args(["recipes/smollm2-135m-spec.yaml", "quant.head_screen=true"])


def test_what_quant_kernel_implies_is_decided_once():
    """`program_kernels` alone turns the recipe's quant section into what the linears, the
    table and the glue compute with; `program_ops` (attention, glue, delegation) follows it."""
    from edgespec.export.swaps import program_ops
    from edgespec.quant import KERNEL_CARRIED, XNNPACK_CARRIED, ProgramKernels, program_kernels

    assert program_kernels(QuantConfig()) == ProgramKernels("edgespec", tuple(KERNEL_CARRIED), table_from_blocks=True)
    assert program_kernels(QuantConfig(embedding_bits=8)).table_from_blocks is False
    assert program_kernels(QuantConfig(carry_blocks=False)) == ProgramKernels("edgespec")
    assert program_kernels(QuantConfig(kernel="xnnpack")) == ProgramKernels("xnnpack", XNNPACK_CARRIED)
    assert program_kernels(QuantConfig(scheme="fp32")) == ProgramKernels("float") == program_kernels(QuantConfig(scheme="fp16", kernel="xnnpack"))
    block, xnn = program_ops(QuantConfig(), "exact", 64, speculative=False), program_ops(QuantConfig(kernel="xnnpack"), "exact", 64, speculative=False)
    assert (block.attention, block.xnnpack, block.glue) == ("exact", "none", True)
    assert (xnn.attention, xnn.xnnpack, xnn.glue) == ("custom_sdpa", "all", False)
    spec = program_ops(QuantConfig(), "rows", 64, speculative=True)
    assert (spec.attention, spec.xnnpack, spec.glue) == ("rows", "compute", True)
