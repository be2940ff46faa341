"""The ``dtmf`` demo model (scripts/make_demo_models.py): which telephone keypad key (0-9, *, #,
A-D) a tone recording is, taking a WAV file (the server mixes it to mono, resamples it to 8 kHz
and keeps 0.5 s). A log magnitude spectrum and a small MLP, trained for a few seconds on
synthetic tones with jitter, twist and noise. Example recordings at assorted rates, channel counts
and sample widths go to ``dtmf/examples`` with ``labels.json``.
"""

from __future__ import annotations

import json
import math
import wave
from pathlib import Path

import numpy as np
import torch
from torch import nn

from _model_repo import fit_classifier, save_export, small_config, spec, write_config

SEED = 0
DTMF_RATE, DTMF_LENGTH = 8000, 4000  # the model hears 0.5 s at 8 kHz

DTMF_ROWS = (697.0, 770.0, 852.0, 941.0)  # Hz, the keypad's rows
DTMF_COLUMNS = (1209.0, 1336.0, 1477.0, 1633.0)  # Hz, its columns
DTMF_KEYPAD = "123A456B789C*0#D"  # row by row
DTMF_LABELS = [*"0123456789*#ABCD"]


def dtmf_frequencies(key: str) -> tuple[float, float]:
    position = DTMF_KEYPAD.index(key)
    return DTMF_ROWS[position // 4], DTMF_COLUMNS[position % 4]


def dtmf_tones(keys: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One 0.5 s recording at 8 kHz per key (an index into DTMF_LABELS): the key's two tones,
    each up to 1.5% off its frequency, at a random level and twist (+-6 dB between the two),
    lasting 0.08-0.5 s from a random start (at least 0.08 s of it inside the window), with white
    noise at an SNR of -5 to 40 dB over the whole recording."""
    n = len(keys)

    def uniform(low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(n, 1, generator=gen)

    pairs = torch.tensor([dtmf_frequencies(DTMF_LABELS[k]) for k in keys.tolist()])
    low = pairs[:, :1] * uniform(0.985, 1.015)
    high = pairs[:, 1:] * uniform(0.985, 1.015)
    level, twist = 10 ** uniform(-2.0, -0.4), 10 ** (uniform(-6.0, 6.0) / 40)
    t = torch.arange(DTMF_LENGTH) / DTMF_RATE
    phase = 2 * math.pi
    audio = level * (
        twist * torch.sin(phase * (low * t + uniform(0, 1)))
        + torch.sin(phase * (high * t + uniform(0, 1))) / twist
    )
    shortest = 0.08 * DTMF_RATE
    start, duration = uniform(0, DTMF_LENGTH - shortest), uniform(shortest, DTMF_LENGTH)
    i = torch.arange(DTMF_LENGTH)
    audio = audio * ((i >= start) & (i < start + duration))
    rms = level * torch.sqrt((twist**2 + twist**-2) / 2)
    noise = rms / 10 ** (uniform(-5.0, 40.0) / 20)
    return audio + noise * torch.randn(n, DTMF_LENGTH, generator=gen)


class DtmfClassifier(nn.Module):
    """Magnitude spectrum of the whole window (2 Hz bins), kept between 600 and 1700 Hz and
    averaged into 10 Hz bands, its log relative to the loudest band (so the level does not
    matter), then a small MLP."""

    BINS = (300, 850)  # 600-1700 Hz at 2 Hz a bin
    POOL = 5

    def __init__(self) -> None:
        super().__init__()
        bands = (self.BINS[1] - self.BINS[0]) // self.POOL
        self.head = nn.Sequential(nn.Linear(bands, 64), nn.ReLU(), nn.Linear(64, len(DTMF_LABELS)))

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.rfft(audio).abs()[:, self.BINS[0] : self.BINS[1]]
        bands = nn.functional.avg_pool1d(spectrum.unsqueeze(1), self.POOL).squeeze(1)
        level = torch.log(bands + 1e-6)
        return self.head(level - level.amax(dim=-1, keepdim=True))


def write_wav(path: Path, audio: np.ndarray, rate: int, width: int) -> None:
    """``audio`` (frames x channels, in [-1, 1]) as integer PCM of ``width`` bytes; 8-bit WAV
    is unsigned, the wider ones signed little-endian."""
    ints = np.round(np.clip(audio, -1, 1) * (2 ** (8 * width - 1) - 1)).astype("<i4")
    if width == 1:
        ints += 128
    with wave.open(str(path), "wb") as f:
        f.setnchannels(audio.shape[1])
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(ints.reshape(-1, 1).view(np.uint8)[:, :width].tobytes())


def read_wav_for_model(path: Path) -> np.ndarray:
    """A WAV file as the model takes it: mono (channels averaged), resampled to 8 kHz (linear
    interpolation), padded with silence or cut to 0.5 s."""
    with wave.open(str(path)) as f:
        channels, width, rate = f.getnchannels(), f.getsampwidth(), f.getframerate()
        raw = np.frombuffer(f.readframes(f.getnframes()), np.uint8).reshape(-1, width)
    if width == 1:
        samples = raw[:, 0].astype(np.float64) - 128
    else:  # into the high bytes of an int32, then shifted down with its sign
        wide = np.zeros((len(raw), 4), np.uint8)
        wide[:, 4 - width :] = raw
        samples = (wide.view("<i4")[:, 0] >> (8 * (4 - width))).astype(np.float64)
    mono = samples.reshape(-1, channels).mean(axis=1) / 2 ** (8 * width - 1)
    frames = int(len(mono) * DTMF_RATE / rate)
    resampled = np.interp(np.arange(frames) / DTMF_RATE, np.arange(len(mono)) / rate, mono)
    return np.pad(resampled, (0, max(0, DTMF_LENGTH - frames)))[:DTMF_LENGTH]


# (file, key, sample rate, channels, bytes a sample) of the example recordings named after
# their key; the others are tone-NN.wav.
DTMF_NAMED_EXAMPLES = [
    ("key-1.wav", "1", 8000, 1, 2),
    ("key-5.wav", "5", 44100, 2, 2),
    ("key-9.wav", "9", 16000, 1, 3),
    ("key-hash.wav", "#", 48000, 1, 4),
    ("key-star.wav", "*", 22050, 1, 1),
]


def dtmf_examples(folder: Path) -> dict[str, str]:
    """Writes example recordings of every key as WAV files in assorted formats (8-48 kHz, mono
    and stereo, 8-32 bit, 0.2-1 s long, the tone within the first 0.4 s); answers file -> key."""
    rng = np.random.default_rng(SEED)
    keys = [DTMF_LABELS[i] for i in rng.permutation(len(DTMF_LABELS))]
    rates, widths = (8000, 16000, 22050, 44100, 48000), (2, 2, 3, 1, 4, 2)
    examples = DTMF_NAMED_EXAMPLES + [
        (f"tone-{n:02d}.wav", key, rates[n % 5], 2 if n % 7 == 3 else 1, widths[n % 6])
        for n, key in enumerate(keys)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    labels = {}
    for name, key, rate, channels, width in examples:
        seconds = rng.uniform(0.2, 1.0)
        start = rng.uniform(0.0, 0.1)
        duration = rng.uniform(0.08, min(0.3, seconds - start - 0.02, 0.4 - start))
        t = np.arange(int(seconds * rate)) / rate
        low, high = (f * rng.uniform(0.99, 1.01) for f in dtmf_frequencies(key))
        twist = 10 ** (rng.uniform(-4, 4) / 40)
        tone = twist * np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t + 1.0) / twist
        tone *= rng.uniform(0.1, 0.4) * ((t >= start) & (t < start + duration))
        audio = tone[:, None] * np.linspace(1.0, 0.7, channels)  # stereo: quieter on the right
        audio += rng.normal(0, 0.003, audio.shape)
        write_wav(folder / name, audio, rate, width)
        labels[name] = key
    (folder / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return labels


def build_dtmf(out: Path) -> None:
    gen = torch.Generator().manual_seed(SEED)
    y = torch.arange(len(DTMF_LABELS)).repeat(300)
    x = dtmf_tones(y, gen)
    y_held_out = torch.arange(len(DTMF_LABELS)).repeat(100)
    x_held_out = dtmf_tones(y_held_out, gen)
    torch.manual_seed(SEED)
    model = DtmfClassifier()
    fit_classifier(model, (x,), y, gen, epochs=10)
    with torch.no_grad():
        accuracy = (model(x_held_out).argmax(-1) == y_held_out).float().mean().item()
    print(f"dtmf: held-out accuracy {accuracy:.3f} on {len(y_held_out)} synthetic recordings")

    root = out / "dtmf"
    audio = spec("audio", "float32", [-1, DTMF_LENGTH])
    save_export(model, root / "1" / "model.pt2", [audio])
    write_config(
        root,
        {
            **small_config(
                "dtmf",
                "Tells which telephone keypad key (0-9, *, #, A-D) a recording of "
                "one DTMF key tone is: a small MLP on its spectrum, trained on synthetic noisy "
                "tones. Takes a WAV file (PCM, any sample rate, mono or stereo) and listens to its "
                "first half second.",
                [audio],
                [spec("logits", "float32", [-1, len(DTMF_LABELS)], labels=DTMF_LABELS)],
            ),
            "batching": {"max_batch_size": 32, "max_queue_delay_us": 1000},
            "processing": {
                "inputs": {
                    "audio": {
                        "type": "audio",
                        "description": "a recording of one keypad tone",
                        "sample_rate": DTMF_RATE,
                        "length": DTMF_LENGTH,
                    }
                },
                "output": {"type": "classification", "top_k": 3},
            },
        },
    )
    labels = dtmf_examples(root / "examples")
    # The example files as a server reads them, through the exported program.
    program = torch.export.load(str(root / "1" / "model.pt2")).module()
    audio_in = torch.tensor(np.stack([read_wav_for_model(root / "examples" / f) for f in labels]))
    with torch.no_grad():
        heard = program(audio_in.to(torch.float32)).argmax(-1).tolist()
    right = sum(DTMF_LABELS[k] == key for k, key in zip(heard, labels.values()))
    print(f"dtmf: exported program reads {right} of {len(labels)} example WAV files right")
