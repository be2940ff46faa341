"""``torch.export`` programs and AOTInductor packages made from a loaded model.

Used by the ``aoti`` fp32 variant (compiled at load, cached) and by ``tensorgate export``.

Dynamic dimensions come from the config: the first dimension of every input, when ``-1``, is one
shared ``Dim("batch", min=1)`` (the gateway joins requests along it, so all inputs agree on it);
any other ``-1`` is a ``Dim`` of its own or, when the model ties dimensions together (``a + b``
needs equal widths), one ``Dim`` per axis shared by the inputs. Every ``Dim`` starts at 1, so a
request of one row is served. TorchScript modules are first converted with torch's
TorchScript-to-export converter.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import platform
import re
import shutil
import signal
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ._errors import WorkerError
from ._examples import example_inputs
from ._loader import LoadedModel, ModelSpec, TensorSpec
from ._outputs import name_outputs

EXPORT_FAILED = "EXPORT_FAILED"


def _dynamic_shapes(
    inputs: list[TensorSpec], tied: bool, bounds: dict[str, tuple[int, int | None]] | None = None
) -> tuple[dict[int, Any], ...]:
    """A ``Dim`` per dynamic dimension, the first shared by all inputs (the batch). ``tied``: one
    ``Dim`` per axis, shared by every input that has it dynamic (``a + b`` needs equal widths).
    ``bounds``: (min, max) of Dims by name, where the model limits them (see _suggested_bounds)."""
    bounds = bounds or {}

    def dim(key: str) -> Any:
        low, high = bounds.get(key, (1, None))
        return (
            torch.export.Dim(key, min=low)
            if high is None
            else torch.export.Dim(key, min=low, max=high)
        )

    dims_by_key: dict[str, Any] = {"batch": dim("batch")}
    shapes = []
    for s in inputs:
        dims: dict[int, Any] = {}
        for axis, d in enumerate(s.shape):
            if d != -1:
                continue
            key = "batch" if axis == 0 else f"dim{axis}" if tied else f"{_ident(s.name)}_{axis}"
            if key not in dims_by_key:
                dims_by_key[key] = dim(key)
            dims[axis] = dims_by_key[key]
        shapes.append(dims)
    return tuple(shapes)


_SUGGESTED_DIM = re.compile(r"^\s*(\w+) = Dim\('\w+'(?:, min=(\d+))?(?:, max=(\d+))?\)\s*$", re.M)


def _suggested_bounds(message: str) -> dict[str, tuple[int, int | None]]:
    """The ranges torch suggests when a model bounds a dynamic dimension: CUDA convolutions, for
    one, guard that an input fits 32-bit indexing, so a batch Dim gets a max (14266 rows of
    3x224x224). Parsed here, as the message of torch 2.6 trips torch's own parser. Every Dim
    keeps a min of at least 1, so one row stays servable."""
    if "Suggested fixes" not in message:
        return {}
    tail = message.split("Suggested fixes", 1)[1]
    return {
        name: (max(1, int(low or 1)), int(high) if high else None)
        for name, low, high in _SUGGESTED_DIM.findall(tail)
    }


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


class Ordered(torch.nn.Module):
    """A model with its outputs as a tuple in the declared order (ONNX has no dicts)."""

    def __init__(self, model: torch.nn.Module, outputs: list[TensorSpec]) -> None:
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(t for _, t in name_outputs(self.model(*inputs), self.outputs))


def export_module(
    module: torch.nn.Module,
    inputs: list[TensorSpec],
    device: torch.device | None = None,
    ordered: list[TensorSpec] | None = None,
) -> Any:
    """``torch.export`` of an eager, TorchScript or exported module with the specs' dynamic
    dimensions; with ``ordered``, its outputs become a tuple in that order.

    EXPORT_FAILED, with torch's first line, when it cannot be traced.
    """
    example = example_inputs(inputs, device or torch.device("cpu"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            if isinstance(module, torch.jit.ScriptModule):
                from torch._export.converter import TS2EPConverter

                module = TS2EPConverter(module, example).convert().module()
            if ordered is not None:
                module = Ordered(module, ordered)

            def export(tied: bool) -> Any:
                shapes = _dynamic_shapes(inputs, tied)
                wrap = (lambda s: (s,)) if ordered is not None else (lambda s: s)  # *inputs
                try:
                    return torch.export.export(module, example, dynamic_shapes=wrap(shapes))
                except Exception as exc:
                    bounds = _suggested_bounds(str(exc))
                    if not bounds:
                        raise
                    # The model bounds a dimension: export again within torch's bounds.
                    shapes = _dynamic_shapes(inputs, tied, bounds)
                    return torch.export.export(module, example, dynamic_shapes=wrap(shapes))

            try:
                return export(tied=False)
            except Exception:
                # Dimensions the model ties to each other: try one Dim per axis.
                if not any(d == -1 for s in inputs for d in s.shape[1:]):
                    raise
                return export(tied=True)
    except WorkerError:
        raise
    except Exception as exc:
        raise WorkerError(EXPORT_FAILED, f"torch.export failed: {first_line(exc)}") from exc


def onnx_export(program: Any, path: str, inputs: list[str], outputs: list[str]) -> int:
    """Writes ``program`` (a torch.export program) as ONNX; returns the opset it used."""
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                program,
                (),
                path,
                input_names=inputs,
                output_names=outputs,
                dynamo=True,
                external_data=False,  # one file: the onnx engine and the registry expect one
                verbose=False,
            )
    except Exception as exc:  # torch raises many types here; the message names the op
        raise WorkerError(EXPORT_FAILED, _onnx_reason(exc)) from exc
    import onnx

    model = onnx.load(path, load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def export_program(loaded: LoadedModel, spec: ModelSpec) -> Any:
    """The loaded model as a ``torch.export`` program with the config's dynamic dimensions."""
    if loaded.program is not None:
        return loaded.program
    export_program_possible(loaded)
    return export_module(loaded.module, spec.inputs, loaded.device)


