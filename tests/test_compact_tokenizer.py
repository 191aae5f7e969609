"""`edgespec.models.compact_tokenizer.CompactTokenizer` against the `tokenizers` library: the
same ids from `encode` and the same text from `decode` (skipping special tokens and not).

Hermetic: small tokenizer.json files made here with the library (byte-level BPE trained on a
few lines, SentencePiece-style BPE from `build_spm_tokenizer_json`, and the other options the
module implements), and the configurations it must refuse. Slow: the real SmolLM2-135M and
Gemma 3 270M tokenizers (as edgespec builds them from the embedded GGUF files) on the
tokenizer-agreement corpus (`edgespec.corpus.varied_text`), the Android core's unicode corpus,
every code point, and random id sequences."""

from __future__ import annotations

import json
import random

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from edgespec.errors import EdgespecError
from edgespec.models.compact_tokenizer import CompactTokenizer
from edgespec.models.tokenizer import build_spm_tokenizer_json

TEXTS = [
    "",
    " ",
    "Hello, world! It's 2024 and we've 3.14159 reasons they'll say I'd go.",
    "  leading and trailing spaces   ",
    "tabs\tand\nnew\r\nlines\n\n\n  \n",
    "Größenwahn über alles — naïve café, déjà vu",
    "日本語のテキストと中文和한국어 mixed with ASCII",
    "emoji 🌸🚀👩‍💻 and ½ ² ⅷ ٣ ໓ numbers 12345678901234",
    "Bonjour\u00a0! 10\u00a0€ «\u00a0x\u00a0» thin\u2009space\u3000ideographic\u2028line\u2029para\u0085nel",
    "def f(x):\n    return {'a': [1, 2, 3]} if x else None  # comment",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|><|endoftext|>x<|im_start",
    "\x00\x01\x1c\x1f\x7f control characters \ufeff\u200b\u200d",
    "<start_of_turn>user\n<b>bold</b>   three spaces<end_of_turn>",
    "the quick brown fox jumps over the lazy dog THE QUICK BROWN FOX",
]


def _compare(text_json: str, texts: list[str], id_lists: list[list[int]] = ()) -> list[tuple]:
    """The disagreements of CompactTokenizer with the library over texts (encode, and decode of
    the library's ids) and id lists (decode), both ways of skipping special tokens."""
    lib, ours = Tokenizer.from_str(text_json), CompactTokenizer.from_json(text_json)
    assert ours.vocab_size == lib.get_vocab_size(with_added_tokens=True)
    bad, id_lists = [], list(id_lists)
    for t in texts:
        theirs = lib.encode(t, add_special_tokens=False).ids
        if ours.encode(t) != theirs:
            bad.append(("encode", t, ours.encode(t), theirs))
        id_lists.append(theirs)
    for ids in id_lists:
        for skip in (True, False):
            if ours.decode(ids, skip) != lib.decode(ids, skip_special_tokens=skip):
                bad.append(("decode", ids, skip, ours.decode(ids, skip), lib.decode(ids, skip_special_tokens=skip)))
    return bad


def _random_ids(vocab_size: int, n: int, seed: int = 0, favour: list[int] = ()) -> list[list[int]]:
    """n random id lists of up to 40 ids (a few past the vocabulary), each id from `favour` half the time when given."""
    rng = random.Random(seed)
    return [[rng.choice(favour) if favour and rng.random() < 0.5 else rng.randrange(vocab_size + 2) for _ in range(rng.randrange(41))] for _ in range(n)]


