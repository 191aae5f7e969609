"""Validation report files: report.json, report.md and PNG plots, written into a directory."""

from __future__ import annotations

import json
from pathlib import Path

from edgespec.manifest import LAYOUT, rerounded

REPORT_JSON = LAYOUT.report_json
REPORT_MD = LAYOUT.report_md


def _fmt(x, nd: int = 2) -> str:
    if x is None:
        return "—"
    return f"{x:.{nd}f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def lossless_text(counts: dict | None) -> str:
    """``identical/prompts`` of a report's lossless counts ('' when not judged)."""
    return "" if counts is None else f"{counts['identical']}/{counts['prompts']}"


# speculative decoders a report may hold, with their column labels: the program's own draft,
# and the hybrid (context suffix matches first, validate.lookup > 0)
DRAFTS = {"spec": "spec", "lookup": "hybrid"}


def _drafts(report: dict) -> list[str]:
    return [n for n in DRAFTS if report["overall"].get(n) is not None]


def _weights(q: dict | None) -> list[str]:
    """Where the linears' weights come from: the file's blocks, a rounding here (and what
    rounding a file's quantized weights again cost), or float."""
    if not q:
        return []
    again = [f"{n} {what}" for n, what in rerounded(q["rounded_from"], q.get("rounding_error", {}))]
    line = f"Weights: {q['carried']} linears carried as the file's blocks, {q['rounded']} rounded here, {q['unquantized']} float"
    return [line + (f"; {', '.join(again)}" if again else "") + ".", ""]


def render_markdown(report: dict, plots: list[str]) -> str:
    drafts = _drafts(report)
    o = report["overall"]
    lines = [
        f"# Validation report: {report['model']} ({report['precision']})",
        "",
        f"Bundle `{report['bundle']}` · program {report['program_bytes'] / 1e6:.1f} MB · peak RSS "
        + ", ".join(f"{k} {v:.0f} MB" for k, v in report["peak_rss_mb"].items())
        + f" · {o['prompts']} prompts, greedy, {report['config']['runs']} run(s) each.",
        "",
        *_weights(report.get("quantization")),  # absent from older reports
        f"**Gates: {'PASSED' if report['passed'] else 'FAILED'}**",
        "",
    ]
    lines += [f"- {'pass' if g['passed'] else 'FAIL'} `{g['name']}`: {g['message']}" for g in report["gates"]] or ["- (no gate applies)"]
    lines += [f"- not judged `{g['name']}`: {g['why']}" for g in report.get("gates_not_judged", [])]  # absent from older reports
    lines += ["", "## Suites", ""]
    head = "| suite | metric | score | fp32 base | AR tok/s |"
    sep = "|---|---|---:|---:|---:|"
    for n in drafts:
        head += f" {DRAFTS[n]} tok/s | speedup | tokens/call |"
        sep += "---:|---:|---:|"
    if drafts:
        head += " lossless |"
        sep += "---:|"
    lines += [head, sep]
    for name, s in [*report["suites"].items(), ("**all**", {**o, "metric": "mean"})]:
        row = f"| {name} | {s['metric']} | {_fmt(s['score'], 3)} | {_fmt(s.get('reference_score'), 3)} | {_fmt(s['ar']['tokens_per_s'], 1)} |"
        for n in drafts:
            sp = s.get(n) or {}
            row += f" {_fmt(sp.get('tokens_per_s'), 1)} | {_fmt(sp.get('speedup'), 3)} | {_fmt(sp.get('tokens_per_call'), 3)} |"
        if drafts:
            row += f" {lossless_text(s['lossless'])} |"
        lines.append(row)
    lines.append("")
    if "accuracy_drop" in o:
        ratio = "n/a" if o.get("score_ratio") is None else f"{o['score_ratio']:.3f}x"
        lines += [
            f"Mean task score {o['score']:.3f}; the fp32 reference (the source file dequantized to fp32) on the same prompts "
            f"{o['reference_score']:.3f} ({ratio}; the same answer on {o.get('same_answers', 'n/a')} prompts)."
        ]
        if "answer_nll_increase" in o:
            lines += [
                "",
                f"Reference answers, teacher-forced: {o['answer_nll']:.4f} nats/token under the program, {o['reference_answer_nll']:.4f} "
                f"under the fp32 reference ({o['answer_nll_increase']:+.4f} on {o['answer_nll_prompts']} prompts).",
            ]
    f = report.get("fidelity")
    if f:
        lines += [
            "",
            f"## Fidelity (held-out text: {f['text']}, {f['tokens']} tokens, teacher-forced, against the fp32 source model: the source file dequantized to fp32)",
            "",
            "| top-1 agreement | perplexity | fp32 perplexity | ratio | mean KL | p99 KL |",
            "|---:|---:|---:|---:|---:|---:|",
            f"| {f['top1_agreement']:.1%} | {f['perplexity']:.3f} | {f['reference_perplexity']:.3f} | {f['perplexity_ratio']:.4f} | {f['kl_mean']:.4f} | {f['kl_p99']:.4f} |",
            "",
        ]
    if "rag" in report["suites"] and "retrieval_recall" in report["suites"]["rag"]:
        lines.append(f"Retrieval (BM25 top-3) put the answer's sentence in the context for {report['suites']['rag']['retrieval_recall']:.0%} of rag prompts.")
    if report.get("normalizer_events") is not None:
        lines.append(f"Normalizer search: {report['normalizer_events']} overflow/underflow events with the chosen pre-normalizers.")
        if report.get("normalizer_note"):
            lines.append(report["normalizer_note"])
    lines += ["", *[f"![{p}]({p})" for p in plots], "", "## Examples (first of each suite)", ""]
    seen = set()
    for r in report["examples"]:
        if r["suite"] in seen:
            continue
        seen.add(r["suite"])
        lines += [f"- **{r['id']}** score {r['score']:.2f}: `{r['prediction'][:160]!r}` (reference `{r['reference'][:120]!r}`)"]
    return "\n".join(lines) + "\n"


