"""Audio decoding in the worker: WAV items to float samples, and resampling to the model's rate.

Audio inputs arrive as BYTES items (docs/worker-protocol.md#bytes-inputs), one encoded file each,
in the shared-memory arena. WAV is the one container taken: it is uncompressed, so reading it needs
no codec, only numpy views over the bytes; a compressed file (MP3, FLAC, Ogg) is named in the error
so the caller knows to convert it rather than guess at what was wrong.

Resampling is the band-limited windowed-sinc filter of torchaudio.functional.resample with its
defaults ("sinc_interp_hann", lowpass_filter_width 6, rolloff 0.99), written out here so that the
worker does not need torchaudio and a model trained on torchaudio-resampled audio sees the same
samples in serving.
"""

from __future__ import annotations

import functools
import math
import struct
from fractions import Fraction

import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812

from ._errors import AUDIO_FORMAT_NOT_SUPPORTED, AUDIO_TOO_LONG, BAD_AUDIO, WorkerError

_PCM = 0x0001
_IEEE_FLOAT = 0x0003
_EXTENSIBLE = 0xFFFE

#: The 14 bytes after the format code in a WAVE_FORMAT_EXTENSIBLE subformat GUID
#: (KSDATAFORMAT_SUBTYPE_*: {0000xxxx-0000-0010-8000-00AA00389B71}).
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"

#: Format tags seen in the wild that WAV files carry but this reader does not decode.
_FORMAT_NAMES = {
    0x0002: "Microsoft ADPCM",
    0x0006: "A-law",
    0x0007: "mu-law",
    0x0011: "IMA ADPCM",
    0x0031: "GSM 6.10",
    0x0040: "G.721 ADPCM",
    0x0050: "MPEG audio",
    0x0055: "MP3",
    0x0092: "Dolby AC-3 (S/PDIF)",
    0x00FF: "AAC",
    0x0160: "WMA v1",
    0x0161: "WMA",
    0x0162: "WMA Pro",
    0x0163: "WMA Lossless",
    0x1610: "AAC (ADTS)",
    0x2000: "Dolby AC-3",
    0xF1AC: "FLAC",
}

#: The PCM sample widths read, and the float ones.
_PCM_BITS = (8, 16, 24, 32)
_FLOAT_BITS = (32, 64)

_CONVERT = "convert it to 16-bit PCM WAV (e.g. ffmpeg -i in -c:a pcm_s16le out.wav)"

#: The sample rates read, here and in a config's sample_rate (src/registry/processing.ts). Bounded
#: so that a header's rate cannot ask resample for an impossible filter.
MIN_RATE, MAX_RATE = 1000, 768_000
#: The most phases of a resampling filter: rates whose reduced ratio needs more (44101 Hz to
#: 16 kHz: 44101/16000) are resampled at the nearest ratio within it, off by under 1e-6.
_MAX_PHASES = 1000

_CHUNK = struct.Struct("<4sI")
_FMT = struct.Struct("<HHIIHH")
_STREAMING_SIZES = (0, 0xFFFFFFFF)


def _describe(head: bytes) -> str | None:
    """What kind of audio file the first bytes say this is, when it is a known non-WAV one."""
    if head.startswith(b"ID3"):
        return "an MP3 file"
    if head.startswith(b"fLaC"):
        return "a FLAC file"
    if head.startswith(b"OggS"):
        return "an OGG file (Vorbis or Opus)"
    if head.startswith(b"FORM") and head[8:12] in (b"AIFF", b"AIFC"):
        return "an AIFF file"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "a WebM/Matroska file"
    if head[4:8] == b"ftyp":
        return "an MP4/M4A file"
    if head.startswith(b"caff"):
        return "a CAF file"
    if head.startswith(b"#!AMR"):
        return "an AMR file"
    if head.startswith(b".snd"):
        return "a Sun AU file"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        # An MPEG audio frame header without an ID3 tag in front: layer bits 00 are AAC's ADTS.
        return "an AAC (ADTS) file" if head[1] & 0x06 == 0 else "an MP3 file"
    return None


def _format_name(tag: int) -> str:
    name = _FORMAT_NAMES.get(tag)
    return f"{name} (format 0x{tag:04X})" if name else f"format 0x{tag:04X}"


def _chunk_id(raw: bytes) -> str:
    return repr(raw.decode("latin-1"))


