"""A BPE tokenizer held in flat numpy arrays, reading a `tokenizer.json`, that encodes to the
same ids and decodes to the same text as the `tokenizers` library: for the host runtime, where
the library holds ~290 MB resident for Gemma 3's 262k-token vocabulary (32 MB for SmolLM2's
49k) and this ~21 MB (5 MB), bench/tokenizer_memory.py. (Loading parses the JSON: ~220 MB
for a moment with Gemma 3's, given back once built.) Encoding is Python: ~1-2 ms per 1,000
characters, 4-7 times the library's time.

Held: the token strings as one UTF-8 blob with offsets; a string -> id lookup by sorted
hashes (np.searchsorted, then the blob compared); the merges as sorted int64 keys
(left_id << 32 | right_id) with their rank and result id. BPE runs as the library's does (a
heap of (rank, position), stale entries skipped), one word at a time, with a bounded cache.

The tokenizer.json shapes implemented exactly (anything else is an EdgespecError naming it):
  model        BPE: merges as pairs or "a b" strings, unk_token (fused or not), byte_fallback,
               ignore_merges; no dropout, continuing_subword_prefix or end_of_word_suffix
  added tokens matched leftmost-longest before normalization (normalized=false) or in the
               normalized text (normalized=true, when normalizing leaves the token as it is);
               special ones skipped by decode(skip_special); no lstrip, rstrip or single_word
  normalizer   null, Prepend, Replace (a plain string), or a Sequence of them
  pre_tokenizer null, ByteLevel(add_prefix_space=false; with or without the GPT-2 split),
               Digits, or a Sequence of them
  decoder      null, ByteLevel, Replace (a plain string), ByteFallback, Fuse, Strip, or a Sequence
  post_processor null, ByteLevel, TemplateProcessing (no effect: encode adds no special tokens)
  no truncation, no padding
These are SmolLM2's (byte-level BPE: Digits then ByteLevel) and the SentencePiece BPE edgespec
builds from a GGUF (Gemma 3: spaces as U+2581, `<0xNN>` byte fallback; Llama 2 also prepends
one), see `edgespec.models.tokenizer`.

Character classes: the library's GPT-2 split (Oniguruma) and Digits (Rust's char::is_numeric)
use their own Unicode tables (16.0 for Oniguruma, and newer for Rust's numbers); the installed
`regex` module's letter and number classes are cut to them here by code point ranges, and
tests/test_compact_tokenizer.py compares every code point with the library (a new `regex` or
`tokenizers` with other Unicode tables shows there first).
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from edgespec.errors import EdgespecError

# code points the installed `regex` module's \p{L} and \p{N} hold that the library's Oniguruma
# tables (Unicode 16.0) do not: characters new in a later Unicode (every code point compared, in
# tests/test_compact_tokenizer.py)
_ONIG_NOT_L = (
    (0x558, 0x558), (0x58B, 0x58C), (0x88F, 0x88F), (0xC5C, 0xC5C), (0xCDC, 0xCDC), (0x208F, 0x208F), (0x209D, 0x209F), (0xA7CE, 0xA7CF),
    (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4), (0xA7DD, 0xA7DD), (0xA7E2, 0xA7E2), (0xA7F1, 0xA7F1), (0xAB6C, 0xAB6D), (0x107BB, 0x107BF),
    (0x10940, 0x10959), (0x10EC5, 0x10EC7), (0x10ED9, 0x10EEE), (0x11B0A, 0x11B0A), (0x11DB0, 0x11DDB), (0x11DF1, 0x11DF1), (0x16EA0, 0x16EB8),
    (0x16EBB, 0x16ED3), (0x16FF2, 0x16FF3), (0x187F8, 0x187FF), (0x18CD6, 0x18CDA), (0x18D09, 0x18D20), (0x18D80, 0x18DF2), (0x18E00, 0x19191),
    (0x191A0, 0x191D2), (0x1B123, 0x1B128), (0x1B168, 0x1B168), (0x1D6A6, 0x1D6A6), (0x1DF1F, 0x1DF24), (0x1DF2B, 0x1DF81), (0x1DF90, 0x1DF96),
    (0x1DFCD, 0x1DFFF), (0x1E6C0, 0x1E6DE), (0x1E6E0, 0x1E6E2), (0x1E6E4, 0x1E6E5), (0x1E6E7, 0x1E6ED), (0x1E6F0, 0x1E6F4), (0x1E6FE, 0x1E6FF),
    (0x2B73A, 0x2B73F), (0x2B81E, 0x2B81E), (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479), (0x3D000, 0x3FC3F),
)  # fmt: skip
_ONIG_NOT_N = ((0x11DE0, 0x11DE9), (0x1246F, 0x1246F), (0x12475, 0x1247F), (0x12550, 0x12686), (0x16FF4, 0x16FF6))
# ... and numbers it holds that Rust's char::is_numeric (the Digits pre-tokenizer) does not
_RUST_NOT_N = ((0x1246F, 0x1246F), (0x12475, 0x1247F), (0x12550, 0x12686))

_CACHE_WORDS = 4096  # BPE results kept (words up to _CACHE_CHARS characters); cleared when full
_CACHE_CHARS = 256
_CACHE_PAIRS = 16384


def _byte_chars() -> list[str]:
    """GPT-2's byte -> character map: printable Latin-1 bytes stand for themselves, the other
    68 bytes for U+0100.. in byte order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out, extra = [""] * 256, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b], extra = chr(0x100 + extra), extra + 1
    return out


