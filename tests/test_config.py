from pathlib import Path

import pytest

from edgespec.config import SUITE_NAMES, GatesConfig, QuantConfig, Recipe, TrainConfig, ValidateConfig, from_dict, load_recipe, recipe_to_yaml
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
        ({"drafter": {"draft_vocab": -1}}, "drafter.draft_vocab"),
        ({"export": {"step_attention": "flash"}}, "export.step_attention"),
        ({"quant": {"group_size": 64}}, "quant.kernel"),  # the block kernel's blocks are 32
        ({"quant": {"kernel": "mkl"}}, "quant.kernel"),
        ({"quant": {"kv_cache": "int8"}}, "quant.kv_cache"),
        ({"quant": {"kv_cache": "fp16", "kernel": "xnnpack"}}, "quant.kv_cache"),  # read by edgespec's exact attention only
        ({"quant": {"kv_cache": "fp16"}, "drafter": {"weights": "w.pt"}, "export": {"step_attention": "rows"}}, "quant.kv_cache"),
    ],
)
def test_bad_fields_name_the_field(data, path):
    with pytest.raises(EdgespecError, match=f"'{path}'"):
        from_dict(Recipe, data)


@pytest.mark.parametrize(
    "make, path",
    [
        (lambda: QuantConfig(scheme="int3"), "quant.scheme"),
        (lambda: QuantConfig(group_size="32"), "quant.group_size"),
        (lambda: TrainConfig(steps=0), "train.steps"),
        (lambda: GatesConfig(min_speedup=-1.0), "validate.gates.min_speedup"),
        (lambda: ValidateConfig(gates={"min_speedup": 101}), "validate.gates.min_speedup"),
        (lambda: ValidateConfig(suites=["poetry"]), r"validate.suites\[0\]"),
        (lambda: Recipe(name=""), "name"),
    ],
)
def test_every_construction_is_checked(make, path):
    with pytest.raises(EdgespecError, match=f"recipe field '{path}'"):
        make()


def test_construction_normalizes_types():
    v = ValidateConfig(suites=["qa"], gates={"min_score_ratio": 0})
    assert v.suites == ("qa",) and v.gates == GatesConfig(min_score_ratio=0.0) and isinstance(v.gates.min_score_ratio, float)


def test_sections_have_no_validate_method():
    import edgespec.config as C

    for cls in (C.ModelConfig, C.QuantConfig, C.DrafterConfig, C.TrainConfig, C.NumericsConfig, C.ExportConfig, C.GatesConfig, C.ValidateConfig):
        assert not hasattr(cls, "validate"), cls
    assert isinstance(Recipe().validate, ValidateConfig)  # the recipe's `validate:` section is a field


def test_train_config_holds_every_trainer_setting():
    t = TrainConfig()
    assert (t.bf16, t.main_weight) == (True, 1.0)


def test_one_list_of_suite_names():
    from edgespec.harness.suites import SUITES

    assert tuple(SUITES) == SUITE_NAMES == Recipe().validate.suites


def test_exponents_without_a_dot_are_numbers(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("train: {lr: 1e-3}\n")
    assert load_recipe(p).train.lr == 0.001


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


def test_every_shipped_recipe_loads_and_names_existing_drafter_weights():
    """A recipe's drafter weights ship with edgespec or the repository, or are what the same
    recipe's `edgespec train` writes (train.out_dir/<kind>.pt: train, then export)."""
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        recipe = load_recipe(path)
        if getattr(recipe, "task", "generate") == "generate" and recipe.drafter.weights:
            shipped = ROOT / "sdk" / "edgespec" / "weights" / recipe.drafter.weights
            own_run = Path(recipe.drafter.weights) == Path(recipe.train.out_dir) / f"{recipe.drafter.kind}.pt"
            assert shipped.is_file() or (ROOT / recipe.drafter.weights).is_file() or own_run, path


def test_medusa_heads_are_lossless_only():
    from edgespec.config import DrafterConfig

    assert DrafterConfig(kind="medusa", tree=(1, 1, 1)).kind == "medusa"
    with pytest.raises(EdgespecError, match=r"drafter.mode.*draft heads leave the base model untouched"):
        DrafterConfig(kind="medusa", mode="shared", tree=(1, 1, 1))


def test_block_kernel_is_for_quantized_linears_only():
    """`quant.kernel: edgespec` (the default) computes 8da4w/8da8w linears; fp32 and fp16
    programs keep XNNPACK whatever the field says."""
    assert QuantConfig().block_kernel and QuantConfig(scheme="8da8w").block_kernel
    assert not QuantConfig(scheme="fp32").block_kernel and not QuantConfig(scheme="fp16").block_kernel
    assert not QuantConfig(kernel="xnnpack").block_kernel
