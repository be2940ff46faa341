"""Input processing in the worker: encoded items (image files, texts, WAV recordings) to the
model's input tensors.

The gateway sends a processed input as a BYTES tensor (docs/worker-protocol.md#bytes-inputs): its
items, each a 4-byte little-endian length and that many bytes, in the shared-memory arena. The
worker decodes them here, in the model's own process, so that decoding and resizing never run on
the gateway's event loop and are batched with the forward pass that takes them.

Images follow torchvision's classic transforms (EXIF orientation, mode, resize, center crop, to
floats, scale, normalise), with Pillow doing the pixel work, so a config written from a
torchvision pipeline reproduces it. Texts go through the model's own Hugging Face tokenizer
(``tokenizer.json`` in the version folder), as ``transformers`` would tokenize them. Recordings
are WAV files, mixed to mono and resampled (``_audio.py``). docs/processing.md is the prose form
of the options.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import json
import logging
import struct
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from . import _audio
from ._dtypes import to_torch
from ._errors import (
    BAD_IMAGE,
    BAD_PARAMETER,
    BAD_TENSOR,
    BAD_TEXT,
    HANDLER_FAILED,
    IMAGE_FORMAT_NOT_SUPPORTED,
    IMAGE_TOO_LARGE,
    LOAD_FAILED,
    TEXT_TOO_LONG,
    WorkerError,
)

try:  # Pillow is a runtime requirement, but a worker without it still serves plain tensors.
    from PIL import Image, ImageOps, UnidentifiedImageError
except ImportError:  # pragma: no cover - exercised only by installs without Pillow
    Image = None  # type: ignore[assignment]
else:
    # Pillow warns between its own pixel limit and twice that; each input's max_pixels is checked
    # before decoding instead. Set once here: catch_warnings is not safe on the decode threads.
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)

#: The formats an image input takes, by config name, with Pillow's names for them.
IMAGE_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "gif": "GIF", "bmp": "BMP"}

_LENGTH = struct.Struct("<I")

T = TypeVar("T")

log = logging.getLogger("tensorgate.worker")


def split_items(buffer: memoryview, count: int, name: str) -> list[memoryview]:
    """The items of a BYTES tensor, as views of ``buffer`` (nothing is copied)."""
    items: list[memoryview] = []
    at = 0
    for index in range(count):
        if at + 4 > len(buffer):
            raise WorkerError(
                BAD_TENSOR, f'input "{name}" item {index}: the BYTES data ends before its length'
            )
        (length,) = _LENGTH.unpack_from(buffer, at)
        at += 4
        if at + length > len(buffer):
            raise WorkerError(
                BAD_TENSOR,
                f'input "{name}" item {index}: its length {length} runs past the data '
                f"({len(buffer) - at} bytes left)",
            )
        items.append(buffer[at : at + length])
        at += length
    if at != len(buffer):
        raise WorkerError(
            BAD_TENSOR, f'input "{name}": {len(buffer) - at} bytes follow the last of {count} items'
        )
    return items


_SIGNATURES = {
    b"\x89PNG": "PNG",
    b"\xff\xd8\xff": "JPEG",
    b"GIF8": "GIF",
    b"BM": "BMP",
}


def _signature(data: memoryview) -> str | None:
    """The format the first bytes claim, to tell a corrupt image from something else."""
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    return next((fmt for magic, fmt in _SIGNATURES.items() if head.startswith(magic)), None)


_INTERPOLATION = {
    "nearest": "NEAREST",
    "bilinear": "BILINEAR",
    "bicubic": "BICUBIC",
    "box": "BOX",
    "lanczos": "LANCZOS",
}


_decoders: ThreadPoolExecutor | None = None


def _decode_all(decode: Callable[[int, memoryview], T], items: list[memoryview]) -> list[T]:
    """Each item decoded, in order; a batch's items side by side on as many threads as the
    worker's forward pass uses (``resources.threads``): Pillow lets go of the GIL while it
    inflates, decodes and resizes, so the threads overlap. The first failing item's error is
    raised, as when decoding one by one."""
    global _decoders
    threads = torch.get_num_threads()
    if len(items) < 2 or threads < 2:
        return [decode(index, data) for index, data in enumerate(items)]
    if _decoders is None or _decoders._max_workers != threads:  # noqa: SLF001 - its own size
        _decoders = ThreadPoolExecutor(threads, thread_name_prefix="tensorgate-decode")
    return list(_decoders.map(decode, range(len(items)), items))


@dataclass(frozen=True)
class Geometry:
    """Where an image item's model-input pixels come from in the image as it was sent (upright,
    after its EXIF orientation): the model-input point (x, y) is ((x + left) * scale_x,
    (y + top) * scale_y) there. Detection outputs map their boxes back with it."""

    width: int
    height: int
    input_width: int
    input_height: int
    left: float
    top: float
    scale_x: float
    scale_y: float

    def json(self) -> dict[str, float]:
        return {
            "width": self.width,
            "height": self.height,
            "input_width": self.input_width,
            "input_height": self.input_height,
            "left": self.left,
            "top": self.top,
            "scale_x": self.scale_x,
            "scale_y": self.scale_y,
        }


@dataclass(frozen=True)
class ImageSteps:
    """One image input's processing, as the gateway validated it (src/registry/processing.ts)."""

    name: str
    tensor: str
    mode: str
    formats: tuple[str, ...]
    max_pixels: int
    invert: bool
    jpeg_draft: bool
    resize_shorter: int | None
    resize_size: tuple[int, int] | None
    interpolation: str
    crop: tuple[int, int] | None
    scale: float
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    layout: str
    dtype: torch.dtype

    @classmethod
    def from_json(cls, name: str, raw: dict[str, Any], dtype: str) -> ImageSteps:
        if Image is None:
            raise WorkerError(
                BAD_PARAMETER,
                "image processing needs Pillow in the worker's Python (pip install pillow)",
            )
        resize = raw.get("resize") or {}
        size = resize.get("size")
        crop = raw.get("center_crop")
        mean, std = raw.get("mean"), raw.get("std")
        return cls(
            name=name,
            tensor=str(raw.get("tensor", name)),
            mode=str(raw.get("mode", "RGB")),
            formats=tuple(IMAGE_FORMATS[f] for f in raw.get("formats", list(IMAGE_FORMATS))),
            max_pixels=int(raw.get("max_pixels", 50_000_000)),
            invert=bool(raw.get("invert", False)),
            jpeg_draft=bool(raw.get("jpeg_draft", True)),
            resize_shorter=resize.get("shorter"),
            resize_size=(int(size[0]), int(size[1])) if size else None,
            interpolation=_INTERPOLATION[resize.get("interpolation", "bilinear")],
            crop=(int(crop[0]), int(crop[1])) if crop else None,
            scale=float(raw.get("scale", 1 / 255)),
            mean=tuple(float(m) for m in mean) if mean else None,
            std=tuple(float(s) for s in std) if std else None,
            layout=str(raw.get("layout", "CHW")),
            dtype=to_torch(dtype),
        )

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3

    def decode(self, index: int, data: memoryview) -> tuple[np.ndarray, Geometry]:
        """One item to uint8 pixels, height x width x channels, after orientation, mode, resize
        and crop; and where those pixels lie in the image as sent."""
        where = f'input "{self.name}" item {index}'
        if len(data) == 0:
            raise WorkerError(BAD_IMAGE, f"{where}: the image is empty (0 bytes)")
        try:
            image = Image.open(io.BytesIO(data), formats=list(IMAGE_FORMATS.values()))
        except Image.DecompressionBombError as exc:
            raise WorkerError(IMAGE_TOO_LARGE, f"{where}: {exc}") from None
        except UnidentifiedImageError:
            fmt = _signature(data)
            raise WorkerError(
                BAD_IMAGE,
                f"{where}: the {fmt} data is corrupt: its header cannot be read"
                if fmt
                else f"{where}: the bytes are not a PNG, JPEG, WebP, GIF or BMP image "
                f"({len(data)} bytes starting {bytes(data[:8]).hex()})",
            ) from None
        except Exception as exc:  # noqa: BLE001 - whatever a decoder raises on bad bytes
            raise WorkerError(
                BAD_IMAGE, f"{where}: the image data is corrupt or truncated: {exc}"
            ) from None
        try:
            if image.format not in self.formats:
                raise WorkerError(
                    IMAGE_FORMAT_NOT_SUPPORTED,
                    f"{where}: {image.format} images are not taken by this model; it takes "
                    f"{', '.join(self.formats)}",
                )
            width, height = image.size
            if width * height > self.max_pixels:
                raise WorkerError(
                    IMAGE_TOO_LARGE,
                    f"{where}: {width}x{height} is {width * height} pixels, over this input's "
                    f"limit of {self.max_pixels} (processing.inputs.{self.name}.max_pixels)",
                )
            full = image.size
            draft = self._draft_size()
            if draft is not None and image.format == "JPEG":
                # libjpeg decodes at 1/2, 1/4 or 1/8 scale while the result stays at least this
                # large: a 12 MP photo to a 224 crop in 9 ms instead of 113 on the development VM.
                image.draft(image.mode, draft)
            try:
                image.load()  # the first frame of an animation; truncated data fails here
                upright = ImageOps.exif_transpose(image)  # a malformed EXIF block fails here
            except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise many kinds
                # The caller's data, not a fault here: no traceback (no exception class) to report.
                raise WorkerError(
                    BAD_IMAGE, f"{where}: the {image.format} data is corrupt or truncated: {exc}"
                ) from None
            if upright.size != image.size:  # turned a quarter by its EXIF orientation
                full = (full[1], full[0])
            # Decoded: what follows works on pixels in memory, and its errors would be ours.
            return self._pixels(upright, full)
        finally:
            image.close()

    def _draft_size(self) -> tuple[int, int] | None:
        """The least size (either way round, as EXIF may turn the image) a JPEG may be decoded at
        for the resize to come; None where it must be decoded in full."""
        if not self.jpeg_draft:
            return None
        if self.resize_shorter is not None:
            return (self.resize_shorter, self.resize_shorter)
        if self.resize_size is not None:
            side = max(self.resize_size)
            return (side, side)
        return None

    def _pixels(self, image: Any, full: tuple[int, int]) -> tuple[np.ndarray, Geometry]:
        """``full``: the image's upright size as sent, which a draft decode may have reduced."""
        width, height = image.size
        if image.mode != self.mode:
            # Transparent pixels over white, as a viewer shows them, not over their hidden colour.
            if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
                rgba = image.convert("RGBA")
                background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                image = Image.alpha_composite(background, rgba)
            image = image.convert(self.mode)
        if self.invert:
            image = ImageOps.invert(image)
        resample = getattr(Image.Resampling, self.interpolation)
        if self.resize_size is not None:
            to_height, to_width = self.resize_size
            image = image.resize((to_width, to_height), resample)
        elif self.resize_shorter is not None:
            short = self.resize_shorter
            if width <= height:
                size = (short, int(short * height / width))
            else:
                size = (int(short * width / height), short)
            image = image.resize(size, resample)
        scale_x, scale_y = full[0] / image.width, full[1] / image.height
        left = top = 0
        if self.crop is not None:
            crop_height, crop_width = self.crop
            left = int(round((image.width - crop_width) / 2.0))
            top = int(round((image.height - crop_height) / 2.0))
            # An image smaller than the crop is padded with black, as torchvision pads it.
            image = image.crop((left, top, left + crop_width, top + crop_height))
        pixels = np.asarray(image, dtype=np.uint8)
        geometry = Geometry(
            full[0], full[1], image.width, image.height, left, top, scale_x, scale_y
        )
        return (pixels[:, :, None] if pixels.ndim == 2 else pixels), geometry

    def batch(
        self, items: list[memoryview], geometry: list[Geometry] | None = None
    ) -> torch.Tensor:
        """The model's input tensor for the items: decoded into one uint8 batch, then scaled,
        normalised and laid out in one vectorised pass. Each item's geometry is appended to
        ``geometry`` when one is given."""
        decoded = _decode_all(self.decode, items)
        pixels = [p for p, _ in decoded]
        if geometry is not None:
            geometry.extend(g for _, g in decoded)
        shapes = {p.shape for p in pixels}
        if len(shapes) > 1:
            raise WorkerError(
                BAD_IMAGE,
                f'input "{self.name}": the images have different sizes after processing '
                f"({sorted(shapes)}); set processing.inputs.{self.name}.resize.size or center_crop",
            )
        batch = torch.from_numpy(np.stack(pixels))  # n x H x W x C, uint8
        if self.dtype == torch.uint8:
            out = batch
        else:
            out = batch.to(torch.float32) * self.scale
            if self.mean is not None:
                out = out - torch.tensor(self.mean)
            if self.std is not None:
                out = out / torch.tensor(self.std)
            out = out.to(self.dtype)
        if self.layout == "CHW":
            out = out.permute(0, 3, 1, 2)
        return out.contiguous()


