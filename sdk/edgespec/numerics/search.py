"""Per-layer normalizer search: calibration activations, candidates evaluated in the target
format, the cheapest safe candidate per norm layer.

For every norm layer the inputs seen on real prompts are recorded (eager fp32). Each
candidate pre-normalizer is then evaluated on those rows in emulated target-format
arithmetic (`prenorm.emulated_pow_sum`: every product and every partial sum rounded),
counting overflow events (the sum is inf), underflow events (the sum of a nonzero row falls
below the smallest normal number), and the output error against float64.

Candidates by run-time cost: none (free) < const (one multiply per element) < linf (a max
reduction + multiply) < l1 (a sum reduction + multiply). With `guarantee=True` only
candidates the theory proves safe for *every* input are eligible (data-dependent scales
with a feasible plan), otherwise the cheapest one with zero events on the evaluation sets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from edgespec.numerics import SEARCH_REPORT_JSON
from edgespec.numerics.formats import FloatFormat, round_to_format
from edgespec.numerics.prenorm import INF, emulated_pow_sum, plan_constant, plan_data_dependent
from edgespec.numerics.stable_norm import NormChoice
from edgespec.output_dir import written_names

REPORT_NAMES = written_names(SEARCH_REPORT_JSON, "normsearch.md", "normsearch.png")  # what write_search_report writes

COST_ORDER = ("none", "const", "linf", "l1")


@dataclass
class Evaluation:
    prenorm: str
    log2_k: int
    guaranteed: bool
    overflow: int
    underflow: int
    rows: int
    max_rel_err: float


def norm_layers(model: nn.Module) -> list[str]:
    """The names of `model`'s norm layers the search covers (RMSNorm and LayerNorm)."""
    from edgespec.models.llama import RMSNorm

    return [name for name, mod in model.named_modules() if isinstance(mod, (RMSNorm, nn.LayerNorm))]


@torch.no_grad()
def collect_norm_inputs(model: nn.Module, calls: Iterable[Callable[[], object]], max_rows: int = 4096) -> dict[str, torch.Tensor]:
    """What every RMSNorm/LayerNorm of `model` sums over while `calls` run (each runs the model
    once): {name: [rows, d] float64}; a LayerNorm's rows are centred (x - mean), as it sums."""
    rows: dict[str, list[torch.Tensor]] = {}

    def keep(m: nn.Module, args: tuple, name: str) -> None:
        x = args[0].reshape(-1, args[0].shape[-1]).double()
        rows.setdefault(name, []).append(x - x.mean(-1, keepdim=True) if isinstance(m, nn.LayerNorm) else x)

    mods = dict(model.named_modules())
    hooks = [mods[name].register_forward_pre_hook(lambda m, a, n=name: keep(m, a, n)) for name in norm_layers(model)]
    try:
        for call in calls:
            call()
    finally:
        for h in hooks:
            h.remove()
    out = {}
    for n, lst in rows.items():
        x = torch.cat(lst)
        if len(x) > max_rows:
            x = x[torch.linspace(0, len(x) - 1, max_rows).long()]
        out[n] = x
    return out


def search_norms(
    model: nn.Module, calibration: dict[str, torch.Tensor], heldout: dict[str, torch.Tensor], fmt_name: str, guarantee: bool, on_layer=lambda name: None
) -> dict:
    """Per-layer choices from collected norm inputs: {"format", "guarantee", "layers", "summary"}."""
    from edgespec.numerics.formats import FORMATS

    fmt = FORMATS[fmt_name]
    mods = dict(model.named_modules())
    layers = []
    for name in calibration:
        on_layer(name)
        layers.append(search_layer(name, calibration[name], heldout[name], mods[name].weight.detach().float(), mods[name].eps, fmt, guarantee))
    return {"format": fmt.name, "guarantee": guarantee, "layers": layers, "summary": summarize_search(layers)}