def _random_texts(n: int, pieces: list[str], seed: int = 0) -> list[str]:
    """n texts of pieces, words, spaces, newlines and random code points."""
    rng = random.Random(seed)
    points = [(0x20, 0x7F), (0x80, 0x800), (0x800, 0x3000), (0x3000, 0xD800), (0xE000, 0x30000), (0, 0x20)]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(1, 25)):
            r = rng.random()
            if r < 0.2:
                parts.append(rng.choice(pieces))
            elif r < 0.45:
                parts.append(chr(rng.randrange(*rng.choice(points))))
            elif r < 0.6:
                parts.append(" " * rng.randrange(1, 6) + "\n" * rng.randrange(0, 3))
            else:
                parts.append(rng.choice(TEXTS)[: rng.randrange(1, 20)])
        out.append("".join(parts))
    return out


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_level(pre=None, vocab_size: int = 700) -> Tokenizer:
    """A byte-level BPE trained on TEXTS, pre-tokenized as SmolLM2's (digits one by one, then GPT-2's split), with its special tokens."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre or pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=alphabet, show_progress=False)
    tk.train_from_iterator(TEXTS * 3, trainer)
    return tk


def test_byte_level_bpe_as_smollm2():
    tk = _byte_level()
    text_json = tk.to_str()
    spec = json.loads(text_json)
    assert len(spec["model"]["merges"]) > 300 and spec["pre_tokenizer"]["type"] == "Sequence"
    texts = TEXTS + _random_texts(300, SPECIALS)
    assert not _compare(text_json, texts, _random_ids(tk.get_vocab_size(), 300))


def test_a_vocabulary_without_merges_encodes_long_words_symbol_by_symbol():
    """No merges at all (the fuzz test's byte tokenizer): a word of many symbols, which looks its
    first pairs up at once, is its symbols."""
    from edgespec.models.tokenizer import build_bpe_tokenizer_json

    tokens = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 173)] + [chr(c) for c in range(174, 256)] + [chr(c) for c in range(256, 324)]
    text_json = build_bpe_tokenizer_json(tokens, [], [1] * len(tokens), pre="gpt2")
    assert not _compare(text_json, ["\U000102d1\U0001239a\U0001239a\U0001b2fc", "abcdefghijklmnopqrstuvwxyz" * 3, "x"])


def test_byte_level_variants():
    """Digits in runs, ByteLevel without the GPT-2 split, no decoder, tokens added outside the vocabulary."""
    for pre in (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False), pre_tokenizers.ByteLevel(add_prefix_space=False)]),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ):
        tk = _byte_level(pre)
        assert not _compare(tk.to_str(), TEXTS + _random_texts(100, SPECIALS, seed=1))
    tk = _byte_level()
    tk.decoder = None
    n = tk.get_vocab_size()
    tk.add_special_tokens([AddedToken("<new special>", special=True, normalized=False)])
    tk.add_tokens([AddedToken("not in vocab", normalized=False)])
    assert tk.get_vocab_size(with_added_tokens=True) == n + 2
    texts = [*TEXTS, "a<new special>b not in vocab not in vocabulary"]
    assert not _compare(tk.to_str(), texts, _random_ids(n + 2, 100, seed=2, favour=[n, n + 1, 0, 1]))


def _spm_vocab(seed: int = 0) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-like vocabulary as a GGUF stores it: control and user-defined pieces,
    the 256 byte pieces, characters, and pieces of words scored at random."""
    rng = random.Random(seed)
    words = ["▁the", "▁quick", "▁brown", "▁fox", "ing", "▁über", "▁café", "日本語", "▁der", "er", "▁Hello", "▁world", "!!", "▁▁", "▁\n"]
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "  ", "   ", "\n\n", "<b>", "</b>"]
    types = [3, 3, 3, 2, 3, 3, 4, 4, 4, 4, 4]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    pieces = sorted({w[i:j] for w in words for i in range(len(w)) for j in range(i + 1, len(w) + 1)} | set("abcdefghijklmnopqrstuvwxyzTHEQ▁,.'"))
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + [-rng.random() * 10 for _ in pieces]
    return tokens, scores, types


@pytest.mark.parametrize("add_space_prefix", [False, True])
def test_sentencepiece_bpe_as_gemma3(add_space_prefix):
    """SentencePiece BPE as edgespec builds it from a GGUF (Gemma 3 without the space prefix,
    Llama 2 with it): byte fallback, control tokens special, user-defined ones text."""
    tokens, scores, types = _spm_vocab()
    text_json = build_spm_tokenizer_json(tokens, scores, types, add_space_prefix=add_space_prefix)
    spec = json.loads(text_json)
    assert spec["model"]["byte_fallback"] and {a["special"] for a in spec["added_tokens"]} == {True, False}
    texts = TEXTS + _random_texts(300, tokens[:11] + tokens[267:], seed=3)
    assert not _compare(text_json, texts, _random_ids(len(tokens), 300, seed=4, favour=list(range(11, 267))))


def _small_bpe(**kw) -> Tokenizer:
    vocab = {c: i for i, c in enumerate(["<unk>", *"abcdehlorw▁", "ab", "abc", "he", "ll", "llo", "hello", "▁w", "wor", "lo"])}
    merges = [("a", "b"), ("ab", "c"), ("h", "e"), ("l", "l"), ("ll", "o"), ("▁", "w"), ("l", "o")]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, **kw))
    tk.normalizer = normalizers.Replace(" ", "▁")
    return tk


