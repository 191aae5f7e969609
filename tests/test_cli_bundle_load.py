"""The CLI on a real tiny program: a quiet terminal by default, and a bundle whose manifest was
edited is refused at load, not run silently."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# ExecuTorch's C++ log lines ("I 00:00:00.001 executorch:cpuinfo_utils.cpp:71] ...",
# "[kernel_runtime_context.h:91] No temp allocator provided") and torch's C++ warnings ("W1201 ...")
RUNTIME_LOG = re.compile(r"executorch:|cpuinfo|\.(?:h|cpp):\d+\]|^[IWE]\d{4} ", re.M)


def _generate(bundle, *args):
    cmd = [sys.executable, "-m", "edgespec.cli", *args, "generate", "--bundle", str(bundle), "--prompt", "hello", "--max-new-tokens", "4", "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_generate_prints_edgespec_lines_only_unless_verbose(tiny_bundle):
    quiet = _generate(tiny_bundle)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert json.loads(quiet.stdout)["completion_ids"]
    assert not RUNTIME_LOG.search(quiet.stderr), quiet.stderr[:2000]
    loud = _generate(tiny_bundle, "--verbose")
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert RUNTIME_LOG.search(loud.stderr), "the runtime logged nothing: this test would not see a leak"


@pytest.fixture
def edited(tiny_bundle, tmp_path):
    d = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, d)

    def edit(**fields):
        m = json.loads((d / "manifest.json").read_text())
        for path, value in fields.items():
            section, key = path.split("__")
            m[section][key] = value
        (d / "manifest.json").write_text(json.dumps(m))
        return d

    return edit


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"tokenizer__eos_ids": [7]}, "program EOS ids [2] != manifest [7]"),
        ({"model__vocab_size": 300}, "program vocabulary 259 != manifest 300"),
    ],
)
def test_generate_refuses_a_manifest_that_disagrees_with_the_program(edited, fields, message):
    res = _generate(edited(**fields))
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1].startswith("error: ") and message in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr


def test_generate_refuses_listed_methods_the_program_lacks(edited, tiny_bundle):
    d = edited()
    m = json.loads((d / "manifest.json").read_text())
    m["methods"] = [*m["methods"], "spec_step"]
    (d / "manifest.json").write_text(json.dumps(m))
    res = _generate(d)
    assert res.returncode == 2 and "the manifest lists methods the program lacks: ['spec_step']" in res.stderr, res.stderr[-2000:]


def test_generate_verify_checks_checksums(edited):
    d = edited()
    tok = d / "tokenizer.json"
    tok.write_text(tok.read_text().replace('"model"', ' "model"', 1))  # same JSON, other bytes
    skipped = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "generate", "--bundle", str(d), "--prompt", "hi", "--max-new-tokens", "2", "--no-verify"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert skipped.returncode == 0, skipped.stderr[-2000:]  # not verified: the tokenizer still reads
    res = subprocess.run(  # verified by default
        [sys.executable, "-m", "edgespec.cli", "generate", "--bundle", str(d), "--prompt", "hi", "--max-new-tokens", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2 and "file 'tokenizer.json' is corrupt" in res.stderr, res.stderr[-2000:]


def test_a_bundle_names_the_runtime_its_program_needs(edited, tiny_bundle):
    """The manifest records the program's operators and delegates as the lowered program has
    them; info and verify say which runtimes run it; verify refuses a record the program
    contradicts."""
    from click.testing import CliRunner

    from edgespec.bundle import read_manifest, runtime_needs
    from edgespec.cli import main

    m = read_manifest(tiny_bundle)
    assert m.runtime == runtime_needs((tiny_bundle / "model.pte").read_bytes()) and "llama::update_cache.out" in m.runtime.operators
    for cmd in ("info", "verify"):
        res = CliRunner().invoke(main, [cmd, "--bundle", str(tiny_bundle)])
        assert res.exit_code == 0 and m.runtime.runtimes_line() in res.output, res.output
    d = edited(runtime__operators=[*m.runtime.operators, "edgespec::block_linear.out"])
    res = CliRunner().invoke(main, ["verify", "--bundle", str(d)])
    assert res.exit_code == 2 and "the manifest's runtime record" in res.output and "is not what the program calls" in res.output, res.output


@pytest.mark.parametrize(("recipe", "extra"), [("smollm2-135m.yaml", "edgespec::block_linear.out"), ("smollm2-135m-stock-aar.yaml", None)])
def test_each_recipes_quantization_gives_the_runtime_it_says(tiny_hf_dir, build_bundle, recipe, extra):
    """A tiny model exported with a shipped recipe's quant section: the default's program
    calls edgespec's block kernel (an AAR built with android/kernels), the stock-AAR recipe's
    calls no edgespec operator at all (the prebuilt AAR runs it)."""
    import yaml

    from edgespec.bundle import read_manifest

    quant = yaml.safe_load((Path(__file__).resolve().parents[1] / "recipes" / recipe).read_text())["quant"]
    d = build_bundle(
        yaml.safe_dump(
            {
                "name": "tiny-kind",
                "model": {"source": str(tiny_hf_dir), "max_seq_len": 128},
                "quant": quant,
                "numerics": {"search": False},
                "validate": {"enabled": False},
            }
        )
    )
    needs = read_manifest(d).runtime
    if extra is None:
        assert needs.extra_operators() == () and "XnnpackBackend" in needs.delegates, needs
        assert "the prebuilt Android AAR run it" in needs.runtimes_line()
    else:
        assert extra in needs.extra_operators() and "the prebuilt org.pytorch:executorch-android AAR does not" in needs.runtimes_line(), needs