def _set(prop: str, minus: Sequence[tuple[int, int]]) -> str:
    """A `regex` V1 set: the property less code point ranges."""
    cut = "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in minus)
    return f"[{prop}--[{cut}]]"


def _steps(cfg: dict | None, members: str, one: Callable[[dict], list]) -> list:
    """A tokenizer.json component as its steps in order: none for null, a `Sequence`'s members'
    (listed under `members`) one after another, else `one(cfg)`."""
    if cfg is None:
        return []
    if cfg.get("type") == "Sequence":
        return [step for c in cfg.get(members, []) for step in _steps(c, members, one)]
    return one(cfg)


class UnsupportedTokenizer(EdgespecError):
    """A tokenizer.json of a shape CompactTokenizer does not implement (the library reads it)."""


def _refuse(what: str) -> UnsupportedTokenizer:
    return UnsupportedTokenizer(f"tokenizer.json: {what} is not supported by CompactTokenizer (see edgespec.models.compact_tokenizer for what is)")


class _AddedMatcher:
    """Leftmost-longest matching of literal tokens, as the library's Aho-Corasick
    (MatchKind::LeftmostLongest): at the first position where any token starts, the longest."""

    def __init__(self, tokens: dict[str, int]):
        self.ids = tokens
        self.single = {t for t in tokens if len(t) == 1}
        lens: dict[str, set[int]] = {}
        for t in tokens:
            if len(t) > 1:
                lens.setdefault(t[:2], set()).add(len(t))
        self.lens = {k: sorted(v, reverse=True) for k, v in lens.items()}  # by the first two characters
        self.first = re.compile("[" + "".join(re.escape(c) for c in sorted({t[0] for t in tokens})) + "]")

    def split(self, text: str) -> list[tuple[str, int]]:
        """text as pieces: (token, its id) or (text between tokens, -1)."""
        out: list[tuple[str, int]] = []
        start = pos = 0
        while (m := self.first.search(text, pos)) is not None:
            i = m.start()
            hit = next((s for n in self.lens.get(text[i : i + 2], ()) if (s := text[i : i + n]) in self.ids), None)
            if hit is None and text[i] in self.single:
                hit = text[i]
            if hit is None:
                pos = i + 1
                continue
            if start < i:
                out.append((text[start:i], -1))
            out.append((hit, self.ids[hit]))
            start = pos = i + len(hit)
        if start < len(text) or not out:
            out.append((text[start:], -1))
        return out


