"""Loading one model version: parse the ``load`` request, pick the device, build the module.

Four formats (docs/model-repository.md):

- ``export``: a ``torch.export`` program (``.pt2``), run as it was exported. Its dynamic
  dimensions (the ``Dim`` s declared at export) are checked against the config's ``-1`` s here, so a
  program traced with a fixed batch is refused at load, not by the first batch of two.
- ``aoti``: an AOTInductor package (``.pt2`` from ``aoti_compile_and_package``): compiled code
  for one device kind, loaded with ``aoti_load_package``.
- ``eager``: ``module:factory`` code plus a state_dict read with ``weights_only=True``, so a
  weights file cannot run code.
- ``torchscript``: ``torch.jit.load``, deprecated by torch 2.x but kept for users' files.

A file encrypted at rest (``_sealed.py``) is decrypted into memory first.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

from ._direct import direct_forward
from ._dtypes import to_torch
from ._errors import BAD_PARAMETER, LOAD_FAILED, UNSUPPORTED_FORMAT, WorkerError
from ._examples import example_inputs
from ._sealed import is_sealed, open_model_file

FORMATS = ("torchscript", "export", "aoti", "eager")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: torch.dtype
    shape: list[int]
    labels: bool = False  # whether the config names the classes of the last dimension


@dataclass(frozen=True)
class ModelSpec:
    """The ``model`` object of a ``load`` request."""

    name: str
    version: str
    format: str
    file: str
    code_dir: str
    entry: str | None
    device: str
    threads: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    warmup_runs: int
    #: Rows the gateway may put in one forward pass (batching.max_batch_size, else 1).
    max_batch_size: int = 1
    #: Batch sizes worth warming up compiled variants for (batching.preferred_batch_sizes).
    preferred_batch_sizes: list[int] = field(default_factory=list)
    #: The config's ``processing`` (src/registry/processing.ts), when inputs are processed here.
    processing: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, raw: object) -> ModelSpec:
        if not isinstance(raw, dict):
            raise WorkerError(BAD_PARAMETER, "load needs a 'model' object")
        try:
            return cls(
                name=str(raw["name"]),
                version=str(raw["version"]),
                format=str(raw["format"]),
                file=str(raw["file"]),
                code_dir=str(raw.get("code_dir") or os.path.dirname(str(raw["file"]))),
                entry=raw.get("entry"),
                device=str(raw.get("device", "cpu")),
                threads=int(raw.get("threads", 1)),
                inputs=[_tensor_spec(s) for s in raw["inputs"]],
                outputs=[_tensor_spec(s) for s in raw["outputs"]],
                warmup_runs=int(raw.get("warmup_runs", 0)),
                max_batch_size=max(1, int(raw.get("max_batch_size", 1))),
                preferred_batch_sizes=[int(n) for n in raw.get("preferred_batch_sizes") or []],
                processing=raw.get("processing"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkerError(BAD_PARAMETER, f"malformed load request: {exc!r}") from exc

    @property
    def batched(self) -> bool:
        """Whether every input's first dimension is dynamic (the gateway batches along it)."""
        return all(s.shape[:1] == [-1] for s in self.inputs)


def _tensor_spec(raw: dict[str, Any]) -> TensorSpec:
    return TensorSpec(
        str(raw["name"]),
        to_torch(raw["dtype"]),
        [int(d) for d in raw["shape"]],
        bool(raw.get("labels")),
    )


@dataclass
class LoadedModel:
    """A model ready to run, and what variants can be built from."""

    module: Callable[..., Any]
    device: torch.device
    #: The ``torch.export`` program, for export-format models: AOTInductor compiles from it.
    program: Any = None
    #: Bytes of weights it holds, for memory accounting.
    weights_bytes: int = 0
    #: An exported program's forward pass without the module around it (``_direct.py``), where
    #: one could be made and agreed with the module.
    direct: Callable[..., Any] | None = None

    @property
    def call(self) -> Callable[..., Any]:
        """What a request's forward pass calls: the direct forward where there is one, else the
        module. Transforms (torch.compile, quantization) take ``module``."""
        return self.module if self.direct is None else self.direct


def supported_formats() -> list[str]:
    """The formats this torch can load, as announced in ``hello``."""
    formats = ["torchscript", "export", "eager"]
    if _has_aoti_loader():
        formats.insert(2, "aoti")
    return formats


