"""A Conformer CTC speech recognizer (Gulati et al. 2020) with a log-mel front end, in plain
PyTorch: the second model family edgespec exports (the first is the Llama decoder).

    waveform [B, N] --LogMel--> features [B, n_mels, F]   (F = 1 + N // hop)
    features --stem conv (k 3, stride 2) + SiLU--> x [B, T, d]   (T = (F - 1) // 2 + 1)
    x --n_blocks x ConformerBlock--> --Linear--> log-probabilities [B, T, vocab]

Each block is the macaron layout: x + FFN/2, x + MHSA, x + Conv, x + FFN/2, LayerNorm. No
positional encoding: the convolutions carry position. The weights come from the hama
package's `asr_waveform.hama` (`load_hama_conformer`); the architecture was settled by
matching hama's own engine on real speech (docs/conformer.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ConformerArgs:
    """Shapes of a Conformer CTC model and its front end."""

    n_mels: int = 80
    dim: int = 144
    n_heads: int = 4
    ffn_dim: int = 576
    kernel: int = 31
    n_blocks: int = 4
    vocab_size: int = 191
    n_fft: int = 400
    hop: int = 160
    sample_rate: int = 16000
    norm_eps: float = 1e-5
    log_floor: float = 1e-10

    @property
    def n_freqs(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def samples_per_frame(self) -> int:
        """Input samples per output frame (hop x the stem's stride 2)."""
        return 2 * self.hop

    def feature_frames(self, n_samples: int) -> int:
        return 1 + n_samples // self.hop

    def output_frames(self, n_feature_frames: int) -> int:
        return (n_feature_frames - 1) // 2 + 1


class LogMel(nn.Module):
    """Log-mel spectrogram as convolutions: a windowed DFT (real and imaginary kernels,
    [n_freqs, 1, n_fft]) with stride hop over the zero-padded waveform, power, mel matrix
    [n_freqs, n_mels], natural log floored at `log_floor`."""

    def __init__(self, args: ConformerArgs):
        super().__init__()
        self.args = args
        self.register_buffer("dft_real", torch.zeros(args.n_freqs, 1, args.n_fft))
        self.register_buffer("dft_imag", torch.zeros(args.n_freqs, 1, args.n_fft))
        self.register_buffer("mel", torch.zeros(args.n_freqs, args.n_mels))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        a = self.args
        x = F.pad(wave[:, None, :], (a.n_fft // 2, a.n_fft // 2))  # [B, 1, N + n_fft]
        re = F.conv1d(x, self.dft_real, stride=a.hop)  # [B, n_freqs, F]
        im = F.conv1d(x, self.dft_imag, stride=a.hop)
        power = re * re + im * im
        mel = torch.matmul(power.transpose(1, 2), self.mel).transpose(1, 2)  # [B, n_mels, F]
        return torch.log(torch.clamp(mel, min=a.log_floor))


class ConformerFeedForward(nn.Module):
    def __init__(self, args: ConformerArgs):
        super().__init__()
        self.norm = nn.LayerNorm(args.dim, eps=args.norm_eps)
        self.fc1 = nn.Linear(args.dim, args.ffn_dim)
        self.fc2 = nn.Linear(args.ffn_dim, args.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(self.norm(x))))


class SelfAttention(nn.Module):
    """Multi-head self-attention over all frames (or those `mask` allows: [T, T] bool)."""

    def __init__(self, args: ConformerArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.in_proj = nn.Linear(args.dim, 3 * args.dim)
        self.out_proj = nn.Linear(args.dim, args.dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.in_proj(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)  # 3 x [B, H, T, dh]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(y.transpose(1, 2).reshape(b, t, d))


class ConvModule(nn.Module):
    """LayerNorm, pointwise to 2d + GLU, depthwise conv (batch norm folded in) + SiLU, pointwise."""

    def __init__(self, args: ConformerArgs):
        super().__init__()
        self.norm = nn.LayerNorm(args.dim, eps=args.norm_eps)
        self.pointwise1 = nn.Linear(args.dim, 2 * args.dim)
        self.depthwise = nn.Conv1d(args.dim, args.dim, args.kernel, padding=args.kernel // 2, groups=args.dim)
        self.pointwise2 = nn.Linear(args.dim, args.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.glu(self.pointwise1(self.norm(x)), dim=-1)  # [B, T, d]
        h = F.silu(self.depthwise(h.transpose(1, 2))).transpose(1, 2)
        return self.pointwise2(h)


class ConformerBlock(nn.Module):
    def __init__(self, args: ConformerArgs):
        super().__init__()
        self.ffn1 = ConformerFeedForward(args)
        self.attn_norm = nn.LayerNorm(args.dim, eps=args.norm_eps)
        self.attn = SelfAttention(args)
        self.conv = ConvModule(args)
        self.ffn2 = ConformerFeedForward(args)
        self.norm = nn.LayerNorm(args.dim, eps=args.norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + 0.5 * self.ffn1(x)
        x = x + self.attn(self.attn_norm(x), mask)
        x = x + self.conv(x)
        x = x + 0.5 * self.ffn2(x)
        return self.norm(x)


class Conformer(nn.Module):
    """features [B, n_mels, F] -> CTC log-probabilities [B, T, vocab]."""

    def __init__(self, args: ConformerArgs):
        super().__init__()
        self.args = args
        self.stem = nn.Conv1d(args.n_mels, args.dim, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(ConformerBlock(args) for _ in range(args.n_blocks))
        self.proj = nn.Linear(args.dim, args.vocab_size)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = F.silu(self.stem(features.to(self.stem.weight.dtype))).transpose(1, 2)  # [B, T, d]
        for block in self.blocks:
            x = block(x, mask)
        return torch.log_softmax(self.proj(x).float(), dim=-1)

    def to_half_(self) -> Conformer:
        """fp16 weights and activations (in place); still fp32 features in, fp32 log-probabilities out."""
        return self.half()


class WaveformConformer(nn.Module):
    """The front end inside the program: waveform [B, N] -> log-probabilities [B, T, vocab]."""

    def __init__(self, frontend: LogMel, encoder: Conformer):
        super().__init__()
        self.frontend, self.encoder = frontend, encoder

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.frontend(wave))


# hama's tensor names: what ONNX constant folding left named, and the rest by role, in file order
_BLOCK_NAMED = (
    "ffn1.norm.weight", "ffn1.norm.bias", "ffn1.fc1.bias", "ffn1.fc2.bias",
    "attn_norm.weight", "attn_norm.bias", "attn.in_proj_bias", "attn.out_proj.bias",
    "conv.norm.weight", "conv.norm.bias", "conv.pointwise1.weight", "conv.pointwise1.bias",
    "conv.pointwise2.weight", "conv.pointwise2.bias",
    "ffn2.norm.weight", "ffn2.norm.bias", "ffn2.fc1.bias", "ffn2.fc2.bias", "norm.weight", "norm.bias",
)  # fmt: skip
_BLOCK_MATMULS = ("ffn1.fc1", "ffn1.fc2", "attn.in_proj", "attn.out_proj", "ffn2.fc1", "ffn2.fc2")


def _state_dict_from_hama(t: dict[str, torch.Tensor], args: ConformerArgs) -> tuple[dict, dict]:
    """(front-end buffers, Conformer state dict) from hama's tensors, every shape checked."""
    prefix = "acoustic_model.model."
    sd: dict[str, torch.Tensor] = {}
    for i in range(args.n_blocks):
        for name in _BLOCK_NAMED:
            key = name.replace("attn.in_proj_bias", "attn.in_proj.bias")
            w = t[f"{prefix}blocks.{i}.{name}"]
            sd[f"blocks.{i}.{key}"] = w[..., 0] if w.ndim == 3 else w  # pointwise convs -> linears
    sd["proj.weight"], sd["proj.bias"] = t[prefix + "proj.weight"][..., 0], t[prefix + "proj.bias"]

    def by_number(kind: str) -> list[torch.Tensor]:
        names = sorted((k for k in t if k.startswith(f"onnx::{kind}_")), key=lambda k: int(k.rsplit("_", 1)[1]))
        return [t[k] for k in names]

    convs, matmuls = by_number("Conv"), by_number("MatMul")
    if len(convs) != 2 + 2 * args.n_blocks or len(matmuls) != len(_BLOCK_MATMULS) * args.n_blocks:
        raise ValueError(f"expected {2 + 2 * args.n_blocks} folded convolutions and {6 * args.n_blocks} matmuls, found {len(convs)} and {len(matmuls)}")
    sd["stem.weight"], sd["stem.bias"] = convs[0], convs[1]
    for i in range(args.n_blocks):
        sd[f"blocks.{i}.conv.depthwise.weight"], sd[f"blocks.{i}.conv.depthwise.bias"] = convs[2 + 2 * i], convs[3 + 2 * i]
        for j, name in enumerate(_BLOCK_MATMULS):
            sd[f"blocks.{i}.{name}.weight"] = matmuls[len(_BLOCK_MATMULS) * i + j].T  # x @ W -> Linear
    front = {"dft_real": t["stft_real_kernel"], "dft_imag": t["stft_imag_kernel"], "mel": t["mel_fb"]}
    return front, sd


def _load_checked(module: nn.Module, sd: dict[str, torch.Tensor]) -> None:
    own = module.state_dict()
    missing, extra = sorted(set(own) - set(sd)), sorted(set(sd) - set(own))
    bad = [k for k in own if k in sd and own[k].shape != sd[k].shape]
    if missing or extra or bad:
        raise ValueError(
            f"weights do not fit the Conformer: missing {missing[:3]}, unexpected {extra[:3]}, shape mismatch {[(k, tuple(sd[k].shape), tuple(own[k].shape)) for k in bad[:3]]}"
        )
    module.load_state_dict(sd)


def args_from_hama(t: dict[str, torch.Tensor], base: ConformerArgs = ConformerArgs()) -> ConformerArgs:
    """The shapes of a hama Conformer read off its tensors; what they do not show (heads,
    hop, sample rate, epsilons) comes from `base`."""
    prefix = "acoustic_model.model."
    n_blocks = len({k.split(".")[3] for k in t if k.startswith(prefix + "blocks.")})
    dim = t[prefix + "blocks.0.norm.weight"].shape[0]
    depthwise = [v for k, v in t.items() if k.startswith("onnx::Conv_") and v.ndim == 3 and v.shape[1] == 1]
    stem = next(v for k, v in t.items() if k.startswith("onnx::Conv_") and v.ndim == 3 and v.shape[1] != 1)
    return dataclasses.replace(
        base,
        n_mels=stem.shape[1],
        dim=dim,
        ffn_dim=t[prefix + "blocks.0.ffn1.fc1.bias"].shape[0],
        kernel=depthwise[0].shape[2] if depthwise else base.kernel,
        n_blocks=n_blocks,
        vocab_size=t[prefix + "proj.bias"].shape[0],
        n_fft=t["stft_real_kernel"].shape[2],
    )


def load_hama_conformer(path: str | Path | None = None, args: ConformerArgs | None = None) -> tuple[LogMel, Conformer]:
    """hama's phoneme recognizer (default: the installed package's ``asr_waveform.hama``) as
    (front end, Conformer) in eval mode, fp32. args: None reads the shapes off the file."""
    from edgespec.errors import EdgespecError
    from edgespec.models.hama import hama_asset, read_hama

    path = Path(path) if path is not None else hama_asset("asr_waveform.hama")
    tensors = read_hama(path)
    try:
        args = args or args_from_hama(tensors)
        frontend, encoder = LogMel(args), Conformer(args)
        front, sd = _state_dict_from_hama(tensors, args)
        _load_checked(frontend, front)
        _load_checked(encoder, sd)
    except (KeyError, ValueError, IndexError, StopIteration) as e:
        raise EdgespecError(f"'{path}' is not a Conformer CTC model edgespec can load ({type(e).__name__}: {e})") from None
    return frontend.eval(), encoder.eval()


def load_conformer_source(source: str) -> tuple[LogMel, Conformer]:
    """A recipe's ``model.source``: ``hama-asr`` (the installed hama package's recognizer) or
    a path to a ``.hama`` file."""
    from edgespec.errors import EdgespecError

    if source == "hama-asr":
        return load_hama_conformer()
    if not Path(source).is_file():
        raise EdgespecError(f"model.source '{source}' is neither 'hama-asr' nor an existing .hama file")
    return load_hama_conformer(source)
