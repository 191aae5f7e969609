"""The typed bundle records: round trip, old schema-1 manifests still open, task dispatch."""

import json
import re
import warnings

import pytest
from click.testing import CliRunner

from edgespec import bundle as B
from edgespec.config import Recipe, RecipeDeprecation, load_recipe
from edgespec.errors import EdgespecError
from edgespec.manifest import AsrManifest, LmManifest, Lossless, parse_manifest
from manifests import tiny_manifest, tiny_manifest_data


def test_manifest_round_trips_through_json(tmp_path):
    B.write_manifest(tmp_path, tiny_manifest(speculative={"drafter": "hydra", "draft_vocab": 8192}))
    m = B.read_manifest(tmp_path)
    assert isinstance(m, LmManifest) and m.task == "generate" and m.recipe == Recipe()
    assert m.speculative.drafter == "hydra" and m.speculative.tree_branching == (1,)
    assert parse_manifest(json.loads((tmp_path / B.MANIFEST).read_text()), "x") == m


def test_a_manifest_written_before_the_records_still_opens():
    """Schema 1 as earlier versions wrote it: no task, losslessness as "k/n", export.backend,
    step attention `block` (now `custom_sdpa`)."""
    old = tiny_manifest_data()
    del old["task"]
    old["recipe"]["export"]["backend"] = "xnnpack"
    old["recipe"]["export"]["step_attention"] = "block"
    gate = {"name": "lossless", "passed": True, "measured": "3/3", "threshold": "all", "message": "ok"}
    old["validation"] = {"passed": True, "gates": [gate], "prompts": 3, "score": 0.5, "ar_tokens_per_s": 100.0, "lossless": "3/3", "peak_rss_mb": {"ar": 90}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading a bundle says nothing about its recipe's form
        m = parse_manifest(old, "old")
    assert m.task == "generate" and m.validation.lossless == Lossless(3, 3) and str(m.validation.lossless) == "3/3"
    assert m.recipe.export.step_attention == "custom_sdpa"


def test_schema_and_task_errors_name_what_is_off():
    with pytest.raises(EdgespecError, match="schema_version 2 is not supported"):
        parse_manifest(tiny_manifest_data(schema_version=2), "m")
    with pytest.raises(EdgespecError, match="task 'tts' is not one of"):
        parse_manifest(tiny_manifest_data(task="tts"), "m")
    with pytest.raises(EdgespecError, match="manifest field 'tokenizer': unknown field"):
        parse_manifest(tiny_manifest_data(task="asr"), "m")  # an asr manifest has its own records
    assert AsrManifest.TASK == "asr"


def test_an_old_recipe_loads_with_one_note(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("export:\n  backend: xnnpack\n")
    with pytest.warns(RecipeDeprecation, match="export.backend was never read"):
        assert load_recipe(p) == Recipe()
    p.write_text("export:\n  step_attention: block\n")
    with pytest.warns(RecipeDeprecation, match="export.step_attention: block is now custom_sdpa"):
        assert load_recipe(p).export.step_attention == "custom_sdpa"


def test_cli_prints_the_note_on_one_line(tmp_path):
    from edgespec.cli import main

    p = tmp_path / "r.yaml"
    p.write_text("model: {source: /nonexistent/x.gguf}\nexport:\n  backend: xnnpack\n")
    res = CliRunner().invoke(main, ["normsearch", str(p), "-o", str(tmp_path / "o")])
    lines = res.output.splitlines()
    assert res.exit_code == 2 and lines[0].startswith("note: recipe in an older form") and lines[1].startswith("error: "), res.output


def test_bundle_commands_take_field_overrides_of_the_bundles_recipe(tmp_path):
    from edgespec.cli import main
    from edgespec.cli.terminal import aliases, bundle_recipe

    assert aliases("validate", runs=3, suites=("rag", "qa"), seed=None) == ["validate.runs=3", 'validate.suites=["rag", "qa"]']
    m = tiny_manifest()
    r = bundle_recipe(m, [*aliases("validate", runs=3, suites=("rag",)), "validate.gates.min_speedup=1.2", "tune.max_size=8"])
    assert r.validate.runs == 3 and r.validate.suites == ("rag",) and r.validate.gates.min_speedup == 1.2 and r.tune.max_size == 8
    B.write_manifest(tmp_path, m)
    for cmd in ("validate", "tune"):
        res = CliRunner().invoke(main, [cmd, "--bundle", str(tmp_path), f"{cmd}.nope=1"])
        assert res.exit_code == 2 and f"recipe field '{cmd}.nope': unknown field" in res.output, res.output


def test_a_recipe_with_the_old_streams_section_loads_as_the_drafter_section(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("streams:\n  drafter: hydra\n  tree: [1, 1, 1]\n  weights: w.pt\n")
    with pytest.warns(RecipeDeprecation, match=r"'streams:' section is now 'drafter:' \(streams.drafter -> drafter.kind\)"):
        r = load_recipe(p)
    assert (r.drafter.kind, r.drafter.tree, r.drafter.weights) == ("hydra", (1, 1, 1), "w.pt")
    with pytest.warns(RecipeDeprecation, match="'streams.drafter' is now 'drafter.kind'"):
        assert load_recipe(None, ["streams.drafter=medusa", "drafter.tree=[1,1,1]"]).drafter.kind == "medusa"


def test_old_drafter_weights_files_load_with_a_note(tmp_path, tiny_model):
    import torch

    from edgespec.config import DrafterConfig
    from edgespec.speculative.drafters import load_drafter, new_drafter, save_drafter

    cfg = DrafterConfig(kind="hydra", draft_depth=2, n_layers=1, tree=(1, 1))
    save_drafter(tmp_path / "new.pt", new_drafter(tiny_model, cfg).params, cfg)
    blob = torch.load(tmp_path / "new.pt", weights_only=True)
    assert blob["drafter"]["draft_depth"] == 2
    arch = {("gamma" if k == "draft_depth" else k): v for k, v in blob["drafter"].items()}
    torch.save({**blob, "drafter": arch}, tmp_path / "gamma.pt")  # the form before 2026-12-06 (the shipped weights'): read as it is
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_drafter(tmp_path / "gamma.pt", tiny_model, expect=cfg).cfg.draft_depth == 2
        assert load_drafter(tmp_path / "gamma.pt", tiny_model).cfg.draft_depth == 2
    blob.pop("drafter")
    blob["streams"] = {("drafter" if k == "kind" else k): v for k, v in arch.items()}  # the form before 0.12
    torch.save(blob, tmp_path / "old.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = load_drafter(tmp_path / "new.pt", tiny_model, expect=cfg)
    with pytest.warns(RecipeDeprecation, match="earlier form"):
        old = load_drafter(tmp_path / "old.pt", tiny_model, expect=cfg)
    assert all(torch.equal(a, b) for a, b in zip(new.params.state_dict().values(), old.params.state_dict().values(), strict=True))


def test_the_language_model_task_records_the_drafter_it_built():
    from types import SimpleNamespace

    from edgespec.tasks.language_model import _speculative_info

    recipe = load_recipe("recipes/smollm2-135m-spec.yaml")
    meta = SimpleNamespace(spec=SimpleNamespace(n_streams=3, branching=(1, 1, 1), parents=(-1, 0, 1, 2)))
    info = _speculative_info(recipe, meta)
    assert (info.drafter, info.weights, info.draft_vocab, info.tree_parents) == ("hydra", "drafter.pt", 8192, (-1, 0, 1, 2))
    assert info.lookup == recipe.validate.lookup == 2  # the hybrid draft it was validated with is how it decodes
    assert _speculative_info(recipe, SimpleNamespace(spec=None)) is None


def test_generate_and_bench_decode_with_the_bundles_own_lookup_unless_told(monkeypatch):
    from types import SimpleNamespace

    from edgespec.runtime.session import decoder

    runner = SimpleNamespace(has_spec=True, has_next_token=False, forward=None, path="p.pte")
    spec = SimpleNamespace(speculative=SimpleNamespace(lookup=2), files={})

    def lookup_of(*args, mode="spec"):
        return decoder(runner, mode, *args)[1].keywords["lookup"]

    assert lookup_of(None, spec) == 2  # the bundle's own (generate, bench, validate)
    assert lookup_of(None, spec, mode="auto") == 2  # generate's default mode: the same draft, steps only while they pay
    assert lookup_of(0, spec) == 0  # --lookup 0: the drafter only
    assert lookup_of(3, spec) == 3
    assert lookup_of(None, SimpleNamespace(speculative=None)) == 0  # a bundle without speculative settings
    assert lookup_of() == 0  # no bundle: the drafter alone


def test_a_manifest_before_the_lookup_field_decodes_with_the_drafter_only(tmp_path):
    data = tiny_manifest_data()
    data["speculative"] = {"tree_branching": [1], "tree_parents": [-1, 0], "drafter": "hydra"}
    assert parse_manifest(data, "old").speculative.lookup == 0


def test_a_manifest_with_the_streams_drafters_names_reads_into_todays_fields():
    """Bundles written before 2026-12-06 name the drafter's depth and top layers `n_streams`
    and `msa_layers`, and their recipe `drafter.gamma` and `train.stream_weights`."""
    data = tiny_manifest_data()
    data["speculative"] = {"tree_branching": [1, 1], "tree_parents": [-1, 0, 1], "drafter": "streams", "n_streams": 3, "msa_layers": 4}
    data["recipe"]["drafter"]["gamma"] = data["recipe"]["drafter"].pop("draft_depth")
    data["recipe"]["train"]["stream_weights"] = data["recipe"]["train"].pop("depth_weights")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading a bundle says nothing about its recipe's form
        m = parse_manifest(data, "old")
    assert (m.speculative.draft_depth, m.speculative.top_layers) == (3, 4) and m.recipe == Recipe()
    assert {"draft_depth", "top_layers"} <= set(m.to_dict()["speculative"]) and "n_streams" not in m.to_dict()["speculative"]


def test_a_recipe_with_the_streams_drafters_names_loads_with_one_note(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("drafter:\n  gamma: 4\n  tree: [1, 1, 1, 1]\ntrain:\n  stream_weights: [1, 1, 1, 1]\n")
    with pytest.warns(RecipeDeprecation, match=r"drafter.gamma is now drafter.draft_depth; train.stream_weights is now train.depth_weights"):
        r = load_recipe(p)
    assert (r.drafter.draft_depth, r.train.depth_weights) == (4, (1.0,) * 4)
    with pytest.warns(RecipeDeprecation, match="'streams.gamma' is now 'drafter.draft_depth'"):
        assert load_recipe(None, ["streams.gamma=4", "train.depth_weights=[1, 1, 1, 1]"]).drafter.draft_depth == 4
    with pytest.warns(RecipeDeprecation, match="'train.stream_weights' is now 'train.depth_weights'"):
        assert load_recipe(None, ["train.stream_weights=[1, 2, 3]"]).train.depth_weights == (1.0, 2.0, 3.0)
    p.write_text("drafter:\n  gamma: 4\n  draft_depth: 4\n")
    with pytest.raises(EdgespecError, match="recipe field 'drafter.gamma': is the earlier name of drafter.draft_depth"):
        load_recipe(p)


def test_every_recipe_and_manifest_kind_has_its_task():
    from edgespec.config import RECIPE_KINDS
    from edgespec.manifest import MANIFEST_KINDS
    from edgespec.tasks import TASKS, task_of_manifest, task_of_recipe

    assert {n: t.RECIPE for n, t in TASKS.items()} == RECIPE_KINDS and set(MANIFEST_KINDS) == set(TASKS)
    assert task_of_recipe(Recipe()).RECIPE.TASK == "generate" and task_of_manifest(tiny_manifest()).RECIPE.TASK == "generate"
    for task in TASKS.values():
        assert task.STAGES[0] == "load" and {"validate", "package"}.isdisjoint(task.STAGES)


def test_a_registry_of_task_kinds_that_misses_one_fails_at_import():
    from edgespec.config import RECIPE_KINDS, check_task_kinds

    check_task_kinds(dict.fromkeys(RECIPE_KINDS), "x")
    with pytest.raises(ImportError, match=r"x holds the task kinds \['generate'\]; edgespec.config.RECIPE_KINDS holds \['asr', 'generate'\]"):
        check_task_kinds({"generate": None}, "x")


def test_the_model_record_is_the_decoders_arguments_with_name_and_source_flat_on_disk():
    """LmModelInfo derives from LlamaArgs (edgespec.models.args): one field list; manifest.json
    holds the architecture's fields beside name and source, as it always has."""
    import dataclasses

    from edgespec.manifest import LmModelInfo
    from edgespec.models.args import LlamaArgs

    arch = {f.name for f in dataclasses.fields(LlamaArgs)}
    assert {f.name for f in dataclasses.fields(LmModelInfo)} == arch | {"name", "source"}
    m = tiny_manifest()
    assert isinstance(m.model, LlamaArgs) and set(m.to_dict()["model"]) == arch | {"name", "source"}
    assert m.model.head_dim == 4  # derived as the decoder derives it


def test_a_model_section_written_before_the_newer_architecture_options_reads_as_the_same_architecture():
    """A flat model section as an early bundle wrote it: name and source first, no Qwen/Gemma
    options, head_dim 0 (= dim / n_heads) absent; it reads as the decoder's arguments it was made from."""
    import dataclasses

    from edgespec.models.args import LlamaArgs

    shape = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 128, "vocab_size": 97}
    old_fields = {"norm_eps": 1e-5, "rope_theta": 10000.0, "tie_embeddings": True, "max_seq_len": 64}
    data = json.loads(json.dumps(tiny_manifest_data(model={"name": "tiny", "source": "m.gguf", **shape, **old_fields})))
    m = parse_manifest(data, "old")
    assert (m.model.name, m.model.source) == ("tiny", "m.gguf")
    expected = LlamaArgs(**shape, **old_fields)
    assert {f.name: getattr(m.model, f.name) for f in dataclasses.fields(LlamaArgs)} == dataclasses.asdict(expected)
    assert m.model.head_dim == 16 and m.model.activation == "silu" and not m.model.local_rope
    assert parse_manifest({**data, "model": {**data["model"], "head_dim": 0}}, "old").model == m.model


def test_a_model_section_the_decoder_could_not_build_is_refused_naming_it():
    base = tiny_manifest_data()["model"]
    for bad, message in (
        ({"n_heads": 0}, "shape sizes must be positive: n_heads=0"),
        ({"dim": 9, "head_dim": 0}, "dim=9 is not a multiple of heads=2"),
        ({"n_kv_heads": 3}, "heads=2 kv_heads=3"),
        ({"activation": "relu"}, "activation 'relu'"),
        ({"sliding_window": 4}, "sliding window 4 over layers"),
    ):
        with pytest.raises(EdgespecError, match=f"m: manifest field 'model': .*{re.escape(message)}"):
            parse_manifest(tiny_manifest_data(model=base | bad), "m")
    with pytest.raises(EdgespecError, match="manifest field 'model.dim': is missing"):
        parse_manifest(tiny_manifest_data(model={"name": "t", "source": "t", "vocab_size": 10}), "m")


def test_reading_a_manifest_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, edgespec.manifest; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_the_decoder_computes_every_activation_its_arguments_accept():
    from edgespec.models.args import ACTIVATION_NAMES
    from edgespec.models.llama import ACTIVATIONS

    assert tuple(ACTIVATIONS) == ACTIVATION_NAMES
