"""Speech recognition: the .hama reader, the Conformer's weight mapping, CTC decoding,
streaming windows, audio input errors, metrics and the asr recipe (tiny random models);
the real hama model against hama's own engine (slow)."""

from __future__ import annotations

import struct
import wave

import numpy as np
import pytest
import torch

from edgespec.errors import EdgespecError
from edgespec.models.conformer import Conformer, ConformerArgs, LogMel, load_hama_conformer

TINY = ConformerArgs(n_mels=8, dim=16, n_heads=2, ffn_dim=32, kernel=5, n_blocks=2, vocab_size=7, n_fft=16, hop=4, sample_rate=400)


def write_hama(path, tensors: dict[str, torch.Tensor]) -> None:
    """A .hama container (the layout edgespec.models.hama reads), f16 except float32 for 'f32:' names."""
    header, blobs, offset = [b"HAMAPK", bytes([1, 2]), struct.pack("<I", len(tensors))], [], 0
    for name, t in tensors.items():
        f32 = name.startswith("f32:")
        arr = t.detach().numpy().astype(np.float32 if f32 else np.float16)
        name = name.removeprefix("f32:").encode()
        header.append(
            struct.pack("<H", len(name))
            + name
            + bytes([0 if f32 else 1, arr.ndim])
            + struct.pack(f"<{arr.ndim}I", *arr.shape)
            + struct.pack("<QQ", offset, arr.nbytes)
        )
        blobs.append(arr.tobytes())
        offset += arr.nbytes
    head = b"".join(header)
    path.write_bytes(head + b"\0" * ((16 - len(head) % 16) % 16) + b"".join(blobs))


def hama_tensors(front: LogMel, model: Conformer) -> dict[str, torch.Tensor]:
    """A model's weights under hama's names and layouts (the inverse of the loader's mapping)."""
    a, sd, p = model.args, model.state_dict(), "acoustic_model.model."
    out = {"f32:mel_fb": front.mel, "f32:stft_real_kernel": front.dft_real, "f32:stft_imag_kernel": front.dft_imag}
    named = ["ffn1.norm.weight", "ffn1.norm.bias", "ffn1.fc1.bias", "ffn1.fc2.bias", "attn_norm.weight", "attn_norm.bias", "attn.in_proj.bias", "attn.out_proj.bias",
             "conv.norm.weight", "conv.norm.bias", "conv.pointwise1.weight", "conv.pointwise1.bias", "conv.pointwise2.weight", "conv.pointwise2.bias",
             "ffn2.norm.weight", "ffn2.norm.bias", "ffn2.fc1.bias", "ffn2.fc2.bias", "norm.weight", "norm.bias"]  # fmt: skip
    for i in range(a.n_blocks):
        for n in named:
            w = sd[f"blocks.{i}.{n}"]
            out[f"{p}blocks.{i}.{n.replace('attn.in_proj.bias', 'attn.in_proj_bias')}"] = (
                w[..., None] if n.endswith("pointwise1.weight") or n.endswith("pointwise2.weight") else w
            )
    out[p + "proj.weight"], out[p + "proj.bias"] = sd["proj.weight"][..., None], sd["proj.bias"]
    convs = [sd["stem.weight"], sd["stem.bias"]] + [sd[f"blocks.{i}.conv.depthwise.{k}"] for i in range(a.n_blocks) for k in ("weight", "bias")]
    for j, t in enumerate(convs):
        out[f"onnx::Conv_{800 + j}"] = t
    mm = [sd[f"blocks.{i}.{n}.weight"].T for i in range(a.n_blocks) for n in ("ffn1.fc1", "ffn1.fc2", "attn.in_proj", "attn.out_proj", "ffn2.fc1", "ffn2.fc2")]
    for j, t in enumerate(mm):
        out[f"onnx::MatMul_{900 + j}"] = t
    return out


def random_tiny(seed: int = 0) -> tuple[LogMel, Conformer]:
    torch.manual_seed(seed)
    front, model = LogMel(TINY), Conformer(TINY)
    front.dft_real.normal_(), front.dft_imag.normal_(), front.mel.uniform_()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    # round to fp16 as the container stores them, so the loaded copy is exact
    for t in [*model.parameters(), front.dft_real, front.dft_imag, front.mel]:
        t.data = t.data.half().float()
    return front.eval(), model.eval()


