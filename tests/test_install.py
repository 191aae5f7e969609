"""edgespec installed as a wheel, not from the source tree: the package carries what its kernel
library builds from (sources and headers) and a block-kernel bundle exports and runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_a_wheel_install_builds_the_kernel_and_runs_a_block_kernel_bundle(tmp_path):
    """Build the wheel, install it (no dependencies: this environment's) into a folder of its
    own, and with only that folder's edgespec importable (a fresh kernel cache, so the library
    is compiled from the wheel's files): export a tiny model on the block kernel and generate."""
    import shutil

    from tiny_models import write_hf_dir

    # the tracked files only (what a clone holds: no egg-info of an editable install, whose file
    # list would put into the wheel what the package data leaves out)
    src, dist, site = tmp_path / "src", tmp_path / "dist", tmp_path / "site"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "pyproject.toml", "README.md", "sdk"], capture_output=True, text=True, check=True)
    for name in tracked.stdout.split():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    done = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel = next(dist.glob("edgespec-*.whl"))
    done = subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    kernels = site / "edgespec" / "kernels"
    assert (site / "edgespec" / "corpus" / "data" / "sql_chinook.yaml").is_file()  # the SQL task's templates are package data
    from edgespec.kernels import library

    missing = [name for name in library.SOURCES + library.HEADERS if not (kernels / name).is_file()]
    assert not missing, f"the wheel lacks kernel files the library build needs: {missing}"
    assert {p.name for p in (site / "edgespec" / "corpus" / "heldout").iterdir()} >= {"prose.txt", "chat.json"}  # the fidelity text

    write_hf_dir(tmp_path / "hf", "llama", hidden_size=64, intermediate_size=96, num_attention_heads=4, head_dim=16, max_position_embeddings=1024)
    env = {**os.environ, "PYTHONPATH": str(site), "EDGESPEC_CACHE": str(tmp_path / "cache")}
    run = [sys.executable, "-m", "edgespec.cli"]
    where = subprocess.run([sys.executable, "-c", "import edgespec; print(edgespec.__file__)"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr  # the wheel's edgespec, not the source tree's
    common = [f"model.source={tmp_path / 'hf'}", "quant.scheme=8da8w", "numerics.search=false", "validate.enabled=false"]
    done = subprocess.run([*run, "export", *common, "-o", str(tmp_path / "b")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["recipe"]["quant"]["kernel"] == "edgespec"
    done = subprocess.run(
        [*run, "generate", "--bundle", str(tmp_path / "b"), "--prompt", "Hello", "--max-new-tokens", "4", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(json.loads(done.stdout.strip().splitlines()[-1])["completion_ids"]) == 4
    assert list((tmp_path / "cache" / "kernels").glob("libedgespec_kernels-*.so"))  # built from the wheel's sources