@dataclass(frozen=True)
class TextSteps:
    """One text input's processing: UTF-8 items through the model's tokenizer into token ids, an
    attention mask and token type ids, padded per batch or to ``max_length``."""

    name: str
    tokenizer: Any  # tokenizers.Tokenizer, configured for this input's padding and truncation
    #: Model input by role: input_ids, attention_mask, token_type_ids.
    tensors: dict[str, str]
    dtypes: dict[str, torch.dtype]
    max_length: int
    refuse_longer: bool

    @classmethod
    def from_json(
        cls, name: str, raw: dict[str, Any], dtypes: dict[str, str], version_dir: Path
    ) -> TextSteps:
        field = f"processing.inputs.{name}.tokenizer"
        path = version_dir / str(raw.get("tokenizer", "tokenizer.json"))
        tokenizer = _tokenizer(field, path)
        max_length = int(raw.get("max_length", 512))
        refuse = raw.get("truncation", "truncate") == "refuse"
        if refuse:
            tokenizer.no_truncation()  # to count the tokens of a text that is too long
        else:
            tokenizer.enable_truncation(max_length)
        pad_id = _pad_id(tokenizer)
        tokenizer.enable_padding(
            pad_id=pad_id,
            pad_token=tokenizer.id_to_token(pad_id) or "[PAD]",
            length=max_length if raw.get("padding", "longest") == "max_length" else None,
        )
        tensors = {str(role): str(t) for role, t in (raw.get("tensors") or {}).items() if t}
        for tensor in tensors.values():
            if tensor not in dtypes:
                message = f"processing input {name!r}: no model input {tensor!r}"
                raise WorkerError(BAD_PARAMETER, message)
        return cls(
            name=name,
            tokenizer=tokenizer,
            tensors=tensors,
            dtypes={t: to_torch(dtypes[t]) for t in tensors.values()},
            max_length=max_length,
            refuse_longer=refuse,
        )

    def batch(self, items: list[memoryview]) -> dict[str, torch.Tensor]:
        texts: list[str] = []
        for index, data in enumerate(items):
            try:
                texts.append(str(data, "utf-8"))
            except UnicodeDecodeError as exc:
                raise WorkerError(
                    BAD_TEXT,
                    f'input "{self.name}" item {index}: not valid UTF-8 ({exc.reason} at byte '
                    f"{exc.start})",
                ) from None
        encodings = self.tokenizer.encode_batch(texts)
        for index, encoding in enumerate(encodings):
            tokens = int(sum(encoding.attention_mask))
            if self.refuse_longer and tokens > self.max_length:
                raise WorkerError(
                    TEXT_TOO_LONG,
                    f'input "{self.name}" item {index}: {tokens} tokens, over this input\'s '
                    f"max_length of {self.max_length}; shorten the text (truncation is "
                    f'"refuse" in processing.inputs.{self.name})',
                )
            if tokens == 0:
                raise WorkerError(
                    BAD_TEXT, f'input "{self.name}" item {index}: the text makes no tokens'
                )
        fields = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        return {
            tensor: torch.tensor(fields[role], dtype=self.dtypes[tensor])
            for role, tensor in self.tensors.items()
        }


