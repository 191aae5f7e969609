"""The one prompt-to-ids rule (`encode_prompt`) and the recipe's `model.chat_template` reaching
training data and the normalizer search's calibration prompts."""

import json
import shutil

import pytest

from edgespec.errors import EdgespecError
from edgespec.models.tokenizer import Tokenizer, encode_prompt

TEMPLATE = "<|user|>{{ messages[0]['content'] }}<|assistant|>"


@pytest.fixture(scope="module")
def chat_hf_dir(tiny_hf_dir, tmp_path_factory):
    """The tiny byte-level model with a chat template."""
    d = tmp_path_factory.mktemp("tiny_chat")
    for f in tiny_hf_dir.iterdir():
        shutil.copy(f, d / f.name)
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return d


@pytest.fixture(scope="module")
def chat_tokenizer(chat_hf_dir):
    return Tokenizer.from_file(chat_hf_dir / "tokenizer.json", chat_template=TEMPLATE)


def test_encode_prompt_wraps_in_the_template_only_when_asked_and_present(chat_tokenizer):
    raw = chat_tokenizer.encode("hello")
    wrapped = encode_prompt(chat_tokenizer, "hello", True)
    assert wrapped == chat_tokenizer.encode("<|user|>hello<|assistant|>") != raw
    assert encode_prompt(chat_tokenizer, "hello", False) == raw
    plain = Tokenizer(chat_tokenizer._tk)  # no template: the raw text either way
    assert encode_prompt(plain, "hello", True) == raw
    with pytest.raises(EdgespecError, match="the prompt is empty"):
        encode_prompt(chat_tokenizer, " \n", False)


@pytest.mark.parametrize("chat_template", [False, True])
def test_the_recipes_chat_template_reaches_training_data(chat_hf_dir, chat_tokenizer, tmp_path, monkeypatch, chat_template):
    from edgespec.config import load_recipe
    from edgespec.speculative import train

    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "hello", "response": "world"}) + "\n")
    overrides = [f"model.source={chat_hf_dir}", "model.max_seq_len=256", f"model.chat_template={str(chat_template).lower()}"]
    recipe = load_recipe(None, overrides + [f"train.data={data}", f"train.out_dir={tmp_path / 'run'}", "train.seq_len=64"])
    seen = []

    class Stop(Exception):
        pass

    def spy(*args, **kwargs):  # the real parsing, then stop: what training would see
        seen.extend(load_examples(*args, **kwargs))
        raise Stop

    load_examples = train.load_examples
    monkeypatch.setattr(train, "load_examples", spy)
    with pytest.raises(Stop):
        train.train_from_recipe(recipe)
    prompt = seen[0].tokens[: seen[0].n_prompt]
    assert prompt == encode_prompt(chat_tokenizer, "hello", chat_template)
    assert (prompt[: len(chat_tokenizer.encode("<|user|>"))] == chat_tokenizer.encode("<|user|>")) == chat_template


@pytest.mark.parametrize("chat_template", [False, True])
def test_normsearch_calibrates_on_prompts_as_the_recipe_encodes_them(tiny_model, chat_template):
    from edgespec.config import NumericsConfig
    from edgespec.numerics.search import run_normsearch

    class Tok:  # records what is encoded; ids fit the tiny model
        chat_template = TEMPLATE
        texts = []

        def apply_chat_template(self, text):
            return f"<|user|>{text}<|assistant|>"

        def encode(self, text):
            self.texts.append(text)
            return [ord(c) % 97 for c in text[:32]]

    tok = Tok()
    run_normsearch(tiny_model, tok, NumericsConfig(calibration_prompts=2, heldout_prompts=1), chat_template)
    assert len(tok.texts) == 3 and all(t.startswith("<|user|>") == chat_template for t in tok.texts)
