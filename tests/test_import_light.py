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
