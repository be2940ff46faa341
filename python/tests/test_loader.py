"""Loading each format, device choice, and the runner's precision and output handling."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tensorgate._errors import (
    BAD_PARAMETER,
    INFERENCE_FAILED,
    LOAD_FAILED,
    UNSUPPORTED_FORMAT,
    WorkerError,
)
from tensorgate._loader import ModelSpec, load_model, resolve_device, supported_formats
from tensorgate._runner import Runner, name_outputs
from tensorgate._variants import VARIANT_UNAVAILABLE, VariantOptions, Variants, autocast_supported

HAS_EXPORT = "export" in supported_formats()


def model_spec(path: Path, fmt: str, **overrides) -> ModelSpec:
    raw = {
        "name": "m",
        "version": "1",
        "format": fmt,
        "file": str(path),
        "code_dir": str(path.parent),
        "device": "cpu",
        "threads": 1,
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 4]}],
        "warmup_runs": 1,
        **overrides,
    }
    return ModelSpec.from_json(raw)


def load_error(spec: ModelSpec) -> WorkerError:
    with pytest.raises(WorkerError) as info:
        load_model(spec)
    return info.value


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_formats_always_include_torchscript_and_eager():
    formats = supported_formats()
    assert formats[0] == "torchscript" and "eager" in formats
    assert (hasattr(torch, "export") and hasattr(torch.export, "load")) == HAS_EXPORT


def test_torchscript(tmp_path):
    path = tmp_path / "model.pt"
    torch.jit.script(Double()).save(str(path))
    model, device = load_model(model_spec(path, "torchscript"))
    assert device == torch.device("cpu")
    assert model(torch.ones(1, 4)).tolist() == [[2.0] * 4]


def test_eager_imports_the_factory_from_code_dir(test_models):
    version = test_models / "flaky" / "1"
    spec = model_spec(version / "weights.pt", "eager", entry="model:build")
    model, _ = load_model(spec)
    assert not model.training
    assert model(torch.zeros(1, 4)).tolist() == [[1.0] * 4]
    # a second eager model whose module is also called "model" gets its own code
    other = test_models / "sleepy" / "1"
    sleepy, _ = load_model(model_spec(other / "weights.pt", "eager", entry="model:build"))
    assert type(sleepy).__name__ == "Sleepy"


def test_eager_weights_are_loaded_with_weights_only(tmp_path, demo_models):
    version = demo_models / "image-classifier" / "2"
    model, _ = load_model(model_spec(version / "weights.pt", "eager", entry="model:build"))
    scripted = torch.jit.load(str(demo_models / "image-classifier" / "1" / "model.pt"))
    image = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        assert torch.allclose(model(image), scripted(image), atol=1e-4)
    # a pickle that is not plain tensors is refused, not executed
    evil = tmp_path / "evil.pt"
    torch.save({"w": Double()}, str(evil))
    (tmp_path / "model.py").write_text((version / "model.py").read_text())
    error = load_error(model_spec(evil, "eager", entry="model:build"))
    assert error.code == LOAD_FAILED


@pytest.mark.skipif(not HAS_EXPORT, reason=f"torch {torch.__version__} has no torch.export")
def test_export(tmp_path):
    path = tmp_path / "model.pt2"
    program = torch.export.export(Double(), (torch.ones(2, 4),))
    torch.export.save(program, str(path))
    model, _ = load_model(model_spec(path, "export"))
    assert model(torch.ones(2, 4)).tolist() == [[2.0] * 4] * 2


@pytest.mark.skipif(HAS_EXPORT, reason="this torch can load torch.export programs")
def test_export_is_unsupported_without_torch_export(tmp_path):
    path = tmp_path / "model.pt2"
    path.write_bytes(b"")
    error = load_error(model_spec(path, "export"))
    assert error.code == UNSUPPORTED_FORMAT
    assert torch.__version__ in error.message


def test_unknown_format_is_unsupported(tmp_path):
    assert load_error(model_spec(tmp_path / "m.onnx", "onnx")).code == UNSUPPORTED_FORMAT


@pytest.mark.parametrize(
    ("fmt", "entry", "content", "match"),
    [
        ("torchscript", None, None, "does not exist"),
        ("torchscript", None, b"not a zip", ""),
        ("eager", None, b"", "entry"),
        ("eager", "nomodule:build", b"", "nomodule"),
        ("eager", "model", b"", "module:factory"),
    ],
)
def test_load_failures(tmp_path, fmt, entry, content, match):
    path = tmp_path / "model.pt"
    if content is not None:
        path.write_bytes(content)
    error = load_error(model_spec(path, fmt, entry=entry))
    assert error.code == LOAD_FAILED
    assert match in error.message


def test_malformed_load_request_is_bad_parameter(tmp_path):
    with pytest.raises(WorkerError) as info:
        ModelSpec.from_json({"name": "m"})
    assert info.value.code == BAD_PARAMETER


def test_devices():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == torch.device(expected)
    for name in ("cuda:99", "tpu", "nonsense"):
        with pytest.raises(WorkerError) as info:
            resolve_device(name)
        assert info.value.code == LOAD_FAILED


# Runner ----------------------------------------------------------------------------------------


def runner_for(module: torch.nn.Module, tmp_path: Path, outputs: list[dict]) -> Runner:
    path = tmp_path / "model.pt"
    scripted = torch.jit.script(module)
    scripted.save(str(path))
    spec = model_spec(path, "torchscript", outputs=outputs)
    model, device = load_model(spec)
    return Runner(model, spec, device)


def test_warmup_runs_on_zeros_of_the_declared_shape(tmp_path):
    runner = runner_for(Double(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    assert runner.warmup(2) >= 0.0


def variants_for(runner: Runner, *precisions: str, **options) -> Variants:
    return runner.build_variants(
        VariantOptions.from_json({"precisions": list(precisions), **options})
    )


def test_bf16_runs_under_autocast_on_cpu(tmp_path):
    linear = torch.nn.Linear(4, 3)
    runner = runner_for(linear, tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 3]}])
    variant = variants_for(runner, "bf16").get("bf16")
    assert variant.method == "autocast bf16" and variant.state == "ready"
    assert variant.max_abs is not None and variant.max_abs < 0.05
    [(spec, out)] = runner.run(variant, [torch.ones(2, 4)])
    assert out.dtype == torch.bfloat16  # the worker casts back to spec.dtype when writing
    assert torch.allclose(out.float(), linear(torch.ones(2, 4)), atol=0.05)


def test_unknown_or_unsupported_precision_is_refused(tmp_path):
    runner = runner_for(Double(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    variants = variants_for(runner, "fp16")
    assert variants.get("fp32").method == "plain"
    with pytest.raises(WorkerError) as info:
        variants.get("int4")
    assert info.value.code == BAD_PARAMETER
    if not autocast_supported("cpu", torch.float16):  # torch 1.13: CPU autocast is bf16 only
        assert variants.by_precision["fp16"].state == "unavailable"
        with pytest.raises(WorkerError, match="cannot run fp16 on cpu") as info:
            variants.get("fp16")
        assert info.value.code == VARIANT_UNAVAILABLE


def test_model_errors_are_inference_failed(tmp_path):
    runner = runner_for(Double(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    with pytest.raises(WorkerError) as info:
        runner.forward(runner.model, [torch.ones(1, 4), torch.ones(1)])
    assert info.value.code == INFERENCE_FAILED


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_int8_quantizes_linear_layers_and_is_checked_against_fp32(tmp_path):
    runner = runner_for(Mlp(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    variant = variants_for(runner, "int8").get("int8")
    assert variant.state == "ready" and variant.method.startswith("dynamic quantization")
    assert 0 < variant.max_abs < variant.tolerance == 5e-2  # quantized: close, not equal
    assert "quantized::" in str(variant.module.inlined_graph)
    x = torch.rand(3, 4)
    [(_, got)] = runner.run(variant, [x])
    assert torch.allclose(got, runner.model(x), atol=0.05)


def test_int8_outside_its_tolerance_is_rejected_and_fp32_still_serves(tmp_path):
    runner = runner_for(Mlp(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    variants = variants_for(runner, "int8", tolerance={"int8": 1e-9})
    int8 = variants.by_precision["int8"]
    assert int8.state == "rejected" and 'output "y" is off from fp32' in int8.reason
    with pytest.raises(WorkerError, match="past the tolerance 1e-09") as info:
        variants.get("int8")
    assert info.value.code == VARIANT_UNAVAILABLE
    assert variants.get("fp32").ready


def test_int8_without_a_quantizable_layer_is_unavailable(tmp_path):
    runner = runner_for(Double(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    int8 = variants_for(runner, "int8").by_precision["int8"]
    assert int8.state == "unavailable" and "no Linear, LSTM or GRU layer" in int8.reason


def test_eager_int8_uses_quantize_dynamic():
    spec = model_spec(Path("/m.pt"), "eager", entry="m:build")
    options = VariantOptions.from_json({"precisions": ["int8"]})
    runner = Runner(Mlp().eval(), spec, torch.device("cpu"))
    variants = Variants(runner.model, spec, runner.device, options, runner.forward)
    assert variants.get("int8").max_abs < 5e-2


@pytest.mark.parametrize("method", ["freeze", "optimize_for_inference"])
def test_torchscript_optimizations_serve_fp32_when_they_agree(tmp_path, method):
    runner = runner_for(Mlp(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    fp32 = variants_for(runner, torch_optimization=method).get("fp32")
    assert fp32.method == method and fp32.max_abs <= 1e-5
    assert fp32.module is not runner.model


def test_compile_without_torch_compile_falls_back_to_plain_fp32_with_the_reason(tmp_path):
    runner = runner_for(Mlp(), tmp_path, [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])
    fp32 = variants_for(runner, torch_optimization="compile").get("fp32")
    if hasattr(torch, "compile"):
        assert fp32.method in ("compile", "plain")
    else:
        assert fp32.method == "plain" and "has no torch.compile" in fp32.reason


def test_variant_options_are_checked():
    with pytest.raises(WorkerError, match="precisions must be among"):
        VariantOptions.from_json({"precisions": ["int4"]})
    assert VariantOptions.from_json(None).precisions == ["fp32"]


def test_outputs_are_named_from_a_tensor_tuple_or_dict():
    a, b = torch.zeros(1), torch.ones(1)
    spec = model_spec(Path("/m.pt"), "torchscript", outputs=[
        {"name": "a", "dtype": "float32", "shape": [1]},
        {"name": "b", "dtype": "int64", "shape": [1]},
    ])  # fmt: skip
    for result in ((a, b), [a, b], {"b": b, "a": a, "extra": a}):
        named = name_outputs(result, spec.outputs)
        assert [(s.name, t) for s, t in named] == [("a", a), ("b", b)]
    assert name_outputs(a, spec.outputs[:1])[0][1] is a
    for bad, match in [(a, "1 outputs"), ({"a": a}, "not the declared"), ((a, 3), "not a tensor"),
                       ("text", "str")]:  # fmt: skip
        with pytest.raises(WorkerError, match=match):
            name_outputs(bad, spec.outputs)
