"""WAV reading and resampling in the worker, against files written apart from the reader: the
stdlib ``wave`` module writes the integer PCM files, and float and WAVE_FORMAT_EXTENSIBLE files are
laid out byte by byte with ``struct``. Resampling is checked against sines computed at the new
rate and against the windowed-sinc sum evaluated directly, sample by sample, in float64."""

from __future__ import annotations

import io
import math
import struct
import wave

import numpy as np
import pytest
import torch

from tensorgate._audio import fit_length, read_wav, resample, silent_wav, to_mono
from tensorgate._errors import (
    AUDIO_FORMAT_NOT_SUPPORTED,
    AUDIO_TOO_LONG,
    BAD_AUDIO,
    WorkerError,
)

WHERE = 'input "audio" item 2'
RATE = 16000


def signal(frames: int = 400, channels: int = 1, seed: int = 0) -> np.ndarray:
    """[channels, frames] float64 test samples in [-1, 1), full scale at both ends included."""
    rng = np.random.default_rng(seed)
    out = rng.uniform(-1.0, 1.0, size=(channels, frames))
    out[:, 0] = -1.0
    out[:, 1] = 1.0 - 1e-9
    return out


def quantise(samples: np.ndarray, bits: int) -> np.ndarray:
    """Integer sample values for ``bits``-bit PCM (unsigned around 128 for 8-bit)."""
    scale = 2 ** (bits - 1)
    ints = np.clip(np.floor(samples * scale), -scale, scale - 1).astype(np.int64)
    return ints + 128 if bits == 8 else ints


def pcm_wav(samples: np.ndarray, bits: int, rate: int = RATE) -> bytes:
    """A PCM WAV of ``samples`` quantised to ``bits``, written by the stdlib ``wave`` module."""
    ints = quantise(samples, bits)
    width = bits // 8
    frames = b"".join(
        int(v).to_bytes(width, "little", signed=bits != 8) for v in ints.T.reshape(-1)
    )
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(samples.shape[0])
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(frames)
    return out.getvalue()


def chunk(chunk_id: bytes, body: bytes, size: int | None = None) -> bytes:
    """A RIFF chunk, with the pad byte after an odd-sized body; ``size`` overrides the header."""
    pad = b"\x00" if len(body) % 2 else b""
    return struct.pack("<4sI", chunk_id, len(body) if size is None else size) + body + pad


def riff(*chunks: bytes, form: bytes = b"WAVE") -> bytes:
    body = form + b"".join(chunks)
    return struct.pack("<4sI", b"RIFF", len(body)) + body


def fmt(
    tag: int,
    channels: int = 1,
    rate: int = RATE,
    bits: int = 16,
    block_align: int | None = None,
    subformat: int | bytes | None = None,
) -> bytes:
    """A ``fmt `` chunk; with ``subformat`` it is WAVE_FORMAT_EXTENSIBLE around that format code
    (or that whole GUID)."""
    align = channels * bits // 8 if block_align is None else block_align
    body = struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)
    if subformat is not None:
        guid = (
            subformat
            if isinstance(subformat, bytes)
            else struct.pack("<H", subformat) + bytes.fromhex("000000001000800000aa00389b71")
        )
        body += struct.pack("<HHI", 22, bits, 0) + guid
    return chunk(b"fmt ", body)


def float_wav(samples: np.ndarray, bits: int, extensible: bool = False) -> bytes:
    channels = samples.shape[0]
    code = "f" if bits == 32 else "d"
    data = struct.pack(f"<{samples.size}{code}", *samples.T.reshape(-1))
    tag = 0xFFFE if extensible else 3
    return riff(
        fmt(tag, channels, bits=bits, subformat=3 if extensible else None), chunk(b"data", data)
    )


def read(data: bytes, max_seconds: float = 60.0) -> tuple[np.ndarray, int]:
    return read_wav(memoryview(data), WHERE, max_seconds)


@pytest.mark.parametrize("bits", [8, 16, 24, 32])
@pytest.mark.parametrize("channels", [1, 2, 3])
def test_pcm_matches_the_written_samples(bits: int, channels: int) -> None:
    original = signal(channels=channels)
    samples, rate = read(pcm_wav(original, bits, rate=22050))
    assert rate == 22050
    assert samples.dtype == np.float32
    assert samples.shape == original.shape
    assert samples.flags.c_contiguous and samples.flags.writeable
    ints = quantise(original, bits) - (128 if bits == 8 else 0)
    np.testing.assert_allclose(samples, ints / 2 ** (bits - 1), rtol=1e-7, atol=0)
    # One quantisation step, or float32's own resolution for 32-bit PCM (whose top rounds to 1).
    assert np.abs(samples - original).max() <= max(2.0 ** -(bits - 1), 2.0**-24)
    assert samples.min() >= -1.0 and samples.max() <= 1.0


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("extensible", [False, True])
def test_float_matches_the_written_samples(bits: int, extensible: bool) -> None:
    original = signal(channels=2)
    original[0, 5] = 1.5  # over full scale: float WAVs keep it, as other readers do
    samples, rate = read(float_wav(original, bits, extensible))
    assert rate == RATE
    assert samples.dtype == np.float32
    np.testing.assert_allclose(samples, original.astype(np.float32), rtol=0, atol=0)


