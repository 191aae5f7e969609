"""Tokenizers built from model files (GPT-2 style byte-level BPE, and SentencePiece BPE as
GGUF's `llama` model stores it), saved as a standard `tokenizer.json`.

The same file is read by the `tokenizers` library here and by ExecuTorch's
`pytorch-tokenizers` in the stock runner (and by the Java core in the app).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from edgespec.errors import EdgespecError

# GGUF token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
_SPECIAL_TYPES = (3, 4)


# the split of Llama 3's and Qwen2's tokenizers (GGUF `tokenizer.ggml.pre` llama-bpe, qwen2):
# GPT-4's pattern, numbers in runs of up to 3 digits (Llama 3) or one digit each (Qwen2/Qwen3)
_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}DIGITS| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def _pre_tokenizer(pre: str):
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    byte_level = pt.ByteLevel(add_prefix_space=False, use_regex=True)

    def split_then_bytes(digits: str):
        split = pt.Split(Regex(_SPLIT.replace("DIGITS", digits)), behavior="isolated", invert=False)
        return pt.Sequence([split, pt.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])

    table = {
        # SmolLM2 splits every digit on its own before byte-level BPE
        "smollm": lambda: pt.Sequence([pt.Digits(individual_digits=True), byte_level]),
        "gpt2": lambda: byte_level,
        "default": lambda: byte_level,
        "llama-bpe": lambda: split_then_bytes("{1,3}"),
        "qwen2": lambda: split_then_bytes(""),
    }
    if pre not in table:
        raise EdgespecError(f"unsupported pre-tokenizer '{pre}' (supported: {', '.join(table)})")
    return table[pre]()


def build_bpe_tokenizer_json(tokens: Sequence[str], merges: Iterable[str], token_types: Sequence[int], pre: str) -> str:
    """A `tokenizer.json` text for a GPT-2 style byte-level BPE vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = _pre_tokenizer(pre)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [tokens[i] for i, t in enumerate(token_types) if t in _SPECIAL_TYPES]
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tk.to_str()


SPACE = "\u2581"  # SentencePiece's visible space


def spm_merges(tokens: Sequence[str], scores: Sequence[float]) -> list[tuple[str, str]]:
    """The BPE merges equivalent to SentencePiece's BPE by scores: llama.cpp's `llm_tokenizer_spm`
    repeatedly joins the adjacent pair whose concatenation is the best-scoring piece (the
    leftmost pair on a tie). As merges: every split of every piece into two pieces, ranked by
    the joined piece's score (best first), splits of one piece by their parts' ids."""
    index = {tok: i for i, tok in enumerate(tokens)}
    ranked = []
    for i, tok in enumerate(tokens):
        splits = [(tok[:c], tok[c:]) for c in range(1, len(tok)) if tok[:c] in index and tok[c:] in index]
        ranked += [(-scores[i], index[a], index[b], a, b) for a, b in splits]
    ranked.sort()
    return [(a, b) for *_, a, b in ranked]


