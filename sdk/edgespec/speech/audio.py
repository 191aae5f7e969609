"""Reading audio for recognition: 16-bit PCM WAV, mono, at the model's sample rate.

Other rates are resampled (linear interpolation) only when asked; otherwise refused with a
message that says how to convert. Every failure is an `EdgespecError` naming the file.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from edgespec.errors import EdgespecError


def read_wav(path: str | Path, sample_rate: int = 16000, resample: bool = False) -> np.ndarray:
    """Mono float32 samples in [-1, 1] at `sample_rate`."""
    path = Path(path)
    if not path.is_file():
        raise EdgespecError(f"audio '{path}' not found")
    try:
        with wave.open(str(path), "rb") as f:
            rate, channels, width, n = f.getframerate(), f.getnchannels(), f.getsampwidth(), f.getnframes()
            raw = f.readframes(n)
    except (wave.Error, EOFError) as e:
        raise EdgespecError(f"audio '{path}' is not a readable WAV file ({e}); convert it with e.g. `ffmpeg -i IN -ar {sample_rate} -ac 1 OUT.wav`") from None
    if width != 2:
        raise EdgespecError(
            f"audio '{path}' has {8 * width}-bit samples; edgespec reads 16-bit PCM WAV (convert with `ffmpeg -i IN -ar {sample_rate} -ac 1 -sample_fmt s16 OUT.wav`)"
        )
    x = np.frombuffer(raw[: len(raw) // (2 * channels) * 2 * channels], dtype="<i2").astype(np.float32) / 32768.0
    x = x.reshape(-1, channels).mean(axis=1)
    if len(x) == 0:
        raise EdgespecError(f"audio '{path}' holds no samples")
    if rate != sample_rate:
        if not resample:
            raise EdgespecError(
                f"audio '{path}' is sampled at {rate} Hz, the model takes {sample_rate} Hz: pass --resample, or convert it (`ffmpeg -i IN -ar {sample_rate} -ac 1 OUT.wav`)"
            )
        x = resample_linear(x, rate, sample_rate)
    return x


def resample_linear(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Linear-interpolation resampling (no anti-aliasing filter: fine for speech going up, or
    down from 22.05/24 kHz; a proper resampler is better for large factors)."""
    n = max(1, round(len(x) * dst / src))
    t = np.arange(n, dtype=np.float64) * (src / dst)
    return np.interp(t, np.arange(len(x), dtype=np.float64), x).astype(np.float32)
