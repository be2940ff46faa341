"""Image processing in the worker, against a reference pipeline written apart from it: Pillow only
decodes, and resizing, cropping and normalising are torch operations (``F.interpolate`` with
antialiasing, slicing, arithmetic), so the two agree only if the steps and their order do."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn import functional as F  # noqa: N812

from tensorgate._errors import (
    BAD_IMAGE,
    BAD_TENSOR,
    IMAGE_FORMAT_NOT_SUPPORTED,
    IMAGE_TOO_LARGE,
    WorkerError,
)
from tensorgate._processing import ImageSteps, Processing, split_items

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
IMAGENET = {
    "type": "image",
    "resize": {"shorter": 24},
    "center_crop": [20, 20],
    "mean": MEAN,
    "std": STD,
}


def picture(width: int = 48, height: int = 36) -> Image.Image:
    """A smooth colour picture (gradients and a disc), so that resampling differences stay small."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    disc = ((x - width * 0.6) ** 2 + (y - height * 0.4) ** 2) < (height * 0.25) ** 2
    rgb = np.stack([x / width * 255, y / height * 255, np.where(disc, 230.0, 40.0)], axis=-1)
    return Image.fromarray(rgb.round().astype(np.uint8), "RGB")


def encode(image: Image.Image, fmt: str, **options: object) -> memoryview:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return memoryview(out.getvalue())


def steps(config: dict, dtype: str = "float32") -> ImageSteps:
    return ImageSteps.from_json("image", config, dtype)


def reference(data: memoryview, short: int, crop: int) -> torch.Tensor:
    """torchvision's classic ImageNet transform, spelled out in torch: 1 x 3 x crop x crop."""
    rgb = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float32)
    x = torch.from_numpy(rgb).permute(2, 0, 1).unsqueeze(0)
    h, w = x.shape[-2:]
    size = (int(short * h / w), short) if w <= h else (short, int(short * w / h))
    x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    x = x.round().clamp(0, 255)  # Pillow resizes 8-bit images into 8-bit images
    top, left = round((size[0] - crop) / 2), round((size[1] - crop) / 2)
    x = x[..., top : top + crop, left : left + crop] / 255.0
    return (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("PNG", {}), ("JPEG", {"quality": 95}), ("WEBP", {"quality": 95}), ("GIF", {}), ("BMP", {})],
)
def test_every_format_matches_the_reference_pipeline(fmt: str, options: dict) -> None:
    data = encode(picture(), fmt, **options)
    got = steps(IMAGENET).batch([data])
    assert got.shape == (1, 3, 20, 20)
    assert got.dtype == torch.float32
    want = reference(data, short=24, crop=20)
    # One 8-bit level is 0.0175 after dividing by std; antialiased kernels differ by a level or two.
    assert (got - want).abs().max().item() < 0.05


def test_a_batch_is_its_items_stacked_and_hwc_keeps_channels_last() -> None:
    a, b = encode(picture(), "PNG"), encode(picture(36, 48), "JPEG")
    batch = steps(IMAGENET).batch([a, b])
    assert torch.equal(batch[0], steps(IMAGENET).batch([a])[0])
    assert torch.equal(batch[1], steps(IMAGENET).batch([b])[0])
    hwc = steps({**IMAGENET, "layout": "HWC"}).batch([a])
    assert torch.equal(hwc, batch[:1].permute(0, 2, 3, 1))


def test_uint8_models_get_the_pixels_as_they_are() -> None:
    data = encode(picture(), "PNG")
    got = steps({"type": "image", "resize": {"size": [36, 48]}}, "uint8").batch([data])
    assert got.dtype == torch.uint8
    assert torch.equal(got[0], torch.from_numpy(np.array(picture())).permute(2, 0, 1))


def test_exif_orientation_is_applied() -> None:
    image = picture(48, 36)
    exif = Image.Exif()
    exif[0x0112] = 6  # the camera was turned: display rotated 90 degrees clockwise
    data = encode(image, "JPEG", quality=95, exif=exif.tobytes())
    got = steps({"type": "image", "scale": 1.0}).batch([data])
    assert got.shape == (1, 3, 48, 36)  # height and width swapped
    upright = np.asarray(Image.open(io.BytesIO(data)).transpose(Image.Transpose.ROTATE_270))
    assert torch.equal(got[0], torch.from_numpy(upright.astype(np.float32)).permute(2, 0, 1))


