"""examples/torchvision/export_classifier.py against torchvision itself: the config's image steps,
run by the worker's processing, make the same tensor as the weights' own transforms, and the
exported program answers the same logits as the eager model on it.

torchvision's newest release pairs with an older torch than the runtime's, so this runs where it
installs: on the floor torch (scripts/test.sh installs it there); elsewhere it is skipped.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

torchvision = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402

from tensorgate._processing import Processing  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def photo(width: int, height: int) -> Image.Image:
    """A smooth colour picture with a disc: something for a resize to get right or wrong."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    disc = ((x - width * 0.4) ** 2 + (y - height * 0.6) ** 2) < (min(width, height) * 0.3) ** 2
    rgb = np.stack([x / width * 255, y / height * 255, np.where(disc, 220.0, 30.0)], axis=-1)
    return Image.fromarray(rgb.round().astype(np.uint8), "RGB")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("torchvision") / "photos"
    script = ROOT / "examples" / "torchvision" / "export_classifier.py"
    subprocess.run([sys.executable, str(script), "resnet18", str(out), "--random"], check=True)
    return out


def test_the_config_reproduces_the_weights_transforms(exported: Path) -> None:
    config = json.loads((exported / "config.json").read_text())
    weights = torchvision.models.ResNet18_Weights.DEFAULT
    assert config["outputs"][0]["labels"] == list(weights.meta["categories"])
    assert config["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 3, 224, 224]}]
    processing = Processing(config["processing"], {"x": ("float32", 4)}, exported / "1")
    preset = weights.transforms()
    for width, height, fmt in [(320, 240, "JPEG"), (200, 300, "PNG"), (256, 256, "PNG")]:
        picture = photo(width, height)
        encoded = io.BytesIO()
        picture.save(encoded, fmt, quality=95)
        ours = processing.tensors("photo", [memoryview(encoded.getvalue())])["x"]
        theirs = preset(Image.open(io.BytesIO(encoded.getvalue()))).unsqueeze(0)
        assert ours.shape == theirs.shape == (1, 3, 224, 224)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_the_exported_program_answers_as_the_eager_model(exported: Path) -> None:
    program = torch.export.load(str(exported / "1" / "model.pt2")).module()
    torch.manual_seed(0)
    x = torch.randn(3, 3, 224, 224)
    # The example exports the architecture randomly initialised: the eager twin gets its weights.
    eager = torchvision.models.resnet18()
    eager.load_state_dict(program.state_dict())
    eager.eval()
    with torch.no_grad():
        torch.testing.assert_close(program(x), eager(x), atol=1e-4, rtol=1e-4)
