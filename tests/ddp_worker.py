"""Train tiny streams; run alone or under torchrun. Writes params + log to argv[1]."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from edgespec.config import (
    DrafterConfig,
    TrainConfig,  # noqa: E402
)
from edgespec.models.llama import LlamaArgs, Transformer  # noqa: E402
from edgespec.speculative.features import FeatureCache  # noqa: E402
from edgespec.speculative.streams import StreamParams, StreamsModel  # noqa: E402
from edgespec.speculative.train import _dist, train_drafter  # noqa: E402
from test_train import _periodic_examples  # noqa: E402


def main(out: str, batch_size: int) -> None:
    torch.manual_seed(0)
    args = LlamaArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, max_seq_len=64)
    base = Transformer(args)
    with torch.no_grad():
        for p in base.parameters():
            p.normal_(0, 0.2)
    base.requires_grad_(False)
    spec = StreamsModel(base, StreamParams(base, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    ex = _periodic_examples()
    hp = TrainConfig(steps=12, batch_size=batch_size, lr=5e-3, warmup_steps=2, checkpoint_every=100, depth_weights=(1.0, 1.0), bf16=False)
    log = train_drafter(spec, ex, FeatureCache(spec, ex).h, hp, Path(out) / "run")
    rank, _ = _dist()
    if rank == 0:
        torch.save(spec.params.state_dict(), Path(out) / "params.pt")
        (Path(out) / "loss.json").write_text(json.dumps(log.loss))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
