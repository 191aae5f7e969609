from pathlib import Path

import pytest

from edgespec.config import QuantConfig, Recipe, from_dict, load_recipe, recipe_to_yaml
from edgespec.errors import EdgespecError

ROOT = Path(__file__).resolve().parents[1]


def test_default_recipe_file_is_the_builtin_default():
    assert load_recipe(ROOT / "recipes" / "smollm2-135m.yaml") == Recipe()
    assert load_recipe(None) == Recipe()


def test_yaml_round_trip():
    r = Recipe().replace(quant={"scheme": "fp32", "group_size": 64}, model={"max_seq_len": 256})
    assert from_dict(Recipe, __import__("yaml").safe_load(recipe_to_yaml(r))) == r


@pytest.mark.parametrize(
    "data, path",
    [
        ({"quant": {"sheme": "8da4w"}}, "quant.sheme"),
        ({"modle": {}}, "modle"),
        ({"quant": {"scheme": "int3"}}, "quant.scheme"),
        ({"quant": {"group_size": 30}}, "quant.group_size"),
        ({"quant": {"group_size": "32"}}, "quant.group_size"),
        ({"model": {"max_seq_len": 4}}, "model.max_seq_len"),
        ({"model": {"chat_template": "yes"}}, "model.chat_template"),
        ({"quant": {"embedding_bits": 3}}, "quant.embedding_bits"),
        ({"model": []}, "model"),
    ],
)
def test_bad_fields_name_the_field(data, path):
    with pytest.raises(EdgespecError, match=f"'{path}'"):
        from_dict(Recipe, data)


def test_configs_are_frozen():
    with pytest.raises(Exception):
        QuantConfig().scheme = "fp32"


def test_missing_and_invalid_yaml(tmp_path):
    with pytest.raises(EdgespecError, match="not found"):
        load_recipe(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("quant: [unclosed")
    with pytest.raises(EdgespecError, match="not valid YAML"):
        load_recipe(bad)


def test_every_shipped_recipe_loads_and_names_existing_stream_weights():
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        recipe = load_recipe(path)
        if recipe.streams.weights:
            shipped = ROOT / "sdk" / "edgespec" / "weights" / recipe.streams.weights
            assert shipped.is_file() or (ROOT / recipe.streams.weights).is_file(), path
