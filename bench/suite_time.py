"""The test suite's wall time and seconds per module, as JSON (the CI budget: 40 minutes).

    python bench/suite_time.py                 # README's way: two xdist workers, a module each
    python bench/suite_time.py --workers 0     # one process, as before issue 70
    python bench/suite_time.py -- -m "not slow"

Runs pytest once in this checkout (run it on a quiet machine, with $EDGESPEC_CACHE empty for
a fresh machine's figure: the kernel library and the aarch64 environment are built in the
run) and prints: the CPU, the wall time, the pass/fail counts and each module's seconds
(setup + call + teardown of its tests, from pytest's JUnit XML, whichever worker ran them).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from edgespec.host import cpu_name, usable_cpus

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (0: one process)")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        junit = Path(d) / "junit.xml"
        dist = ["-n", str(a.workers), "--dist", "loadscope"] if a.workers else []
        cmd = [sys.executable, "-m", "pytest", "-q", *dist, f"--junitxml={junit}", *a.pytest_args]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        per_module, outcomes = Counter(), Counter()
        for case in ET.parse(junit).iter("testcase"):
            per_module[case.get("classname").rsplit(".", 1)[-1]] += float(case.get("time"))
            outcomes[next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")] += 1
    summary = next((l for l in reversed(done.stdout.splitlines()) if " in " in l and ("passed" in l or "failed" in l)), "")
    print(
        json.dumps(
            {
                "cpu": cpu_name(),
                "cpus": usable_cpus(),
                "command": " ".join(cmd[1:]).replace(f"--junitxml={junit}", "--junitxml=..."),
                "exit_code": done.returncode,
                "wall_s": round(wall, 1),
                "pytest_summary": summary.strip("= "),
                "outcomes": dict(outcomes),
                "test_seconds": round(sum(per_module.values()), 1),
                "seconds_per_module": {m: round(s, 1) for m, s in per_module.most_common()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
