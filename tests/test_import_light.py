import subprocess
import sys


def test_import_edgespec_does_not_import_executorch_or_torch():
    code = (
        "import sys, edgespec, edgespec.cli, edgespec.config, edgespec.bundle;"
        "heavy=[m for m in ('executorch','torch','torchao') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_cli_help_lists_the_contract_commands():
    out = subprocess.run([sys.executable, "-m", "edgespec.cli", "--help"], capture_output=True, text=True, check=True)
    for cmd in ("export", "generate", "bench", "info"):
        assert cmd in out.stdout


def test_importing_edgespec_first_keeps_torchs_openmp_workers_asleep():
    """`import edgespec` sets OMP_WAIT_POLICY=PASSIVE before torch loads OpenMP; torch imported
    first cannot be fixed, and a program runner says so (edgespec.host.openmp_spins)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    show = "import os; from edgespec import host; print(os.environ.get('OMP_WAIT_POLICY'), host.openmp_spins())"
    first = subprocess.run([sys.executable, "-c", f"import edgespec, torch; {show}"], capture_output=True, text=True, check=True, env=env)
    assert first.stdout.split() == ["PASSIVE", "False"]
    late = subprocess.run([sys.executable, "-c", f"import torch, edgespec; {show}"], capture_output=True, text=True, check=True, env=env)
    assert late.stdout.split() == ["PASSIVE", "True"]
    chosen = subprocess.run(
        [sys.executable, "-c", f"import torch, edgespec; {show}"], capture_output=True, text=True, check=True, env={**env, "OMP_WAIT_POLICY": "passive"}
    )
    assert chosen.stdout.split() == ["passive", "False"]


def test_a_foreign_child_process_gets_the_environment_without_edgespecs_openmp_policy():
    import os

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = "import os; from edgespec import host; print(os.environ.get('OMP_WAIT_POLICY'), host.foreign_environ().get('OMP_WAIT_POLICY'))"
    ours = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert ours.stdout.split() == ["PASSIVE", "None"]
    users = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**env, "OMP_WAIT_POLICY": "PASSIVE"})
    assert users.stdout.split() == ["PASSIVE", "PASSIVE"]  # the user's own setting is passed on


def test_running_programs_does_not_import_executorchs_exporter(tmp_path):
    """The runtime binds ExecuTorch's C++ runtime and kernel libraries without the Python
    modules that import its exporter (executorch.exir, torch._dynamo, torchao, torch._inductor):
    seconds and 134 MB of every `edgespec generate` (edgespec.runtime.runner.bindings)."""
    program = tmp_path / "no_edgespec_ops.pte"
    program.write_bytes(bytes(64))  # calls no edgespec:: operator: only ExecuTorch's libraries are loaded
    code = (
        "import sys; from edgespec.runtime import runner;"
        f"assert runner.load_runtime_kernels({str(program)!r}) is None; runner.set_threads(1); assert runner.threads() == 1;"
        "import torch; assert torch.ops.llama.update_cache.out is not None;"
        "heavy=[m for m in ('executorch.exir','executorch.runtime','torch._dynamo','torch._inductor','torchao') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""
