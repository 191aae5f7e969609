"""FIELD=VALUE overrides: parsed as YAML, merged into the recipe, checked exactly like the file."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgespec.cli import main
from edgespec.config import Recipe, apply_overrides, load_recipe, recipe_from_args
from edgespec.errors import EdgespecError

SPEC = "recipes/smollm2-135m-spec.yaml"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])


def test_values_are_yaml():
    r = apply_overrides(Recipe(), ["quant.scheme=fp32", "validate.enabled=false", "drafter.tree=[1,1,1]", "train.lr=1e-3", "train.steps=120"])
    assert (r.quant.scheme, r.validate.enabled, r.drafter.tree, r.train.lr, r.train.steps) == ("fp32", False, (1, 1, 1), 0.001, 120)
    assert r.quant.group_size == Recipe().quant.group_size  # the rest of the section stays


def test_numbers_without_a_dot_are_numbers():
    r = apply_overrides(Recipe(), ["train.lr=2e-4", "train.depth_weights=[1, 5e-1, 25e-2]", "validate.gates.min_score_ratio=0"])
    assert r.train.lr == 2e-4 and r.train.depth_weights == (1.0, 0.5, 0.25) and r.validate.gates.min_score_ratio == 0.0


def test_string_fields_take_the_text():
    r = apply_overrides(Recipe(), ["name=2024", "drafter.weights=", "model.source=/models/x.gguf", "validate.suites=[qa, my.jsonl]"])
    assert (r.name, r.drafter.weights, r.model.source, r.validate.suites) == ("2024", "", "/models/x.gguf", ("qa", "my.jsonl"))


def test_sections_merge_and_later_overrides_win():
    r = apply_overrides(Recipe(), ["validate.gates={min_speedup: 1.5}", "quant.scheme=fp16", "quant.scheme=8da8w"])
    assert r.validate.gates.min_speedup == 1.5 and r.validate.gates.min_score_ratio == Recipe().validate.gates.min_score_ratio
    assert r.quant.scheme == "8da8w"


def test_overrides_apply_to_the_file_before_checking():
    r = load_recipe(SPEC, ["drafter.tree=[2,1]"])
    assert r.drafter.tree == (2, 1) and r.name == "smollm2-135m-spec"
    # checked once, after merging: together these are valid although draft_depth 4 alone is not
    r = load_recipe(SPEC, ["drafter.draft_depth=4", "train.depth_weights=[1, 1, 1, 1]"])
    assert r.drafter.draft_depth == 4


def test_recipe_file_or_overrides_first():
    assert recipe_from_args([]) == Recipe()
    assert recipe_from_args(["quant.scheme=fp32"]) == Recipe().replace(quant={"scheme": "fp32"})
    assert recipe_from_args([SPEC]) == load_recipe(SPEC)
    assert recipe_from_args([SPEC, "quant.scheme=fp32"]).drafter.weights == load_recipe(SPEC).drafter.weights


@pytest.mark.parametrize(
    "override, field",
    [
        ("quant.scheme=int3", "recipe field 'quant.scheme': must be one of"),
        ("nope.x=1", "recipe field 'nope': unknown field"),
        ("quant.nope=1", "recipe field 'quant.nope': unknown field"),
        ("quant.scheme.x=1", "recipe field 'quant.scheme.x': unknown field"),
        ("quant=3", "recipe field 'quant': must be a mapping"),
        ("train.steps=1e3", "recipe field 'train.steps': must be an integer"),
        ("validate.enabled=maybe", "recipe field 'validate.enabled': must be true or false"),
        ("drafter.tree=[1,", "override 'drafter.tree=[1,': the value is not valid YAML"),
        ("drafter.draft_depth=5", "recipe field 'train.depth_weights'"),
        ("quant.scheme", "override 'quant.scheme': expected FIELD=VALUE"),
        ("=fp32", "override '=fp32': expected FIELD=VALUE"),
        ("quant..scheme=fp32", "override 'quant..scheme=fp32': expected FIELD=VALUE"),
    ],
)
def test_bad_overrides_name_the_field(override, field):
    with pytest.raises(EdgespecError, match="^" + re.escape(field)):
        load_recipe(SPEC, [override])


def test_a_first_argument_without_equals_is_the_recipe():
    with pytest.raises(EdgespecError, match=r"recipe 'quant\.scheme' not found \(an override is FIELD=VALUE"):
        recipe_from_args(["quant.scheme", "fp32"])
    with pytest.raises(EdgespecError, match="recipe 'none.yaml' not found"):
        recipe_from_args(["none.yaml", "quant.scheme=fp32"])


def _one_error_line(res, text):
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and text in lines[0], res.output
    return lines[0]


@pytest.mark.parametrize("cmd", ["export", "train", "normsearch"])
@pytest.mark.parametrize(
    "args, text",
    [
        (["quant.scheme=int3"], "recipe field 'quant.scheme'"),
        (["nope.x=1"], "recipe field 'nope'"),
        ([SPEC, "quant.nope=1"], "recipe field 'quant.nope'"),
        ([SPEC, "quant.scheme"], "override 'quant.scheme': expected FIELD=VALUE"),
    ],
)
def test_cli_bad_override_exits_2_with_one_line(tmp_path, cmd, args, text):
    extra = ["-o", str(tmp_path / "out")] if cmd != "train" else []
    _one_error_line(CliRunner().invoke(main, [cmd, *args, *extra]), text)
    assert not (tmp_path / "out").exists()


def test_cli_export_passes_overrides_through(tmp_path, monkeypatch):
    """Without running an export: the recipe the export would get."""
    import edgespec.tasks as T
    from edgespec.manifest import FileEntry
    from edgespec.tasks.pipeline import ExportResult
    from manifests import tiny_manifest

    seen = {}

    def fake_export(recipe, outdir, on_stage, on_progress):
        seen["recipe"], seen["outdir"] = recipe, outdir
        return ExportResult(Path(outdir), tiny_manifest(files={"model.pte": FileEntry("0" * 64, 1)}), {"load": 0.0})

    monkeypatch.setattr(T, "export_recipe", fake_export)
    res = CliRunner().invoke(main, ["export", SPEC, "quant.scheme=fp32", "validate.enabled=false", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert seen["recipe"] == load_recipe(SPEC).replace(quant={"scheme": "fp32"}, validate={"enabled": False})
    assert seen["outdir"] == str(tmp_path / "b")
    res = CliRunner().invoke(main, ["export", "quant.scheme=fp16", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert seen["recipe"] == Recipe().replace(quant={"scheme": "fp16"})


def test_help_explains_overrides():
    for cmd in ("export", "train", "normsearch"):
        out = CliRunner().invoke(main, [cmd, "--help"]).output
        assert "[RECIPE] [FIELD=VALUE]..." in out and f"edgespec {cmd} " in out and "=" in out.split("Examples:")[1]
        assert "\\b" not in out and f"  edgespec {cmd} recipes/smollm2-135m.yaml " in out  # click's no-rewrap marker, not a literal
    assert "Shared mode" in CliRunner().invoke(main, ["train", "--help"]).output  # it fine-tunes the model, not only a drafter
