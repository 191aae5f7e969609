"""Real read speech with transcripts: the LibriVox sentences of Debian's
`pocketsphinx-testdata` (16 kHz), with reference phonemes from hama's G2P."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import EdgespecError

LIBRIVOX_DIR = Path("/usr/share/pocketsphinx/test/data/librivox")
PACKAGE_HINT = "apt-get install pocketsphinx-testdata"


@dataclass(frozen=True)
class Utterance:
    id: str
    audio: Path
    text: str  # lower case words, as transcribed


def librivox_utterances(root: Path = LIBRIVOX_DIR) -> list[Utterance]:
    """The utterances listed in `transcription` (``<s> words </s> (id)`` per line)."""
    listing = root / "transcription"
    if not listing.is_file():
        raise EdgespecError(f"the asr suite needs the LibriVox test sentences in {root} ({PACKAGE_HINT})")
    out = []
    for line in listing.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"\s*(?:<s>)?(.*?)(?:</s>)?\s*\((\S+)\)\s*", line)
        if m and (root / f"{m.group(2)}.wav").is_file():
            out.append(Utterance(m.group(2), root / f"{m.group(2)}.wav", " ".join(m.group(1).split())))
    if not out:
        raise EdgespecError(f"no utterances with audio found in {listing}")
    return out


@functools.cache
def _g2p():
    from hama import G2PModel

    return G2PModel()


def reference_phonemes(text: str) -> list[str]:
    """The transcript's phonemes by hama's G2P (the reference for phoneme error rate)."""
    return [a.phoneme for a in _g2p().predict(text).alignments]


@functools.cache
def _p2g():
    from hama import P2GModel

    return P2GModel()


def phonemes_to_text(phoneme_text: str) -> str:
    """Spelled words from ``'p h o n | e m e s'`` by hama's P2G model (on the host)."""
    return _p2g().predict(phoneme_text).text if phoneme_text.strip() else ""