def _onnx_reason(exc: BaseException) -> str:
    """The line of torch.onnx's report that names what failed (an operator without an ONNX
    function, usually), without its colour codes; else its first line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    for line in text.splitlines():
        if "No ONNX function found" in line or "Unsupported" in line:
            return line.split(">: ", 1)[-1].strip()
    summary = text.split("## Exception summary", 1)[-1]
    lines = [line for line in summary.splitlines() if line.startswith("<class ")]
    return lines[0].split(">: ", 1)[-1].strip() if lines else first_line(exc)


def first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def device_key(device: torch.device) -> str:
    """What a compiled package depends on besides the model: torch, Python, the device kind."""
    if device.type == "cuda":
        index = device.index or 0
        name = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        target = f"cuda-{name}-sm{major}{minor}-cuda{torch.version.cuda}"
    else:
        target = f"cpu-{platform.machine()}-{torch.backends.cpu.get_cpu_capability()}"
    return f"torch{torch.__version__}-py{platform.python_version()}-{target}"


def _file_digest(path: str, digest: Any) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)


def cache_key(spec: ModelSpec, device: torch.device) -> str:
    """A digest of the model file (and an eager model's code), its input specs and device_key."""
    digest = hashlib.sha256()
    _file_digest(spec.file, digest)
    if spec.format == "eager":
        for path in sorted(Path(spec.code_dir).glob("*.py")):
            digest.update(path.name.encode())
            _file_digest(str(path), digest)
    for s in spec.inputs:
        digest.update(f"{s.name}:{s.dtype}:{s.shape};".encode())
    digest.update(device_key(device).encode())
    return digest.hexdigest()[:24]


@dataclass(frozen=True)
class Package:
    path: str
    #: Found in the cache (not compiled by this call).
    cached: bool
    #: Lives in the cache; otherwise a scratch folder the caller removes once it is loaded.
    kept: bool


def aoti_package(
    loaded: LoadedModel, spec: ModelSpec, cache_dir: str | None, sealed: bool
) -> Package:
    """The model's AOTInductor package for its device: from the cache, or compiled (and cached).

    Cached under ``cache_dir/aoti/<model>/<version>/<key>.pt2`` (cache_key), written whole then
    renamed, so a restart or another instance finds it and a crash never leaves half a package.
    A model encrypted at rest is never cached: the package would hold its weights in the clear.
    Compiled in a process of its own (build_isolated): a compiler that crashes takes down that
    process, not the worker serving the model.
    """
    export_program_possible(loaded)
    if cache_dir and not sealed:
        folder = Path(cache_dir) / "aoti" / spec.name / spec.version
        target = folder / f"{cache_key(spec, loaded.device)}.pt2"
        if target.is_file():
            return Package(str(target), cached=True, kept=True)
        folder.mkdir(parents=True, exist_ok=True)
        build_isolated(spec, target)
        return Package(str(target), cached=False, kept=True)
    target = Path(tempfile.mkdtemp(prefix="tensorgate-aoti-")) / "model.pt2"
    try:
        build_isolated(spec, target)
    except BaseException:
        shutil.rmtree(target.parent, ignore_errors=True)
        raise
    return Package(str(target), cached=False, kept=False)


def export_program_possible(loaded: LoadedModel) -> None:
    if loaded.program is None and not isinstance(loaded.module, torch.nn.Module):
        raise WorkerError(EXPORT_FAILED, "an AOTInductor package cannot be exported again")


def build_isolated(spec: ModelSpec, target: Path) -> None:
    """Loads the model in a spawned process, exports and compiles it there, and writes the package
    at ``target`` (whole, then renamed). Inductor's C++ and CUDA toolchains run native code that
    can crash (SIGSEGV from AOTInductor on CUDA has been seen); here that is an EXPORT_FAILED
    naming the signal. The child inherits the environment (a sealed model's key too) but not the
    worker's control socket."""
    context = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
    receive, send = context.Pipe(duplex=False)
    child = context.Process(
        target=_build_in_child, args=(spec, str(target), send), name="tensorgate-aoti-build"
    )
    child.start()
    send.close()
    try:
        outcome = receive.recv()
    except EOFError:  # it died before saying how it went
        outcome = None
    finally:
        receive.close()
        child.join()
    if outcome is None or child.exitcode != 0:
        code = child.exitcode or 0
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
        raise WorkerError(EXPORT_FAILED, f"AOTInductor's build process {how}")
    if outcome != "ok":
        raise WorkerError(outcome[0], outcome[1])


def _build_in_child(spec: ModelSpec, target: str, send: Any) -> None:
    from ._loader import load_model

    try:
        program = export_program(load_model(spec), spec)
        scratch = Path(tempfile.mkdtemp(prefix="tensorgate-aoti-"))
        try:
            compile_package(program, str(scratch / "model.pt2"))
            partial = Path(f"{target}.{os.getpid()}.partial")
            shutil.move(scratch / "model.pt2", partial)  # the scratch may be on another device
            os.replace(partial, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        send.send("ok")
    except WorkerError as exc:
        send.send((exc.code, exc.message))
    except Exception as exc:  # noqa: BLE001 - reported to the worker, which says why
        send.send((EXPORT_FAILED, f"{type(exc).__name__}: {first_line(exc)}"))


def compile_package(program: Any, path: str) -> None:
    """AOTInductor: the program compiled for the device its tensors are on, packaged at ``path``."""
    from torch._inductor import aoti_compile_and_package

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Weights as constants: the package only infers (see _variants.py on freezing).
            aoti_compile_and_package(
                program, package_path=path, inductor_configs={"freezing": True}
            )
    except Exception as exc:
        raise WorkerError(EXPORT_FAILED, f"AOTInductor failed: {first_line(exc)}") from exc


__all__ = [
    "EXPORT_FAILED",
    "Package",
    "aoti_package",
    "cache_key",
    "compile_package",
    "device_key",
    "Ordered",
    "export_module",
    "export_program",
    "onnx_export",
]
