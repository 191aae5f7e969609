"""A bundle opened for decoding: manifest, tokenizer and program, plus the decoders over it."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from edgespec.errors import EdgespecError
from edgespec.manifest import LAYOUT, LmManifest
from edgespec.models.tokenizer import Tokenizer
from edgespec.runtime.generate import generate
from edgespec.runtime.runner import ProgramRunner


def open_bundle(bundle: str | Path, verify: bool = True) -> tuple[LmManifest, Tokenizer, ProgramRunner]:
    """(manifest, tokenizer, program runner) of a bundle directory.

    `verify`: every file's SHA-256 is checked against the manifest first (a file unchanged
    since this machine last checked it is not hashed again: edgespec.bundle.VerifiedFiles);
    then the program is checked against the manifest (methods, metadata)."""
    from edgespec.bundle import read_manifest, verify_checksums

    manifest = read_manifest(bundle)
    if not isinstance(manifest, LmManifest):
        raise EdgespecError(f"bundle '{bundle}' is a {manifest.KIND} bundle, not a language model's: use `{manifest.USE.format(bundle=bundle)}`")
    if verify:
        verify_checksums(bundle, manifest, remembered=True)
    tokenizer = bundle_tokenizer(bundle, manifest)
    runner = ProgramRunner(Path(bundle) / LAYOUT.program, program_data(bundle, manifest))
    check_program(runner, manifest, bundle)
    return manifest, tokenizer, runner


def bundle_tokenizer(bundle: str | Path, manifest: LmManifest | None = None) -> Tokenizer:
    """The bundle's tokenizer with its manifest's chat template and special ids (no program loaded)."""
    if manifest is None:
        from edgespec.bundle import read_manifest

        manifest = read_manifest(bundle)
    tk = manifest.tokenizer
    return Tokenizer.from_file(Path(bundle) / tk.file, chat_template=tk.chat_template, bos_id=tk.bos_id, eos_ids=tk.eos_ids, add_bos=tk.add_bos)


def program_data(bundle: str | Path, manifest: LmManifest) -> Path | None:
    """The data file a bundle's program reads its base weights from (export.separate_base), or None."""
    return Path(bundle) / manifest.program_data if manifest.program_data else None


def bundle_lookup(manifest: LmManifest) -> int:
    """The suffix-match length of the hybrid draft a bundle decodes with by default (manifest
    speculative.lookup, what its validation measured; 0 = the drafter alone). The Android
    app's Bundle.java follows the same rule."""
    return manifest.speculative.lookup if manifest.speculative is not None else 0


def decoder(runner: ProgramRunner, mode: str, lookup: int | None = None, manifest: LmManifest | None = None):
    """(mode, decode function) for mode 'ar', 'spec' (every call a speculative step), 'auto'
    (where the program has spec_step: speculative steps only while they pay on this device,
    edgespec.runtime.adaptive; else 'ar') or 'ar-logits' (autoregressive through forward's
    logits even where the program has `next_token`: the full head, for comparison);
    the function takes (prompt_ids, max_new_tokens=, max_seq_len=, eos_ids=, ...). lookup: the
    hybrid draft's suffix-match length; None: the bundle's own (`bundle_lookup(manifest)`; 0, the
    drafter alone, without a manifest)."""
    if lookup is None:
        lookup = bundle_lookup(manifest) if manifest is not None else 0
    next_token = runner.next_token if runner.has_next_token else None
    if mode == "auto":
        if not runner.has_spec:
            return "ar", functools.partial(generate, runner.forward, next_token=next_token)
        policy, remember = device_policy(runner, manifest)
        return mode, functools.partial(_remembering, runner.forward, spec=runner, lookup=lookup, next_token=next_token, adaptive=policy, remember=remember)
    if mode == "spec":
        if not runner.has_spec:
            raise EdgespecError(f"program '{runner.path}' has no speculative methods (export with a trained drafter: recipe drafter.weights); use --mode ar")
        return mode, functools.partial(generate, runner.forward, spec=runner, lookup=lookup)
    if mode == "ar-logits":
        return mode, functools.partial(generate, runner.forward)
    return mode, functools.partial(generate, runner.forward, next_token=next_token)


