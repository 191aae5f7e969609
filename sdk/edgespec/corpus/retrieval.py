"""BM25 (Okapi) ranking over a small in-memory corpus, for the retrieval-augmented suite."""

from __future__ import annotations

import math
import re
from collections import Counter


def bm25_tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class BM25:
    def __init__(self, docs: list[str], k1: float = 1.5, b: float = 0.75):
        self.docs = [Counter(bm25_tokens(d)) for d in docs]
        self.lens = [sum(d.values()) for d in self.docs]
        self.avg = sum(self.lens) / max(1, len(self.lens))
        df = Counter(t for d in self.docs for t in d)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def scores(self, query: str) -> list[float]:
        q = bm25_tokens(query)
        out = []
        for d, dl in zip(self.docs, self.lens):
            s = 0.0
            for t in q:
                tf = d.get(t, 0)
                if tf:
                    s += self.idf[t] * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * dl / self.avg))
            out.append(s)
        return out

    def top(self, query: str, k: int) -> list[int]:
        """Indices of the k best documents, best first (ties: earlier document first)."""
        s = self.scores(query)
        return sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
