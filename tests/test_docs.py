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


def _expand(name: str) -> list[str]:
    """A cited file name with its `{a,b}` alternatives spelled out."""
    m = re.search(r"\{([^{}]*)\}", name)
    return [x for alt in m.group(1).split(",") for x in _expand(name[: m.start()] + alt + name[m.end() :])] if m else [name]


def _unbacked(statements: list[tuple[str, str, list[str]]]) -> list[str]:
    """Of (where, text, settings) statements: each "N.NNx" in text not held, at the precision
    written, by a docs/results/*.json the same text cites; a statement that says "history" is
    exempt, and so is a ratio that is one of its own `settings` (a gate restated: "at most 1.05x")."""
    import json

    out = []
    for where, text, settings in statements:
        ratios = RATIO.findall(text)
        if not ratios or "history" in text:
            continue
        cited = [f for name in re.findall(r"docs/results/([\w.{},-]+\.json)", text) for f in _expand(name)]
        values = [v for f in cited if (ROOT / "docs" / "results" / f).is_file() for v in _numbers(json.loads((ROOT / "docs" / "results" / f).read_text()))]
        for r in ratios:
            if float(r) in settings or any(round(v, len(r.split(".")[1])) == float(r) for v in values):
                continue
            out.append(f"{where}: {r}x (cites {cited or 'no results file'})")
    return out


def _recipe_statements(path: Path) -> list[tuple[str, str, list[str]]]:
    """A recipe's comments as statements: each run of consecutive commented lines, joined, with
    the numbers its lines set (`field: value  # ...`)."""
    out, run = [], []
    for n, line in enumerate(path.read_text().splitlines() + [""], 1):
        value, hash_, comment = line.partition("#")
        if hash_:
            run.append((n, value, comment))
            continue
        if run:
            settings = [float(x) for _, v, _ in run for x in re.findall(r":\s*(\d+(?:\.\d+)?)\s*$", v)]
            out.append((f"{path.relative_to(ROOT)}:{run[0][0]}", " ".join(c for _, _, c in run), settings))
            run = []
    return out


def test_every_ratio_readme_states_is_in_a_results_file_or_dated():
    """Each "N.NNx" in README cites, on its line, the docs/results/*.json that holds it (at the
    precision README prints it), or its line marks it as history: README's figures are the
    current ones and say where they come from."""
    lines = (ROOT / "README.md").read_text().splitlines()
    statements = [(f"README.md:{n}", line, []) for n, line in enumerate(lines, 1)]
    assert any(RATIO.search(line) for line in lines)  # the pattern finds README's ratios
    unbacked = _unbacked(statements)
    assert not unbacked, "README states ratios that the results file it cites does not hold (update them, or date them as history):\n" + "\n".join(unbacked)


def test_every_ratio_a_recipe_states_is_in_a_results_file_or_dated():
    """The same for the recipes' comments, a run of comment lines being one statement: a speed
    or quality ratio a recipe states cites the results file that holds it, or says it is history."""
    statements = [s for path in sorted((ROOT / "recipes").glob("*.yaml")) for s in _recipe_statements(path)]
    assert sum(len(RATIO.findall(text)) for _, text, _ in statements) >= 5  # the recipes' ratios are found
    unbacked = _unbacked(statements)
    assert not unbacked, "recipes state ratios that the results file they cite does not hold (update them, or date them as history):\n" + "\n".join(unbacked)


def test_the_ratio_check_reads_braces_settings_and_history():
    backed = "1.12x (docs/results/spec_vs_ar_hydra_epyc26_{2threads,1thread}.json)"
    assert _expand("a_{x,y}_{1,2}.json") == ["a_x_1.json", "a_x_2.json", "a_y_1.json", "a_y_2.json"]
    assert _unbacked([("w", "9.99x " + backed, [])]) == ["w: 9.99x (cites ['spec_vs_ar_hydra_epyc26_2threads.json', 'spec_vs_ar_hydra_epyc26_1thread.json'])"]
    assert _unbacked([("w", "1.16x " + backed, [])]) == []  # the 2-thread file's heads every call
    assert _unbacked([("w", "9.99x, history", []), ("w", "at most 1.05x", [1.05])]) == []