def test_hama_container_round_trip_and_mapping(tmp_path):
    front, model = random_tiny()
    path = tmp_path / "tiny.hama"
    write_hama(path, hama_tensors(front, model))
    front2, model2 = load_hama_conformer(path, TINY)
    wave = torch.randn(1, 400)
    with torch.no_grad():
        assert torch.equal(front(wave), front2(wave))
        assert torch.allclose(model(front(wave)), model2(front2(wave)), atol=1e-5)


def test_corrupt_container_is_refused(tmp_path):
    front, model = random_tiny()
    path = tmp_path / "tiny.hama"
    write_hama(path, hama_tensors(front, model))
    raw = path.read_bytes()
    (tmp_path / "short.hama").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "magic.hama").write_bytes(b"NOTHAM" + raw[6:])
    for bad in ("short.hama", "magic.hama", "missing.hama"):
        with pytest.raises(EdgespecError, match=bad):
            load_hama_conformer(tmp_path / bad, TINY)
    write_hama(tmp_path / "wrong.hama", {k: v for k, v in hama_tensors(front, model).items() if "MatMul_900" not in k})
    with pytest.raises(EdgespecError, match="not a Conformer CTC model"):
        load_hama_conformer(tmp_path / "wrong.hama", TINY)


def test_frame_counts():
    front, model = random_tiny()
    for n in (64, 65, 100, 399, 400):
        with torch.no_grad():
            feats = front(torch.randn(1, n))
            assert feats.shape[-1] == TINY.feature_frames(n)
            assert model(feats).shape[1] == TINY.output_frames(feats.shape[-1]) == n // TINY.samples_per_frame + 1


def test_ctc_decode_collapses_repeats_and_groups_words():
    from edgespec.speech.ctc import decode

    tokens = ["a", "b", "c", "<wb>", "<blank>"]
    frames = [0, 0, 4, 0, 1, 3, 3, 2, 4, 4, 2]  # a a _ a b | | c _ _ c
    lp = torch.full((len(frames), 5), -10.0)
    lp[torch.arange(len(frames)), torch.tensor(frames)] = 0.0
    t = decode(lp, tokens)
    assert t.phonemes == ["a", "a", "b", "c", "c"]
    assert t.words == [["a", "a", "b"], ["c", "c"]]
    assert t.phoneme_text == "a a b | c c"
    # a blank bias large enough turns every frame to blank
    assert decode(lp, tokens, blank_bias=20.0).phonemes == []


def test_chunk_windows_partition_the_frames():
    from edgespec.speech.recognize import chunk_windows

    for n, c, l, r in [(1, 4, 0, 0), (10, 3, 2, 1), (100, 32, 64, 8), (33, 32, 0, 0)]:
        ws = chunk_windows(n, c, l, r)
        kept = [f for w in ws for f in range(w.keep_start, w.keep_stop)]
        assert kept == list(range(n))
        assert all(w.start == max(0, w.keep_start - l) and w.stop == min(n, w.keep_stop + r) for w in ws)


