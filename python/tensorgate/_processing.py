"""Input processing in the worker: encoded items (image files) to the model's input tensors.

The gateway sends a processed input as a BYTES tensor (docs/worker-protocol.md#bytes-inputs): its
items, each a 4-byte little-endian length and that many bytes, in the shared-memory arena. The
worker decodes them here, in the model's own process, so that decoding and resizing never run on
the gateway's event loop and are batched with the forward pass that takes them.

The steps and their order follow torchvision's classic transforms (EXIF orientation, mode, resize,
center crop, to floats, scale, normalise), with Pillow doing the pixel work, so a config written
from a torchvision pipeline reproduces it. docs/processing.md is the prose form of the options.
"""

from __future__ import annotations

import contextlib
import io
import struct
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ._dtypes import to_torch
from ._errors import (
    BAD_IMAGE,
    BAD_PARAMETER,
    BAD_TENSOR,
    IMAGE_FORMAT_NOT_SUPPORTED,
    IMAGE_TOO_LARGE,
    WorkerError,
)

try:  # Pillow is a runtime requirement, but a worker without it still serves plain tensors.
    from PIL import Image, ImageOps, UnidentifiedImageError
except ImportError:  # pragma: no cover - exercised only by installs without Pillow
    Image = None  # type: ignore[assignment]

#: The formats an image input takes, by config name, with Pillow's names for them.
IMAGE_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "gif": "GIF", "bmp": "BMP"}

_LENGTH = struct.Struct("<I")


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


@dataclass(frozen=True)
class ImageSteps:
    """One image input's processing, as the gateway validated it (src/registry/processing.ts)."""

    name: str
    tensor: str
    mode: str
    formats: tuple[str, ...]
    max_pixels: int
    invert: bool
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

    def decode(self, index: int, data: memoryview) -> np.ndarray:
        """One item to uint8 pixels, height x width x channels, after orientation, mode, resize
        and crop."""
        where = f'input "{self.name}" item {index}'
        if len(data) == 0:
            raise WorkerError(BAD_IMAGE, f"{where}: the image is empty (0 bytes)")
        try:
            with warnings.catch_warnings():
                # Pillow warns between its own limit and twice that; ours is checked below.
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
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
            try:
                image.load()  # the first frame of an animation; truncated data fails here
                upright = ImageOps.exif_transpose(image)  # a malformed EXIF block fails here
            except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise many kinds
                # The caller's data, not a fault here: no traceback (no exception class) to report.
                raise WorkerError(
                    BAD_IMAGE, f"{where}: the {image.format} data is corrupt or truncated: {exc}"
                ) from None
            # Decoded: what follows works on pixels in memory, and its errors would be ours.
            return self._pixels(upright)
        finally:
            image.close()

    def _pixels(self, image: Any) -> np.ndarray:
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
            height, width = self.resize_size
            image = image.resize((width, height), resample)
        elif self.resize_shorter is not None:
            width, height = image.size
            short = self.resize_shorter
            if width <= height:
                size = (short, int(short * height / width))
            else:
                size = (int(short * width / height), short)
            image = image.resize(size, resample)
        if self.crop is not None:
            height, width = self.crop
            left = int(round((image.width - width) / 2.0))
            top = int(round((image.height - height) / 2.0))
            # An image smaller than the crop is padded with black, as torchvision pads it.
            image = image.crop((left, top, left + width, top + height))
        pixels = np.asarray(image, dtype=np.uint8)
        return pixels[:, :, None] if pixels.ndim == 2 else pixels

    def batch(self, items: list[memoryview]) -> torch.Tensor:
        """The model's input tensor for the items: decoded into one uint8 batch, then scaled,
        normalised and laid out in one vectorised pass."""
        pixels = [self.decode(index, data) for index, data in enumerate(items)]
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


class Processing:
    """A model's input processing: which model inputs come from which processed inputs."""

    def __init__(self, raw: object, input_dtypes: dict[str, str]) -> None:
        if not isinstance(raw, dict):
            raise WorkerError(BAD_PARAMETER, "processing must be an object")
        self.steps: dict[str, ImageSteps] = {}
        for name, cfg in (raw.get("inputs") or {}).items():
            if not isinstance(cfg, dict) or cfg.get("type") != "image":
                raise WorkerError(
                    BAD_PARAMETER, f"processing input {name!r}: this worker processes images only"
                )
            tensor = str(cfg.get("tensor", name))
            if tensor not in input_dtypes:
                raise WorkerError(
                    BAD_PARAMETER, f"processing input {name!r}: no model input {tensor!r}"
                )
            self.steps[name] = ImageSteps.from_json(name, cfg, input_dtypes[tensor])

    def warm(self) -> None:
        """Decodes a tiny image through every input's steps, so that loading Pillow's format
        plugins and the first resize (17 ms on the development VM) land in the load, not in the
        first request."""
        Image.init()
        for steps in self.steps.values():
            tiny = io.BytesIO()
            Image.new("RGB", (4, 4)).save(tiny, "PNG")
            # A config that refuses PNG refuses it here: the plugins are loaded all the same.
            with contextlib.suppress(WorkerError):
                steps.batch([memoryview(tiny.getvalue())])

    def tensor(self, name: str, items: list[memoryview]) -> tuple[str, torch.Tensor]:
        """The model input ``name``'s items make, and that input's name."""
        steps = self.steps.get(name)
        if steps is None:
            raise WorkerError(BAD_TENSOR, f'input "{name}" is BYTES but has no processing')
        return steps.tensor, steps.batch(items)
