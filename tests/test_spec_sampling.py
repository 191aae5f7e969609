"""Tree rejection sampling preserves the target distribution (statistical tests)."""

import math

import pytest
import torch

from edgespec.spec.tree import Tree
from edgespec.spec.verify import accept_sampling


def _chi2_sf(x: float, k: int) -> float:
    """Survival function of the chi-square distribution (regularized upper gamma), k dof."""
    from scipy.stats import chi2  # noqa: F401  (scipy is optional; fall back below)

    return float(chi2.sf(x, k))


def chi2_pvalue(observed: torch.Tensor, expected: torch.Tensor) -> float:
    keep = expected > 0
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    dof = int(keep.sum()) - 1
    try:
        return _chi2_sf(stat, dof)
    except ImportError:  # Wilson-Hilferty normal approximation
        z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
        return 0.5 * math.erfc(z / math.sqrt(2))


@pytest.mark.parametrize("draft", [[2, 0], [0, 0], [4, 1], [5, 5]])
def test_one_step_output_distribution_equals_target(draft):
    """First emitted token vs the exact target distribution, N = 8000 draws."""
    gen = torch.Generator().manual_seed(42)
    V = 6
    logits = torch.tensor([[1.0, 0.2, 2.0, -1.0, 0.5, 0.0]] + [[0.0] * V] * 2)
    tree = Tree((2,))
    toks = torch.tensor([0, *draft])
    n = 8000
    counts = torch.zeros(V)
    for _ in range(n):
        counts[accept_sampling(tree, toks, logits, 1.0, gen).tokens[0]] += 1
    p = torch.softmax(logits[0], -1)
    assert chi2_pvalue(counts, p * n) > 1e-3


def test_two_step_joint_distribution_on_a_tiny_model(tiny_model):
    """Joint law of the first two sampled tokens: speculative sampler vs exact target law."""
    from edgespec.spec.decode import spec_generate
    from edgespec.spec.msa import SpecModel

    prompt = [1, 2, 3]
    with torch.no_grad():
        tiny_model.output.weight.mul_(0.15)  # flatter distributions: many outcomes matter
        p1 = torch.softmax(tiny_model(torch.tensor([prompt]), torch.tensor([0]))[0], -1)
        top = p1.topk(4).indices.tolist()
        joint = {}
        for a in top:
            pa = torch.softmax(tiny_model(torch.tensor([prompt + [a]]), torch.tensor([0]))[0], -1)
            for b in pa.topk(4).indices.tolist():
                joint[(a, b)] = float(p1[a] * pa[b])

    def drafter(main_h, stream_h, context, tree):  # a fixed, imperfect draft
        return torch.tensor([[top[0], top[1]], [top[1], top[2]]])

    spec = SpecModel(tiny_model, None)
    n = 2000
    counts = {k: 0 for k in joint}
    other = 0
    for s in range(n):
        out = spec_generate(spec, Tree((2, 2)), prompt, max_new_tokens=2, eos_ids=(), drafter=drafter, temperature=1.0, seed=s).completion_ids
        key = tuple(out[:2])
        if key in counts:
            counts[key] += 1
        else:
            other += 1
    keys = list(joint)
    observed = torch.tensor([counts[k] for k in keys] + [other], dtype=torch.float64)
    expected = torch.tensor([joint[k] for k in keys] + [1 - sum(joint.values())], dtype=torch.float64) * n
    assert chi2_pvalue(observed, expected) > 1e-3
