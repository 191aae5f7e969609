"""The whole bundle decoding on aarch64, here: the README's default bundle and the speculative
recipe's bundle, exported on this x86 host, decoded under qemu-user by ExecuTorch's aarch64
wheels and edgespec's kernel library cross-built for aarch64 (tests/aarch64_env.py), on
emulated CPUs of the widest and the portable path of the block kernel (the speculative bundle
on the widest); every completion's token ids equal the x86 ones. The path between them
(neon-dotprod, qemu's cortex-a76) is bitwise the portable one in the kernel self-test under
qemu (test_block_linear.py), which also checks that a cortex-a76 dispatches to it.

The Armv8.0 cores (qemu's cortex-a53/a72) cannot run a whole bundle from these wheels:
ExecuTorch's LLM custom-ops library (`llama::update_cache`) uses Armv8.1 atomics (`ldaddal`).
The portable path runs on qemu's a64fx (Armv8.2, no dot product); the kernel self-test covers
it on a Cortex-A53 (test_block_linear.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import aarch64_env  # noqa: E402

pytestmark = pytest.mark.slow

DECODE = str(Path(__file__).parent / "decode_ids.py")
PROMPTS = ("Write a haiku about the sea.", "List three uses of a paperclip.")
NEW_TOKENS = 16
CPUS = {"max": "neon-i8mm", "a64fx": "portable"}  # qemu -cpu: the path it dispatches to
# The default bundle is decoded on the widest and the portable path (the dotprod path costs
# another ~100 s emulated and adds only its dispatch, which the self-test covers); the
# speculative one on the widest only: its
# kernels are the same block kernel (each path bitwise the portable one in the kernel
# self-test, test_block_linear.py), what it adds is the program's spec_step and the decode
# loop around it, which do not depend on the path. (Each emulated run costs minutes.)
CPUS_OF = {"default": tuple(CPUS), "spec": ("max",)}


@pytest.fixture(scope="module")
def bundles(build_bundle) -> dict[str, Path]:
    # neither validated nor normalizer-searched: both leave an fp32-activation program as it is
    off = ("validate.enabled=false", "numerics.search=false")
    return {
        "default": build_bundle("", *off),  # the README's: embedded SmolLM2, block kernel
        "spec": build_bundle("recipes/smollm2-135m-spec.yaml", *off),  # Hydra heads + suffix match
    }


@pytest.fixture(scope="module")
def arm() -> aarch64_env.Aarch64Env:
    return aarch64_env.prepare()


def _decode(cmd: list[str], env: dict[str, str] | None = None) -> tuple[dict, list[dict]]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines[0], lines[1:]


@pytest.mark.parametrize("name", ["default", "spec"])
def test_bundle_decodes_the_same_tokens_on_aarch64(bundles, arm, name):
    mode = "spec" if name == "spec" else "ar"  # every call a step: the speculative path is what is compared, whatever pays
    args = [DECODE, str(bundles[name]), mode, str(NEW_TOKENS), *PROMPTS]
    _, x86 = _decode([sys.executable, *args], {**os.environ})
    assert [r["mode"] for r in x86] == [mode] * len(PROMPTS)
    assert all(len(r["ids"]) == NEW_TOKENS for r in x86), x86
    for cpu in CPUS_OF[name]:
        path = CPUS[cpu]
        # the flags' choice (the widest path this CPU runs), not a plan timed under emulation
        kernels, runs = _decode(arm.command(args, cpu, {"EDGESPEC_KERNEL_PLAN": "default"}))
        assert set(kernels["used"].values()) == {path}, (cpu, kernels)
        assert [r["mode"] for r in runs] == [r["mode"] for r in x86], (cpu, runs)
        assert [r["ids"] for r in runs] == [r["ids"] for r in x86], (cpu, runs, x86)