def _parse_fmt(fmt: memoryview, where: str) -> tuple[int, int, int, int, int]:
    """The ``fmt `` chunk's (encoding, channels, rate, block_align, bits), encoding being PCM or
    IEEE float with WAVE_FORMAT_EXTENSIBLE resolved to its subformat; refuses what is not read."""
    if len(fmt) < _FMT.size:
        raise WorkerError(
            BAD_AUDIO,
            f"{where}: the WAV's fmt chunk is truncated ({len(fmt)} bytes, at least 16 needed)",
        )
    tag, channels, rate, _byte_rate, block_align, bits = _FMT.unpack_from(fmt)
    encoding = tag
    if tag == _EXTENSIBLE:
        # cbSize, valid bits, channel mask and the 16-byte subformat GUID follow the basic fields.
        if len(fmt) < 40:
            raise WorkerError(
                BAD_AUDIO,
                f"{where}: the WAV's fmt chunk says WAVE_FORMAT_EXTENSIBLE but is truncated "
                f"({len(fmt)} bytes, 40 needed)",
            )
        guid = bytes(fmt[24:40])
        encoding = int.from_bytes(guid[:2], "little")
        if guid[2:] != _GUID_TAIL:
            raise WorkerError(
                AUDIO_FORMAT_NOT_SUPPORTED,
                f"{where}: the WAV's WAVE_FORMAT_EXTENSIBLE subformat {guid.hex()} is not PCM or "
                f"IEEE float; {_CONVERT}",
            )
    if encoding not in (_PCM, _IEEE_FLOAT):
        raise WorkerError(
            AUDIO_FORMAT_NOT_SUPPORTED,
            f"{where}: the WAV holds {_format_name(encoding)} audio, which is not read here "
            f"(PCM and IEEE float are); {_CONVERT}",
        )
    if channels == 0:
        raise WorkerError(BAD_AUDIO, f"{where}: the WAV's fmt chunk says 0 channels")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise WorkerError(
            BAD_AUDIO,
            f"{where}: the WAV's fmt chunk says a sample rate of {rate} Hz; recordings are read "
            f"at {MIN_RATE} to {MAX_RATE} Hz",
        )
    kind, widths = ("PCM", _PCM_BITS) if encoding == _PCM else ("float", _FLOAT_BITS)
    if bits not in widths:
        raise WorkerError(
            AUDIO_FORMAT_NOT_SUPPORTED,
            f"{where}: {bits}-bit {kind} WAVs are not read here ({kind} is read at "
            f"{', '.join(map(str, widths))} bits); {_CONVERT}",
        )
    if block_align != channels * bits // 8:
        raise WorkerError(
            BAD_AUDIO,
            f"{where}: the WAV's block align is {block_align} bytes, but {channels} channel(s) "
            f"of {bits}-bit samples take {channels * bits // 8}",
        )
    return encoding, channels, rate, block_align, bits


def _samples(raw: memoryview, encoding: int, channels: int, bits: int) -> np.ndarray:
    """Interleaved little-endian samples to a new float32 [channels, frames] array.

    The bytes are read through np.frombuffer views; the one copy made is the float32 output, which
    also deinterleaves. It must be a copy in any case: the item lives in the request's arena
    slot, which is reused once the request is answered.
    """
    frames = len(raw) * 8 // (bits * channels)
    out = np.empty((channels, frames), dtype=np.float32)
    if encoding == _IEEE_FLOAT:
        values = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8")
        np.copyto(out, values.reshape(frames, channels).T, casting="same_kind")
        return out
    if bits == 8:  # unsigned, 128 is silence
        values = np.frombuffer(raw, dtype=np.uint8).reshape(frames, channels).T
        np.subtract(values, 128, out=out, dtype=np.float32)
        out *= 1 / 128
        return out
    if bits == 24:
        # Each 3-byte sample goes into the top of a little-endian int32 (low byte zero), which
        # sign-extends it for free; then it scales like 32-bit PCM.
        triples = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3)
        widened = np.zeros((len(triples), 4), dtype=np.uint8)
        widened[:, 1:] = triples
        values = widened.view("<i4").reshape(frames, channels).T
        bits = 32
    else:
        dtype = "<i2" if bits == 16 else "<i4"
        values = np.frombuffer(raw, dtype=dtype).reshape(frames, channels).T
    np.multiply(values, np.float32(2.0 ** -(bits - 1)), out=out, dtype=np.float32)
    return out


