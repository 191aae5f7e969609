"""Export of the speculative methods: `forward` (the main stream, autoregressive, dynamic
length: it prefills prompts) and `spec_step` (`edgespec.speculative.step.SpecProgram.step`),
sharing one KV cache (same buffer names, lowered with shared mutable buffers).

A prompt is prefilled by `forward` (as in autoregressive decoding); the first `spec_step`
starts from the first generated token with a placeholder draft and produces the first real
draft. So there is no separate drafting prefill method: every method carries its own packed
copy of the weights in ExecuTorch's XNNPACK runtime (no weight cache in the pip build:
+100 MB resident per 8da4w method, measured), and a third method would push the
speculative program's memory past the autoregressive one's by a third instead of a sixth.
"""

from __future__ import annotations

import torch

from edgespec.export import constants as C
from edgespec.export.lowering import MethodAsForward, export_dynamic_length
from edgespec.export.swaps import executorch_ops
from edgespec.speculative.step import SpecProgram
from edgespec.speculative.tree import placeholder_draft


def example_step_inputs(program: SpecProgram) -> tuple[torch.Tensor, ...]:
    R, D, k, V = program.tree.size, program.depth, program.k, program.base.args.vocab_size
    return (
        torch.zeros(1, dtype=torch.long),
        placeholder_draft(D, k),
        torch.ones(1, dtype=torch.long),
        torch.zeros(1),
        torch.full((R, k), 0.5),
        torch.zeros(V),
    )


def export_spec_methods(
    program: SpecProgram, attention: str = "custom_sdpa", call_tokens: int = 0, glue: bool = False
) -> dict[str, torch.export.ExportedProgram]:
    """`torch.export` of forward (autoregressive, up to `call_tokens` tokens a call, 0: the
    context - 1) and spec_step, attending with `edgespec.export.swaps.EXPORT_ATTENTION[attention]`
    (`export.step_attention`); `glue`: `edgespec.export.swaps.ProgramOps.glue`."""
    out = {}
    with torch.no_grad(), executorch_ops(program, attention, glue):
        out[C.FORWARD] = export_dynamic_length(MethodAsForward(program, "forward"), call_tokens or program.max_seq_len - 1)
        out[C.SPEC_STEP] = torch.export.export(MethodAsForward(program, "step"), example_step_inputs(program), strict=False)
    return out


def spec_meta(program: SpecProgram):
    from edgespec.export.lowering import SpecMeta

    cfg = program.cfg  # None: a program without trained drafting parameters
    return SpecMeta(program.tree.branching, program.tree.parents, cfg.draft_depth if cfg else 0, cfg is None or cfg.mode != "shared")