def build_spm_tokenizer_json(tokens: Sequence[str], scores: Sequence[float], token_types: Sequence[int], add_space_prefix: bool) -> str:
    """A `tokenizer.json` text for a SentencePiece BPE vocabulary (GGUF `tokenizer.ggml.model`
    llama: Llama 2, Mistral, Gemma), tokenizing as llama.cpp does: control and user-defined
    pieces matched in the raw text first, spaces written as U+2581 (one prepended when
    `add_space_prefix`), pieces merged by score, characters outside the vocabulary as their
    UTF-8 bytes (`<0xNN>` pieces)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    vocab = {tok: i for i, tok in enumerate(tokens)}
    unk = next((tokens[i] for i, t in enumerate(token_types) if t == 2), None)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=spm_merges(tokens, scores), unk_token=unk, fuse_unk=True, byte_fallback=True))
    tk.normalizer = normalizers.Sequence([*([normalizers.Prepend(SPACE)] if add_space_prefix else []), normalizers.Replace(" ", SPACE)])
    tk.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(), *([decoders.Strip(" ", 1, 0)] if add_space_prefix else [])]
    )
    # control pieces are special (skipped when decoding); user-defined ones (Gemma's HTML tags,
    # runs of spaces, tabs and newlines) are text
    tk.add_tokens([AddedToken(tokens[i], special=t == 3, normalized=False) for i, t in enumerate(token_types) if t in _SPECIAL_TYPES])
    return tk.to_str()


class _Library:
    """The `tokenizers` library behind CompactTokenizer's three calls: for the tokenizer.json
    shapes CompactTokenizer does not implement (Llama 3's and Qwen2's `Split` pre-tokenizer)."""

    def __init__(self, tk):
        self.tk = tk

    @property
    def vocab_size(self) -> int:
        return self.tk.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tk.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.tk.decode(list(ids), skip_special_tokens=skip_special)


@dataclass
class Tokenizer:
    """Encode/decode plus the model's chat template.

    The tokens and merges are held by `edgespec.models.compact_tokenizer.CompactTokenizer`
    (flat arrays: 21 MB resident for Gemma 3's 262k tokens where the `tokenizers` library holds
    290 MB; the same ids and text, tests/test_compact_tokenizer.py); a tokenizer.json of a shape
    it does not implement is read by the library instead."""

    _tk: object  # CompactTokenizer, or _Library
    chat_template: str | None = None
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    add_bos: bool = False

    @classmethod
    def from_json(cls, text: str, **meta) -> Tokenizer:
        from edgespec.models.compact_tokenizer import CompactTokenizer, UnsupportedTokenizer

        try:
            return cls(CompactTokenizer.from_json(text), **meta)
        except UnsupportedTokenizer:
            from tokenizers import Tokenizer as HFTokenizer

            return cls(_Library(HFTokenizer.from_str(text)), **meta)

    @classmethod
    def from_file(cls, path, **meta) -> Tokenizer:
        """The tokenizer in a `tokenizer.json` file; EdgespecError naming the file when it is
        unreadable or not a tokenizer."""
        from edgespec.models.compact_tokenizer import CompactTokenizer, UnsupportedTokenizer

        try:
            return cls(CompactTokenizer.from_file(path), **meta)
        except UnsupportedTokenizer:
            pass  # a shape the library reads
        from tokenizers import Tokenizer as HFTokenizer

        try:
            # read by the library itself: from a Python string, Gemma 3's 262k-token file took 80 MB more (371 vs 290 MB)
            return cls(_Library(HFTokenizer.from_file(str(path))), **meta)
        except Exception as e:  # the tokenizers library raises plain Exception for a file it cannot parse
            raise EdgespecError(f"tokenizer '{path}' is not a tokenizer.json the tokenizers library reads ({str(e)[:200]}); re-export the bundle") from None

    @property
    def vocab_size(self) -> int:
        return self._tk.vocab_size

    def encode(self, text: str) -> list[int]:
        ids = self._tk.encode(text)
        if self.add_bos and self.bos_id is not None:
            ids = [self.bos_id, *ids]
        return ids

    def encode_continuation(self, text: str) -> list[int]:
        """Ids of text that continues a sequence already begun (never a BOS)."""
        return self._tk.encode(text)

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self._tk.decode(ids, skip_special)

    def apply_chat_template(self, user_text: str) -> str:
        """The prompt text for one user turn, ending where the assistant's answer starts."""
        return self.render_chat([{"role": "user", "content": user_text}], add_generation_prompt=True)

    def render_chat(self, messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
        """A conversation (dicts of `role` and `content`) in the model's chat template; with
        add_generation_prompt, ending where the assistant's next answer starts."""
        if not self.chat_template:
            raise EdgespecError("this model has no chat template; use --no-chat-template")
        return _compiled_template(self.chat_template).render(messages=list(messages), add_generation_prompt=add_generation_prompt, bos_token="", eos_token="")


@functools.lru_cache(maxsize=4)
def _compiled_template(source: str):
    """A chat template compiled once (Jinja, sandboxed), not once per prompt."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)


def check_text(text: str, what: str = "the prompt") -> str:
    """text, or an EdgespecError when it is not valid Unicode: a lone surrogate, from a JSON
    escape such as \\ud800 or from bytes that are not UTF-8 (Python decodes those in argv and
    in files read with errors="surrogateescape" as \\udc80-\\udcff), which no tokenizer takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise EdgespecError(
            f"{what} is not valid text: {text[e.start]!r} at character {e.start} (bytes that are not UTF-8, or a lone surrogate escape); give it as UTF-8 text"
        ) from None
    return text


def encode_prompt(tokenizer: Tokenizer, text: str, chat_template: bool) -> list[int]:
    """Token ids of a user prompt: in the model's chat template when `chat_template` is set and
    the tokenizer has one, else the raw text (the recipe's `model.chat_template`, or
    --no-chat-template). An empty prompt, or one that is not valid text, is an EdgespecError."""
    if not check_text(text).strip():
        raise EdgespecError("the prompt is empty")
    return tokenizer.encode(tokenizer.apply_chat_template(text) if chat_template and tokenizer.chat_template else text)


class StreamDecoder:
    """Turns a growing list of ids into text pieces, holding back incomplete UTF-8."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = 0

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        piece, self.emitted = text[self.emitted :], len(text)
        return piece
