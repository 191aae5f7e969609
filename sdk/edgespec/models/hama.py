"""Read the `.hama` tensor container of the `hama` package (its speech and P2G models).

Layout (little-endian), as found in hama 1.7.0's assets:

    b"HAMAPK" | version u8 u8 | count u32
    count x ( name_len u16 | name utf-8 | dtype u8 (0 f32, 1 f16) | ndim u8 | dims u32 x ndim
              | offset u64 | nbytes u64 )
    data: starts at the header's end rounded up to 16 bytes; offsets are relative to it

The weights are read from the installed package at run time; edgespec keeps no copy.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import torch

from edgespec.errors import EdgespecError

MAGIC = b"HAMAPK"
_DTYPES = {0: np.float32, 1: np.float16}
HAMA_PIP = "pip install hama==1.7.0"


def read_hama(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a `.hama` file as fp32 torch tensors, in file order."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise EdgespecError(f"cannot read '{path}': {e.strerror or e}") from None
    try:
        return _parse(raw)
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise EdgespecError(f"'{path}' is not a readable .hama container ({e})") from None


def _parse(raw: bytes) -> dict[str, torch.Tensor]:
    if raw[:6] != MAGIC:
        raise ValueError(f"magic {raw[:6]!r}, expected {MAGIC!r}")
    (count,) = struct.unpack_from("<I", raw, 8)
    pos, entries = 12, []
    for _ in range(count):
        (name_len,) = struct.unpack_from("<H", raw, pos)
        name = raw[pos + 2 : pos + 2 + name_len].decode("utf-8")
        pos += 2 + name_len
        dtype, ndim = raw[pos], raw[pos + 1]
        dims = struct.unpack_from(f"<{ndim}I", raw, pos + 2)
        offset, nbytes = struct.unpack_from("<QQ", raw, pos + 2 + 4 * ndim)
        pos += 2 + 4 * ndim + 16
        if dtype not in _DTYPES:
            raise ValueError(f"tensor {name!r} has unknown dtype code {dtype}")
        entries.append((name, _DTYPES[dtype], dims, offset, nbytes))
    base = (pos + 15) // 16 * 16
    out = {}
    for name, dtype, dims, offset, nbytes in entries:
        itemsize = np.dtype(dtype).itemsize
        if nbytes != itemsize * int(np.prod(dims)) or base + offset + nbytes > len(raw):
            raise ValueError(f"tensor {name!r} ({dims}, {nbytes} bytes at {offset}) does not fit the file")
        arr = np.frombuffer(raw, dtype=dtype, count=nbytes // itemsize, offset=base + offset).reshape(dims)
        out[name] = torch.from_numpy(arr.astype(np.float32))
    return out


def hama_asset(name: str) -> Path:
    """A file of the installed hama package's assets (e.g. ``asr_waveform.hama``)."""
    from edgespec.packages import package_file

    return package_file("hama", f"assets/{name}", f"the hama asset {name}", HAMA_PIP)


def phoneme_tokens() -> list[str]:
    """The ASR head's output tokens: hama's decoder vocabulary, then ``<wb>`` (word boundary)
    and ``<blank>`` (CTC blank), as hama's own ASR model orders them."""
    import json

    data = json.loads(hama_asset("g2p_vocab.json").read_text(encoding="utf-8"))
    return [*data["decoder"], "<wb>", "<blank>"]