def test_an_animated_gif_gives_its_first_frame() -> None:
    frames = [Image.new("L", (8, 8), 30), Image.new("L", (8, 8), 220)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100)
    got = steps({"type": "image", "mode": "L", "scale": 1.0}).batch([memoryview(out.getvalue())])
    assert torch.all(got == 30)


def test_transparency_is_flattened_onto_white_and_invert_turns_ink_light() -> None:
    rgba = Image.new("RGBA", (8, 8), (0, 0, 0, 0))  # fully transparent black
    rgba.putpixel((3, 3), (0, 0, 0, 255))  # one opaque black dot
    data = encode(rgba, "PNG")
    gray = steps({"type": "image", "mode": "L", "scale": 1.0}).batch([data])[0, 0]
    assert gray[0, 0] == 255 and gray[3, 3] == 0
    inverted = steps({"type": "image", "mode": "L", "scale": 1.0, "invert": True}).batch([data])
    assert inverted[0, 0, 0, 0] == 0 and inverted[0, 0, 3, 3] == 255


def test_box_shrinking_of_an_upscaled_scan_gives_the_scan_back() -> None:
    """The digits demo's steps: 8x8 values upscaled 4x as dark-on-light files read back to
    within rounding."""
    scan = np.random.default_rng(0).integers(0, 17, (8, 8))
    paper = (255 - scan * 255 / 16).round().astype(np.uint8)
    data = encode(Image.fromarray(paper, "L").resize((32, 32), Image.Resampling.NEAREST), "PNG")
    digits = {
        "type": "image",
        "mode": "L",
        "invert": True,
        "resize": {"size": [8, 8], "interpolation": "box"},
    }
    got = steps(digits).batch([data])[0, 0]
    assert np.abs(got.numpy() - scan / 16).max() < 1 / 255 + 1e-6