def write_plots(report: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    names = list(report["suites"])
    drafts = _drafts(report)
    spec = "spec" in drafts

    fig, ax = plt.subplots(figsize=(7, 3.2))
    if drafts:
        width = 0.8 / len(drafts)
        for i, d in enumerate(drafts):
            vals = [(report["suites"][n].get(d) or {}).get("speedup") or 0 for n in names]
            ax.bar([x + (i - (len(drafts) - 1) / 2) * width for x in range(len(names))], vals, width, label=DRAFTS[d])
        ax.set_xticks(range(len(names)), names)
        ax.axhline(1.0, color="k", lw=1, ls="--")
        ax.set_ylabel("spec / AR decode tok/s")
        ax.set_title("Speculative speedup per task (median of per-prompt ratios)")
        if len(drafts) > 1:
            ax.legend()
    else:
        ax.bar(names, [report["suites"][n]["ar"]["tokens_per_s"] for n in names], color="tab:gray")
        ax.set_ylabel("decode tok/s")
        ax.set_title("Autoregressive decode speed per task (no speculative methods)")
    fig.tight_layout()
    fig.savefig(out / "speedup_per_task.png", dpi=110)
    plt.close(fig)
    files.append("speedup_per_task.png")

    if spec:
        hist = report["overall"]["spec"]["tokens_per_call_histogram"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ks = sorted(int(k) for k in hist)
        ax.bar(ks, [hist[k] if k in hist else hist[str(k)] for k in ks], color="tab:green")
        ax.set_xticks(ks)
        ax.set_xlabel("tokens per spec_step call (1 = no draft accepted)")
        ax.set_ylabel("calls")
        ax.set_title(f"Accepted length, all suites (mean {report['overall']['spec']['tokens_per_call']:.2f})")
        fig.tight_layout()
        fig.savefig(out / "accepted_length.png", dpi=110)
        plt.close(fig)
        files.append("accepted_length.png")

    if report["overall"].get("reference_score") is not None:
        import numpy as np

        x = np.arange(len(names))
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.bar(x - 0.2, [report["suites"][n]["reference_score"] for n in names], 0.4, label="fp32 base (eager)")
        ax.bar(x + 0.2, [report["suites"][n]["score"] for n in names], 0.4, label=f"{report['precision']} program")
        ax.set_xticks(x, names)
        ax.set_ylabel("task score")
        ax.set_title("Accuracy vs precision")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "accuracy_vs_precision.png", dpi=110)
        plt.close(fig)
        files.append("accuracy_vs_precision.png")
    return files


def write_report(report: dict, out_dir: str | Path) -> list[str]:
    """report.json, report.md and the plots into out_dir; returns the file names."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(report, out)
    (out / REPORT_JSON).write_text(json.dumps(report, indent=1) + "\n")
    (out / REPORT_MD).write_text(render_markdown(report, plots))
    return [REPORT_JSON, REPORT_MD, *plots]