def _tokenizer(field: str, path: Path) -> Any:
    """A tokenizer.json, or LOAD_FAILED naming the config field that points at it."""
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - a runtime requirement
        raise WorkerError(
            BAD_PARAMETER,
            "text processing needs the tokenizers package in the worker's Python "
            "(pip install tokenizers)",
        ) from None
    if not path.is_file():
        raise WorkerError(
            LOAD_FAILED,
            f"{field}: no tokenizer file {path}; save the model's tokenizer there "
            '(tokenizer.save_pretrained writes "tokenizer.json")',
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the tokenizers library raises plain Exceptions
        message = f"{field}: {path} is not a tokenizer.json: {exc}"
        raise WorkerError(LOAD_FAILED, message) from None


class TextOutput:
    """A text output: each item's token ids decoded by the model's tokenizer."""

    def __init__(self, raw: dict[str, Any], first_output: str, version_dir: Path) -> None:
        path = version_dir / str(raw.get("tokenizer", "tokenizer.json"))
        self.tokenizer = _tokenizer("processing.output.tokenizer", path)
        self.tensor = str(raw.get("tensor") or first_output)
        self.skip_special_tokens = bool(raw.get("skip_special_tokens", True))

    def decode(self, outputs: dict[str, torch.Tensor]) -> list[str]:
        ids = outputs[self.tensor].to("cpu", torch.int64).tolist()
        return self.tokenizer.decode_batch(ids, skip_special_tokens=self.skip_special_tokens)


def _pad_id(tokenizer: Any) -> int:
    """The tokenizer's own padding id, else its pad token's, else 0 (masked out either way)."""
    if tokenizer.padding:
        return int(tokenizer.padding["pad_id"])
    for token in ("[PAD]", "<pad>", "<|pad|>", "<PAD>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return 0


@dataclass(frozen=True)
class AudioSteps:
    """One audio input's processing: WAV items mixed to mono, resampled to the model's rate and
    padded or trimmed to its length (else to the batch's longest)."""

    name: str
    tensor: str
    sample_rate: int
    length: int | None
    max_seconds: float
    dtype: torch.dtype
    #: The model takes [batch, 1, samples] rather than [batch, samples].
    channel_dim: bool

    @classmethod
    def from_json(cls, name: str, raw: dict[str, Any], dtype: str, rank: int) -> AudioSteps:
        length = raw.get("length")
        return cls(
            name=name,
            tensor=str(raw.get("tensor", name)),
            sample_rate=int(raw["sample_rate"]),
            length=int(length) if length is not None else None,
            max_seconds=float(raw.get("max_seconds", 600)),
            dtype=to_torch(dtype),
            channel_dim=rank == 3,
        )

    def batch(self, items: list[memoryview]) -> dict[str, torch.Tensor]:
        signals = []
        for index, data in enumerate(items):
            samples, rate = _audio.read_wav(
                data, f'input "{self.name}" item {index}', self.max_seconds
            )
            mono = torch.from_numpy(_audio.to_mono(samples))
            signals.append(_audio.resample(mono, rate, self.sample_rate))
        length = self.length if self.length is not None else max(len(s) for s in signals)
        out = torch.stack([_audio.fit_length(s, length) for s in signals]).to(self.dtype)
        return {self.tensor: out.unsqueeze(1) if self.channel_dim else out}


class Handler:
    """A model's own processing code (``processing.handler: "module:Class"``, the module a file in
    the version folder): ``Class(version_dir)`` once at load, then per batch
    ``preprocess(items)`` (each processed input's items as bytes -> the model's input tensors by
    name) and, if it has one, ``postprocess(outputs, items)`` (the output tensors by name -> one
    JSON-serialisable answer per item). Whatever either raises fails the request with
    HANDLER_FAILED, naming the handler; the worker serves on."""

    def __init__(self, entry: str, version_dir: Path) -> None:
        self.entry = entry
        module_name, _, class_name = entry.partition(":")
        path = version_dir / f"{module_name}.py"
        field = "processing.handler"
        if not path.is_file():
            raise WorkerError(LOAD_FAILED, f"{field} {entry!r}: no file {path}")
        try:
            spec = importlib.util.spec_from_file_location(f"tensorgate_handler_{module_name}", path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            cls = getattr(module, class_name)
            self.instance = cls(version_dir) if inspect.signature(cls).parameters else cls()
        except Exception as exc:  # noqa: BLE001 - the handler's own code, whatever it raises
            raise WorkerError(
                LOAD_FAILED, f"{field} {entry!r} could not be set up: {type(exc).__name__}: {exc}"
            ) from exc
        if not callable(getattr(self.instance, "preprocess", None)):
            raise WorkerError(LOAD_FAILED, f"{field} {entry!r} has no preprocess(items) method")
        self.answers = callable(getattr(self.instance, "postprocess", None))

    def _failed(self, method: str, exc: Exception) -> WorkerError:
        message = f"processing.handler {self.entry}.{method} raised {type(exc).__name__}: {exc}"
        # The caller gets the message; the handler's author gets the traceback, in the log.
        log.warning("%s", message, exc_info=exc)
        return WorkerError(HANDLER_FAILED, message)

    def preprocess(
        self, items: dict[str, list[bytes]], dtypes: dict[str, torch.dtype]
    ) -> dict[str, torch.Tensor]:
        try:
            tensors = self.instance.preprocess(items)
        except Exception as exc:  # noqa: BLE001 - the handler's own code
            raise self._failed("preprocess", exc) from None
        if not isinstance(tensors, dict) or not all(
            isinstance(t, torch.Tensor) for t in tensors.values()
        ):
            raise WorkerError(
                HANDLER_FAILED,
                f"processing.handler {self.entry}.preprocess must return the model inputs as a "
                f"dict of tensors by name, not {type(tensors).__name__}",
            )
        # Cast to the declared dtypes: a handler's torch.tensor(...) of ints is int64, of floats
        # float32, which is what most models take but not all.
        return {name: t.to(dtypes[name]) if name in dtypes else t for name, t in tensors.items()}

    def postprocess(
        self, outputs: dict[str, torch.Tensor], items: dict[str, list[bytes]], rows: int
    ) -> list[Any]:
        try:
            answers = self.instance.postprocess(outputs, items)
            json.dumps(answers)
        except Exception as exc:  # noqa: BLE001 - the handler's own code
            raise self._failed("postprocess", exc) from None
        if not isinstance(answers, list) or len(answers) != rows:
            raise WorkerError(
                HANDLER_FAILED,
                f"processing.handler {self.entry}.postprocess must return a list of one answer "
                f"per item ({rows}), not {type(answers).__name__}"
                + (f" of {len(answers)}" if isinstance(answers, list) else ""),
            )
        return answers


class Processing:
    """A model's input processing: which model inputs come from which processed inputs, or the
    model's own handler."""

    def __init__(
        self,
        raw: object,
        model_inputs: dict[str, tuple[str, int]],
        version_dir: Path,
        first_output: str = "",
    ) -> None:
        """``model_inputs``: each model input's dtype name and rank."""
        if not isinstance(raw, dict):
            raise WorkerError(BAD_PARAMETER, "processing must be an object")
        output = raw.get("output")
        #: Detection boxes are mapped back to each image as sent, which needs its geometry.
        self.wants_geometry = isinstance(output, dict) and output.get("type") == "detection"
        self.text_output = (
            TextOutput(output, first_output, version_dir)
            if isinstance(output, dict) and output.get("type") == "text"
            else None
        )
        dtypes = {name: dtype for name, (dtype, _) in model_inputs.items()}
        self.steps: dict[str, ImageSteps | TextSteps | AudioSteps] = {}
        self.handler = Handler(str(raw["handler"]), version_dir) if raw.get("handler") else None
        self.dtypes = {name: to_torch(dtype) for name, dtype in dtypes.items()}
        if self.handler is not None:
            return  # the handler makes the model's inputs from the items as they come
        for name, cfg in (raw.get("inputs") or {}).items():
            kind = cfg.get("type") if isinstance(cfg, dict) else None
            if kind == "text":
                self.steps[name] = TextSteps.from_json(name, cfg, dtypes, version_dir)
                continue
            if kind not in ("image", "audio"):
                raise WorkerError(
                    BAD_PARAMETER,
                    f"processing input {name!r}: type {kind!r} is not image, text or audio",
                )
            tensor = str(cfg.get("tensor", name))
            if tensor not in model_inputs:
                raise WorkerError(
                    BAD_PARAMETER, f"processing input {name!r}: no model input {tensor!r}"
                )
            dtype, rank = model_inputs[tensor]
            self.steps[name] = (
                ImageSteps.from_json(name, cfg, dtype)
                if kind == "image"
                else AudioSteps.from_json(name, cfg, dtype, rank)
            )

    def warm(self) -> None:
        """Runs a tiny item through every input's steps, so that loading Pillow's format plugins,
        the tokenizer's first batch and the first resize (17 ms for images on the development VM)
        land in the load, not in the first request."""
        for steps in self.steps.values():
            if isinstance(steps, ImageSteps):
                Image.init()
                tiny = io.BytesIO()
                Image.new("RGB", (4, 4)).save(tiny, "PNG")
                item = tiny.getvalue()
            elif isinstance(steps, TextSteps):
                item = b"warm up"
            else:
                item = _audio.silent_wav(steps.sample_rate, steps.length or 16)
            # A config that refuses PNG refuses it here: the plugins are loaded all the same.
            with contextlib.suppress(WorkerError):
                self.tensors(steps.name, [memoryview(item)])

    def handled(self, items: dict[str, list[bytes]]) -> dict[str, torch.Tensor]:
        """The model inputs the handler makes of every processed input's items."""
        assert self.handler is not None
        return self.handler.preprocess(items, self.dtypes)

    def answers(
        self, outputs: list[tuple[Any, torch.Tensor]], items: dict[str, list[bytes]]
    ) -> list[Any] | None:
        """The JSON answers, one per row, that the handler's postprocess or the text output make
        of the model's outputs (paired with their specs); None when the outputs are the answer."""
        handler = self.handler
        if handler is not None and handler.answers:
            rows = len(next(iter(items.values()), []))
            return handler.postprocess({s.name: t for s, t in outputs}, items, rows)
        if self.text_output is not None:
            return self.text_output.decode({s.name: t for s, t in outputs})
        return None

    def tensors(
        self,
        name: str,
        items: list[memoryview],
        geometry: dict[str, list[Geometry]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """The model inputs ``name``'s items make, by model input name; an image input's items'
        geometry goes into ``geometry[name]`` when one is given."""
        steps = self.steps.get(name)
        if steps is None:
            raise WorkerError(BAD_TENSOR, f'input "{name}" is BYTES but has no processing')
        if isinstance(steps, ImageSteps):
            where = geometry.setdefault(name, []) if geometry is not None else None
            return {steps.tensor: steps.batch(items, where)}
        return steps.batch(items)