class CompactTokenizer:
    """A `tokenizer.json`'s BPE tokenizer in flat arrays: `encode` gives the `tokenizers`
    library's `encode(text, add_special_tokens=False).ids`, `decode` its
    `decode(ids, skip_special_tokens=...)`. Build with `from_file` or `from_json`."""

    def __init__(self, spec: dict):
        import numpy as np

        for key in ("truncation", "padding"):
            if spec.get(key) is not None:
                raise _refuse(f"'{key}'")
        post = spec.get("post_processor")
        if post is not None and post.get("type") not in ("ByteLevel", "TemplateProcessing"):
            raise _refuse(f"post_processor {post.get('type')!r}")
        model = spec.get("model") or {}
        if model.get("type", "BPE" if "merges" in model else None) != "BPE":  # the library reads a model without a type by its fields
            raise _refuse(f"model {model.get('type')!r}")
        for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(key) is not None:
                raise _refuse(f"BPE '{key}' {model[key]!r}")
        vocab: dict[str, int] = model.get("vocab") or {}
        n = len(vocab)
        ids = np.fromiter(vocab.values(), dtype=np.int64, count=n)
        if n == 0 or not np.array_equal(np.sort(ids), np.arange(n)):
            raise _refuse("a vocabulary whose ids are not 0..n-1")
        del ids

        # added tokens: ids as the library assigns them (the vocabulary's, else the next new one in the file's order)
        added: list[tuple[str, int, bool, bool]] = []  # content, id, special, normalized
        extra: list[str] = []
        seen: set[str] = set()
        for tok in spec.get("added_tokens") or []:
            content = tok["content"]
            for flag in ("lstrip", "rstrip", "single_word"):
                if tok.get(flag):
                    raise _refuse(f"added token {content!r} with {flag}=true")
            if not content or content in seen:
                raise _refuse(f"added token {content!r} (empty or repeated)")
            seen.add(content)
            tid = vocab.get(content)
            if tid is None:
                tid = n + len(extra)
                extra.append(content)
            added.append((content, tid, bool(tok.get("special")), bool(tok.get("normalized"))))
        self._n, self._n_model = n + len(extra), n

        # token strings: one UTF-8 blob, offsets; lookup by sorted str hashes
        strings = [""] * self._n
        for tok, i in vocab.items():
            strings[i] = tok
        strings[n:] = extra
        lens = np.fromiter((len(s.encode("utf-8", "surrogatepass")) for s in strings), dtype=np.int64, count=self._n)
        self._offsets = np.zeros(self._n + 1, dtype=np.int64)
        np.cumsum(lens, out=self._offsets[1:])
        del lens
        self._blob = "".join(strings).encode("utf-8", "surrogatepass")
        hashes = np.fromiter((hash(s) for s in strings), dtype=np.int64, count=self._n)
        del strings
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._hash_ids = hashes[order], order.astype(np.int32)
        del hashes, order
        self._hmv, self._hidmv, self._omv = _view(self._hashes, "q"), _view(self._hash_ids, "i"), _view(self._offsets, "q")
        self._special = np.zeros(self._n, dtype=np.uint8)
        for _, tid, special, _ in added:
            self._special[tid] = special
        self._special_mv = _view(self._special, "B")

        self._normalizer = _steps(spec.get("normalizer"), "normalizers", self._normalizer_step)
        self._raw_added = _AddedMatcher({c: i for c, i, _, normalized in added if not normalized}) if any(not a[3] for a in added) else None
        # normalized=true tokens are matched in the normalized text; one the normalizer would change reads back (decode) as changed: not implemented
        norm_added = {c: i for c, i, _, normalized in added if normalized}
        for c in norm_added:
            if self._normalize(c) != c:
                raise _refuse(f"added token {c!r} with normalized=true that the normalizer changes (to {self._normalize(c)!r})")
        self._norm_added = _AddedMatcher(norm_added) if norm_added else None
        self._pre = _steps(spec.get("pre_tokenizer"), "pretokenizers", self._pre_tokenizer_step)
        self._decoders = _steps(spec.get("decoder"), "decoders", self._decoder_step)

        # BPE model
        self._byte_fallback = bool(model.get("byte_fallback"))
        self._ignore_merges = bool(model.get("ignore_merges"))
        self._fuse_unk = bool(model.get("fuse_unk"))
        unk = model.get("unk_token")
        if unk is not None and unk not in vocab:
            raise _refuse(f"unk_token {unk!r} outside the vocabulary")
        self._unk = -1 if unk is None else vocab[unk]
        self._byte_ids = [vocab.get(f"<0x{b:02X}>", -1) for b in range(256)]
        self._merges(model.get("merges") or [], vocab)
        self._chars: dict[str, int] = {}
        self._cache: dict[str, list[int]] = {}
        self._pairs: dict[int, int] = {}

    def _merges(self, merges: list, vocab: dict[str, int]) -> None:
        """Sorted keys left << 32 | right, with each merge's rank (its index) and result id; a pair
        listed twice keeps its last rank, as the library's map does."""
        import numpy as np

        m = len(merges)
        keys = np.empty(m, dtype=np.int64)
        new = np.empty(m, dtype=np.int32)
        for r, pair in enumerate(merges):
            try:
                a, b = pair.split(" ") if isinstance(pair, str) else pair
                keys[r], new[r] = (vocab[a] << 32) | vocab[b], vocab[a + b]
            except (KeyError, TypeError, ValueError):
                raise EdgespecError(f"tokenizer.json: merge {pair!r} is not two tokens of the vocabulary whose join is one too") from None
        rank = np.arange(m, dtype=np.int32)
        # last occurrence of each key: unique over the reversed order
        keys, first = np.unique(keys[::-1], return_index=True)
        self._mkeys, self._mrank, self._mnew = keys, rank[::-1][first].copy(), new[::-1][first].copy()
        self._kmv, self._rmv, self._nmv = _view(keys, "q"), _view(self._mrank, "i"), _view(self._mnew, "i")

    # configuration -> steps

    def _normalizer_step(self, cfg: dict) -> list[Callable[[str], str]]:
        kind = cfg.get("type")
        if kind == "Prepend":
            pre = cfg["prepend"]
            return [lambda s: pre + s if s else s]
        if kind == "Replace":
            a, b = self._plain_pattern(cfg), cfg["content"]
            return [lambda s: s.replace(a, b)]
        raise _refuse(f"normalizer {kind!r}")

    def _pre_tokenizer_step(self, cfg: dict) -> list[Callable[[str], list[str]]]:
        kind = cfg.get("type")
        import regex

        if kind == "Digits":
            num = _set(r"\p{N}", _RUST_NOT_N)
            split = regex.compile(f"{num}|[^{num}]+" if cfg.get("individual_digits") else f"{num}+|[^{num}]+", regex.V1).findall
            return [split]
        if kind == "ByteLevel":
            if cfg.get("add_prefix_space"):
                raise _refuse("pre_tokenizer ByteLevel with add_prefix_space=true")
            table = str.maketrans({chr(b): c for b, c in enumerate(_byte_chars())})

            def to_bytes(s: str) -> list[str]:
                return [s.encode("utf-8").decode("latin-1").translate(table)]

            if not cfg.get("use_regex", True):
                return [to_bytes]
            L, N = _set(r"\p{L}", _ONIG_NOT_L), _set(r"\p{N}", _ONIG_NOT_N)
            # GPT-2's split; \s is White_Space in both engines; it covers every character
            gpt2 = regex.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?{L}+| ?{N}+| ?[^\s{L}{N}]+|\s+(?!\S)|\s+", regex.V1).findall
            return [gpt2, to_bytes]
        raise _refuse(f"pre_tokenizer {kind!r}")

    def _decoder_step(self, cfg: dict) -> list[Callable[[list[str]], list[str]]]:
        kind = cfg.get("type")
        if kind == "ByteLevel":
            chars = _byte_chars()
            table = str.maketrans({c: chr(b) for b, c in enumerate(chars)})
            other = re.compile("[^" + "".join(re.escape(c) for c in chars) + "]")

            # a token of byte characters stands for those bytes, any other for its UTF-8; all of them decoded lossily
            def byte_level(tokens: list[str]) -> list[str]:
                raw = b"".join(t.encode("utf-8", "surrogatepass") if other.search(t) else t.translate(table).encode("latin-1") for t in tokens)
                return [raw.decode("utf-8", "replace")]

            return [byte_level]
        if kind == "Replace":
            a, b = self._plain_pattern(cfg), cfg["content"]
            return [lambda tokens: [t.replace(a, b) for t in tokens]]
        if kind == "ByteFallback":
            return [_byte_fallback]
        if kind == "Fuse":
            return [lambda tokens: ["".join(tokens)]]
        if kind == "Strip":
            content, start, stop = cfg["content"], int(cfg.get("start", 0)), int(cfg.get("stop", 0))
            return [lambda tokens: [_strip(t, content, start, stop) for t in tokens]]
        raise _refuse(f"decoder {kind!r}")

    @staticmethod
    def _plain_pattern(cfg: dict) -> str:
        pattern = cfg.get("pattern") or {}
        if set(pattern) != {"String"} or not pattern["String"]:
            raise _refuse(f"{cfg.get('type')} with pattern {pattern!r} (only a non-empty plain string)")
        return pattern["String"]

    # public API

    @classmethod
    def from_json(cls, text: str | bytes) -> CompactTokenizer:
        """The tokenizer of a `tokenizer.json` text; EdgespecError when it is not JSON or of a
        shape not implemented."""
        spec = _parse(text)
        tk = cls(spec)
        del spec
        _release_freed_memory()
        return tk

    @classmethod
    def from_file(cls, path: str | Path) -> CompactTokenizer:
        """The tokenizer in a `tokenizer.json` file; EdgespecError naming the file when it is
        unreadable or not a tokenizer, UnsupportedTokenizer when it is of a shape not implemented."""
        try:
            spec = _parse(Path(path).read_bytes())  # the file's bytes freed here, its parse once built
            tk = cls(spec)
        except OSError as e:
            raise EdgespecError(f"cannot read tokenizer '{path}': {e.strerror}") from None
        except UnsupportedTokenizer as e:
            raise UnsupportedTokenizer(f"'{path}': {e}") from None
        except EdgespecError as e:
            raise EdgespecError(f"tokenizer '{path}' is not a tokenizer.json edgespec reads ({str(e)[:200]}); re-export the bundle") from None
        del spec
        _release_freed_memory()
        return tk

    @property
    def vocab_size(self) -> int:
        """Tokens with the added ones (the library's `get_vocab_size(with_added_tokens=True)`)."""
        return self._n

    def token_id(self, token: str) -> int | None:
        """The id of a token string, or None."""
        i = self._lookup(token)
        return None if i < 0 else i

    def encode(self, text: str) -> list[int]:
        """Token ids of text, no special tokens added (added tokens in it are matched whole).
        Text with a lone surrogate (not UTF-8; the library raises TypeError) is an EdgespecError."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise EdgespecError(f"text to encode is not valid Unicode: {text[e.start]!r} at character {e.start} (a lone surrogate)") from None
        out: list[int] = []
        for piece, tid in self._raw_added.split(text) if self._raw_added else ((text, -1),):
            if tid >= 0:
                out.append(tid)
                continue
            for step in self._normalizer:
                piece = step(piece)
            for sub, tid2 in self._norm_added.split(piece) if self._norm_added else ((piece, -1),):
                if tid2 >= 0:
                    out.append(tid2)
                    continue
                for word in self.pre_tokenize(sub):
                    out += self._word(word)
        return out

    def pre_tokenize(self, text: str) -> list[str]:
        """The words the pre-tokenizer makes of text (the library's `pre_tokenizer.pre_tokenize_str`, without offsets)."""
        words = [text]
        for step in self._pre:
            words = [w for word in words for w in step(word) if w]
        return words

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """The text of ids (ids past the vocabulary are left out, as the library does)."""
        o, blob, special = self._omv, self._blob, self._special_mv
        tokens = []
        for i in ids:
            if not 0 <= i < 1 << 32:
                raise OverflowError(f"token id {i} is not an unsigned 32-bit integer")  # as the library
            if i < self._n and not (skip_special and special[i]):
                tokens.append(blob[o[i] : o[i + 1]].decode("utf-8", "surrogatepass"))
        if not self._decoders:
            return " ".join(tokens)
        for step in self._decoders:
            tokens = step(tokens)
        return "".join(tokens)

    # BPE

    def _lookup(self, s: str) -> int:
        """The id of token string s, else -1: its hash's run in the sorted hashes, each checked in the blob."""
        h = hash(s)
        j = int(self._hashes.searchsorted(h))
        hmv, o, raw = self._hmv, self._omv, None
        while j < len(hmv) and hmv[j] == h:
            i = self._hidmv[j]
            raw = raw or s.encode("utf-8", "surrogatepass")
            if self._blob[o[i] : o[i + 1]] == raw:
                return i
            j += 1
        return -1

    def _char(self, c: str) -> int:
        """The model vocabulary's id of a character (added tokens outside it are not the model's), else -1."""
        i = self._chars.get(c)
        if i is None:
            if len(self._chars) >= 65536:
                self._chars.clear()
            i = self._lookup(c)
            i = self._chars[c] = i if i < self._n_model else -1
        return i

    def _merge(self, a: int, b: int) -> int:
        """Index of merge (a, b) in the sorted keys, else -1 (the last _CACHE_PAIRS found kept)."""
        k = (a << 32) | b
        j = self._pairs.get(k)
        if j is None:
            j = int(self._mkeys.searchsorted(k))
            j = j if j < len(self._kmv) and self._kmv[j] == k else -1
            if len(self._pairs) >= _CACHE_PAIRS:
                self._pairs.clear()
            self._pairs[k] = j
        return j

    def _word(self, word: str) -> list[int]:
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        if self._ignore_merges and 0 <= (i := self._lookup(word)) < self._n_model:
            ids = [i]
        else:
            ids = self._bpe(self._symbols(word))
        if len(word) <= _CACHE_CHARS:
            if len(self._cache) >= _CACHE_WORDS:
                self._cache.clear()
            self._cache[word] = ids
        return ids

    def _symbols(self, word: str) -> list[int]:
        """The library's BPE::merge_word before merging: one id per character; a character outside
        the vocabulary as its UTF-8 bytes' `<0xNN>` tokens (byte_fallback, when all exist), else
        the unknown token, added when a known character or the end follows (a run of them as one
        with fuse_unk), else left out."""
        out: list[int] = []
        unk = False  # an unknown token pending
        for c in word:
            i = self._char(c)
            if i >= 0:
                if unk:
                    out.append(self._unk)
                    unk = False
                out.append(i)
                continue
            if self._byte_fallback:
                fb = [self._byte_ids[b] for b in c.encode("utf-8", "surrogatepass")]
                if min(fb) >= 0:
                    out += fb
                    continue
            if self._unk >= 0:
                if unk and not self._fuse_unk:
                    out.append(self._unk)
                unk = True
        if unk:
            out.append(self._unk)
        return out

    def _bpe(self, ids: list[int]) -> list[int]:
        """The library's Word::merge_all: pop the lowest (rank, position); skip it when its
        symbol is gone or the pair there has changed; merge; push the pairs the new symbol makes.
        (The library skips an entry when the pair there no longer makes the entry's token: the
        same test, as a symbol only grows, and a longer pair's token is a longer string.)"""
        n = len(ids)
        if n < 2 or not len(self._mkeys):  # nothing to merge (a vocabulary without merges)
            return ids
        merge, rank, new = self._merge, self._rmv, self._nmv
        if n < 16:
            heap = [(rank[j], p, ids[p], ids[p + 1], new[j]) for p in range(n - 1) if (j := merge(ids[p], ids[p + 1])) >= 0]
        else:  # the first pairs looked up at once
            import numpy as np

            a = np.array(ids, dtype=np.int64)
            keys = (a[:-1] << 32) | a[1:]
            js = self._mkeys.searchsorted(keys)
            js[js == len(self._mkeys)] = 0
            ps = np.flatnonzero(self._mkeys[js] == keys)
            js = js[ps]
            heap = list(zip(self._mrank[js].tolist(), ps.tolist(), a[ps].tolist(), a[ps + 1].tolist(), self._mnew[js].tolist()))
        heapq.heapify(heap)
        prev, nxt, alive = list(range(-1, n - 1)), [*range(1, n), -1], [True] * n
        while heap:
            _, p, left, right, made = heapq.heappop(heap)
            q = nxt[p]
            if not alive[p] or q < 0 or ids[p] != left or ids[q] != right:
                continue
            ids[p], alive[q] = made, False
            nxt[p] = r = nxt[q]
            if r >= 0:
                prev[r] = p
            if (l := prev[p]) >= 0 and (j := merge(ids[l], made)) >= 0:
                heapq.heappush(heap, (rank[j], l, ids[l], made, new[j]))
            if r >= 0 and (j := merge(made, ids[r])) >= 0:
                heapq.heappush(heap, (rank[j], p, made, ids[r], new[j]))
        return [t for t, a in zip(ids, alive) if a]

    def _normalize(self, s: str) -> str:
        for step in self._normalizer:
            s = step(s)
        return s


def _parse(text: str | bytes) -> dict:
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise EdgespecError(f"tokenizer.json is not JSON ({e})") from None
    if not isinstance(spec, dict):
        raise EdgespecError("tokenizer.json is not a JSON object")
    return spec


def _release_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing):
    parsing Gemma 3's tokenizer.json makes ~200 MB of short-lived objects, and the pages they
    leave free in the heap otherwise stay resident (~50 MB after loading instead of ~21)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def _view(a, code: str) -> memoryview:
    """A memoryview of a numpy array: its items read as Python ints, faster than numpy's scalars."""
    return memoryview(a).cast("B").cast(code)


def _byte_fallback(tokens: list[str]) -> list[str]:
    """The library's ByteFallback decoder: runs of `<0xNN>` tokens become their bytes' text when
    those are UTF-8, else one U+FFFD per byte."""
    out: list[str] = []
    run = bytearray()
    for t in tokens:
        b = -1
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">") and re.fullmatch(r"\+?[0-9A-Fa-f]{1,2}", t[3:5]):
            b = int(t[3:5], 16)
        if b >= 0:
            run.append(b)
            continue
        if run:
            out += _flush(run)
        out.append(t)
    if run:
        out += _flush(run)
    return out


def _flush(run: bytearray) -> list[str]:
    try:
        text = [run.decode("utf-8")]
    except UnicodeDecodeError:
        text = ["\ufffd"] * len(run)
    run.clear()
    return text


def _strip(t: str, content: str, start: int, stop: int) -> str:
    """The library's Strip decoder: up to `start` leading and `stop` trailing `content` characters off."""
    a = 0
    while a < min(start, len(t)) and t[a] == content:
        a += 1
    b = len(t)
    while len(t) - b < stop and b > a and t[b - 1] == content:
        b -= 1
    return t[a:b]
