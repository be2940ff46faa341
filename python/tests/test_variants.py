"""Variants with real torch: autocast, int8, TorchScript freezing, torch.compile and AOTInductor
packages (compiled, cached and loaded again), each checked against fp32; a variant that cannot be
built or fails its check leaves plain fp32 serving."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
import torch

from tensorgate._errors import BAD_PARAMETER, INFERENCE_FAILED, WorkerError
from tensorgate._loader import FlatAOTICall, ModelSpec, load_model, pt2_kind
from tensorgate._runner import Runner
from tensorgate._variants import VARIANT_UNAVAILABLE, Variant, VariantOptions, Variants

Y4 = [{"name": "y", "dtype": "float32", "shape": [-1, 4]}]


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def spec_for(path: Path, fmt: str, **overrides) -> ModelSpec:
    return ModelSpec.from_json({
        "name": "m", "version": "1", "format": fmt, "file": str(path), "entry": "model:build",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}], "outputs": Y4,
        "warmup_runs": 1, **overrides,
    })  # fmt: skip


def scripted_runner(module: torch.nn.Module, tmp_path: Path) -> Runner:
    path = tmp_path / "model.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(module).save(str(path))
    spec = spec_for(path, "torchscript")
    return Runner(load_model(spec), spec)


MLP_CODE = """
import torch


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
        )

    def forward(self, x):
        return self.net(x)


def build():
    return Mlp()
"""


def eager_mlp(folder: Path, **overrides) -> ModelSpec:
    """An eager model folder (model.py + weights.pt) of the Mlp, as a user writes one."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(MLP_CODE)
    torch.save(Mlp().state_dict(), str(folder / "weights.pt"))
    return spec_for(folder / "weights.pt", "eager", **overrides)


def eager_runner(folder: Path, **overrides) -> Runner:
    spec = eager_mlp(folder, **overrides)
    return Runner(load_model(spec), spec)


def variants_for(runner: Runner, *precisions: str, **options) -> Variants:
    return runner.build_variants(
        VariantOptions.from_json({"precisions": list(precisions), **options})
    )


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_autocast_runs_on_cpu_and_is_checked(tmp_path, precision, dtype):
    runner = scripted_runner(Mlp(), tmp_path)
    variant = variants_for(runner, precision).get(precision)
    assert variant.method == f"autocast {precision}" and variant.state == "ready"
    assert variant.check.rule == "values" and 0 < variant.check.error < variant.check.tolerance
    [(_, out)] = runner.run(variant, [torch.ones(2, 4)])
    assert out.dtype == dtype  # the worker casts back to spec.dtype when writing


def test_unknown_precision_is_refused(tmp_path):
    variants = variants_for(scripted_runner(Double(), tmp_path), "bf16")
    assert variants.get("fp32").method == "plain"
    with pytest.raises(WorkerError) as info:
        variants.get("int4")
    assert info.value.code == BAD_PARAMETER


def test_model_errors_are_inference_failed(tmp_path):
    runner = scripted_runner(Double(), tmp_path)
    with pytest.raises(WorkerError) as info:
        runner.forward(runner.model, [torch.ones(1, 4), torch.ones(1)])
    assert info.value.code == INFERENCE_FAILED


def test_int8_quantizes_torchscript_linear_layers(tmp_path):
    runner = scripted_runner(Mlp(), tmp_path)
    variant = variants_for(runner, "int8").get("int8")
    assert variant.state == "ready" and variant.method.startswith("dynamic quantization")
    assert 0 < variant.check.error < variant.check.tolerance == 5e-2  # close, not equal
    assert "quantized::" in str(variant.module.inlined_graph)


def test_int8_of_eager_code_uses_quantize_dynamic(tmp_path):
    variant = variants_for(eager_runner(tmp_path), "int8").get("int8")
    assert variant.ready and 0 < variant.check.error < 5e-2
    assert "DynamicQuantizedLinear" in str(variant.module)


def test_int8_that_changes_the_answers_is_rejected_and_fp32_still_serves(tmp_path):
    variants = variants_for(scripted_runner(Mlp(), tmp_path), "int8", tolerance={"int8": 1e-9})
    int8 = variants.by_precision["int8"]
    assert int8.state == "rejected"
    assert int8.reason.startswith('it changes the answers: output "y" is off from fp32 by up to')
    with pytest.raises(WorkerError, match=r"of its spread \(tolerance 1e-09\)") as info:
        variants.get("int8")
    assert info.value.code == VARIANT_UNAVAILABLE
    assert variants.get("fp32").ready


