"""Small, valid manifests for tests that need a bundle without a program."""

from edgespec.config import Recipe
from edgespec.manifest import LAYOUT, LmManifest, LmModelInfo, SpeculativeInfo, TokenizerInfo


def tiny_manifest(speculative: dict | None = None, **fields) -> LmManifest:
    """A language-model manifest: a one-layer decoder of vocabulary 10, EOS 2, the default
    recipe; files are filled in by `edgespec.bundle.write_manifest`."""
    return LmManifest(
        model=LmModelInfo(name="t", source="t", dim=8, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=16, vocab_size=10),
        recipe=Recipe(),
        precision="fp32",
        tokenizer=TokenizerInfo(file=LAYOUT.tokenizer, eos_ids=(2,)),
        speculative=None if speculative is None else SpeculativeInfo(**{"tree_branching": [1], "tree_parents": [-1], **speculative}),
        **fields,
    )


def tiny_manifest_data(**top) -> dict:
    """The same as plain JSON data, with top-level fields replaced."""
    return tiny_manifest().to_dict() | top
