"""The one acceptance rule for draft chains and trees (`accept_tree`), greedy and sampled.

Greedy: walk from the root, following the child whose token equals the target's argmax;
emit the accepted tokens plus the target's token after the last accepted node (the bonus
token: a call emits 1 + accepted depth tokens, "tokens per call").

Greedy needs one argmax per row (`greedy_choice`); the program runs only the rule the
call's temperature asks for.

Sampling (temperature > 0): multi-candidate rejection sampling for deterministic drafts.
At a node with target distribution p and candidate children c_1..c_m: accept c_i with
probability p'(c_i), where p' is p with the earlier rejected candidates zeroed and
renormalized; on acceptance descend into c_i, otherwise try c_{i+1}; when all are rejected
emit a sample from the final residual p'. The emitted token is distributed exactly as p:
P(c_1) = p(c_1), and after rejecting c_1 the process samples from p restricted to the other
tokens, renormalized -- by induction the output distribution is p. A candidate repeating an
earlier sibling's token was already rejected: p'(t) = 0, it is never accepted. Each step
applies this to the distribution conditioned on the accepted prefix, so the whole sequence
is distributed as plain autoregressive sampling from the target.
"""

from __future__ import annotations

import torch

MIN_TEMPERATURE = 1e-6  # a lower temperature is taken as this: logits / 1e-300 overflow float32


def accept_tree(
    children: torch.Tensor,
    valid: torch.Tensor,
    depth: int,
    node_tokens: torch.Tensor,
    logits: torch.Tensor,
    temperature: torch.Tensor,
    uniforms: torch.Tensor,
    gumbel: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tree acceptance as static tensor code (it runs inside the ExecuTorch program).

    children/valid [R, k] from `Tree.children_table`; depth D = len(tree.branching);
    node_tokens [R]; logits [R, V];
    temperature [1] (<= 0: greedy); uniforms [R, k] in (0, 1); gumbel [V] Gumbel(0, 1) noise
    (zeros when greedy).
    The randomness comes from the caller, so the host owns the seed.

    Every node's choice first (`greedy_choice` or `sampled_choice`: which child it accepts and
    what it emits when it accepts none), then the walk from the root. In the program the two
    choices are the branches of one `torch.cond` on the temperature, so a greedy step does
    one argmax per row and none of the sampled rule's vocabulary-wide work.

    Returns (path [D+1] tree rows root first, padded by repeating the last; n [1] number of
    tokens emitted = path length; tokens [D+1] emitted tokens, valid up to n).
    """
    cand = node_tokens[children]  # [R, k] candidate tokens of each node's children
    operands = (cand, valid, logits, temperature, uniforms, gumbel)
    if torch.compiler.is_exporting():  # both rules in the program, one runs per call
        chosen, residual = torch.cond(temperature[0] <= 0, greedy_choice, sampled_choice, operands)
    else:
        chosen, residual = (greedy_choice if bool(temperature[0] <= 0) else sampled_choice)(*operands)
    # walk from the root (D + 1 steps: the last one at a leaf always emits its residual)
    node = torch.zeros(1, dtype=torch.long)
    alive = torch.ones(1, dtype=torch.bool)
    n = torch.zeros(1, dtype=torch.long)
    path, out = [], []
    for _ in range(depth + 1):
        c = chosen[node]  # [1]
        acc = alive & (c >= 0)
        child = children[node, c.clamp(min=0)]  # [1]
        out.append(torch.where(acc, node_tokens[child], residual[node]))
        path.append(node)
        n = n + alive.to(torch.long)
        node = torch.where(acc, child, node)
        alive = acc
    return torch.cat(path), n, torch.cat(out)


def greedy_choice(
    cand: torch.Tensor, valid: torch.Tensor, logits: torch.Tensor, temperature: torch.Tensor, uniforms: torch.Tensor, gumbel: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The T -> 0 limit of `sampled_choice`, taken exactly: each node accepts its first valid
    child whose token is the argmax, and emits the argmax when none is (striking rejected
    candidates, which all differ from the argmax, leaves it the first maximum).

    cand/valid [R, k], logits [R, V] -> (chosen [R] child slot or -1, residual [R] token)."""
    best = logits.argmax(-1)  # [R]
    k = cand.shape[1]
    match = valid & (cand == best[:, None])  # [R, k]
    first = torch.where(match, torch.arange(k), k).amin(-1)  # [R]; k: no child matches
    return torch.where(first < k, first, -1), best


def sampled_choice(
    cand: torch.Tensor, valid: torch.Tensor, logits: torch.Tensor, temperature: torch.Tensor, uniforms: torch.Tensor, gumbel: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rule of the module docstring at every node at once (each node has its own
    uniforms): candidate i of a node is accepted with probability p'(c_i) (p with the earlier
    rejected candidates removed, renormalized); when all are rejected the node emits
    argmax(logits / T + gumbel) over the remaining tokens, a sample of the residual
    (Gumbel-max).

    cand/valid/uniforms [R, k], logits [R, V], temperature [1] > 0, gumbel [V]
    -> (chosen [R] child slot or -1, residual [R] token)."""
    R, k = cand.shape
    scaled = logits / temperature.clamp(min=MIN_TEMPERATURE)  # [R, V]
    scores = scaled + gumbel
    probs = torch.softmax(scaled, -1)
    p_cand = probs.gather(1, cand)  # [R, k]
    if k > 1:  # a repeat of an earlier valid sibling's token: already rejected, p'(t) = 0
        earlier = torch.ones(k, k, dtype=torch.bool).tril(-1)  # [i, j]: j < i
        repeat = ((cand[:, :, None] == cand[:, None, :]) & valid[:, None, :] & earlier).any(-1)  # [R, k]
        p_cand = p_cand.masked_fill(repeat, 0.0)
    chosen = torch.full((R,), -1, dtype=torch.long)
    removed = torch.zeros(R, dtype=probs.dtype)
    for i in range(k):  # sequential over a node's candidates, parallel over nodes
        open_ = valid[:, i] & (chosen < 0)
        take = open_ & (uniforms[:, i] < p_cand[:, i] / (1 - removed).clamp(min=1e-12))
        chosen = torch.where(take, i, chosen)
        removed = removed + torch.where(open_ & ~take, p_cand[:, i], 0.0)
    # residual draw per node: best of (scores) among tokens that are not rejected candidates:
    # the node's valid candidates are struck out, then one argmax scan (cheaper in the
    # program than a top-k over the vocabulary, and no [R, V] copy beyond the scatter's own).
    # Valid slots are a prefix: an invalid slot aims at slot 0's token and writes what slot 0
    # writes there (-inf, or a leaf's own score back), so duplicate indices agree.
    slot = torch.where(valid, cand, cand[:, :1])  # [R, k]
    struck = scores.scatter(1, slot, torch.where(valid[:, :1], float("-inf"), scores.gather(1, slot)))
    return chosen, struck.argmax(-1)
