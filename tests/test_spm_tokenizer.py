"""SentencePiece BPE vocabularies (GGUF `tokenizer.ggml.model` llama: Llama 2, Mistral, Gemma)
as edgespec's tokenizer.json: the same ids as SentencePiece itself, for a small BPE model
trained here with byte fallback, with and without the dummy space prefix, user-defined pieces
included. (Against llama.cpp on the real Gemma 3 file: bench/tokenizer_agreement.py.)"""

import io
from pathlib import Path

import pytest

from edgespec.models.tokenizer import SPACE, Tokenizer, build_spm_tokenizer_json, spm_merges

spm = pytest.importorskip("sentencepiece")  # executorch's pytorch-tokenizers brings it

PROSE = Path(__file__).resolve().parent.parent / "sdk" / "edgespec" / "corpus" / "heldout" / "prose.txt"
# (not a run of spaces, as Gemma has: SentencePiece matches user-defined pieces after writing
# spaces as U+2581, llama.cpp in the raw text; edgespec follows llama.cpp, the file's runtime)
USER_DEFINED = ["<b>", "</b>", "\n\n"]
TEXTS = [
    "The kettle boiled while the rain kept falling on the roof.",
    "Numbers like 1234 and 56.78, punctuation!? and CAPITALS.",
    "tabs\tand  double spaces   and\n\nparagraphs",
    "unseen letters: żółć, 日本語, émoji 🙂 — byte fallback",
    "<b>bold</b> text",
    " leading space and trailing space ",
]


def _trained(add_dummy_prefix: bool):
    model = io.BytesIO()
    lines = [p for p in PROSE.read_text().splitlines() if p.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=700,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        user_defined_symbols=USER_DEFINED,
        add_dummy_prefix=add_dummy_prefix,
        normalization_rule_name="identity",  # llama.cpp normalizes nothing
        remove_extra_whitespaces=False,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def _gguf_vocab(sp):
    """The vocabulary as a GGUF file stores it: pieces, scores, llama.cpp's token types."""
    kinds = ((sp.is_unknown, 2), (sp.is_control, 3), (sp.is_byte, 6))
    types = []
    for i in range(sp.get_piece_size()):
        t = next((k for test, k in kinds if test(i)), 4 if sp.id_to_piece(i) in USER_DEFINED else 1)
        types.append(t)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())], [sp.get_score(i) for i in range(sp.get_piece_size())], types


@pytest.mark.parametrize("prefix", [False, True], ids=["no-prefix", "space-prefix"])
def test_spm_vocabulary_tokenizes_as_sentencepiece(prefix):
    sp = _trained(prefix)
    tokens, scores, types = _gguf_vocab(sp)
    tk = Tokenizer.from_json(build_spm_tokenizer_json(tokens, scores, types, add_space_prefix=prefix))
    for text in TEXTS:
        if prefix and any(u in text for u in USER_DEFINED):
            continue  # llama.cpp (the reference here) prefixes a space after each user-defined piece too; SentencePiece once
        assert tk.encode_continuation(text) == sp.encode(text), text
        assert tk.decode(sp.encode(text)) == text, text


def test_user_defined_pieces_are_text_and_control_pieces_special():
    sp = _trained(False)
    tokens, scores, types = _gguf_vocab(sp)
    tk = Tokenizer.from_json(build_spm_tokenizer_json(tokens, scores, types, add_space_prefix=False))
    ids = tk.encode_continuation("<s>x<b>y</b>")
    assert ids[0] == sp.piece_to_id("<s>") and sp.piece_to_id("<b>") in ids  # both matched in the raw text
    assert tk.decode(ids) == "x<b>y</b>"  # the control piece is skipped, the user-defined ones kept


def test_merges_rank_pieces_by_score():
    tokens = ["a", "b", "c", "ab", "bc", "abc"]
    scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0]
    # bc scores best, then ab; abc = a + bc or ab + c, after both
    assert spm_merges(tokens, scores) == [("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]
    tk = Tokenizer.from_json(build_spm_tokenizer_json(tokens + ["<0x20>"], scores + [0.0], [1] * 6 + [6], add_space_prefix=False))
    assert tk.encode_continuation("abc") == [5] and tk.encode_continuation("abab") == [3, 3]
    assert SPACE not in "".join(tokens)


def _gguf_with_vocabulary(path, model: str, tokens, scores, types, add_space_prefix: bool):
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return gguf.GGUFReader(str(path))


def test_gguf_sentencepiece_tokenizer_is_read_from_the_file(tmp_path):
    from edgespec.errors import EdgespecError
    from edgespec.models.gguf import tokenizer_json

    sp = _trained(False)
    vocab = _gguf_vocab(sp)
    reader = _gguf_with_vocabulary(tmp_path / "spm.gguf", "llama", *vocab, add_space_prefix=False)
    tk = Tokenizer.from_json(tokenizer_json(reader))
    assert [tk.encode_continuation(t) for t in TEXTS] == [sp.encode(t) for t in TEXTS]
    reader = _gguf_with_vocabulary(tmp_path / "bert.gguf", "bert", *vocab, add_space_prefix=False)
    with pytest.raises(EdgespecError, match="unsupported tokenizer 'bert' \\(supported: gpt2, llama\\)"):
        tokenizer_json(reader, tmp_path / "bert.gguf")