def _remembering(step, prompt_ids: list[int], *, remember, **options):
    """`generate`, then `remember()`: what the adaptive policy measured is kept (`device_policy`)."""
    res = generate(step, prompt_ids, **options)
    remember()
    return res


def device_policy(runner: ProgramRunner, manifest: LmManifest | None):
    """The adaptive policy (edgespec.runtime.adaptive) for this program on this device, and a
    function that keeps what it has measured for the next process: the autoregressive and
    step times and each class's tokens per step, cached beside the block kernel's plan (by
    CPU build, thread count and the program's SHA-256), so a fresh `edgespec generate` starts
    informed instead of probing. Measured again when the plan is (timed anew). Without a
    manifest (the program's checksum unknown) nothing is kept."""
    import json

    from edgespec.kernels import library
    from edgespec.output_dir import renamed_into_place
    from edgespec.runtime.adaptive import AdaptiveSpeculation
    from edgespec.runtime.runner import threads

    policy = AdaptiveSpeculation()
    entry = manifest.files.get(LAYOUT.program) if manifest is not None else None
    if entry is None:
        return policy, lambda: None
    path = library.kernels_dir() / "speculation" / f"{library.library_path().stem}-{threads()}t-{entry.sha256[:16]}.json"
    plan = runner.kernel_plan.timed_at if runner.kernel_plan is not None else ""
    try:
        kept = json.loads(path.read_text())
        if kept.get("plan_timed_at") == plan:
            policy.learn(kept["knowledge"])
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or unreadable: measure afresh
        pass

    def remember() -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with renamed_into_place(path, ".policy-", ".json") as tmp:
                tmp.write_text(json.dumps({"plan_timed_at": plan, "knowledge": policy.knowledge()}))
        except OSError:  # an unwritable cache: the next process probes again
            pass

    return policy, remember


def verify_program(bundle_dir: str | Path, manifest: LmManifest) -> dict[str, Any]:
    """Load the bundle's program with ExecuTorch and `check_program` it against the manifest.
    Returns the metadata it read."""
    return check_program(ProgramRunner(Path(bundle_dir) / LAYOUT.program, program_data(bundle_dir, manifest)), manifest, bundle_dir)


def check_program(runner: ProgramRunner, manifest: LmManifest, bundle_dir: str | Path) -> dict[str, Any]:
    """Check that a loaded program answers its metadata methods and agrees with the bundle's
    manifest (methods, vocabulary, EOS ids, speculative tree); EdgespecError naming the first
    difference. Returns the metadata it read."""
    from edgespec.export import constants as C

    d = Path(bundle_dir)
    have = set(runner.program.method_names)
    missing = [m for m in manifest.methods if m not in have]
    if missing:
        raise EdgespecError(f"bundle '{d}': the manifest lists methods the program lacks: {missing}")
    lists = (C.GET_EOS_IDS, C.GET_SPEC_BRANCHING, C.GET_SPEC_PARENTS)
    meta = {name: runner.constant(name, many=name in lists) for name in C.METADATA_METHODS}
    if meta[C.GET_VOCAB_SIZE] != manifest.model.vocab_size:
        raise EdgespecError(f"bundle '{d}': program vocabulary {meta[C.GET_VOCAB_SIZE]} != manifest {manifest.model.vocab_size}")
    if [int(x) for x in meta[C.GET_EOS_IDS]] != list(manifest.tokenizer.eos_ids):
        raise EdgespecError(f"bundle '{d}': program EOS ids {meta[C.GET_EOS_IDS]} != manifest {list(manifest.tokenizer.eos_ids)}")
    spec = manifest.speculative
    if runner.has_spec != (spec is not None):
        raise EdgespecError(f"bundle '{d}': program {'has' if runner.has_spec else 'lacks'} spec_step but the manifest says the opposite")
    if spec is not None:
        for name in C.SPEC_METADATA_METHODS:
            meta[name] = runner.constant(name, many=name in lists)
        for name, key in ((C.GET_SPEC_BRANCHING, "tree_branching"), (C.GET_SPEC_PARENTS, "tree_parents")):
            if [int(x) for x in meta[name]] != list(getattr(spec, key)):
                raise EdgespecError(f"bundle '{d}': program {key} {[int(x) for x in meta[name]]} != manifest {list(getattr(spec, key))}")
    return {k: ([int(x) for x in v] if isinstance(v, list) else v) for k, v in meta.items()}