def test_unknown_tokens_fused_or_not_ignore_merges_and_merges_listed_twice():
    texts = ["hello world", "abcxyzab", "zz", "xhex", "abc abd", "hellohello", "wor", "", "héllo ßß ab"]
    for kw in ({"unk_token": "<unk>", "fuse_unk": True}, {"unk_token": "<unk>", "fuse_unk": False}, {}, {"ignore_merges": True}):
        assert not _compare(_small_bpe(**kw).to_str(), texts), kw
    spec = json.loads(_small_bpe().to_str())
    for merges in ([["l", "l"], ["l", "o"], ["l", "l"]], [["l", "o"], ["l", "l"], ["l", "o"]], ["a b", "ab c", "l o", "l l", "ll o"]):
        spec["model"]["merges"] = merges  # a pair listed twice ranks by its last place, as the library's map keeps it
        assert not _compare(json.dumps(spec), ["llo", "lllo abc", "hello llllo"]), merges
    spec["model"]["merges"] = ["a b c"]
    with pytest.raises(EdgespecError, match="merge 'a b c'"):
        CompactTokenizer.from_json(json.dumps(spec))


def test_added_tokens_normalized_or_not_prepend_and_template_post_processor():
    """Tokens added with normalized=true are matched in the normalized text ("a▁b" in "a b"
    once spaces are U+2581), the others in the raw text, the normalizer's Prepend applied to
    each piece between them; TemplateProcessing adds nothing when no special tokens are asked
    for. A normalized=true token the normalizer would change ("he llo": the library decodes it
    as "he▁llo") is refused."""
    texts = ["a b", "x he llo a bd e", "<s>he llo<s>", "abab a b", "d e he llod e", " d e", "he  llo", "hello", "a▁b", "<s> <s>d e"]
    for prepend in (False, True):
        tk = _small_bpe(unk_token="<unk>")
        if prepend:
            tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
            tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        else:
            tk.add_tokens([AddedToken("a▁b", normalized=True), AddedToken("ll", normalized=True), AddedToken("▁he", normalized=True)])
            tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse()])
        tk.add_tokens([AddedToken("d e", normalized=False)])
        tk.add_special_tokens([AddedToken("<s>", special=True, normalized=False)])
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tk.token_to_id("<s>"))])
        assert not _compare(tk.to_str(), texts, _random_ids(tk.get_vocab_size(), 50, seed=5))
    tk.add_tokens([AddedToken("he llo", normalized=True)])
    with pytest.raises(EdgespecError, match="normalized=true"):
        CompactTokenizer.from_json(tk.to_str())


def _mutate(path: str, value):
    """The trained byte-level tokenizer.json with one field (dotted path; an int for a list index) set."""
    spec = json.loads(_byte_level().to_str())
    *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = spec
    for k in parents:
        node = node[k]
    node[last] = value
    return json.dumps(spec)


