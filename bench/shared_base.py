"""N task programs over one base (`export.separate_base`: each bundle's base.ptd is the same
bytes) against the same N programs exported whole: what they cost on a phone.

- bytes on disk: the files a runtime reads (the manifest's needed files), each distinct
  content counted once (N separated bundles carry one base.ptd between them);
- memory: one fresh process loads every program of a configuration and decodes one prompt
  with each (speculative, greedy); its peak RSS (VmHWM), its RSS at the end (VmRSS) and its
  PSS at the end (smaps_rollup: anonymous and file-backed), with the process's RSS before
  any program loaded beside them.

    python bench/shared_base.py --shared bundles/sql-shared --shared bundles/sql-lora \\
        --whole bundles/sql-shared-whole --whole bundles/sql-lora-whole > docs/results/shared_base.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def _rss_mb(field: str, status: str = "/proc/self/status") -> float:
    for line in open(status):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{status} has no {field}")


def _pss_mb() -> dict:
    """Proportional set size: a page mapped twice (one file under two programs) counts once
    in total, as physical memory does; VmRSS counts it per mapping."""
    return {f"{k.lower()}_mb": round(_rss_mb(k, "/proc/self/smaps_rollup"), 1) for k in ("Pss", "Pss_Anon", "Pss_File")}


def worker(bundles: list[str], prompt: str, max_new_tokens: int) -> dict:
    """In a fresh process: load every bundle's program, then decode `prompt` with each."""
    import edgespec  # noqa: F401  (before torch: passive OpenMP workers)
    from edgespec.models.tokenizer import encode_prompt
    from edgespec.runtime.session import decoder, open_bundle

    before = _rss_mb("VmRSS")
    opened = [open_bundle(b) for b in bundles]
    loaded = _rss_mb("VmRSS")
    for manifest, tokenizer, runner in opened:
        ids = encode_prompt(tokenizer, prompt, manifest.tokenizer.chat_template is not None)
        decoder(runner, "auto", manifest=manifest)[1](ids, max_new_tokens=max_new_tokens, max_seq_len=runner.max_seq_len, eos_ids=runner.eos_ids)
    return {
        "rss_before_mb": round(before, 1),
        "rss_loaded_mb": round(loaded, 1),
        "rss_end_mb": round(_rss_mb("VmRSS"), 1),
        "peak_rss_mb": round(_rss_mb("VmHWM"), 1),
        **_pss_mb(),
    }


def disk_bytes(bundles: list[str]) -> dict:
    """The bytes of the files a runtime reads, each distinct content once, and per file name."""
    from edgespec.bundle import read_manifest

    seen: dict[str, int] = {}
    files = []
    for b in bundles:
        m = read_manifest(b)
        for name in m.needed_files():
            entry = m.files[name]
            files.append({"bundle": b, "file": name, "bytes": entry.bytes, "sha256": entry.sha256[:16]})
            seen[entry.sha256] = entry.bytes
    return {"distinct_bytes": sum(seen.values()), "listed_bytes": sum(f["bytes"] for f in files), "files": files}


def measure(bundles: list[str], prompt: str, max_new_tokens: int) -> dict:
    payload = json.dumps({"bundles": bundles, "prompt": prompt, "max_new_tokens": max_new_tokens})
    out = subprocess.run([sys.executable, __file__, "--worker"], input=payload, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"worker failed: {out.stderr.strip().splitlines()[-3:]}")
    return {"bundles": bundles, **disk_bytes(bundles), **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", action="append", default=[], help="a bundle exported with export.separate_base (repeat: one per task)")
    ap.add_argument("--whole", action="append", default=[], help="the same task exported in one file (repeat, same order)")
    ap.add_argument("--prompt", default="List the names of the tracks on the album 'Let There Be Rock'.")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        job = json.loads(sys.stdin.read())
        print(json.dumps(worker(job["bundles"], job["prompt"], job["max_new_tokens"])))
        return
    if not args.shared:
        ap.error("give at least one --shared bundle")
    rows = {"shared": measure(args.shared, args.prompt, args.max_new_tokens)}
    if args.whole:
        rows["whole"] = measure(args.whole, args.prompt, args.max_new_tokens)
        rows["shared_over_whole"] = {k: round(rows["shared"][k] / rows["whole"][k], 3) for k in ("distinct_bytes", "rss_loaded_mb", "peak_rss_mb", "pss_mb")}
    rows["first_alone"] = measure(args.shared[:1], args.prompt, args.max_new_tokens)  # what the second program adds
    print(json.dumps({"prompt": args.prompt, "max_new_tokens": args.max_new_tokens, **rows}, indent=1))


if __name__ == "__main__":
    main()
