"""Fidelity: how close a program's next-token distributions are to the source model's.

Measured the way llama.cpp's `llama-perplexity --kl-divergence` does, on held-out text that no
edgespec calibration, training or suite reads: Python's language reference as CPython ships
it (`pydoc_data.topics`). The text is tokenized once (no BOS, no template) and cut into
chunks of `ctx` tokens; each chunk's first half is context, and the prediction of every token
of its second half is scored. The program is teacher-forced: the first half in one `forward` call, then one
token per call (the decode path), its last-row logits kept. The reference is the source model
in fp32, run eagerly over each whole chunk.

Per scored token i, with p the reference's and q the program's softmax:
  KL_i = sum_v p_v (log p_v - log q_v), top-1 agreement = [argmax q == argmax p],
  perplexity = exp(mean_i -log q(target_i)); ratio = program / reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from edgespec.manifest import Fidelity

HELDOUT_SOURCE = "Python language reference (pydoc_data.topics, shipped with CPython)"
CHUNK = 512  # tokens per chunk (llama-perplexity's default context): 256 scored each


def heldout_text() -> str:
    """The held-out text: every topic of CPython's `pydoc_data.topics`, in name order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def heldout_chunks(tokenizer, n_chunks: int, ctx: int) -> list[list[int]]:
    """The first `n_chunks` chunks of `ctx` tokens of the held-out text."""
    ids = tokenizer.encode(heldout_text())
    if len(ids) < n_chunks * ctx:
        raise ValueError(f"the held-out text has {len(ids)} tokens, fewer than {n_chunks} chunks of {ctx}")
    return [ids[i * ctx : (i + 1) * ctx] for i in range(n_chunks)]


def compare(reference: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> Fidelity:
    """Fidelity of logits [N, V] against reference logits [N, V]; targets [N] the next tokens."""
    lp, lq = reference.double().log_softmax(-1), logits.double().log_softmax(-1)
    kl = (lp.exp() * (lp - lq)).sum(-1)  # [N]
    nll_q = -lq.gather(-1, targets[:, None]).squeeze(-1)
    nll_p = -lp.gather(-1, targets[:, None]).squeeze(-1)
    ppl, ref = float(nll_q.mean().exp()), float(nll_p.mean().exp())
    return Fidelity(
        tokens=int(targets.numel()),
        perplexity=round(ppl, 4),
        reference_perplexity=round(ref, 4),
        perplexity_ratio=round(ppl / ref, 5),
        kl_mean=round(float(kl.mean()), 6),
        kl_p99=round(float(kl.float().quantile(0.99)), 6),
        top1_agreement=round(float((lq.argmax(-1) == lp.argmax(-1)).double().mean()), 5),
        text=HELDOUT_SOURCE,
    )


def scored_targets(chunks: Sequence[Sequence[int]]) -> torch.Tensor:
    """The scored tokens: each chunk's second half, tokens ctx/2 .. ctx - 1."""
    return torch.tensor([t for c in chunks for t in c[len(c) // 2 :]], dtype=torch.long)


def eager_logits(model, seq: Sequence[int], start: int) -> torch.Tensor:
    """An eager `Transformer`'s logits [len(seq) - start, V] predicting seq[start:], one pass
    over the whole sequence (its cache reset before and after)."""
    with torch.no_grad():
        model.reset_cache()
        h = model.hidden(torch.tensor([list(seq)]), torch.tensor([0]))  # [1, T, d]
        out = model.output(h[0, start - 1 : len(seq) - 1]).float()
    model.reset_cache()
    return out


def teacher_forced_logits(
    forward: Callable[[torch.Tensor, int], torch.Tensor], seq: Sequence[int], start: int, on_token: Callable[[], None] = lambda: None
) -> torch.Tensor:
    """A program's logits [len(seq) - start, V] predicting seq[start:], teacher-forced:
    seq[:start] in one call, then one token per call, the decode path (`forward(tokens [1, T],
    start_pos) -> [V]`)."""
    out = [forward(torch.tensor([list(seq[:start])]), 0).float().clone()]
    for pos in range(start, len(seq) - 1):
        out.append(forward(torch.tensor([[seq[pos]]]), pos).float().clone())
        on_token()
    return torch.stack(out)


def reference_logits(model, chunks: Sequence[Sequence[int]]) -> torch.Tensor:
    """Source-model logits [N, V] predicting the scored tokens (each chunk in one eager pass)."""
    return torch.cat([eager_logits(model, c, len(c) // 2) for c in chunks])


def program_logits(
    forward: Callable[[torch.Tensor, int], torch.Tensor], chunks: Sequence[Sequence[int]], on_token: Callable[[], None] = lambda: None
) -> torch.Tensor:
    """A program's logits [N, V] predicting the scored tokens, teacher-forced: each chunk's
    first half in one call, then one token per call."""
    return torch.cat([teacher_forced_logits(forward, c, len(c) // 2, on_token) for c in chunks])


def measure_fidelity(
    forward: Callable[[torch.Tensor, int], torch.Tensor],
    reference,
    tokenizer,
    n_chunks: int,
    ctx: int = CHUNK,
    on_token: Callable[[], None] = lambda: None,
) -> Fidelity:
    """A program (its `forward`) against the fp32 source model `reference`
    (edgespec.harness.reference.load_reference) on `n_chunks` held-out chunks."""
    chunks = heldout_chunks(tokenizer, n_chunks, ctx)
    logits = program_logits(forward, chunks, on_token)
    return compare(reference_logits(reference, chunks), logits, scored_targets(chunks))
