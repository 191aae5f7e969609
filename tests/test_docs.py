"""The documentation cites only files that are in the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# a repository path: one of these folders, then path characters (a trailing '.' or ',' ends a sentence)
CITED = re.compile(r"(?<![\w./-])((?:bench|scripts|sdk|tests)/[\w./-]*[\w/])")
ABSOLUTE_SCRIPT = re.compile(r"(?<![\w./~-])/(?:[\w.-]+/)+[\w.-]+\.(?:py|sh)\b")


def _cited(pattern):
    return [
        (doc.relative_to(ROOT), n, m.group(1) if m.groups() else m.group(0))
        for doc in DOCS
        for n, line in enumerate(doc.read_text().splitlines(), 1)
        for m in pattern.finditer(line)
    ]


def test_every_cited_repository_path_exists():
    cited = _cited(CITED)
    assert len(cited) > 50  # the pattern finds the citations
    missing = [f"{doc}:{n}: {path}" for doc, n, path in cited if not (ROOT / path).exists()]
    assert not missing, "docs cite paths that are not in the repository:\n" + "\n".join(missing)


def test_no_script_is_cited_outside_the_repository():
    outside = [f"{doc}:{n}: {path}" for doc, n, path in _cited(ABSOLUTE_SCRIPT)]
    assert not outside, "docs cite scripts by an absolute path (not in the repository):\n" + "\n".join(outside)


# a ratio README states: "1.76x"
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)x\b")


def _numbers(x) -> list[float]:
    if isinstance(x, dict):
        return [v for item in x.values() for v in _numbers(item)]
    if isinstance(x, list):
        return [v for item in x for v in _numbers(item)]
    return [float(x)] if isinstance(x, (int, float)) and not isinstance(x, bool) else []


def test_every_ratio_readme_states_is_in_a_results_file_or_dated():
    """Each "N.NNx" in README cites, on its line, the docs/results/*.json that holds it (at the
    precision README prints it), or its line marks it as history: README's figures are the
    current ones and say where they come from."""
    import json

    stated = [(n, m.group(1), line) for n, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1) for m in RATIO.finditer(line)]
    assert stated  # the pattern finds README's ratios
    unbacked = []
    for n, r, line in stated:
        if "history" in line:
            continue
        cited = re.findall(r"docs/results/([\w.-]+\.json)", line)
        values = [v for f in cited if (ROOT / "docs" / "results" / f).is_file() for v in _numbers(json.loads((ROOT / "docs" / "results" / f).read_text()))]
        if not any(round(v, len(r.split(".")[1])) == float(r) for v in values):
            unbacked.append(f"README.md:{n}: {r}x (cites {cited or 'no results file'})")
    assert not unbacked, "README states ratios that the results file it cites does not hold (update them, or date them as history):\n" + "\n".join(unbacked)
