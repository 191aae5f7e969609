"""`edgespec export` end to end on a tiny random Llama (HF directory): lower -> validate -> package,
and a failing gate that stops the bundle from being written. Real ExecuTorch programs."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgespec.cli import main

pytestmark = pytest.mark.slow


def _recipe(tmp_path, src, gates=""):
    r = tmp_path / "r.yaml"
    r.write_text(
        f"name: tiny\nmodel: {{source: {src}, max_seq_len: 512}}\nquant: {{scheme: fp32}}\nnumerics: {{search: false}}\n"
        f"validate: {{suites: [rag, qa], prompts_per_suite: 2{gates}}}\n"
    )
    return r


def test_export_validates_and_packages_the_report(tiny_hf_dir, tmp_path, monkeypatch, fresh_cache):
    from edgespec.harness import reference

    loads = []
    load = reference.load_reference
    monkeypatch.setattr(reference, "load_reference", lambda *a: loads.append(a) or load(*a))
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["export", str(_recipe(tmp_path, tiny_hf_dir)), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "validated on 4 prompts" in res.output and "gates passed" in res.output
    assert len(loads) == 1  # one fp32 model for the reference answers (cold cache) and the fidelity
    m = json.loads((out / "manifest.json").read_text())
    for f in ("report.json", "report.md", "speedup_per_task.png", "accuracy_vs_precision.png"):
        assert f in m["files"] and f in m["reports"]
    v = m["validation"]
    assert (
        v["passed"]
        and v["prompts"] == 4
        and {g["name"] for g in v["gates"]} == {"min_score_ratio", "min_top1_agreement", "max_perplexity_ratio", "max_kl_mean"}
    )
    report = json.loads((out / "report.json").read_text())
    assert set(report["suites"]) == {"rag", "qa"} and len(report["examples"]) == 4
    # the reference answers' likelihood measured (the fp32 program: no increase), its gate not
    # judged at 4 prompts (a sign-flip test cannot reach p < 0.05 there)
    assert abs(report["overall"]["answer_nll_increase"]) < 1e-3 and report["overall"]["answer_nll_prompts"] == 4
    assert any(g["name"] == "max_answer_nll_increase" and "no power at 4 prompts" in g["why"] for g in report["gates_not_judged"])
    # the fp32 program and the eager fp32 base model answer alike: no accuracy drop
    assert report["overall"]["accuracy_drop"] == pytest.approx(0.0, abs=1e-9)
    assert all(e["prediction"] == e["reference_prediction"] for e in report["examples"])
    # ... and on held-out text: 4 chunks of 512 tokens, the second half of each scored
    f = report["fidelity"]
    assert f["tokens"] == 4 * 256 and f["top1_agreement"] > 0.99 and f["perplexity_ratio"] == pytest.approx(1.0, abs=1e-3) and f["kl_mean"] < 1e-4
    assert v["fidelity"] == f and "held-out vs fp32: top-1" in res.output and "## Fidelity" in (out / "report.md").read_text()
    assert report["peak_rss_mb"]["ar"] > 0 and report["program_bytes"] == m["files"]["model.pte"]["bytes"]
    assert list((fresh_cache / "reference").glob("*.json"))  # the reference is cached
    res = CliRunner().invoke(main, ["info", "--bundle", str(out)])
    assert res.exit_code == 0 and "checksums ok" in res.output


def test_export_refuses_to_write_when_a_gate_fails(tiny_hf_dir, tmp_path, fresh_cache):
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["export", str(_recipe(tmp_path, tiny_hf_dir, ", gates: {min_speedup: 1.5}")), "-o", str(out)])
    assert res.exit_code == 1, res.output
    err = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "validation gate(s) failed, bundle not written: min_speedup" in err[0] and "no speculative methods" in err[0]
    assert not out.exists() and not any(p.name.startswith(".bundle") for p in tmp_path.iterdir())
    rejected = tmp_path / "bundle.rejected"
    assert "**Gates: FAILED**" in (rejected / "report.md").read_text()
    assert json.loads((rejected / "report.json").read_text())["passed"] is False


def test_validate_cli_exit_codes(tiny_hf_dir, tmp_path, fresh_cache):
    out = tmp_path / "bundle"
    r = _recipe(tmp_path, tiny_hf_dir).read_text().replace("validate: {", "validate: {enabled: false, ")
    (tmp_path / "r2.yaml").write_text(r)
    assert CliRunner().invoke(main, ["export", str(tmp_path / "r2.yaml"), "-o", str(out)]).exit_code == 0
    assert not (out / "report.json").exists()
    base = ["validate", "--bundle", str(out), "--suite", "rag", "--prompts-per-suite", "2", "--reference", "none"]
    res = CliRunner().invoke(main, base)  # the recipe's score and fidelity gates, with nothing to judge them by
    assert res.exit_code == 1 and "validate.reference: none" in res.output and "validate.gates.min_score_ratio: 0" in res.output
    base += ["--min-score-ratio", "0", "validate.gates.min_top1_agreement=0", "validate.gates.max_perplexity_ratio=0", "validate.gates.max_kl_mean=0"]
    base += ["validate.gates.max_answer_nll_increase=0"]
    res = CliRunner().invoke(main, [*base, "--json", "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{") :])
    assert report["passed"] and list(report["suites"]) == ["rag"] and (tmp_path / "rep" / "report.md").is_file()
    res = CliRunner().invoke(main, [*base, "--min-speedup", "2"])
    assert res.exit_code == 1 and "gate FAIL" in res.output and "validation FAILED" in res.output
    res = CliRunner().invoke(main, [*base, "--suite", "poetry"])
    assert res.exit_code == 2 and "must be one of" in res.output


def test_verify_and_package(tiny_hf_dir, tmp_path):
    import zipfile

    out = tmp_path / "bundle"
    r = _recipe(tmp_path, tiny_hf_dir).read_text().replace("validate: {", "validate: {enabled: false, ")
    (tmp_path / "r.yaml").write_text(r)
    assert CliRunner().invoke(main, ["export", str(tmp_path / "r.yaml"), "-o", str(out)]).exit_code == 0
    res = CliRunner().invoke(main, ["verify", "--bundle", str(out), "--json"])
    assert res.exit_code == 0, res.output
    meta = json.loads(res.output[res.output.index("{") :])
    assert meta["get_max_context_len"] == 512 and meta["get_max_seq_len"] == 128 and meta["get_eos_ids"] == [2] and meta["get_vocab_size"] == 259
    res = CliRunner().invoke(main, ["package", "--bundle", str(out), "-o", str(tmp_path / "b.zip")])
    assert res.exit_code == 0, res.output
    names = zipfile.ZipFile(tmp_path / "b.zip").namelist()
    assert names[0] == "manifest.json" and {"model.pte", "tokenizer.json"} <= set(names)
    # a corrupt program: verify and package both refuse, naming the file
    pte = out / "model.pte"
    data = bytearray(pte.read_bytes())
    data[100] ^= 0xFF
    pte.write_bytes(bytes(data))
    for cmd in (["verify", "--bundle", str(out)], ["package", "--bundle", str(out), "-o", str(tmp_path / "c.zip")]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code == 2 and "file 'model.pte' is corrupt" in res.output, res.output
    assert not (tmp_path / "c.zip").exists()
    # re-signed, the damaged program still fails: ExecuTorch's full flatbuffer verification
    import hashlib

    def resign(**tokenizer):
        m = json.loads((out / "manifest.json").read_text())
        m["files"]["model.pte"]["sha256"] = hashlib.sha256(pte.read_bytes()).hexdigest()
        m["tokenizer"].update(tokenizer)
        (out / "manifest.json").write_text(json.dumps(m))

    resign()
    res = CliRunner().invoke(main, ["verify", "--bundle", str(out)])
    assert res.exit_code == 2 and "could not be loaded by ExecuTorch" in res.output, res.output
    # an intact program that disagrees with its manifest
    data[100] ^= 0xFF
    pte.write_bytes(bytes(data))
    resign(eos_ids=[7])
    res = CliRunner().invoke(main, ["verify", "--bundle", str(out)])
    assert res.exit_code == 2 and "program EOS ids [2] != manifest [7]" in res.output, res.output


@pytest.mark.parametrize("scheme", ["fp16", "8da4w", "8da8w"])
def test_every_quantization_scheme_lowers_and_runs(tiny_hf_dir, tmp_path, scheme):
    """Each QuantConfig scheme (fp32 is the other tests') exports, loads, and its program
    computes what the eager model quantized the same way computes."""
    from typing import get_args

    import torch

    from edgespec.config import QuantConfig, QuantScheme
    from edgespec.models.load import build_model, read_source
    from edgespec.quant import plan_quantization, quantize_
    from edgespec.runtime.runner import ProgramRunner

    assert set(get_args(QuantScheme)) == {"fp32", "fp16", "8da4w", "8da8w", "int8wo"}  # int8wo is refused (below)
    r = tmp_path / "r.yaml"
    r.write_text(
        f"name: q\nmodel: {{source: {tiny_hf_dir}, max_seq_len: 64}}\nquant: {{scheme: {scheme}}}\nnumerics: {{search: false}}\nvalidate: {{enabled: false}}\n"
    )
    res = CliRunner().invoke(main, ["export", str(r), "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    tokens = torch.tensor([[5, 17, 42, 7]])
    got = ProgramRunner(tmp_path / "b" / "model.pte").forward(tokens, 0)
    eager = build_model(read_source(str(tiny_hf_dir), 64))
    quantize_(eager, plan_quantization(eager, QuantConfig(scheme=scheme)))
    with torch.no_grad():
        ref = eager(tokens, torch.tensor([0]))[0].float()  # last position [V]
    assert torch.isfinite(got).all()
    err = float((got - ref).abs().max())
    assert err < 0.05 * float(ref.abs().max()), (scheme, err)


def test_int8_weight_only_is_refused_before_any_work(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("quant: {scheme: int8wo}\n")
    res = CliRunner().invoke(main, ["export", str(r), "-o", str(tmp_path / "b")])
    assert res.exit_code == 2 and "recipe field 'quant.scheme': int8wo" in res.output and "use 8da8w" in res.output
    assert not (tmp_path / "b").exists()


def test_a_shared_program_is_validated_on_its_task_against_its_own_fine_tune(tiny_hf_dir, tmp_path, monkeypatch, fresh_cache):
    """A Shared-mode bundle (adapters on the main rows) validated on a task suite: the fp32
    reference is the fine-tuned model (the base with the drafter file's adapters merged), so
    the fp32 program agrees with it; the task's metric comes with its 95% interval."""
    import shutil

    import torch

    from edgespec.harness import reference

    src = shutil.copytree(tiny_hf_dir, tmp_path / "tiny")  # a context long enough for SQL prompts in bytes
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 2048}))
    tiny_hf_dir = src
    _tiny_shared_drafter(tiny_hf_dir, tmp_path / "shared.pt", seed=0)
    loads = []
    load = reference.load_reference
    monkeypatch.setattr(reference, "load_reference", lambda *a: loads.append(a) or load(*a))
    r = tmp_path / "r.yaml"
    r.write_text(
        f"name: tiny-shared\nmodel: {{source: {tiny_hf_dir}, max_seq_len: 2048}}\nquant: {{scheme: fp32}}\nnumerics: {{search: false}}\n"
        f"drafter: {{kind: streams, mode: shared, draft_depth: 2, n_layers: 1, lora_rank: 4, tree: [1, 1], weights: {tmp_path / 'shared.pt'}}}\n"
        "validate: {suites: ['task:sql_chinook'], prompts_per_suite: 2, fidelity_chunks: 1}\n"
    )
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["export", str(r), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(loads) == 1 and loads[0][2].name == "drafter.pt"  # the fine-tune, read from the bundle being written
    report = json.loads((out / "report.json").read_text())
    suite = report["suites"]["task:sql_chinook"]
    assert "Chinook" in suite["source"] and suite["metric"] == "sql_execution"
    score, lo, hi = suite["task_scores"]["sql_execution"]
    assert lo <= score <= hi and suite["reference_task_scores"]["sql_execution"][0] == score
    assert all(e["prediction"] == e["reference_prediction"] for e in report["examples"])  # the fp32 program is its fine-tune
    assert report["overall"]["lossless"]["identical"] == 2  # speculative answers equal its own autoregressive ones
    assert report["fidelity"]["top1_agreement"] > 0.99 and report["passed"]
    # the base model is not the yardstick: it answers otherwise (the adapters matter)
    base = reference.load_reference(str(tiny_hf_dir), 2048)
    merged = reference.load_reference(str(tiny_hf_dir), 2048, out / "drafter.pt")
    tokens = torch.randint(3, 259, (1, 40))
    with torch.no_grad():
        a, b = (m.output(m.norm(frozen(m, tokens))).argmax(-1) for m in (base, merged))
    assert (a != b).float().mean() > 0.2


def frozen(model, tokens):
    from edgespec.speculative.common import frozen_layers

    return frozen_layers(model, model.embed(tokens), 0, model.args.n_layers)


def _tiny_shared_drafter(src, path, seed):
    import torch

    from edgespec.config import DrafterConfig
    from edgespec.models.load import build_model, read_source
    from edgespec.speculative.drafters import new_drafter, save_drafter

    cfg = DrafterConfig(kind="streams", mode="shared", draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))
    drafter = new_drafter(build_model(read_source(str(src), 256)), cfg)
    torch.manual_seed(seed)
    for p in drafter.params.lora.parameters():  # adapters that change the model (B starts at zero)
        p.data.normal_(0, 0.3)
    save_drafter(path, drafter.params, cfg)