def _emulate(x: torch.Tensor, e: torch.Tensor | None, fmt: FloatFormat, weight: torch.Tensor, eps: float, p: float = 2.0):
    """Emulated stable-norm forward: (sums [n], outputs [n, d]) in float64 of format values."""
    c = round_to_format(x, fmt)
    if e is None:
        xs, eps_s = c, torch.full((len(x),), eps, dtype=torch.float64)
    else:
        xs = round_to_format(c * torch.pow(2.0, -e)[:, None], fmt)
        eps_s = eps * torch.pow(2.0, -p * e)
    t = emulated_pow_sum(xs, p, fmt)
    y = xs * torch.pow(t / x.shape[1] + eps_s, -1 / p)[:, None] * weight.double()
    return t, y


def evaluate(x: torch.Tensor, choice: NormChoice, fmt: FloatFormat, weight: torch.Tensor, eps: float, guaranteed: bool) -> Evaluation:
    a = x.abs()
    kind = choice.prenorm
    if kind == "none":
        e = None
    elif kind == "const":
        e = torch.full((len(x),), float(choice.log2_k), dtype=torch.float64)
    else:
        m = a.amax(-1) if kind == "linf" else a.mean(-1)
        e = torch.round(torch.log2(torch.where(m > 0, m, torch.ones_like(m)))) + choice.log2_k
    t, y = _emulate(x, e, fmt, weight, eps)
    nonzero = a.amax(-1) > 0
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    err = (y - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-300)
    err = torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))
    return Evaluation(kind, choice.log2_k, guaranteed, int(t.isinf().sum()), int(((t < fmt.min_normal) & nonzero & ~t.isinf()).sum()), len(x), float(err.max()))


def candidates(x_calib: torch.Tensor, fmt: FloatFormat, p: float = 2.0, calib_margin: float = 4.0) -> list[tuple[NormChoice, bool]]:
    """(choice, guaranteed-for-every-input) in cost order."""
    d = x_calib.shape[1]
    t = x_calib.pow(p).sum(-1)
    t = t[t > 0]
    t_min, t_max = float(t.min()) / calib_margin, float(t.max()) * calib_margin
    out: list[tuple[NormChoice, bool]] = [(NormChoice("none"), False)]
    out.append((NormChoice("const", plan_constant(p, d, t_min, t_max, fmt).log2_k), False))
    for kind, q in (("linf", INF), ("l1", 1.0)):
        plan = plan_data_dependent(p, d, q, fmt)
        out.append((NormChoice(kind, plan.log2_k), plan.feasible))
    return out


def adversarial(x: torch.Tensor, fmt: FloatFormat, n: int = 64) -> torch.Tensor:
    """Rows of x rescaled by powers of two across the format's whole range, up to max |x| = M/2."""
    idx = torch.linspace(0, len(x) - 1, n).long()
    rows = x[idx]
    amax = rows.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    target_exp = torch.linspace(math.log2(fmt.min_normal) + 4, math.log2(fmt.max_finite) - 1, n)[:, None].double()
    return rows / amax * torch.pow(2.0, target_exp)


def search_layer(name: str, calib: torch.Tensor, heldout: torch.Tensor, weight: torch.Tensor, eps: float, fmt: FloatFormat, guarantee: bool = True) -> dict:
    """Evaluate every candidate on calibration, held-out and adversarial rows; pick one."""
    adv = adversarial(calib, fmt)
    rows = []
    for choice, guaranteed in candidates(calib, fmt):
        evals = {k: evaluate(v, choice, fmt, weight, eps, guaranteed) for k, v in (("calibration", calib), ("heldout", heldout), ("adversarial", adv))}
        rows.append((choice, guaranteed, evals))

    def safe(r) -> bool:
        choice, guaranteed, evals = r
        clean = all(ev.overflow == 0 and ev.underflow == 0 for ev in evals.values())
        return clean and (guaranteed or not guarantee)

    chosen = next((r for r in rows if safe(r)), rows[-1])
    return {
        "layer": name,
        "d": calib.shape[1],
        "rms_max": float(calib.pow(2).mean(-1).sqrt().max()),
        # values the format cannot hold before any pre-normalizer: no candidate is clean there
        "max_abs": float(torch.cat([calib, heldout]).abs().max()),
        "rows_beyond_format": {k: int((v.abs().amax(-1) > fmt.max_finite).sum()) for k, v in (("calibration", calib), ("heldout", heldout))},
        "chosen": {"prenorm": chosen[0].prenorm, "log2_k": chosen[0].log2_k},
        "candidates": [{"prenorm": c.prenorm, "log2_k": c.log2_k, "guaranteed": g, **{k: asdict(v) for k, v in ev.items()}} for c, g, ev in rows],
    }