@pytest.mark.parametrize(
    "path, value, named",
    [
        ("added_tokens.1.lstrip", True, "lstrip"),
        ("added_tokens.1.rstrip", True, "rstrip"),
        ("added_tokens.2.single_word", True, "single_word"),
        ("normalizer", {"type": "NFKC"}, "NFKC"),
        ("normalizer", {"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}, "Regex"),
        ("pre_tokenizer", {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}, "Metaspace"),
        ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": False}, "Split"),
        ("pre_tokenizer.pretokenizers.1.add_prefix_space", True, "add_prefix_space"),
        ("model.type", "WordPiece", "WordPiece"),
        ("model.dropout", 0.1, "dropout"),
        ("model.continuing_subword_prefix", "##", "continuing_subword_prefix"),
        ("decoder", {"type": "WordPiece", "prefix": "##", "cleanup": True}, "WordPiece"),
        ("truncation", {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}, "truncation"),
        ("padding", {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0, "pad_type_id": 0, "pad_token": "x"}, "padding"),
        ("post_processor", {"type": "BertProcessing", "sep": ["<|im_end|>", 2], "cls": ["<|im_start|>", 1]}, "BertProcessing"),
    ],
)
def test_refuses_what_it_does_not_implement(path, value, named):
    with pytest.raises(EdgespecError, match=named):
        CompactTokenizer.from_json(_mutate(path, value))


def test_file_errors(tmp_path):
    with pytest.raises(EdgespecError, match="cannot read tokenizer"):
        CompactTokenizer.from_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(EdgespecError, match="bad.json.*not JSON"):
        CompactTokenizer.from_file(tmp_path / "bad.json")
    (tmp_path / "ok.json").write_text(_byte_level().to_str())
    assert (
        CompactTokenizer.from_file(tmp_path / "ok.json").encode("<|im_start|>hi") == Tokenizer.from_file(str(tmp_path / "ok.json")).encode("<|im_start|>hi").ids
    )


def test_invalid_input_fails_as_the_library_does_or_says_why():
    text_json = _byte_level().to_str()
    lib, ours = Tokenizer.from_str(text_json), CompactTokenizer.from_json(text_json)
    with pytest.raises(TypeError):
        lib.encode("a\ud800b")
    with pytest.raises(EdgespecError, match="lone surrogate"):
        ours.encode("a\ud800b")
    for ids in ([-1], [1 << 32]):
        with pytest.raises(OverflowError):
            lib.decode(ids)
        with pytest.raises(OverflowError):
            ours.decode(ids)


# the real tokenizers


@pytest.fixture(scope="module")
def real_json(tmp_path_factory):
    """name -> tokenizer.json path, built from the embedded GGUF file the first time it is asked for."""
    made: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in made:
            from gguf import GGUFReader

            from edgespec.models.gguf import tokenizer_json
            from edgespec.models.load import embedded_path

            gguf = embedded_path(name)
            path = tmp_path_factory.mktemp("tok") / f"{name}.json"
            path.write_text(tokenizer_json(GGUFReader(gguf), gguf))
            made[name] = str(path)
        return made[name]

    return get


REAL = ["smollm2-135m-instruct", "gemma-3-270m"]


def _corpora() -> dict[str, list[str]]:
    from tests.test_android_core import CORPUS

    from edgespec.corpus.varied_text import varied_lines

    return {"varied_text": [t for lines in varied_lines(60).values() for t in lines], "android_core": list(CORPUS)}


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_real_tokenizer_agrees_on_the_corpora(real_json, name):
    """0 disagreements on the tokenizer-agreement corpus (353 texts), the Android core's
    unicode corpus, and 500 random id sequences (for Gemma 3 half their ids byte tokens)."""
    path = real_json(name)
    lib, ours = Tokenizer.from_file(path), CompactTokenizer.from_file(path)
    assert ours.vocab_size == lib.get_vocab_size(with_added_tokens=True)
    text_json = open(path, encoding="utf-8").read()
    bytes_ = [i for i in (ours.token_id(f"<0x{b:02X}>") for b in range(256)) if i is not None]
    for corpus, texts in _corpora().items():
        assert len(texts) > (300 if corpus == "varied_text" else 40)
        bad = _compare(text_json, texts)
        assert not bad, f"{name} {corpus}: {len(bad)} disagreements, e.g. {bad[:2]!r}"
    bad = _compare(text_json, [], _random_ids(ours.vocab_size, 500, seed=6, favour=bytes_))
    assert not bad, f"{name} random ids: {len(bad)} disagreements, e.g. {bad[:2]!r}"


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_real_tokenizer_agrees_on_every_code_point(real_json, name):
    """Every code point but the surrogates (after a space, doubled, before a letter), encoded in
    chunks of 2,000: every character's byte-level merges (SmolLM2) or piece or byte fallback
    (Gemma 3). (The character classes in more contexts: the next test.)"""
    path = real_json(name)
    lib, ours = Tokenizer.from_file(path), CompactTokenizer.from_file(path)
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    bad = []
    for k in range(0, len(points), 2000):
        text = "".join(f" {c}{c}a" for c in map(chr, points[k : k + 2000]))
        if ours.encode(text) != lib.encode(text, add_special_tokens=False).ids:
            bad.append(hex(points[k]))
    assert not bad, f"{name}: {len(bad)} chunks of 2,000 code points disagree, starting at {bad[:10]}"


@pytest.mark.slow
def test_gpt2_split_and_digits_classes_on_every_code_point():
    """The pre-tokenizer's words themselves (SmolLM2's: Digits then ByteLevel's GPT-2 split)
    for every code point: the character classes cut to the library's Unicode versions."""
    tk = _byte_level()
    ours = CompactTokenizer.from_json(tk.to_str())
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    bad = []
    for k in range(0, len(points), 4000):
        text = "".join(f"a{c}b {c}1{c}{c} x" for c in map(chr, points[k : k + 4000]))
        if ours.pre_tokenize(text) != [w for w, _ in tk.pre_tokenizer.pre_tokenize_str(text)]:
            bad.append(hex(points[k]))
    assert not bad, f"{len(bad)} chunks of 4,000 code points split differently, starting at {bad[:10]}"