def read_wav(data: memoryview | bytes, where: str, max_seconds: float) -> tuple[np.ndarray, int]:
    """A RIFF/WAVE file's samples as float32 [channels, frames], and its sample rate.

    Integer PCM is scaled by 2**(bits - 1) (8-bit is unsigned around 128), so it lies in [-1, 1];
    float WAVs are returned as stored, as torchaudio and soundfile return them, peaks over full
    scale included. ``where`` names the item (``input "audio" item 0``) and starts every error
    message.

    The RIFF size field is not trusted: streaming writers leave it 0 or 0xFFFFFFFF, as they do the
    ``data`` chunk's size, which then means "to the end of the file".
    """
    buf = memoryview(data)
    if buf.ndim != 1 or buf.format not in ("B", "b", "c"):
        buf = buf.cast("B")
    end = len(buf)
    if end == 0:
        raise WorkerError(BAD_AUDIO, f"{where}: the audio is empty (0 bytes)")
    head = bytes(buf[:12])
    if head[:4] != b"RIFF":
        if head[:4] in (b"RF64", b"BW64"):
            raise WorkerError(
                AUDIO_FORMAT_NOT_SUPPORTED,
                f"{where}: the bytes are a 64-bit ({head[:4].decode()}) WAV, which is not read "
                f"here; {_CONVERT}",
            )
        if head[:4] == b"RIFX":
            raise WorkerError(
                AUDIO_FORMAT_NOT_SUPPORTED,
                f"{where}: the bytes are a big-endian (RIFX) WAV, which is not read here; "
                f"{_CONVERT}",
            )
        kind = _describe(head)
        raise WorkerError(
            BAD_AUDIO,
            f"{where}: the bytes are {kind}, not a WAV file; {_CONVERT}"
            if kind
            else f"{where}: the bytes are not a WAV file ({end} bytes starting {head[:8].hex()})",
        )
    if end < 12:
        raise WorkerError(
            BAD_AUDIO, f"{where}: the WAV header is truncated ({end} bytes, at least 12 needed)"
        )
    if head[8:12] != b"WAVE":
        raise WorkerError(
            BAD_AUDIO,
            f"{where}: the bytes are a RIFF file of type {_chunk_id(head[8:12])}, not a WAV "
            f"(WAVE) file",
        )

    fmt: tuple[int, int, int, int, int] | None = None
    at = 12
    while at + _CHUNK.size <= end:
        chunk, size = _CHUNK.unpack_from(buf, at)
        body = at + _CHUNK.size
        left = end - body
        if chunk == b"data":
            if fmt is None:
                raise WorkerError(BAD_AUDIO, f"{where}: the WAV has no fmt chunk before its data")
            if size in _STREAMING_SIZES:
                size = left
            elif size > left:
                raise WorkerError(
                    BAD_AUDIO,
                    f"{where}: the WAV's data chunk declares {size} bytes but only {left} follow "
                    f"(the file is truncated, or its header is wrong)",
                )
            return _data(buf[body : body + size], fmt, where, max_seconds)
        if size > left:
            raise WorkerError(
                BAD_AUDIO,
                f"{where}: the WAV's {_chunk_id(chunk)} chunk declares {size} bytes but only "
                f"{left} follow (the file is truncated)",
            )
        if chunk == b"fmt " and fmt is None:
            fmt = _parse_fmt(buf[body : body + size], where)
        at = body + size + (size & 1)  # odd-sized chunks are followed by a pad byte
    if fmt is None:
        raise WorkerError(BAD_AUDIO, f"{where}: the WAV has no fmt chunk")
    raise WorkerError(BAD_AUDIO, f"{where}: the WAV has no data chunk")


def _data(
    raw: memoryview, fmt: tuple[int, int, int, int, int], where: str, max_seconds: float
) -> tuple[np.ndarray, int]:
    encoding, channels, rate, block_align, bits = fmt
    if len(raw) == 0:
        raise WorkerError(BAD_AUDIO, f"{where}: the WAV holds no samples")
    if len(raw) % block_align:
        raise WorkerError(
            BAD_AUDIO,
            f"{where}: the WAV's data is {len(raw)} bytes, not a multiple of its block align "
            f"({block_align} bytes: {channels} channel(s) of {bits} bits)",
        )
    frames = len(raw) // block_align
    seconds = frames / rate
    if seconds > max_seconds:
        raise WorkerError(
            AUDIO_TOO_LONG,
            f"{where}: the audio lasts {seconds:.2f} s, over the input's max_seconds "
            f"({max_seconds:g} s)",
        )
    samples = _samples(raw, encoding, channels, bits)
    if encoding == _IEEE_FLOAT and not np.isfinite(samples).all():
        raise WorkerError(BAD_AUDIO, f"{where}: the WAV holds NaN or infinite samples")
    return samples, rate


def silent_wav(sample_rate: int, frames: int) -> bytes:
    """A mono 16-bit PCM WAV of ``frames`` zero samples: the item that warms an audio input's steps
    (parsing, the resampling kernel for its rate) when a model loads."""
    data = bytes(2 * frames)
    fmt = _FMT.pack(_PCM, 1, sample_rate, 2 * sample_rate, 2, 16)
    return b"".join(
        (
            _CHUNK.pack(b"RIFF", 4 + 2 * _CHUNK.size + len(fmt) + len(data)),
            b"WAVE",
            _CHUNK.pack(b"fmt ", len(fmt)),
            fmt,
            _CHUNK.pack(b"data", len(data)),
            data,
        )
    )