def run_normsearch(model: nn.Module, tokenizer, cfg, chat_template: bool, on_layer=lambda name: None) -> dict:
    """The whole search on a loaded fp32 model: prompts -> activations -> per-layer choice.

    cfg: a `NumericsConfig`; chat_template: the prompts in the model's chat template (the
    recipe's `model.chat_template`, as the program will see them). Returns {"format",
    "layers": [...], "summary": {...}}.
    """
    from edgespec.corpus.prompts import mixed_prompts
    from edgespec.models.tokenizer import encode_prompt

    limit = min(384, model.args.max_seq_len - 1)  # calibration rows per prompt, within the context

    def calls(split: str, n: int):
        enc = (encode_prompt(tokenizer, p.text, chat_template) for p in mixed_prompts(split, n))
        return [lambda ids=ids: model(torch.tensor([ids[:limit]]), torch.tensor([0])) for ids in enc]

    calib = collect_norm_inputs(model, calls("train", cfg.calibration_prompts))
    held = collect_norm_inputs(model, calls("heldout", cfg.heldout_prompts))
    return search_norms(model, calib, held, cfg.format, cfg.guarantee, on_layer)


def summarize_search(layers: list[dict]) -> dict:
    def events(kind: str, key: str) -> int:
        return sum(c[key]["overflow"] + c[key]["underflow"] for layer in layers for c in layer["candidates"] if c["prenorm"] == kind)

    chosen = [layer["chosen"]["prenorm"] for layer in layers]
    chosen_events = sum(
        c[k]["overflow"] + c[k]["underflow"]
        for layer in layers
        for c in layer["candidates"]
        if c["prenorm"] == layer["chosen"]["prenorm"]
        for k in ("calibration", "heldout", "adversarial")
    )
    beyond = [layer["layer"] for layer in layers if any(layer["rows_beyond_format"].values())]
    return {
        "layers": len(layers),
        "chosen": {k: chosen.count(k) for k in COST_ORDER if k in chosen},
        # layers whose inputs exceed the format's largest finite number (any pre-normalizer
        # scales the value after it is held in the format): such a model cannot run its norms there
        "layers_beyond_format": beyond,
        "max_abs_input": max(layer["max_abs"] for layer in layers),
        "chosen_events_all_sets": chosen_events,
        "naive_events": {k: events("none", k) for k in ("calibration", "heldout", "adversarial")},
        "rows": {
            k: sum(next(c for c in layer["candidates"] if c["prenorm"] == "none")[k]["rows"] for layer in layers)
            for k in ("calibration", "heldout", "adversarial")
        },
    }


def beyond_format_text(result: dict) -> str:
    """What it means when layers' inputs exceed the searched format (and what to do)."""
    s, fmt = result["summary"], result["format"]
    from edgespec.numerics.formats import FORMATS

    return (
        f"The inputs of {len(s['layers_beyond_format'])} norm layers ({s['layers_beyond_format'][0]}, ...) reach |x| = {s['max_abs_input']:.4g}, "
        f"beyond {fmt}'s largest finite number {FORMATS[fmt].max_finite:.4g}: no pre-normalizer can hold them, so this model's norms cannot run in {fmt}. "
        f"Search the format its norms run in (numerics.format: bf16 has fp32's range)."
    )


