"""Fidelity: how close a program's next-token distributions are to the source model's.

Measured the way llama.cpp's `llama-perplexity --kl-divergence` does, on held-out text that no
edgespec calibration, training or suite reads, written for this purpose and shipped with
edgespec (`edgespec/corpus/heldout/`), in two domains: expository prose, and conversations
in the model's own chat template (the way an instruct model is used; a model without a
template reads them as plain "User:" / "Assistant:" turns, and the report says so). Each
domain is tokenized once and cut into chunks of `ctx` tokens, the chunks taken from the
domains in turn; each chunk's first half is context, and the prediction of every token of
its second half is scored. The program is teacher-forced: the first half in one `forward`
call, then one token per call (the decode path), its last-row logits kept. The reference is
the source model in fp32, run eagerly over each whole chunk.

Per scored token i, with p the reference's and q the program's softmax:
  KL_i = sum_v p_v (log p_v - log q_v), top-1 agreement = [argmax q == argmax p],
  perplexity = exp(mean_i -log q(target_i)); ratio = program / reference.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from edgespec.errors import EdgespecError
from edgespec.manifest import Fidelity

HELDOUT_DIR = Path(__file__).resolve().parents[1] / "corpus" / "heldout"
CHUNK = 512  # tokens per chunk (llama-perplexity's default context): 256 scored each


def _prose(tokenizer) -> tuple[str, str]:
    return (HELDOUT_DIR / "prose.txt").read_text(), "expository prose on everyday topics (17 paragraphs)"


def _chat(tokenizer) -> tuple[str, str]:
    conversations = json.loads((HELDOUT_DIR / "chat.json").read_text())
    if tokenizer.chat_template:
        return "".join(tokenizer.render_chat(c) for c in conversations), f"{len(conversations)} conversations in the model's chat template"
    plain = "\n\n".join("\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in c) for c in conversations)
    return plain, f"{len(conversations)} conversations as plain User:/Assistant: turns (the model has no chat template)"


DOMAINS: dict[str, Callable] = {"prose": _prose, "chat": _chat}  # name -> tokenizer -> (text, what it is)


def heldout_domains(tokenizer) -> dict[str, tuple[str, str]]:
    """Each held-out domain's text for this tokenizer (chat: rendered in its template) and what it is."""
    return {name: text_of(tokenizer) for name, text_of in DOMAINS.items()}


def heldout_source(tokenizer, domains: dict[str, tuple[str, str]] | None = None) -> str:
    """The held-out text's domains as the report names them (`domains`: heldout_domains' answer, if at hand)."""
    return "; ".join(f"{name}: {what}" for name, (_, what) in (domains or heldout_domains(tokenizer)).items())


def heldout_text(tokenizer) -> str:
    """Every domain's text, one after the other (for tools that cut their own chunks, such as
    llama-perplexity: its chunks are not edgespec's, so compare ratios, not tokens)."""
    return "\n\n".join(text for text, _ in heldout_domains(tokenizer).values())


def heldout_chunks(tokenizer, n_chunks: int, ctx: int, domains: dict[str, tuple[str, str]] | None = None) -> list[list[int]]:
    """`n_chunks` chunks of `ctx` tokens, taken from the domains in turn (prose, chat, prose,
    ...), each domain's chunks consecutive from its start (`domains`: heldout_domains' answer, if at hand)."""
    streams = {name: tokenizer.encode(text) for name, (text, _) in (domains or heldout_domains(tokenizer)).items()}
    names = list(streams)
    chunks, taken = [], dict.fromkeys(names, 0)
    for i in range(n_chunks):
        name = names[i % len(names)]
        ids, j = streams[name], taken[name]
        if len(ids) < (j + 1) * ctx:
            raise EdgespecError(
                f"the held-out {name} text has {len(ids)} tokens with this tokenizer, fewer than {j + 1} chunks of {ctx}: "
                f"{n_chunks} fidelity chunks is too many (validate.fidelity_chunks; 8 fit the embedded model's tokenizer)"
            )
        chunks.append(ids[j * ctx : (j + 1) * ctx])
        taken[name] = j + 1
    return chunks


def compare(reference: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor, text: str = "") -> Fidelity:
    """Fidelity of logits [N, V] against reference logits [N, V]; targets [N] the next tokens;
    `text` names what they were measured on."""
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
        text=text,
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
    domains = heldout_domains(tokenizer)  # read and rendered once
    chunks = heldout_chunks(tokenizer, n_chunks, ctx, domains)
    logits = program_logits(forward, chunks, on_token)
    return compare(reference_logits(reference, chunks), logits, scored_targets(chunks), heldout_source(tokenizer, domains))