def to_mono(samples: np.ndarray) -> np.ndarray:
    """[channels, frames] to [frames] float32, the mean of the channels (a mono file's one channel
    is returned as it is, not copied)."""
    if samples.shape[0] == 1:
        return samples[0]
    return samples.mean(axis=0, dtype=np.float32)


#: torchaudio.functional.resample's defaults, which models trained on resampled audio have seen.
_LOWPASS_FILTER_WIDTH = 6
_ROLLOFF = 0.99


@functools.lru_cache(maxsize=64)
def _kernel(
    orig: int, new: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, int]:
    """The polyphase filter for rates reduced by their gcd: ``new`` phases (conv1d output
    channels), each a Hann-windowed sinc over 2 * width + orig input samples, and width.

    Output sample j is sum_i x[i] * h(i - j * orig / new), h the sinc with cutoff rolloff times
    the lower Nyquist frequency, windowed to lowpass_filter_width of its zero crossings. Built in
    float64 and cached: a server resamples many items between the same two rates.
    """
    base = min(orig, new) * _ROLLOFF
    width = math.ceil(_LOWPASS_FILTER_WIDTH * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64) / orig
    t = (torch.arange(0, -new, -1, dtype=torch.float64)[:, None] / new + idx) * base
    t = t.clamp_(-_LOWPASS_FILTER_WIDTH, _LOWPASS_FILTER_WIDTH)
    window = torch.cos(t * (math.pi / _LOWPASS_FILTER_WIDTH / 2)) ** 2
    t *= math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
    kernel = sinc * window * (base / orig)
    return kernel[:, None, :].to(dtype=dtype, device=device), width


def _reduced(orig_rate: int, new_rate: int) -> tuple[int, int]:
    """The rates' ratio in lowest terms, both at most _MAX_PHASES: the filter has ``new`` phases
    over ``orig`` input samples, so unusual rates (a reduced 44101:16000) would need gigabytes."""
    gcd = math.gcd(orig_rate, new_rate)
    orig, new = orig_rate // gcd, new_rate // gcd
    if orig <= _MAX_PHASES and new <= _MAX_PHASES:
        return orig, new
    if new < orig:
        ratio = Fraction(new, orig).limit_denominator(_MAX_PHASES)
        return ratio.denominator, max(1, ratio.numerator)
    ratio = Fraction(orig, new).limit_denominator(_MAX_PHASES)
    return max(1, ratio.numerator), ratio.denominator


def resample(signal: torch.Tensor, orig_rate: int, new_rate: int) -> torch.Tensor:
    """``signal`` (time in its last dimension) from ``orig_rate`` to ``new_rate`` Hz, as
    torchaudio.functional.resample with its default sinc_interp_hann filter computes it.

    The result has ceil(len * new_rate / orig_rate) samples; output sample j is at the time of
    input sample j * orig_rate / new_rate. Equal rates return ``signal`` itself.
    """
    if orig_rate <= 0 or new_rate <= 0:
        raise ValueError(f"sample rates must be positive, not {orig_rate} and {new_rate}")
    if not signal.is_floating_point():
        raise TypeError(f"resample takes floating-point samples, not {signal.dtype}")
    if orig_rate == new_rate:
        return signal
    orig, new = _reduced(orig_rate, new_rate)
    length = signal.shape[-1]
    # ceil, in integers: exact for any length; of the true rates, when the filter's are near them.
    target = -(-length * new_rate // orig_rate)
    if length == 0:
        return signal.new_zeros(signal.shape)
    kernel, width = _kernel(orig, new, signal.dtype, signal.device)
    waves = signal.reshape(-1, length)
    # Padding makes floor(length / orig) + 1 blocks of new outputs each, at least target.
    padded = F.pad(waves, (width, width + orig))
    out = F.conv1d(padded[:, None], kernel, stride=orig)  # [waves, new phases, blocks]
    out = out.transpose(1, 2).reshape(waves.shape[0], -1)[:, :target]
    if out.shape[-1] < target:  # a nearest ratio a little under the true one: a sample short
        out = F.pad(out, (0, target - out.shape[-1]))
    return out.reshape(*signal.shape[:-1], target)


def fit_length(signal: torch.Tensor, length: int) -> torch.Tensor:
    """``signal``'s first ``length`` samples (last dimension), zero-padded at the end if it is
    shorter: a model with a fixed input length takes clips that long."""
    if length < 0:
        raise ValueError(f"length must be >= 0, not {length}")
    have = signal.shape[-1]
    if have >= length:
        return signal[..., :length]
    return F.pad(signal, (0, length - have))
