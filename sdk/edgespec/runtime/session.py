"""A bundle opened for decoding: manifest, tokenizer and program, plus the decoders over it."""

from __future__ import annotations

import functools
from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.models.tokenizer import Tokenizer
from edgespec.runtime.generate import generate, generate_spec
from edgespec.runtime.program import ProgramRunner


def open_bundle(bundle: str | Path) -> tuple[dict, Tokenizer, ProgramRunner]:
    """(manifest, tokenizer, program runner) of a bundle directory."""
    from edgespec.bundle import PROGRAM, read_manifest

    manifest = read_manifest(bundle)
    tk = manifest["tokenizer"]
    tokenizer = Tokenizer.from_file(
        Path(bundle) / tk["file"], chat_template=tk.get("chat_template"), bos_id=tk.get("bos_id"), eos_ids=tuple(tk["eos_ids"]), add_bos=tk.get("add_bos", False)
    )
    return manifest, tokenizer, ProgramRunner(Path(bundle) / PROGRAM)


def prompt_ids(tokenizer: Tokenizer, prompt: str, chat_template: bool = True) -> list[int]:
    """Token ids of a user prompt, wrapped in the chat template when the model has one."""
    if not prompt.strip():
        raise EdgespecError("the prompt is empty")
    text = tokenizer.apply_chat_template(prompt) if chat_template and tokenizer.chat_template else prompt
    return tokenizer.encode(text)


def decoder(runner: ProgramRunner, mode: str, lookup: int = 0):
    """(mode, decode function) for mode 'ar', 'spec' or 'auto' (spec when the program has it);
    the function takes (prompt_ids, max_new_tokens=, max_seq_len=, eos_ids=, ...)."""
    if mode == "auto":
        mode = "spec" if runner.has_spec else "ar"
    if mode == "spec":
        if not runner.has_spec:
            raise EdgespecError(f"program '{runner.path}' has no speculative methods (export with trained streams: recipe streams.weights); use --mode ar")
        return mode, functools.partial(generate_spec, runner, lookup=lookup)
    return mode, functools.partial(generate, runner.forward)