@pytest.mark.parametrize(
    ("fmt", "match"),
    [("torchscript", "no Linear, LSTM or GRU layer"), ("export", "a export model has none")],
)
def test_int8_without_quantizable_modules_is_unavailable(tmp_path, fmt, match):
    if fmt == "torchscript":
        runner = scripted_runner(Double(), tmp_path)
    else:
        path = tmp_path / "model.pt2"
        dims = ({0: torch.export.Dim("batch", min=1)},)
        torch.export.save(
            torch.export.export(Mlp(), (torch.ones(2, 4),), dynamic_shapes=dims), str(path)
        )
        spec = spec_for(path, "export")
        runner = Runner(load_model(spec), spec)
    int8 = variants_for(runner, "int8").by_precision["int8"]
    assert int8.state == "unavailable" and match in int8.reason


@pytest.mark.parametrize("method", ["freeze", "optimize_for_inference"])
def test_torchscript_optimizations_serve_fp32_when_they_agree(tmp_path, method):
    runner = scripted_runner(Mlp(), tmp_path)
    fp32 = variants_for(runner, torch_optimization=method).get("fp32")
    assert fp32.method == method and fp32.check.error <= 1e-4
    assert fp32.module is not runner.model and fp32.build_ms > 0


def test_compile_serves_fp32_warmed_at_every_batch_size_it_will_see(tmp_path):
    torch._dynamo.reset()
    runner = eager_runner(tmp_path, max_batch_size=8)
    fp32 = variants_for(runner, torch_optimization="compile").get("fp32")
    assert fp32.method == "torch.compile (mode default)" and fp32.ready, fp32.reason
    assert fp32.check.error <= 1e-4 and fp32.build_ms > 0
    # Warm-up compiled batch 1 and the dynamic graph: no batch up to 8 compiles again.
    with torch._dynamo.config.patch(error_on_recompile=True):
        for rows in (1, 3, 8):
            [(_, got)] = runner.run(fp32, [torch.ones(rows, 4)])
            assert got.shape == (rows, 4)


def test_compile_of_torchscript_is_unavailable_and_plain_fp32_serves(tmp_path):
    runner = scripted_runner(Mlp(), tmp_path)
    fp32 = variants_for(runner, torch_optimization="compile").get("fp32")
    assert fp32.method == "plain"
    assert "torch.compile does not take TorchScript modules" in fp32.reason
    [(_, got)] = runner.run(fp32, [torch.ones(2, 4)])
    assert torch.allclose(got, runner.model(torch.ones(2, 4)))


def test_compile_that_fails_on_first_call_leaves_plain_fp32_serving(tmp_path):
    torch._dynamo.reset()
    runner = eager_runner(tmp_path)
    # A real failure: Inductor's CPU code needs a C++ compiler, here one that does not exist.
    with torch._inductor.config.patch({"cpp.cxx": ("/nonexistent/c++",)}):
        fp32 = variants_for(runner, torch_optimization="compile").get("fp32")
    assert fp32.method == "plain"
    assert "torch.compile (mode default) was not used: it is unavailable" in fp32.reason
    assert "fails on the check inputs" in fp32.reason
    assert runner.run(fp32, [torch.ones(1, 4)])[0][1].shape == (1, 4)


class Unsized(torch.nn.Module):
    """A module that refuses len(), as compiled and scripted modules do in some torch releases."""

    def __len__(self) -> int:
        raise NotImplementedError("len() of a compiled module")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def test_running_a_variant_never_truth_tests_its_module(tmp_path):
    runner = scripted_runner(Double(), tmp_path)
    variant = Variant("fp32", "compile", module=Unsized())
    [(_, got)] = runner.run(variant, [torch.zeros(1, 4)])
    assert got.tolist() == [[1.0] * 4]
    assert runner.warmup(1, variant) >= 0


def test_variant_options_are_checked():
    for bad in ({"precisions": ["int4"]}, {"torch_optimization": "jit"}, {"compile_mode": "fast"}):
        with pytest.raises(WorkerError, match="must be among"):
            VariantOptions.from_json(bad)
    assert VariantOptions.from_json(None).precisions == ["fp32"]


