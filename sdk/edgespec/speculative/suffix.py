"""Suffix matching over the prompt and the text generated so far, as a draft source.

An incremental suffix automaton (SAM) of the token sequence: `extend(token)` adds one token
in amortized O(1), and the matcher keeps, alongside, the longest suffix of the whole
sequence that also occurs ending earlier. Its continuation (what followed that earlier
occurrence) is the draft. Unlike n-gram prompt lookup (a fixed n, a scan of the whole
context every step) the match is as long as the text allows and nothing is rescanned.

States: `nxt[s]` transitions, `link[s]` suffix link, `length[s]` longest string of s,
`first[s]` end position of the first occurrence of s's strings.
"""

from __future__ import annotations


class SuffixMatcher:
    """Longest-earlier-match drafts over a growing token sequence."""

    def __init__(self, tokens: list[int] | tuple[int, ...] = ()):
        self.text: list[int] = []
        self.nxt: list[dict[int, int]] = [{}]
        self.link = [-1]
        self.length = [0]
        self.first = [-1]
        self.last = 0  # state of the whole text
        self.match, self.match_len = 0, 0  # longest suffix that also ends earlier
        for t in tokens:
            self.extend(t)

    def _new_state(self, length: int, first: int, nxt: dict[int, int], link: int) -> int:
        self.nxt.append(nxt)
        self.link.append(link)
        self.length.append(length)
        self.first.append(first)
        return len(self.length) - 1

    def extend(self, token: int) -> None:
        """Append one token (amortized O(1))."""
        # 1. the match: walk the automaton of the text so far (every occurrence ends earlier)
        s, n = self.match, self.match_len
        while s > 0 and token not in self.nxt[s]:
            s = self.link[s]
            n = self.length[s]
        if token in self.nxt[s]:
            s, n = self.nxt[s][token], n + 1
        else:
            s, n = 0, 0
        # 2. the automaton (standard online construction)
        i = len(self.text)
        self.text.append(token)
        cur = self._new_state(self.length[self.last] + 1, i, {}, -1)
        p = self.last
        while p >= 0 and token not in self.nxt[p]:
            self.nxt[p][token] = cur
            p = self.link[p]
        if p < 0:
            self.link[cur] = 0
        else:
            q = self.nxt[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._new_state(self.length[p] + 1, self.first[q], dict(self.nxt[q]), self.link[q])
                while p >= 0 and self.nxt[p].get(token) == q:
                    self.nxt[p][token] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur
        # a split may have put a shorter state between the match's state and its link
        while s > 0 and self.length[self.link[s]] >= n:
            s = self.link[s]
        self.match, self.match_len = s, n

    def draft(self, length: int, min_match: int = 1) -> tuple[list[int], int]:
        """(up to `length` tokens that followed the first earlier occurrence of the longest
        matched suffix, its length); ([], n) when the match is shorter than `min_match`."""
        n = self.match_len
        if n < min_match or n == 0:
            return [], n
        start = self.first[self.match] + 1
        return self.text[start : start + length], n