def test_task_programs_share_one_base_file(tiny_hf_dir, tmp_path):
    """export.separate_base: two task programs over one base write the same base.ptd byte for
    byte and programs of their own; each decodes as the same task exported in one file; the
    program does not load without its base file."""
    from edgespec.runtime.session import decoder, open_bundle

    def export(task: str, separate: bool) -> Path:
        _tiny_shared_drafter(tiny_hf_dir, tmp_path / f"{task}.pt", seed=ord(task))
        r = tmp_path / f"{task}{separate}.yaml"
        r.write_text(
            f"name: tiny-{task}\nmodel: {{source: {tiny_hf_dir}, max_seq_len: 256}}\nquant: {{scheme: 8da4w, group_size: 32, kernel: edgespec}}\n"
            f"numerics: {{search: false}}\nexport: {{separate_base: {str(separate).lower()}}}\nvalidate: {{enabled: false}}\n"
            f"drafter: {{kind: streams, mode: shared, draft_depth: 2, n_layers: 1, lora_rank: 4, tree: [1, 1], weights: {tmp_path / (task + '.pt')}}}\n"
        )
        out = tmp_path / f"bundle-{task}-{separate}"
        res = CliRunner().invoke(main, ["export", str(r), "-o", str(out)])
        assert res.exit_code == 0, res.output
        return out

    a, b, whole = export("a", True), export("b", True), export("a", False)
    assert (a / "base.ptd").read_bytes() == (b / "base.ptd").read_bytes()
    assert (a / "model.pte").read_bytes() != (b / "model.pte").read_bytes()
    assert not (whole / "base.ptd").exists() and (a / "model.pte").stat().st_size < (whole / "model.pte").stat().st_size / 2
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["program_data"] == "base.ptd" and "base.ptd" in manifest["files"]
    prompt = list(b"SELECT name FROM")
    answers = {}
    for name, bundle in (("a", a), ("b", b), ("whole", whole)):
        _, _, runner = open_bundle(bundle)
        answers[name] = [decoder(runner, mode)[1](prompt, max_new_tokens=24, max_seq_len=256, eos_ids=()).completion_ids for mode in ("ar", "spec")]
    assert answers["a"] == answers["whole"] and answers["a"][0] == answers["a"][1]  # lossless too
    assert answers["b"] != answers["a"]  # its own adapters
    res = CliRunner().invoke(main, ["info", "--bundle", str(a)])
    assert res.exit_code == 0 and "shared      base.ptd" in res.output, res.output
    (a / "base.ptd").unlink()
    res = CliRunner().invoke(main, ["verify", "--bundle", str(a)])
    assert res.exit_code == 2 and "base.ptd" in res.output, res.output
