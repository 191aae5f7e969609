import os
import warnings

import pytest

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_args():
    from edgespec.models.llama import LlamaArgs

    return LlamaArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=97, norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=True, max_seq_len=64)


@pytest.fixture
def tiny_model(tiny_args):
    import torch

    from edgespec.models.llama import Transformer

    torch.manual_seed(0)
    m = Transformer(tiny_args)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m.eval()
