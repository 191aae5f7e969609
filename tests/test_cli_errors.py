"""`edgespec export` on bad input: one-line error naming the problem, exit 2, no bundle."""

import pytest
from click.testing import CliRunner

from edgespec.cli import main


def _export(tmp_path, recipe_text, outdir=None):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(recipe_text)
    out = outdir or tmp_path / "bundle"
    res = CliRunner().invoke(main, ["export", str(recipe), "-o", str(out)])
    return res, out


def _assert_clean_failure(res, out, message):
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], res.output
    assert not out.exists()
    assert not any(p.name.startswith(".bundle") for p in out.parent.iterdir())


def test_missing_gguf(tmp_path):
    res, out = _export(tmp_path, f"model: {{source: {tmp_path}/nope.gguf}}\n")
    _assert_clean_failure(res, out, "not found")


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00garbage" * 50)
    res, out = _export(tmp_path, f"model: {{source: {bad}}}\n")
    _assert_clean_failure(res, out, "is not a readable GGUF file")


def test_unsupported_architecture(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    res, out = _export(tmp_path, f"model: {{source: {path}}}\n")
    _assert_clean_failure(res, out, "unsupported architecture 'mamba'")


@pytest.mark.parametrize("text, field", [("quant: {schema: fp32}\n", "quant.schema"), ("quant: {scheme: int2}\n", "quant.scheme")])
def test_bad_recipe_field(tmp_path, text, field):
    res, out = _export(tmp_path, text)
    _assert_clean_failure(res, out, f"recipe field '{field}'")


@pytest.mark.parametrize("override, field", [("quant.scheme=int3", "quant.scheme"), ("nope.x=1", "nope"), ("quant.nope=1", "quant.nope")])
def test_bad_override(tmp_path, override, field):
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["export", override, "-o", str(out)])
    _assert_clean_failure(res, out, f"recipe field '{field}'")


def test_bad_override_after_a_recipe(tmp_path):
    recipe, out = tmp_path / "r.yaml", tmp_path / "bundle"
    recipe.write_text("quant: {scheme: fp32}\n")
    for override, message in [
        ("quant.scheme", "override 'quant.scheme': expected FIELD=VALUE"),
        ("validate.gates.min_speedup=-1", "recipe field 'validate.gates.min_speedup'"),
    ]:
        res = CliRunner().invoke(main, ["export", str(recipe), override, "-o", str(out)])
        _assert_clean_failure(res, out, message)


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    res, out = _export(tmp_path, "quant: {scheme: fp32}\n", outdir=blocker / "bundle")
    assert res.exit_code == 2 and "error: cannot write to output directory" in res.output


def test_missing_recipe_file(tmp_path):
    res = CliRunner().invoke(main, ["export", str(tmp_path / "none.yaml")])
    assert res.exit_code != 0 and "none.yaml" in res.output


def test_an_assembled_model_without_its_packages_says_how_to_install_them(tmp_path, monkeypatch):
    from edgespec.models import load

    monkeypatch.setattr(load, "ASSEMBLED", {"gemma-3-270m": "no_such_model_package"})
    res, out = _export(tmp_path, "model: {source: gemma-3-270m}\nquant: {scheme: fp32}\n")
    _assert_clean_failure(res, out, "embedded model 'gemma-3-270m' needs its packages: pip install")
