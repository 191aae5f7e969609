"""The fuzz and property tests at a larger budget than CI's: every reader (recipes and
overrides, manifests, JSONL, CLI errors, tokenizer round trip, bundle zips) with
`--examples` generated inputs per test instead of 60-150. Prints JSON: per test, passed or
the failure, and the time taken.

    python bench/fuzz_long.py --examples 5000 > docs/results/fuzz_long.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_fuzz.py", "tests/test_bundle_zip.py"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=5000)
    args = ap.parse_args()
    report = ROOT / ".pytest_cache" / "fuzz_long.xml"
    report.parent.mkdir(exist_ok=True)
    env = {**os.environ, "EDGESPEC_FUZZ_EXAMPLES": str(args.examples)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider", f"--junitxml={report}", *FILES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    tests = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        failure = case.find("failure")
        tests[f"{case.get('classname')}::{case.get('name')}"] = {
            "seconds": round(float(case.get("time", 0)), 1),
            "outcome": "failed" if failure is not None else ("skipped" if case.find("skipped") is not None else "passed"),
            **({"failure": (failure.get("message") or "")[:500]} if failure is not None else {}),
        }
    print(
        json.dumps(
            {
                "examples_per_property_test": args.examples,
                "seconds": round(time.perf_counter() - t0, 1),
                "passed": sum(t["outcome"] == "passed" for t in tests.values()),
                "failed": sum(t["outcome"] == "failed" for t in tests.values()),
                "tests": tests,
            },
            indent=1,
        )
    )
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
