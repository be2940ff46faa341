"""Loading each format (TorchScript, torch.export programs, AOTInductor packages, eager), the
checks of an exported program's dimensions against the config, device choice, output naming."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from tensorgate._errors import BAD_PARAMETER, LOAD_FAILED, UNSUPPORTED_FORMAT, WorkerError
from tensorgate._export import export_module
from tensorgate._loader import (
    ModelSpec,
    TensorSpec,
    load_model,
    program_dims,
    pt2_kind,
    resolve_device,
    skip_per_call_structure_check,
    supported_formats,
)
from tensorgate._outputs import name_outputs


def model_spec(path: Path, fmt: str, **overrides) -> ModelSpec:
    return ModelSpec.from_json(load_request_model(path, fmt, **overrides))


def load_request_model(path: Path, fmt: str, **overrides) -> dict:
    """The ``model`` object of a ``load`` request for the file at ``path``."""
    return {
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


def load_error(spec: ModelSpec) -> WorkerError:
    with pytest.raises(WorkerError) as info:
        load_model(spec)
    return info.value


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_current_torch_loads_every_format():
    assert supported_formats() == ["torchscript", "export", "aoti", "eager"]


def test_formats_are_told_and_torchscript_loads_without_importing_inductor(tmp_path):
    """Every worker's ``hello`` lists the formats: importing Inductor to see that AOTInductor's
    loader is there cost each worker over a second of CPU. A TorchScript model does not need it."""
    path = save_scripted(Double(), tmp_path / "model.pt")
    script = (
        "import json, sys\n"
        "from tensorgate._loader import ModelSpec, load_model, supported_formats\n"
        "formats = supported_formats()\n"
        "after_hello = 'torch._inductor' in sys.modules\n"
        "load_model(ModelSpec.from_json(json.loads(sys.argv[1])))\n"
        "print(json.dumps([formats, after_hello, 'torch._inductor' in sys.modules]))\n"
    )
    package_dir = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(load_request_model(path, "torchscript"))],
        env={**os.environ, "PYTHONPATH": str(package_dir)},
        capture_output=True,
        text=True,
        check=True,
    )
    formats, after_hello, after_load = json.loads(done.stdout.strip().splitlines()[-1])
    assert formats == supported_formats() and "aoti" in formats
    assert not after_hello and not after_load


def save_scripted(module: torch.nn.Module, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(module).save(str(path))
    return path


def test_torchscript_loads_without_torch_2_deprecation_warnings(tmp_path):
    path = save_scripted(Double(), tmp_path / "model.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch 2.x warns on every torch.jit.load
        loaded = load_model(model_spec(path, "torchscript"))
    assert loaded.device == torch.device("cpu") and loaded.program is None
    assert loaded.module(torch.ones(1, 4)).tolist() == [[2.0] * 4]


def test_eager_imports_the_factory_from_code_dir(test_models):
    version = test_models / "flaky" / "1"
    spec = model_spec(version / "weights.pt", "eager", entry="model:build")
    model = load_model(spec).module
    assert not model.training
    assert model(torch.zeros(1, 4)).tolist() == [[1.0] * 4]
    # a second eager model whose module is also called "model" gets its own code
    other = test_models / "sleepy" / "1"
    sleepy = load_model(model_spec(other / "weights.pt", "eager", entry="model:build")).module
    assert type(sleepy).__name__ == "Sleepy"


def test_eager_weights_are_loaded_with_weights_only(tmp_path, demo_models):
    version = demo_models / "image-classifier" / "2"
    model = load_model(model_spec(version / "weights.pt", "eager", entry="model:build")).module
    program = torch.export.load(str(demo_models / "image-classifier" / "1" / "model.pt2"))
    image = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        assert torch.allclose(model(image), program.module()(image), atol=1e-4)
    # a pickle that is not plain tensors is refused, not executed
    evil = tmp_path / "evil.pt"
    torch.save({"w": Double()}, str(evil))
    (tmp_path / "model.py").write_text((version / "model.py").read_text())
    error = load_error(model_spec(evil, "eager", entry="model:build"))
    assert error.code == LOAD_FAILED


def export_double(path: Path, **dims: object) -> Path:
    dynamic = ({0: dims["batch"]},) if "batch" in dims else None
    program = torch.export.export(Double(), (torch.ones(2, 4),), dynamic_shapes=dynamic)
    torch.export.save(program, str(path))
    return path


def test_export_programs_load_and_batch_over_their_dynamic_dims(tmp_path):
    path = export_double(tmp_path / "model.pt2", batch=torch.export.Dim("batch", min=1, max=64))
    loaded = load_model(model_spec(path, "export", max_batch_size=64))
    assert loaded.program is not None and loaded.weights_bytes == 0
    for rows in (1, 2, 5, 64):  # the program's Dim, not the 2 rows it was traced with
        assert loaded.module(torch.ones(rows, 4)).tolist() == [[2.0] * 4] * rows
    assert program_dims(loaded.program) == [[(1, 64), 4]]
    assert pt2_kind(str(path)) == "export"


class AddPair(torch.nn.Module):
    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return pair[0] + pair[1]


def test_export_modules_check_their_argument_structure_once_and_their_guards_every_call(tmp_path):
    path = export_double(tmp_path / "model.pt2", batch=torch.export.Dim("batch", min=1, max=8))
    loaded = load_model(model_spec(path, "export", max_batch_size=8))
    checked = torch.export.load(str(path)).module()
    if not hasattr(checked, "_guards_fn"):  # older torch: that check is where the guards run
        assert loaded.module.validate_inputs is True
        return
    assert loaded.module.validate_inputs is False and checked.validate_inputs is True
    x = torch.rand(3, 4)
    assert torch.equal(loaded.module(x), checked(x))
    with pytest.raises(Exception, match="Guard failed"):
        loaded.module(torch.rand(9, 4))  # past the Dim's max: the graph's own guard refuses it
    with pytest.raises(Exception, match="Guard failed"):
        loaded.module(torch.rand(2, 5))
    nested = torch.export.export(AddPair(), ((torch.ones(2), torch.ones(2)),)).module()
    assert skip_per_call_structure_check(nested, 2) is False  # not a flat tuple of tensors
    assert nested.validate_inputs is True


@pytest.mark.parametrize(
    ("dims", "overrides", "match"),
    [
        ({}, {}, r'input "x" dimension 0 is fixed at 2 in the exported program but the config '
                 r"declares it dynamic \(-1\)"),
        ({"batch": torch.export.Dim("batch", min=1, max=8)}, {"max_batch_size": 16},
         "may be at most 8 in the exported program, but batching may send 16 rows"),
        ({"batch": torch.export.Dim.AUTO}, {}, "is at least 2 in the exported program"),
        ({}, {"inputs": [{"name": "x", "dtype": "float32", "shape": [2, 5]}]},
         'input "x" dimension 1 is 4 in the exported program and 5 in the config'),
        ({}, {"inputs": [{"name": "x", "dtype": "float32", "shape": [2, 4]}] * 2},
         "takes 1 inputs and the config declares 2"),
    ],
)  # fmt: skip
def test_export_programs_that_cannot_take_what_the_config_sends_are_refused(
    tmp_path, dims, overrides, match
):
    path = export_double(tmp_path / "model.pt2", **dims)
    error = load_error(model_spec(path, "export", **overrides))
    assert error.code == LOAD_FAILED
    assert re.search(match, error.message), error.message


class BoundedBatch(torch.nn.Module):
    """Guards on its batch size, as CUDA convolutions do for 32-bit indexing."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] > 14266 else x + 1


def test_export_keeps_within_bounds_the_model_sets_on_a_dynamic_dim():
    program = export_module(BoundedBatch(), [TensorSpec("x", torch.float32, [-1, 3])])
    assert program_dims(program) == [[(1, 14266), 3]]
    assert program.module()(torch.zeros(1, 3)).tolist() == [[1.0] * 3]


def test_export_keeps_a_dict_of_outputs(test_models):
    version = test_models / "multi_out" / "1"
    outputs = [{"name": "scores", "dtype": "float32", "shape": [-1, 4]},
               {"name": "argmax", "dtype": "int64", "shape": [-1]}]  # fmt: skip
    loaded = load_model(model_spec(version / "model.pt2", "export", outputs=outputs))
    result = loaded.module(torch.tensor([[0.0, 3.0, 0.0, 0.0]]))
    assert sorted(result) == ["argmax", "scores"] and result["argmax"].tolist() == [1]


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
