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