@pytest.fixture(scope="module")
def aoti_build(tmp_path_factory):
    """An eager model's AOTInductor variant built twice with one cache: compiled, then found."""
    root = tmp_path_factory.mktemp("aoti")
    cache = root / "cache"
    options = {"torch_optimization": "aoti", "cache_dir": str(cache)}
    spec = eager_mlp(root / "model", max_batch_size=8)
    first = Runner(load_model(spec), spec)
    compiled = variants_for(first, "bf16", **options)
    start = time.perf_counter()
    second = Runner(load_model(spec), spec)
    found = variants_for(second, **options)
    return first, compiled, second, found, (time.perf_counter() - start) * 1000, cache


def test_aoti_variant_is_compiled_for_the_device_checked_and_cached(aoti_build):
    first, compiled, _, _, _, cache = aoti_build
    fp32 = compiled.get("fp32")
    assert fp32.method == "AOTInductor package for cpu" and fp32.ready, fp32.reason
    assert fp32.cached is False and fp32.check.error <= 1e-4
    assert compiled.get("bf16").ready  # autocast runs the plain model beside it
    [package] = list((cache / "aoti" / "m" / "1").glob("*.pt2"))
    assert pt2_kind(str(package)) == "aoti"
    for rows in (1, 5, 8):  # the package takes the batch Dim, not only the rows it traced
        x = torch.rand(rows, 4)
        [(_, got)] = first.run(fp32, [x])
        assert torch.allclose(got, first.model(x), atol=1e-5)
        # Called directly, past the package's per-call spec parsing: the very same numbers.
        assert isinstance(fp32.module, FlatAOTICall)
        assert torch.equal(got, fp32.module.package(x))
    assert FlatAOTICall.of(fp32.module.package, 2) is None  # the package takes one input


def test_a_second_load_finds_the_package_in_the_cache(aoti_build):
    _, compiled, second, found, reload_ms, _ = aoti_build
    fp32 = found.get("fp32")
    assert fp32.cached is True and fp32.method.endswith("(from the cache)")
    assert reload_ms < compiled.get("fp32").build_ms / 2, (reload_ms, compiled.get("fp32").build_ms)
    [(_, got)] = second.run(fp32, [torch.ones(3, 4)])
    assert torch.allclose(got, second.model(torch.ones(3, 4)), atol=1e-5)


def test_aoti_packages_load_as_a_format_and_run_as_compiled(aoti_build):
    cache = aoti_build[5]
    [package] = list((cache / "aoti" / "m" / "1").glob("*.pt2"))
    spec = spec_for(package, "aoti")
    runner = Runner(load_model(spec), spec)
    assert isinstance(runner.model, FlatAOTICall)
    variants = variants_for(runner, "bf16", torch_optimization="compile")
    [(_, got)] = runner.run(variants.get("fp32"), [torch.ones(2, 4)])
    assert got.shape == (2, 4)
    assert variants.by_precision["fp32"].reason.endswith(
        "(an AOTInductor package is compiled already)"
    )
    assert "runs as it was compiled" in variants.by_precision["bf16"].reason


CRASHES_IN_THE_BUILD_PROCESS = """
import multiprocessing, os, resource, signal
import torch

class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2

def build():
    if multiprocessing.current_process().name == "tensorgate-aoti-build":
        # Dies as a native compiler crash would, in the process that builds the package.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGSEGV)
    return Double()
"""


def test_an_aoti_build_that_crashes_its_process_leaves_fp32_serving(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.py").write_text(CRASHES_IN_THE_BUILD_PROCESS)
    torch.save({}, str(folder / "weights.pt"))
    spec = spec_for(folder / "weights.pt", "eager")
    runner = Runner(load_model(spec), spec)
    cache = tmp_path / "cache"
    variants = variants_for(runner, torch_optimization="aoti", cache_dir=str(cache))
    fp32 = variants.get("fp32")
    assert fp32.method == "plain" and fp32.ready
    assert "AOTInductor's build process was killed by SIGSEGV" in fp32.reason, fp32.reason
    [(_, got)] = runner.run(fp32, [torch.ones(2, 4)])
    assert got.tolist() == [[2.0] * 4] * 2
    assert not [p for p in cache.rglob("*") if p.is_file()], "nothing half-built is left"


def test_fp32_tolerance_defaults_to_tf32_precision_on_cuda_unless_the_config_sets_it():
    defaults = VariantOptions.from_json({})
    assert defaults.tolerance_for("fp32", "cpu") == 1e-4
    assert defaults.tolerance_for("fp32", "cuda") == 5e-3
    assert defaults.tolerance_for("fp16", "cuda") == 1e-2
    strict = VariantOptions.from_json({"tolerance": {"fp32": 1e-6}})
    assert strict.tolerance_for("fp32", "cuda") == 1e-6