def test_bad_images_get_codes_that_name_the_item() -> None:
    good = encode(picture(), "PNG")
    small = steps(IMAGENET)

    def code_of(data: memoryview, on: ImageSteps = small) -> WorkerError:
        with pytest.raises(WorkerError) as caught:
            on.batch([good, data])
        assert 'input "image" item 1' in caught.value.message
        return caught.value

    truncated = code_of(good[: len(good) // 2])
    assert truncated.code == BAD_IMAGE and "corrupt or truncated" in truncated.message
    assert code_of(memoryview(b"")).code == BAD_IMAGE
    garbage = code_of(memoryview(b"\x89PNG\r\n\x1a\n" + bytes(100)))
    assert garbage.code == BAD_IMAGE and "PNG data is corrupt" in garbage.message
    assert code_of(memoryview(b"just some text, no image")).code == BAD_IMAGE
    tiff = code_of(encode(picture(), "TIFF"))
    assert tiff.code == BAD_IMAGE  # not among the formats a worker decodes at all
    only_png = steps({**IMAGENET, "formats": ["png"]})
    assert code_of(encode(picture(), "JPEG"), only_png).code == IMAGE_FORMAT_NOT_SUPPORTED
    bomb = code_of(
        encode(Image.new("L", (300, 300)), "PNG"), steps({**IMAGENET, "max_pixels": 2000})
    )
    assert bomb.code == IMAGE_TOO_LARGE and "90000 pixels" in bomb.message


def test_images_of_different_sizes_need_a_fixed_size() -> None:
    loose = steps({"type": "image"})
    with pytest.raises(WorkerError) as caught:
        loose.batch([encode(picture(), "PNG"), encode(picture(20, 20), "PNG")])
    assert caught.value.code == BAD_IMAGE and "resize.size or center_crop" in caught.value.message


def test_bytes_items_are_split_without_copying_and_checked() -> None:
    items = [b"abc", b"", b"defgh"]
    data = bytearray(b"".join(struct.pack("<I", len(i)) + i for i in items))
    views = split_items(memoryview(data), 3, "image")
    assert [bytes(v) for v in views] == items
    data[4] = ord("z")
    assert bytes(views[0]) == b"zbc"  # a view of the buffer, not a copy
    for bad, count in [(data[:-1], 3), (data, 2), (data[:2], 1)]:
        with pytest.raises(WorkerError) as caught:
            split_items(memoryview(bytes(bad)), count, "image")
        assert caught.value.code == BAD_TENSOR


def test_processing_maps_processed_inputs_to_model_inputs(tmp_path: Path) -> None:
    processing = Processing(
        {"inputs": {"photo": {**IMAGENET, "tensor": "pixels"}}},
        {"pixels": ("float32", 4)},
        tmp_path,
    )
    (name, tensor), *_ = processing.tensors("photo", [encode(picture(), "PNG")]).items()
    assert name == "pixels" and tensor.shape == (1, 3, 20, 20)
    with pytest.raises(WorkerError):
        Processing(
            {"inputs": {"photo": {**IMAGENET, "tensor": "nope"}}},
            {"pixels": ("float32", 4)},
            tmp_path,
        )


def test_geometry_says_where_the_model_pixels_lie_in_the_image_as_sent() -> None:
    """A 48x36 picture resized (shorter side 24: 32x24) and cropped to 20x20 from the middle; a
    sideways JPEG whose EXIF orientation stands it upright is measured upright."""
    geometry: list = []
    batch = steps(IMAGENET).batch([encode(picture(), "PNG")], geometry)
    assert batch.shape == (1, 3, 20, 20)
    assert [g.json() for g in geometry] == [
        {
            "width": 48,
            "height": 36,
            "input_width": 20,
            "input_height": 20,
            "left": 6,
            "top": 2,
            "scale_x": 1.5,
            "scale_y": 1.5,
        }
    ]
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    sideways = encode(picture(36, 48), "JPEG", exif=exif)
    upright = steps({"type": "image", "resize": {"size": [12, 16]}}).batch([sideways], geometry)
    assert upright.shape == (1, 3, 12, 16)
    assert geometry[1].json() == {
        "width": 48,
        "height": 36,
        "input_width": 16,
        "input_height": 12,
        "left": 0,
        "top": 0,
        "scale_x": 3.0,
        "scale_y": 3.0,
    }


def test_a_detection_output_asks_the_worker_for_each_image_geometry(tmp_path: Path) -> None:
    config = {"inputs": {"photo": IMAGENET}, "output": {"type": "detection"}}
    processing = Processing(config, {"photo": ("float32", 4)}, tmp_path)
    assert processing.wants_geometry
    geometry: dict = {}
    items = [encode(picture(), "PNG"), encode(picture(24, 48), "PNG")]
    processing.tensors("photo", items, geometry)
    assert [g.width for g in geometry["photo"]] == [48, 24]
    plain = Processing({"inputs": {"photo": IMAGENET}}, {"photo": ("float32", 4)}, tmp_path)
    assert not plain.wants_geometry


def test_large_jpegs_are_decoded_at_a_reduced_scale_unless_asked_not_to() -> None:
    """A 1600x1200 JPEG to a 64 crop: libjpeg's 1/8 scale gives nearly the same pixels, and the
    geometry still speaks of the photo as sent, upright."""
    big = encode(picture(1600, 1200), "JPEG", quality=95)
    config = {"type": "image", "resize": {"shorter": 72}, "center_crop": [64, 64], "scale": 1.0}
    full_geometry: list = []
    draft_geometry: list = []
    full = steps({**config, "jpeg_draft": False}).batch([big], full_geometry)
    drafted = steps(config).batch([big], draft_geometry)
    assert drafted.shape == full.shape == (1, 3, 64, 64)
    assert 0 < float((drafted - full).abs().mean()) < 1.0  # of 255: decoded another way, alike
    assert full_geometry[0].json() == draft_geometry[0].json()
    assert (draft_geometry[0].width, draft_geometry[0].height) == (1600, 1200)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: upright it is 1200 wide, 1600 high
    sideways = encode(picture(1600, 1200), "JPEG", quality=95, exif=exif)
    geometry: list = []
    steps(config).batch([sideways], geometry)
    assert (geometry[0].width, geometry[0].height) == (1200, 1600)
    assert geometry[0].scale_x == pytest.approx(1200 / 72, rel=0.01)


def test_a_batch_decodes_on_the_worker_threads_in_order() -> None:
    """With two torch threads the items decode side by side; the batch is the same, in order, and
    a bad item still fails naming itself."""
    items = [encode(picture(40 + 4 * i, 36), "PNG") for i in range(6)]
    image = steps({**IMAGENET, "resize": {"size": [20, 20]}})
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_by_one = image.batch(items)
        torch.set_num_threads(2)
        side_by_side = image.batch(items)
        assert torch.equal(one_by_one, side_by_side)
        with pytest.raises(WorkerError, match='input "image" item 4: the image is empty'):
            image.batch([*items[:4], memoryview(b""), memoryview(b"")])
    finally:
        torch.set_num_threads(before)