def choices_of(result: dict) -> dict[str, NormChoice]:
    return {layer["layer"]: NormChoice(layer["chosen"]["prenorm"], layer["chosen"]["log2_k"]) for layer in result["layers"]}


def overflow_rms(fmt_name: str, d: int) -> float:
    """The RMS above which a d-element row's sum of squares overflows the format: sqrt(M / d),
    M the format's largest finite number (65504 for fp16, about 3.4e38 for bf16 and fp32)."""
    from edgespec.numerics.formats import FORMATS

    return math.sqrt(FORMATS[fmt_name].max_finite / d)


def plot_report(result: dict):
    """The normsearch figure (a matplotlib Figure, made without pyplot): each layer's max input
    RMS, and the overflow line of the searched format (`overflow_rms`)."""
    from matplotlib.figure import Figure

    s = result["summary"]
    fmt = result["format"]
    names = [layer["layer"].replace("layers.", "L").replace(".attention_norm", ".att").replace(".ffn_norm", ".ffn") for layer in result["layers"]]
    rms = [layer["rms_max"] for layer in result["layers"]]
    naive_cal = [next(c for c in layer["candidates"] if c["prenorm"] == "none")["calibration"]["overflow"] for layer in result["layers"]]
    fig = Figure(figsize=(12, 3.8))
    ax = fig.subplots()
    ax.bar(range(len(rms)), rms, color=["tab:red" if n else "tab:blue" for n in naive_cal])
    ax.axhline(overflow_rms(fmt, result["layers"][0]["d"]), color="k", ls="--", lw=1, label=f"{fmt} sum-of-squares overflow (RMS = sqrt(M/d))")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    ax.set_ylabel("max RMS of the layer input")
    ax.set_title(f"Norm inputs on calibration prompts (red: naive {fmt} overflows); chosen: {s['chosen']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_search_report(result: dict, out_dir) -> list[str]:
    """normsearch.json, normsearch.md (table) and normsearch.png (plot) into out_dir."""
    import json
    from pathlib import Path

    out = Path(out_dir)
    (out / SEARCH_REPORT_JSON).write_text(json.dumps(result, indent=1))
    s = result["summary"]
    lines = [
        f"# Normalizer search ({result['format']}, guarantee={result['guarantee']})",
        "",
        f"Chosen: {s['chosen']}; overflow/underflow events of the chosen normalizers over calibration, held-out and adversarial rows: **{s['chosen_events_all_sets']}**.",
        f"Naive {result['format']} norm (no pre-normalizer) on the same rows: {s['naive_events']} events (rows: {s['rows']}).",
        *([beyond_format_text(result)] if s["layers_beyond_format"] else []),
        "",
        "| layer | max RMS | chosen | log2 k | naive events (cal/held/adv) | chosen max rel. error (held-out) |",
        "|---|---:|---|---:|---|---:|",
    ]
    for layer in result["layers"]:
        naive = next(c for c in layer["candidates"] if c["prenorm"] == "none")
        ch = next(c for c in layer["candidates"] if c["prenorm"] == layer["chosen"]["prenorm"])
        ev = "/".join(str(naive[k]["overflow"] + naive[k]["underflow"]) for k in ("calibration", "heldout", "adversarial"))
        lines.append(f"| {layer['layer']} | {layer['rms_max']:.1f} | {ch['prenorm']} | {ch['log2_k']} | {ev} | {ch['heldout']['max_rel_err']:.2e} |")
    (out / "normsearch.md").write_text("\n".join(lines) + "\n")
    files = [SEARCH_REPORT_JSON, "normsearch.md"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return files
    plot_report(result).savefig(out / "normsearch.png", dpi=110)
    return files + ["normsearch.png"]
