"""The one decode loop, `generate`: autoregressive, or speculative when given the program's
speculative methods (autoregressive decoding is speculative decoding without a draft).

The same loop drives the `.pte` (ProgramRunner) and eager models (`eager_step`,
`edgespec.speculative.step.EagerSpecMethods`), so they are compared on equal terms. Timing
is returned as stats, never printed here.

The loop itself is `decoding`, a generator that asks for each forward call it needs (`Feed`:
these tokens at this position, answer with the logits of the last) instead of making it:
`generate` answers from one program, `edgespec.runtime.batch_decode` answers many loops'
feeds with one batched program call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from edgespec.errors import EdgespecError
from edgespec.runtime.adaptive import AdaptiveSpeculation
from edgespec.runtime.ngram import banned_tokens, block_
from edgespec.runtime.sampling import sample
from edgespec.speculative.lookup import with_lookup
from edgespec.speculative.suffix import SuffixMatcher
from edgespec.speculative.tree import placeholder_draft

StepFn = Callable[[torch.Tensor, int], torch.Tensor]
NextTokenFn = Callable[[torch.Tensor, int], int]  # a StepFn's greedy token (`ProgramRunner.next_token`)


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    completion_ids: list[int]
    stopped_by_eos: bool
    prefill_s: float  # the prompt fed and its next token chosen (the first completion token)
    decode_s: float
    step_times_s: list[float] = field(default_factory=list)
    tokens_per_call: list[int] = field(default_factory=list)  # tokens emitted by each decode call (1 when autoregressive)
    reused_prefix: int = 0  # prompt tokens whose KV was already in the cache (not prefilled)
    speculative_calls: list[bool] = field(default_factory=list)  # per decode call: a spec_step (else one token)
    adaptive_events: list[str] = field(default_factory=list)  # the adaptive policy's switches, with their reasons

    @property
    def prefill_tokens_per_s(self) -> float:
        return len(self.prompt_ids) / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens(self) -> int:
        """Tokens produced by decode calls (the first completion token comes from prefill)."""
        return sum(self.tokens_per_call)

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def mean_tokens_per_call(self) -> float:
        """Mean tokens emitted per decode call, the bonus token included (1.0 autoregressive)."""
        return self.decode_tokens / len(self.step_times_s) if self.step_times_s else 0.0

    @property
    def speculative_share(self) -> float:
        """Share of decode calls that were speculative steps."""
        return sum(self.speculative_calls) / len(self.speculative_calls) if self.speculative_calls else 0.0


@dataclass(frozen=True)
class Feed:
    """A forward call the decode loop needs: `tokens` fed at positions pos.. of its sequence;
    answered with the logits of the last one ([V]), or with its greedy token (an int) when
    `token_only` (the program's `next_token`)."""

    tokens: list[int]
    pos: int
    token_only: bool = False


Decoding = Generator[Feed, "torch.Tensor | int", GenerationResult]


class SpecMethods(Protocol):
    """The speculative methods of a program (see `edgespec.export.constants`)."""

    depth: int
    topk: int
    tree_size: int
    vocab_size: int

    def spec_step(
        self, last: int, draft: torch.Tensor, pos: int, temperature: float, uniforms: torch.Tensor, gumbel: torch.Tensor
    ) -> tuple[list[int], torch.Tensor]: ...

    def forward(self, tokens: torch.Tensor, start_pos: int) -> torch.Tensor: ...


def generate(step: StepFn, prompt_ids: list[int], *, next_token: NextTokenFn | None = None, **options) -> GenerationResult:
    """The decode loop (`decoding`, its options) run on one program: each feed it asks for is
    one `step` call (or `next_token` call, where decoding is greedy without n-gram bans)."""
    loop = decoding(prompt_ids, token_only=next_token is not None, **options)
    try:
        feed = next(loop)
        while True:
            t = torch.tensor([feed.tokens], dtype=torch.long)
            feed = loop.send(next_token(t, feed.pos) if feed.token_only else step(t, feed.pos))
    except StopIteration as done:
        return done.value


def decoding(
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    max_seq_len: int,
    eos_ids: tuple[int, ...],
    temperature: float = 0.0,
    seed: int = 0,
    on_token: Callable[[int], None] | None = None,
    no_repeat_ngram_size: int = 0,
    cache: CacheState | None = None,
    spec: SpecMethods | None = None,
    lookup: int = 0,
    token_only: bool = False,
    adaptive: AdaptiveSpeculation | None = None,
) -> Decoding:
    """The decode loop: prefill the whole prompt in one forward call, then decode; each
    forward call is a `Feed` yielded to the driver (`generate`), which sends back its answer.

    Without `spec` every call feeds one token (autoregressive decoding). With `spec` (the
    program's speculative methods) one `spec_step` call verifies the last draft and drafts
    the next, emitting 1 + accepted drafts tokens; near the end of the context, where a tree
    no longer fits, the loop finishes one token per call. Greedy output is the same either
    way; with temperature > 0 the speculative output is distributed as autoregressive
    sampling (the program's tree rejection sampling, fed uniforms and Gumbel noise from this
    function's seeded generator).

    lookup > 0 (with spec): when the longest suffix of the context (prompt and output) that
    also occurs earlier is at least `lookup` tokens long, what followed its first occurrence
    goes first into the draft, ahead of the streams' candidates (suffix matching,
    edgespec.speculative.suffix, updated per emitted token; verification is exact, so the
    output does not change).

    no_repeat_ngram_size n > 0: never emit a token that repeats an n-gram of the context
    (prompt included), greedy or sampled (edgespec.runtime.ngram). With spec and greedy
    decoding the program verifies as usual; the host then checks the emitted tokens in order,
    and at the first banned one recomputes that position's logits with one `step` call (the
    cache already holds the accepted prefix), takes the best unbanned token and drops the
    rest: every token kept is the argmax of its position's logits, so the output equals
    autoregressive blocked decoding. Blocked sampling decodes one token per call (the
    program's acceptance does not see the bans).

    cache: what the program's KV cache holds from the previous generation; the prompt's
    longest common prefix with it is not prefilled again (see CacheState).

    token_only: the driver can answer a feed with its greedy token alone (the program's
    `next_token` method, a screened head); asked for the calls that feed one token or the
    prompt when decoding is greedy without n-gram bans (the same tokens as the argmax of the
    logits).

    adaptive (with spec): speculate only while it pays on this device (edgespec.runtime.adaptive:
    each call is a spec_step or one token as the policy says, from the measured cost of both);
    greedy output is the same either way."""
    room = spec.tree_size + spec.depth if spec is not None else 0  # slots a spec step may touch past its position
    _check_prompt(prompt_ids, max_seq_len, room)
    max_new_tokens = min(max_new_tokens, max_seq_len - len(prompt_ids))
    gen = torch.Generator().manual_seed(seed)
    ctx = _Context(prompt_ids, max_seq_len, no_repeat_ngram_size)
    matcher = SuffixMatcher(prompt_ids) if lookup and spec is not None else None
    speculate = spec is not None and not (no_repeat_ngram_size > 0 and temperature > 0)
    if spec is not None:
        R, k = spec.tree_size, spec.topk
        half, no_noise = torch.full((R, k), 0.5), torch.zeros(spec.vocab_size)
        draft = placeholder_draft(spec.depth, k)  # the first step drafts for real

    greedy = token_only and temperature == 0 and no_repeat_ngram_size == 0

    def one_call(tokens: list[int], at: int) -> Generator[Feed, torch.Tensor | int, int]:  # the token after feeding `tokens` at `at`
        if greedy:
            return int((yield Feed(tokens, at, token_only=True)))
        return sample(ctx.block((yield Feed(tokens, at))), temperature, gen)

    t0 = time.perf_counter()
    start = cache.reusable(prompt_ids) if cache is not None else 0
    x = yield from one_call(prompt_ids[start:], start)
    prefill_s = time.perf_counter() - t0

    out: list[int] = []
    steps: list[float] = []
    per_call: list[int] = []
    kinds: list[bool] = []
    if adaptive is not None:
        adaptive.start(max_tokens=spec.depth + 1 if spec is not None else 0)
    t_dec = time.perf_counter()
    new = [x]
    pos = len(prompt_ids)  # position of x, the last emitted token (not yet in the cache)
    stopped = False
    while True:
        for tok in new:  # emit, stopping at EOS or the token budget
            if tok in eos_ids:
                stopped = True
                break
            out.append(tok)
            ctx.push(tok)
            if matcher is not None:
                matcher.extend(tok)
            if on_token:
                on_token(tok)
            if len(out) >= max_new_tokens:
                break
        if stopped or len(out) >= max_new_tokens or pos >= max_seq_len:
            break
        t = time.perf_counter()
        continuation = matcher.draft(spec.depth, min_match=lookup)[0] if matcher is not None else []
        speculative = speculate and pos + room <= max_seq_len and (adaptive is None or adaptive.speculate(bool(continuation)))
        if speculative:
            if temperature > 0:
                uniforms = torch.rand((R, k), generator=gen)
                gumbel = -torch.log(-torch.log(torch.rand(spec.vocab_size, generator=gen).clamp(1e-20, 1 - 1e-7)))
            else:
                uniforms, gumbel = half, no_noise
            if matcher is not None:
                draft = with_lookup(draft, continuation)
            new, draft = spec.spec_step(x, draft, pos, temperature, uniforms, gumbel)
            if no_repeat_ngram_size > 0:
                new = yield from _unblock(ctx, x, pos, new)
        else:  # one token per call
            new = [(yield from one_call([x], pos))]
        steps.append(time.perf_counter() - t)
        per_call.append(len(new))
        kinds.append(speculative)
        if adaptive is not None and speculate:
            adaptive.record(speculative, steps[-1], len(new), bool(continuation))
        pos += len(new)
        x = new[-1]
    if cache is not None:
        cache.holds(prompt_ids + out, pos)
    events = list(adaptive.events) if adaptive is not None else []
    return GenerationResult(prompt_ids, out, stopped, prefill_s, time.perf_counter() - t_dec, steps, per_call, start, kinds, events)


def _check_prompt(prompt_ids: list[int], max_seq_len: int, reserve: int = 0) -> None:
    if not prompt_ids:
        raise EdgespecError("the prompt is empty")
    if len(prompt_ids) + reserve >= max_seq_len:
        raise EdgespecError(
            f"the prompt has {len(prompt_ids)} tokens but the program's context is {max_seq_len}"
            + (f" ({reserve} reserved for speculation)" if reserve else "")
            + "; shorten the prompt or export with a larger model.max_seq_len"
        )


class CacheState:
    """Which tokens the program's KV cache holds, for prefix reuse across generations.

    The cache is a fixed buffer indexed by position, and a call writes the rows it feeds before
    attending over rows [0, position]. So after a generation the rows of the tokens it fed stay
    valid, and the next prompt that starts with those tokens (a shared system prompt, a RAG
    context) only prefills from where it differs: no copy, nothing recomputed. The first
    differing token and everything after it are simply overwritten. One CacheState per loaded
    program; reset() after anything else used the program.

    Numerics: a prompt prefilled in two calls is the same computation as in one, except that
    the attention kernel accumulates per call; logits can differ in the last bits (fp32) or
    more (8da4w's dynamic activation quantization), as with any chunked prefill.
    """

    def __init__(self) -> None:
        self.ids: list[int] = []

    def reset(self) -> None:
        self.ids = []

    def reusable(self, prompt_ids: list[int]) -> int:
        """Prompt tokens already in the cache, leaving at least one to feed (for its logits)."""
        n = 0
        for a, b in zip(self.ids, prompt_ids):
            if a != b:
                break
            n += 1
        return min(n, len(prompt_ids) - 1)

    def holds(self, context: list[int], fed: int) -> None:
        self.ids = list(context[:fed])


class _Context:
    """The token context (prompt + emitted) in a preallocated buffer, for n-gram bans."""

    def __init__(self, prompt_ids: list[int], max_seq_len: int, n: int):
        self.n = n
        self.buf = torch.empty(max_seq_len + 1, dtype=torch.long)
        self.buf[: len(prompt_ids)] = torch.tensor(prompt_ids, dtype=torch.long)
        self.len = len(prompt_ids)

    def push(self, tok: int) -> None:
        if self.n > 0 and self.len < self.buf.numel():
            self.buf[self.len] = tok
        self.len += 1

    def view(self, extra: list[int] = ()) -> torch.Tensor:
        if not extra:
            return self.buf[: self.len]
        return torch.cat([self.buf[: self.len], torch.tensor(extra, dtype=torch.long)])

    def block(self, logits: torch.Tensor) -> torch.Tensor:
        return block_(logits.clone(), self.buf[: self.len], self.n) if self.n > 0 else logits


def _unblock(ctx: _Context, x: int, pos: int, new: list[int]) -> Generator[Feed, torch.Tensor, list[int]]:
    """Greedy spec tokens with n-gram bans applied (see `decoding`): keep the tokens up to the
    first banned one, which is replaced by the best unbanned token of its position."""
    for j, tok in enumerate(new):
        if bool((banned_tokens(ctx.view(new[:j]), ctx.n) == tok).any()):
            prev = x if j == 0 else new[j - 1]
            logits = yield Feed([prev], pos + j)
            return new[:j] + [int(torch.argmax(block_(logits.clone(), ctx.view(new[:j]), ctx.n)))]
    return new


def eager_step(model: torch.nn.Module) -> StepFn:
    """A StepFn over an eager `Transformer` (same contract as the program's forward)."""

    @torch.no_grad()
    def step(tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        return model(tokens, torch.tensor([start_pos], dtype=torch.long))[0]

    return step