@functools.cache
def _has_aoti_loader() -> bool:
    """Whether this torch ships AOTInductor's package loader (``torch._inductor.package``), told
    from where its files are rather than by importing it: importing Inductor takes about a second
    of CPU on torch 2.15, which every worker's ``hello`` paid, where only an AOTInductor model
    (and the ``.pt2`` programs and compiled variants, which import it anyway) needs it."""
    spec = importlib.util.find_spec("torch._inductor")
    places = (spec.submodule_search_locations or []) if spec else []
    return any(os.path.isdir(os.path.join(place, "package")) for place in places)


def _aoti_loader() -> Callable[..., Any] | None:
    try:
        from torch._inductor import aoti_load_package
    except ImportError:
        return None
    return aoti_load_package


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when present, else CPU)."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise WorkerError(LOAD_FAILED, f"unknown device {name!r}: {exc}") from exc
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise WorkerError(LOAD_FAILED, f"device {name!r}: only cpu, cuda, cuda:N and auto exist")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = 0 if device.index is None else device.index
    if index >= count:
        raise WorkerError(
            LOAD_FAILED, f"device {name!r} asked for, but this machine has {count} CUDA devices"
        )
    return torch.device("cuda", index)


def import_entry(entry: str, code_dir: str) -> Callable[[], Any]:
    """The factory named by ``module:factory``, imported from ``code_dir``.

    A module of the same name imported from elsewhere (tests load several eager models named
    ``model`` into one process) is dropped first, so each version gets its own code.
    """
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise WorkerError(LOAD_FAILED, f"entry {entry!r} is not 'module:factory'")
    code_dir = os.path.abspath(code_dir)
    top = module_name.split(".")[0]
    cached = sys.modules.get(top)
    cached_file = getattr(cached, "__file__", None) or ""
    if cached is not None and not os.path.abspath(cached_file).startswith(code_dir + os.sep):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
    if code_dir in sys.path:
        sys.path.remove(code_dir)
    sys.path.insert(0, code_dir)
    importlib.invalidate_caches()
    module = importlib.import_module(module_name)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkerError(LOAD_FAILED, f"{module_name} in {code_dir} has no callable {attr!r}")
    return factory