@pytest.mark.parametrize("bits", [16, 24, 32])
def test_extensible_pcm(bits: int) -> None:
    original = signal(channels=2)
    ints = quantise(original, bits)
    data = b"".join(int(v).to_bytes(bits // 8, "little", signed=True) for v in ints.T.reshape(-1))
    samples, _ = read(riff(fmt(0xFFFE, 2, bits=bits, subformat=1), chunk(b"data", data)))
    np.testing.assert_allclose(samples, ints / 2 ** (bits - 1), rtol=1e-7, atol=0)


def test_a_memoryview_slice_and_bytes_read_alike() -> None:
    wav = pcm_wav(signal(), 16)
    arena = memoryview(b"\x01\x02\x03" + wav + b"\x04")
    from_slice, _ = read_wav(arena[3 : 3 + len(wav)], WHERE, 60.0)
    from_bytes, _ = read_wav(wav, WHERE, 60.0)
    np.testing.assert_array_equal(from_slice, from_bytes)


def test_silent_wav() -> None:
    wav = silent_wav(44100, 16)
    with wave.open(io.BytesIO(wav)) as reader:
        assert reader.getparams()[:4] == (1, 2, 44100, 16)
        assert reader.readframes(16) == bytes(32)
    samples, rate = read(wav)
    assert rate == 44100
    np.testing.assert_array_equal(samples, np.zeros((1, 16), dtype=np.float32))


def test_stereo_mixes_to_the_mean() -> None:
    left = np.linspace(-0.5, 0.5, 100)
    samples, _ = read(pcm_wav(np.stack([left, -left / 2]), 16))
    mono = to_mono(samples)
    assert mono.shape == (100,) and mono.dtype == np.float32
    np.testing.assert_allclose(mono, (samples[0] + samples[1]) / 2, rtol=0, atol=1e-7)
    np.testing.assert_allclose(mono, left / 4, atol=2 / 32768)


def test_mono_is_its_one_channel() -> None:
    samples, _ = read(pcm_wav(signal(), 16))
    mono = to_mono(samples)
    assert mono.shape == (400,)
    np.testing.assert_array_equal(mono, samples[0])


def test_chunks_before_data_are_skipped_with_their_pad_byte() -> None:
    original = signal(frames=50)
    ints = quantise(original, 16)
    data = struct.pack("<50h", *ints[0])
    info = chunk(b"LIST", b"INFOISFT\x05\x00\x00\x00test\x00")  # 17 bytes: padded to 18
    assert len(info) == 8 + 18
    wav = riff(chunk(b"JUNK", b"\x00" * 4), fmt(1), info, chunk(b"data", data), info)
    samples, _ = read(wav)
    np.testing.assert_allclose(samples[0], ints[0] / 32768, rtol=1e-7, atol=0)


@pytest.mark.parametrize("size", [0xFFFFFFFF, 0])
def test_a_streaming_data_size_reads_to_the_end(size: int) -> None:
    ints = np.arange(-30, 30) * 1000
    data = struct.pack("<60h", *ints)
    samples, _ = read(riff(fmt(1), chunk(b"data", data, size=size)))
    np.testing.assert_allclose(samples[0], ints / 32768, rtol=1e-7, atol=0)


def test_too_long() -> None:
    wav = pcm_wav(signal(frames=RATE * 2), 16)
    assert read(wav, max_seconds=2.0)[0].shape == (1, RATE * 2)
    with pytest.raises(WorkerError) as caught:
        read(wav, max_seconds=1.5)
    assert caught.value.code == AUDIO_TOO_LONG
    assert caught.value.message.startswith(WHERE + ": ")
    assert "2.00 s" in caught.value.message and "1.5 s" in caught.value.message
    assert "max_seconds" in caught.value.message


DATA16 = chunk(b"data", struct.pack("<4h", 1, 2, 3, 4))

BAD_FILES = {
    "empty": (b"", BAD_AUDIO, "empty"),
    "mp3 with id3": (b"ID3\x04\x00\x00\x00\x00\x00\x00" + bytes(100), BAD_AUDIO, "an MP3 file"),
    "mp3 frame": (b"\xff\xfb\x90\x64" + bytes(100), BAD_AUDIO, "an MP3 file"),
    "flac": (b"fLaC\x00\x00\x00\x22" + bytes(100), BAD_AUDIO, "a FLAC file"),
    "ogg": (b"OggS\x00\x02" + bytes(100), BAD_AUDIO, "an OGG file"),
    "text": (b"hello, world", BAD_AUDIO, "starting 68656c6c6f2c2077"),
    "short riff": (b"RIFF\x10\x00", BAD_AUDIO, "header is truncated"),
    "riff not wave": (riff(form=b"WEBP"), BAD_AUDIO, "type 'WEBP'"),
    "no fmt": (riff(chunk(b"LIST", b"INFO")), BAD_AUDIO, "no fmt chunk"),
    "data before fmt": (riff(DATA16, fmt(1)), BAD_AUDIO, "no fmt chunk before its data"),
    "no data": (riff(fmt(1), chunk(b"LIST", b"INFO")), BAD_AUDIO, "no data chunk"),
    "lying data size": (
        riff(fmt(1), chunk(b"data", bytes(100), size=1000)),
        BAD_AUDIO,
        "declares 1000 bytes but only 100 follow",
    ),
    "truncated chunk": (
        riff(fmt(1), chunk(b"LIST", bytes(10), size=500)),
        BAD_AUDIO,
        "'LIST' chunk declares 500 bytes but only 10",
    ),
    "truncated fmt": (
        riff(chunk(b"fmt ", bytes(10)), DATA16),
        BAD_AUDIO,
        "fmt chunk is truncated (10 bytes",
    ),
    "partial frame": (
        riff(fmt(1, channels=2), chunk(b"data", bytes(6))),
        BAD_AUDIO,
        "6 bytes, not a multiple of its block align (4 bytes",
    ),
    "no samples": (riff(fmt(1), chunk(b"data", b"")), BAD_AUDIO, "holds no samples"),
    "zero channels": (riff(fmt(1, channels=0), DATA16), BAD_AUDIO, "0 channels"),
    "zero rate": (riff(fmt(1, rate=0), DATA16), BAD_AUDIO, "sample rate of 0 Hz"),
    "absurd rate": (riff(fmt(1, rate=1_000_000_000), DATA16), BAD_AUDIO, "1000000000 Hz"),
    "block align": (riff(fmt(1, block_align=3), DATA16), BAD_AUDIO, "block align is 3 bytes"),
    "nan": (
        riff(fmt(3, bits=32), chunk(b"data", struct.pack("<2f", 0.5, math.nan))),
        BAD_AUDIO,
        "NaN",
    ),
    "a-law": (riff(fmt(6, bits=8), DATA16), AUDIO_FORMAT_NOT_SUPPORTED, "A-law (format 0x0006)"),
    "mu-law": (riff(fmt(7, bits=8), DATA16), AUDIO_FORMAT_NOT_SUPPORTED, "mu-law"),
    "adpcm": (riff(fmt(2, bits=4), DATA16), AUDIO_FORMAT_NOT_SUPPORTED, "Microsoft ADPCM"),
    "mp3 in wav": (riff(fmt(0x55, bits=0), DATA16), AUDIO_FORMAT_NOT_SUPPORTED, "MP3"),
    "unknown tag": (riff(fmt(0x1234), DATA16), AUDIO_FORMAT_NOT_SUPPORTED, "format 0x1234"),
    "12-bit pcm": (riff(fmt(1, bits=12, block_align=2), DATA16), AUDIO_FORMAT_NOT_SUPPORTED, "12"),
    "16-bit float": (riff(fmt(3, bits=16), DATA16), AUDIO_FORMAT_NOT_SUPPORTED, "16-bit float"),
    "extensible a-law": (
        riff(fmt(0xFFFE, bits=8, subformat=6), DATA16),
        AUDIO_FORMAT_NOT_SUPPORTED,
        "A-law",
    ),
    "extensible unknown guid": (
        riff(fmt(0xFFFE, subformat=bytes(range(16))), DATA16),
        AUDIO_FORMAT_NOT_SUPPORTED,
        "000102030405060708090a0b0c0d0e0f",
    ),
    "rf64": (b"RF64" + riff()[4:], AUDIO_FORMAT_NOT_SUPPORTED, "RF64"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files(case: str) -> None:
    data, code, fragment = BAD_FILES[case]
    with pytest.raises(WorkerError) as caught:
        read(data)
    assert caught.value.code == code, caught.value.message
    assert caught.value.message.startswith(WHERE + ": "), caught.value.message
    assert fragment in caught.value.message, caught.value.message
    if code == AUDIO_FORMAT_NOT_SUPPORTED or "a FLAC" in fragment:
        assert "convert it to 16-bit PCM WAV" in caught.value.message


def sine(rate: int, seconds: float, freq: float = 440.0) -> torch.Tensor:
    t = torch.arange(round(rate * seconds), dtype=torch.float64) / rate
    return torch.sin(2 * math.pi * freq * t).to(torch.float32)


@pytest.mark.parametrize("orig", [44100, 48000, 22050, 8000, 44101, 767_999])
def test_resampled_sine_matches_the_sine_at_the_new_rate(orig: int) -> None:
    # 44101 and 767999 Hz share no factor with 16 kHz: their filters would have 16000 phases over
    # 44101 (or 767999) samples; they run at the nearest ratio of at most 1000 phases instead.
    x = sine(orig, 0.25)
    y = resample(x, orig, 16000)
    assert y.dtype == torch.float32
    assert len(y) == math.ceil(len(x) * 16000 / orig)
    t = torch.arange(len(y), dtype=torch.float64) / 16000
    expected = torch.sin(2 * math.pi * 440 * t)
    assert (y.double() - expected)[64:-64].abs().max() < 1e-2


def windowed_sinc(x: np.ndarray, orig: int, new: int, width: float = 6, rolloff: float = 0.99):
    """Output sample j = sum_i x[i] h(i - j orig / new), h a sinc at rolloff times the lower
    Nyquist frequency under a Hann window ``width`` zero crossings wide, evaluated directly."""
    ratio = min(orig, new) * rolloff / orig  # cutoff, in cycles per input sample, times 2
    n = math.ceil(len(x) * new / orig)
    t = ratio * (np.arange(len(x))[None, :] - np.arange(n)[:, None] * orig / new)
    window = np.where(np.abs(t) <= width, np.cos(np.pi * t / width / 2) ** 2, 0.0)
    return (x[None, :] * ratio * np.sinc(t) * window).sum(axis=1)


@pytest.mark.parametrize(("orig", "new"), [(44100, 16000), (16000, 44100), (48000, 16000)])
def test_resample_is_the_windowed_sinc_sum(orig: int, new: int) -> None:
    x = np.random.default_rng(1).uniform(-1, 1, 997)
    y = resample(torch.from_numpy(x.astype(np.float32)), orig, new)
    np.testing.assert_allclose(y.numpy(), windowed_sinc(x, orig, new), rtol=0, atol=2e-5)


@pytest.mark.parametrize("length", [0, 1, 2, 440, 441, 442, 1000, 4409])
@pytest.mark.parametrize(("orig", "new"), [(44100, 16000), (48000, 16000), (8000, 16000)])
def test_resampled_length(length: int, orig: int, new: int) -> None:
    y = resample(torch.zeros(length), orig, new)
    assert y.shape == (-(-length * new // orig),)


def test_resample_keeps_leading_dimensions() -> None:
    x = torch.randn(2, 3, 1000)
    y = resample(x, 48000, 16000)
    assert y.shape == (2, 3, 334)
    torch.testing.assert_close(y[1, 2], resample(x[1, 2].contiguous(), 48000, 16000))


def test_equal_rates_are_the_identity() -> None:
    x = torch.randn(100)
    assert resample(x, 16000, 16000) is x


def test_resample_roundtrip() -> None:
    t = torch.arange(8000, dtype=torch.float64) / 8000
    x = sum(a * torch.sin(2 * math.pi * f * t) for a, f in [(0.5, 300), (0.3, 1000), (0.2, 2500)])
    x = x.to(torch.float32)
    up = resample(x, 8000, 16000)
    assert len(up) == 16000
    back = resample(up, 16000, 8000)
    assert len(back) == 8000
    assert (back - x)[64:-64].abs().max() < 1e-2


def test_ten_seconds_at_44100_to_16000() -> None:
    x = sine(44100, 10.0)
    y = resample(x, 44100, 16000)
    assert y.shape == (160000,)
    t = torch.arange(160000, dtype=torch.float64) / 16000
    assert (y.double() - torch.sin(2 * math.pi * 440 * t))[64:-64].abs().max() < 1e-2


def test_fit_length() -> None:
    x = torch.arange(1.0, 6.0)
    torch.testing.assert_close(fit_length(x, 3), torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(fit_length(x, 7), torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 0, 0]))
    assert fit_length(x, 5).shape == (5,)
    assert fit_length(x, 0).shape == (0,)
    assert fit_length(torch.ones(2, 4), 6).shape == (2, 6)
