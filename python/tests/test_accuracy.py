"""The accuracy rules that judge a variant against fp32: the cases shared with the gateway's
implementation (test/fixtures/accuracy-cases.json), and real variants of the demo image model."""

from __future__ import annotations

import copy
import json
import math
import warnings
from pathlib import Path

import pytest
import torch

from tensorgate._accuracy import check_output
from tensorgate._dtypes import to_torch
from tensorgate._loader import ModelSpec, TensorSpec, load_model

CASES = json.loads(
    (Path(__file__).resolve().parents[2] / "test" / "fixtures" / "accuracy-cases.json").read_text()
)["cases"]


def tensor(values: object, dtype: torch.dtype) -> torch.Tensor:
    def number(v: object) -> object:
        if isinstance(v, list):
            return [number(x) for x in v]
        return float(v) if isinstance(v, str) else v

    return torch.tensor(number(values), dtype=dtype)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_shared_cases(case):
    dtype = to_torch(case["dtype"])
    spec = TensorSpec("out", dtype, [-1], labels=case["labels"])
    check = check_output(
        spec, tensor(case["actual"], dtype), tensor(case["expected"], dtype), case["tolerance"]
    )
    assert check.rule == case["rule"]
    assert check.within is case["within"], check
    if "changed" in case:
        assert check.changed == case["changed"], check
    if "error" in case:
        assert math.isclose(check.error, case["error"], rel_tol=1e-3, abs_tol=1e-9), check


@pytest.fixture(scope="module")
def image_model(demo_models):
    version = demo_models / "image-classifier" / "2"
    config = json.loads((demo_models / "image-classifier" / "config.json").read_text())
    spec = ModelSpec.from_json({
        "name": "image-classifier", "version": "2", "format": "eager", "entry": "model:build",
        "file": str(version / "weights.pt"), "inputs": config["inputs"],
        "outputs": config["outputs"], "warmup_runs": 0,
    })  # fmt: skip
    torch.set_num_threads(2)
    model = load_model(spec).module
    image = torch.rand(4, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        reference = model(image)
    return model, image, reference, spec.outputs[0]


def judged(image_model, run, tolerance: float):
    model, image, reference, output = image_model
    with torch.inference_mode():
        got = run(model, image)
    return check_output(output, got.float(), reference, tolerance)


@pytest.mark.parametrize(
    ("name", "tolerance", "run"),
    [
        ("bf16", 0.05, lambda m, x: _autocast(m, x, torch.bfloat16)),
        ("fp16", 0.01, lambda m, x: _autocast(m, x, torch.float16)),
        ("int8", 0.05, lambda m, x: _int8(m)(x)),
    ],
)
def test_correct_lower_precisions_of_the_image_model_pass_their_defaults(
    image_model, name, tolerance, run
):
    check = judged(image_model, run, tolerance)
    assert check.within and check.changed == 0, check
    assert 0 < check.error < tolerance


def test_perturbed_weights_change_the_answers_and_are_rejected(image_model):
    def perturbed(model, image):
        broken = copy.deepcopy(model)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in broken.parameters():
                p.add_(1e-2 * torch.randn(p.shape, generator=generator))
        return broken(image)

    check = judged(image_model, perturbed, 0.05)
    assert not check.within and check.error > 0.05


def _autocast(model, image, dtype):
    with torch.autocast("cpu", dtype=dtype):
        return model(image)


def _int8(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