def module_weights_bytes(model: object) -> int:
    """Bytes held by a module's parameters and buffers (shared tensors counted once)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += tensor.numel() * tensor.element_size()
    return total


def _as_loaded(model: torch.nn.Module, device: torch.device) -> LoadedModel:
    model.eval()
    return LoadedModel(model, device, weights_bytes=module_weights_bytes(model))


def _load_eager(spec: ModelSpec, device: torch.device) -> LoadedModel:
    if not spec.entry:
        raise WorkerError(LOAD_FAILED, "eager models need an 'entry' such as 'model:build'")
    model = import_entry(spec.entry, spec.code_dir)()
    if not isinstance(model, torch.nn.Module):
        raise WorkerError(
            LOAD_FAILED, f"{spec.entry} returned {type(model).__name__}, not a Module"
        )
    state = torch.load(open_model_file(spec.file), map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return _as_loaded(model.to(device), device)


def _load_torchscript(spec: ModelSpec, device: torch.device) -> LoadedModel:
    with warnings.catch_warnings():
        # torch 2.x says on every load that TorchScript is deprecated; docs/model-repository.md
        # says it once, with the way out (tensorgate export).
        warnings.filterwarnings(
            "ignore", message=r".*torch\.jit\..* is deprecated", category=FutureWarning
        )
        return _as_loaded(torch.jit.load(open_model_file(spec.file), map_location=device), device)


def _load_export(spec: ModelSpec, device: torch.device) -> LoadedModel:
    program = torch.export.load(open_model_file(spec.file))
    check_program(program, spec)
    if device.type != "cpu":
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, device)
    # No .eval(): an exported program runs as it was traced (export in eval mode), and its
    # module refuses train/eval switches.
    module = program.module()
    direct = None
    if skip_per_call_structure_check(module, len(spec.inputs)):
        direct = direct_forward(module, program, example_inputs(spec.inputs, device))
    return LoadedModel(module, device, program, module_weights_bytes(module), direct)


def takes_flat_tensors(in_spec: object, inputs: int) -> bool:
    """Whether a program's input tree is what every call of tensorgate's passes: ``inputs``
    positional tensors and no keyword arguments."""
    return in_spec == pytree.tree_structure((tuple(range(inputs)), {}))


def skip_per_call_structure_check(module: Any, inputs: int) -> bool:
    """Turns off the exported module's per-call check of its arguments' structure, where that
    check is all it does; True when it did.

    ``ExportedProgram.module()`` checks every call's arguments against the program's input tree
    (a pytree walk: about 30 µs of the tabular model's 75 µs forward on the CPU). tensorgate
    always calls with the same flat tuple of tensors, so the structure is checked once, here.
    The shape guards are not skipped: where the module has a ``_guards_fn`` (current torch) the
    graph calls it on every forward itself; where it has none (older torch), the check is also
    where the guards run, so it stays on.
    """
    if not hasattr(module, "_guards_fn") or getattr(module, "validate_inputs", None) is not True:
        return False
    if not takes_flat_tensors(getattr(module, "_in_spec", None), inputs):
        return False  # nested arguments: a structure tensorgate's flat tensors do not have
    module.validate_inputs = False
    return True


def load_aoti_package(source: Any, device: torch.device, inputs: int) -> Callable[..., Any]:
    """An AOTInductor package (a path or the bytes of one) loaded for ``device``, to be called
    with ``inputs`` tensors (directly, where ``FlatAOTICall`` can)."""
    load = _aoti_loader()
    if load is None:  # its files are there (supported_formats), but it does not import
        raise WorkerError(
            UNSUPPORTED_FORMAT,
            f"torch {torch.__version__} cannot import AOTInductor's package loader "
            "(torch._inductor.aoti_load_package); serve the model's .pt2 program or its eager "
            "code instead",
        )
    index = device.index or 0
    model = load(source, device_index=index) if device.type == "cuda" else load(source)
    return FlatAOTICall.of(model, inputs) or model


class FlatAOTICall:
    """An AOTInductor model's runner called directly with the flat tensors tensorgate passes.

    The package's own ``__call__`` parses its input and output tree specs from JSON and flattens
    the arguments on every call: about 9 µs of the tabular model's 15 µs forward on the CPU.
    Here the specs are parsed once, and the input spec is checked once to be the flat tuple of
    tensors every call passes; the runner and the outputs' structure are the package's own.
    """

    def __init__(self, model: Any, run: Callable[..., Any], out_spec: pytree.TreeSpec) -> None:
        self.package = model
        self._run = run
        self._out_spec = out_spec

    @classmethod
    def of(cls, model: Any, inputs: int) -> FlatAOTICall | None:
        """The direct call of ``model``; None where its inputs are not a flat tuple of tensors
        or the package is not the kind this knows (the package's own call then serves)."""
        try:
            loader = model.loader
            # boxed_run (current torch) frees the inputs as it goes; older torch has run only.
            run = getattr(loader, "boxed_run", None) or loader.run
            in_spec, out_spec = (pytree.treespec_loads(s) for s in loader.get_call_spec())
        except Exception:  # noqa: BLE001 - another torch's package: its own call works
            return None
        if not takes_flat_tensors(in_spec, inputs):
            return None
        return cls(model, run, out_spec)

    def __call__(self, *inputs: torch.Tensor) -> Any:
        # boxed_run takes the list it is given (and empties it): a fresh one per call.
        return pytree.tree_unflatten(self._run(list(inputs)), self._out_spec)

    def get_metadata(self) -> dict[str, str]:
        return self.package.get_metadata()


def _load_aoti(spec: ModelSpec, device: torch.device) -> LoadedModel:
    model = load_aoti_package(open_model_file(spec.file), device, len(spec.inputs))
    compiled_for = model.get_metadata().get("AOTI_DEVICE_KEY", "")
    if compiled_for and compiled_for != device.type:
        raise WorkerError(
            LOAD_FAILED,
            f"{os.path.basename(spec.file)} is an AOTInductor package compiled for "
            f"{compiled_for}, and the config's device is {device.type}: compile one for "
            f"{device.type} (tensorgate export --format aoti --device {device.type})",
        )
    return LoadedModel(model, device, weights_bytes=os.path.getsize(spec.file))


_LOADERS: dict[str, Callable[[ModelSpec, torch.device], LoadedModel]] = {
    "torchscript": _load_torchscript,
    "export": _load_export,
    "aoti": _load_aoti,
    "eager": _load_eager,
}


def pt2_kind(path: str) -> str | None:
    """``export`` or ``aoti`` for a ``.pt2`` archive (read from its entries), else None."""
    if is_sealed(path) or not zipfile.is_zipfile(path):
        return None
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    # Archive layouts differ across torch releases (2.6 has no top folder); the entries do not.
    if any("data/aotinductor/" in n for n in names):
        return "aoti"
    exported = ("models/model.json", "serialized_exported_program.json")
    if any(n == e or n.endswith("/" + e) for n in names for e in exported):
        return "export"
    return None


def program_dims(program: Any) -> list[list[tuple[int, int | None] | int]]:
    """Each user input's dimensions: an int when fixed, ``(min, max)`` when dynamic."""
    ranges = program.range_constraints
    user_inputs = set(program.graph_signature.user_inputs)
    dims: list[list[tuple[int, int | None] | int]] = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        value = node.meta.get("val")
        shape: list[tuple[int, int | None] | int] = []
        for size in getattr(value, "shape", ()):
            if isinstance(size, int):
                shape.append(size)
                continue
            bounds = ranges.get(size.node.expr)
            lower = _finite(bounds.lower) if bounds is not None else None
            upper = _finite(bounds.upper) if bounds is not None else None
            shape.append((lower or 0, upper))
        dims.append(shape)
    return dims


def _finite(bound: Any) -> int | None:
    """A range bound as an int; None for torch's symbolic infinity."""
    try:
        return int(bound) if bool(bound.is_finite) else None
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def check_program(program: Any, spec: ModelSpec) -> None:
    """LOAD_FAILED when the program's inputs cannot take what the config says it may be sent."""
    dims = program_dims(program)
    if len(dims) != len(spec.inputs):
        raise WorkerError(
            LOAD_FAILED,
            f"the exported program takes {len(dims)} inputs and the config declares "
            f"{len(spec.inputs)}",
        )
    for tensor, shape in zip(spec.inputs, dims):
        if len(shape) != len(tensor.shape):
            raise WorkerError(
                LOAD_FAILED,
                f'input "{tensor.name}" has {len(shape)} dimensions in the exported program and '
                f"{len(tensor.shape)} in the config",
            )
        for axis, (declared, traced) in enumerate(zip(tensor.shape, shape)):
            where = f'input "{tensor.name}" dimension {axis}'
            if isinstance(traced, int):
                if declared == -1:
                    raise WorkerError(
                        LOAD_FAILED,
                        f"{where} is fixed at {traced} in the exported program but the config "
                        f"declares it dynamic (-1): export with dynamic_shapes naming a Dim for "
                        f"it (tensorgate export does), or declare {traced}",
                    )
                if declared != traced:
                    raise WorkerError(
                        LOAD_FAILED,
                        f"{where} is {traced} in the exported program and {declared} in the config",
                    )
                continue
            lower, upper = traced
            rows = spec.max_batch_size if axis == 0 and declared == -1 else max(declared, 1)
            if upper is not None and rows > upper:
                raise WorkerError(
                    LOAD_FAILED,
                    f"{where} may be at most {upper} in the exported program, but "
                    + (
                        f"batching may send {rows} rows: lower batching.max_batch_size or "
                        "export with a larger Dim max"
                        if axis == 0 and declared == -1
                        else f"the config declares {declared}"
                    ),
                )
            if declared == -1 and lower > 1:
                raise WorkerError(
                    LOAD_FAILED,
                    f"{where} is at least {lower} in the exported program, so a request of one row "
                    "fails: export with Dim(..., min=1) (tensorgate export does)",
                )
            if declared != -1 and declared < lower:
                raise WorkerError(
                    LOAD_FAILED,
                    f"{where} is at least {lower} in the exported program, not {declared}",
                )


def load_model(spec: ModelSpec) -> LoadedModel:
    """The model ready to run on its device; UNSUPPORTED_FORMAT or LOAD_FAILED otherwise."""
    if spec.format not in supported_formats():
        raise WorkerError(
            UNSUPPORTED_FORMAT,
            f"format {spec.format!r} cannot be loaded by torch {torch.__version__}; "
            f"this worker loads {supported_formats()}",
        )
    device = resolve_device(spec.device)
    if device.type == "cuda":
        # A worker holds one model: its device becomes the process's current one, so that what
        # names no device lands there too (the arenas' page-locking, which counts for the current
        # device's context only; CUDA graphs; a model's own ``.cuda()``).
        torch.cuda.set_device(device)
    if not os.path.isfile(spec.file):
        raise WorkerError(LOAD_FAILED, f"model file {spec.file} does not exist")
    try:
        return _LOADERS[spec.format](spec, device)
    except WorkerError:
        raise
    except Exception as exc:
        raise WorkerError(LOAD_FAILED, str(exc) or type(exc).__name__) from exc