def test_streaming_with_full_context_equals_whole_utterance():
    from edgespec.speech.recognize import stream_log_probs

    front, model = random_tiny(1)
    wave = np.random.default_rng(0).standard_normal(1000).astype(np.float32)

    def run(seg):
        with torch.no_grad():
            return model(front(torch.from_numpy(seg)[None]))[0]

    whole = run(wave)
    step = TINY.samples_per_frame
    same, _ = stream_log_probs(run, wave, step, 4 * TINY.hop, 5, 10**6, 10**6)
    assert torch.allclose(same, whole, atol=1e-5)
    short, times = stream_log_probs(run, wave, step, 4 * TINY.hop, 5, 4, 2)
    assert short.shape == whole.shape and len(times) == -(-whole.shape[0] // 5)


def _wav(path, rate=16000, width=2, samples=1600, channels=1):
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels), f.setsampwidth(width), f.setframerate(rate)
        f.writeframes(b"\x01\x00" * (width // 2) * samples * channels if width == 2 else b"\x80" * samples * channels)


def test_audio_errors_and_resampling(tmp_path):
    from edgespec.speech.audio import read_wav

    _wav(tmp_path / "ok.wav")
    assert read_wav(tmp_path / "ok.wav").shape == (1600,)
    _wav(tmp_path / "stereo.wav", channels=2)
    assert read_wav(tmp_path / "stereo.wav").shape == (1600,)
    _wav(tmp_path / "r8k.wav", rate=8000, samples=800)
    with pytest.raises(EdgespecError, match="8000 Hz.*--resample"):
        read_wav(tmp_path / "r8k.wav")
    assert read_wav(tmp_path / "r8k.wav", resample=True).shape == (1600,)
    _wav(tmp_path / "u8.wav", width=1)
    with pytest.raises(EdgespecError, match="8-bit"):
        read_wav(tmp_path / "u8.wav")
    _wav(tmp_path / "empty.wav", samples=0)
    with pytest.raises(EdgespecError, match="no samples"):
        read_wav(tmp_path / "empty.wav")
    (tmp_path / "text.wav").write_text("not audio")
    with pytest.raises(EdgespecError, match="not a readable WAV"):
        read_wav(tmp_path / "text.wav")
    with pytest.raises(EdgespecError, match="not found"):
        read_wav(tmp_path / "nope.wav")


def test_error_rates():
    from edgespec.harness.metrics import edit_distance, error_rate

    assert edit_distance(list("kitten"), list("sitting")) == 3
    assert edit_distance([], list("abc")) == 3
    assert error_rate([["a", "b"], ["c"]], [["a", "x"], ["c", "d"]]) == pytest.approx(2 / 4)


def test_asr_recipe(tmp_path):
    from edgespec.config import AsrRecipe, load_recipe

    r = load_recipe("recipes/conformer-hama.yaml", ["streaming.chunk_frames=16", "quant.scheme=fp32"])
    assert isinstance(r, AsrRecipe) and r.streaming.chunk_frames == 16 and r.quant.scheme == "fp32"
    with pytest.raises(EdgespecError, match="quant.scheme"):
        load_recipe("recipes/conformer-hama.yaml", ["quant.scheme=int8wo"])
    with pytest.raises(EdgespecError, match="streaming.left_frames"):
        load_recipe("recipes/conformer-hama.yaml", ["streaming.left_frames=-1"])
    with pytest.raises(EdgespecError, match="task"):
        (tmp_path / "r.yaml").write_text("task: tts\n")
        load_recipe(tmp_path / "r.yaml")


@pytest.mark.slow
def test_hama_conformer_matches_hama_engine():
    """The real model, fp32 eager, against hama's own engine on the LibriVox sentences."""
    from edgespec.speech.asr_suite import _agreement, _engine_log_probs
    from edgespec.speech.audio import read_wav
    from edgespec.speech.librivox import librivox_utterances

    front, model = load_hama_conformer()
    agree, frames = 0.0, 0
    for u in librivox_utterances():
        w = read_wav(u.audio)
        with torch.no_grad():
            lp = model(front(torch.from_numpy(w)[None]))[0]
        ref = _engine_log_probs(w)
        assert ref is not None and ref.shape == tuple(lp.shape)
        agree += _agreement(lp, ref) * len(lp)
        frames += len(lp)
    assert agree / frames >= 0.99


SMALL = ConformerArgs(n_mels=8, dim=16, ffn_dim=32, kernel=5, n_blocks=2)  # real vocabulary, front end, heads


def _small_hama(tmp_path):
    torch.manual_seed(3)
    front, model = LogMel(SMALL), Conformer(SMALL)
    real_front, _ = load_hama_conformer()
    front.dft_real.copy_(real_front.dft_real), front.dft_imag.copy_(real_front.dft_imag)
    front.mel.copy_(real_front.mel[:, :: 80 // SMALL.n_mels])
    for p in model.parameters():
        p.data = p.data.normal_(0, 0.3).half().float()
    path = tmp_path / "small.hama"
    write_hama(path, hama_tensors(front, model))
    return path


@pytest.mark.parametrize("frontend", ["program", "host"])
def test_export_transcribe_a_small_model(tmp_path, frontend):
    """`edgespec export` of an asr recipe (a small random model in a .hama file, validation
    off), then the program against the eager model, whole and streaming, and `transcribe`."""
    from click.testing import CliRunner

    from edgespec.cli import main
    from edgespec.speech.audio import read_wav
    from edgespec.speech.recognize import Recognizer

    src = _small_hama(tmp_path)
    out = tmp_path / "b"
    args = [
        "export",
        "recipes/conformer-hama.yaml",
        f"model.source={src}",
        f"model.frontend={frontend}",
        "model.max_seconds=4",
        "quant.scheme=fp32",
        "validate.enabled=false",
        "-o",
        str(out),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    front, model = load_hama_conformer(src)
    wav = tmp_path / "a.wav"
    rng = np.random.default_rng(0)
    with wave.open(str(wav), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
        f.writeframes((rng.standard_normal(16000 * 3) * 3000).astype("<i2").tobytes())
    x = read_wav(wav)
    rec = Recognizer(out, threads=1)
    got = rec.recognize(x)
    with torch.no_grad():
        ref = model(front(torch.from_numpy(x[: len(x) // 320 * 320])[None]))[0]
    assert got.log_probs.shape == ref.shape and torch.allclose(got.log_probs, ref, atol=1e-3)
    streamed = rec.recognize_streaming(x, 8, 1000, 1000)  # full context: the same frames
    assert torch.allclose(streamed.log_probs, got.log_probs, atol=1e-3)
    r = CliRunner().invoke(main, ["transcribe", "-b", str(out), str(wav), "--phonemes", "--json"])
    assert r.exit_code == 0, r.output
    assert '"phonemes"' in r.output
    long = tmp_path / "long.wav"
    with wave.open(str(long), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
        f.writeframes(b"\x00\x01" * 16000 * 5)
    r = CliRunner().invoke(main, ["transcribe", "-b", str(out), str(long), "--phonemes"])
    assert r.exit_code != 0 and "--stream" in r.output
    r = CliRunner().invoke(main, ["transcribe", "-b", str(out), str(long), "--phonemes", "--stream"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["verify", "--bundle", str(out)])
    assert r.exit_code == 0 and "speech program answers 6 metadata methods" in r.output, r.output
    r = CliRunner().invoke(main, ["info", "--bundle", str(out)])
    assert r.exit_code == 0 and "speech recognition, 2 Conformer blocks" in r.output, r.output
    r = CliRunner().invoke(main, ["generate", "--bundle", str(out), "--prompt", "hi"])
    assert r.exit_code != 0 and "speech recognition bundle" in r.output
    r = CliRunner().invoke(main, ["validate", "--bundle", str(out), "--suite", "math"])
    assert r.exit_code != 0 and "'validate.suites': unknown field" in r.output


def test_stress_variants_stay_in_full_scale():
    from edgespec.speech.norm_calibration import stress_variants

    w = (np.sin(np.arange(4000) / 7) * 0.5).astype(np.float32)
    v = stress_variants(w)
    assert set(v) == {"speech", "loud", "quiet", "silence", "noise"}
    assert all(x.shape == w.shape and np.abs(x).max() <= 1.0 for x in v.values())
    assert np.abs(v["loud"]).max() == 1.0 and np.abs(v["quiet"]).max() < 1e-3 and not v["silence"].any()


def test_half_conformer_takes_and_returns_fp32():
    front, model = random_tiny(2)
    wave = torch.randn(1, 800)
    with torch.no_grad():
        ref = model(front(wave))
        half = Conformer(TINY).eval()
        half.load_state_dict(model.state_dict())
        got = half.to_half_()(front(wave))
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


@pytest.mark.slow
def test_normsearch_on_speech_chooses_safe_norms():
    """The search over the real model's 20 LayerNorms: the choices have no events anywhere,
    plain fp16 norms none on audio (only on the synthetic range-spanning rows)."""
    from edgespec.config import NumericsConfig
    from edgespec.speech.norm_calibration import asr_normsearch

    front, model = load_hama_conformer()
    res = asr_normsearch(front, model, NumericsConfig(calibration_prompts=2, heldout_prompts=1))
    s = res["summary"]
    assert s["layers"] == 20 and s["chosen_events_all_sets"] == 0
    assert s["naive_events"]["calibration"] == 0 and s["naive_events"]["heldout"] == 0 and s["naive_events"]["adversarial"] > 0


@pytest.mark.slow
def test_export_the_recipe_and_transcribe_librivox(tmp_path):
    """README's speech command on the real model: the export passes its gates, and a real
    sentence comes back as words."""
    from click.testing import CliRunner

    from edgespec.cli import main
    from edgespec.speech.librivox import librivox_utterances

    out = tmp_path / "asr"
    r = CliRunner().invoke(main, ["export", "recipes/conformer-hama.yaml", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "gates passed" in r.output
    u = next(u for u in librivox_utterances() if u.id.endswith("0880"))  # "he was not an ill disposed young man"
    r = CliRunner().invoke(main, ["transcribe", "-b", str(out), str(u.audio)])
    assert r.exit_code == 0, r.output
    assert "young man" in r.output
