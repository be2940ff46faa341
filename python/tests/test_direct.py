"""An exported program's forward called without the module around it (``_direct.py``): the same
outputs, the same guards, the module's own tensors, and the module where that cannot be done."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import tensorgate._direct as direct_module
from tensorgate._direct import direct_forward
from tensorgate._loader import ModelSpec, load_model, skip_per_call_structure_check


class Scaled(torch.nn.Module):
    """Weights in nested submodules (the getattr chains the module walks), a buffer, and a buffer
    the forward pass updates in place."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(
            torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), torch.nn.Linear(8, 3)
        )
        self.register_buffer("shift", torch.full((3,), 0.5))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return self.blocks(x) + self.shift


def exported(path: Path, model: torch.nn.Module, max_rows: int = 8) -> Path:
    batch = torch.export.Dim("batch", min=1, max=max_rows)
    program = torch.export.export(model.eval(), (torch.rand(2, 4),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))
    return path


def spec(path: Path, outputs: int = 3) -> ModelSpec:
    return ModelSpec.from_json(
        {
            "name": "m",
            "version": "1",
            "format": "export",
            "file": str(path),
            "code_dir": str(path.parent),
            "device": "cpu",
            "threads": 1,
            "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, outputs]}],
            "warmup_runs": 1,
            "max_batch_size": 8,
        }
    )


def guards_in_graph(path: Path) -> bool:
    """Whether this torch runs an exported module's guards in its graph (2.8 and newer); before,
    they run in the structure check, which then stays on, and no direct forward is made."""
    return hasattr(torch.export.load(str(path)).module(), "_guards_fn")


@pytest.fixture
def scaled(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    return exported(tmp_path / "model.pt2", Scaled())


def test_the_direct_forward_gives_the_modules_outputs_bit_for_bit(scaled):
    loaded = load_model(spec(scaled))
    if not guards_in_graph(scaled):
        assert loaded.direct is None and loaded.call is loaded.module
        return
    assert loaded.direct is not None and loaded.call is loaded.direct
    plain = torch.export.load(str(scaled)).module()
    with torch.inference_mode():
        for rows in (1, 2, 5, 8):
            x = torch.rand(rows, 4)
            assert torch.equal(loaded.call(x), plain(x))


def test_the_direct_forward_runs_the_programs_guards(scaled):
    loaded = load_model(spec(scaled))
    if loaded.direct is None:
        pytest.skip("this torch runs the guards in the structure check, which stays on")
    with pytest.raises(Exception, match="Guard failed"):
        loaded.direct(torch.rand(9, 4))  # past the Dim's max
    with pytest.raises(Exception, match="Guard failed"):
        loaded.direct(torch.rand(2, 5))  # a static dimension of another size


def test_the_direct_forward_reads_and_updates_the_modules_own_tensors(scaled):
    loaded = load_model(spec(scaled))
    if loaded.direct is None:
        pytest.skip("no direct forward on this torch")
    module = loaded.module
    x = torch.rand(3, 4)
    before = int(module.calls)
    with torch.inference_mode():
        first = loaded.direct(x)
    # A buffer the graph updates in place is the module's: nothing was copied.
    assert int(module.calls) == before + 1
    # So are the weights: a change made through the module shows in the next direct call.
    last = module.get_submodule("blocks.1")
    with torch.no_grad():
        last.bias.add_(1.0)
    with torch.inference_mode():
        assert torch.allclose(loaded.direct(x), first + 1.0)
        assert torch.equal(loaded.direct(x), module(x))


def prepared(path: Path) -> tuple[torch.nn.Module, object]:
    program = torch.export.load(str(path))
    module = program.module()
    if not skip_per_call_structure_check(module, 1):
        pytest.skip("this torch keeps the structure check on: no direct forward")
    return module, program


def test_a_module_with_hooks_of_its_own_is_called_as_it_is(scaled):
    module, program = prepared(scaled)
    x = [torch.rand(2, 4)]
    assert direct_forward(module, program, x) is not None
    seen = []
    module.register_forward_hook(lambda *args: seen.append(1))
    assert direct_forward(module, program, x) is None  # a hook the direct forward would skip


def test_hooks_registered_for_every_module_leave_the_module_called_as_it_is(scaled):
    module, program = prepared(scaled)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *args: None)
    try:
        assert direct_forward(module, program, [torch.rand(2, 4)]) is None
    finally:
        handle.remove()
    assert direct_forward(module, program, [torch.rand(2, 4)]) is not None


def test_a_module_still_checking_its_arguments_per_call_is_called_as_it_is(scaled):
    module, program = prepared(scaled)
    module.validate_inputs = True
    assert direct_forward(module, program, [torch.rand(2, 4)]) is None


@contextlib.contextmanager
def worker_warnings() -> Iterator[list[str]]:
    """The warnings the worker's logger gives inside the block (pytest runs with -p no:logging,
    so there is no caplog)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(logging.WARNING)
    logger = logging.getLogger("tensorgate.worker")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def test_a_direct_forward_that_disagrees_with_the_module_is_not_used(scaled, monkeypatch):
    module, program = prepared(scaled)
    generate = direct_module._generate

    def slightly_off(m):
        forward = generate(m)
        return lambda *inputs: forward(*inputs) + 1e-6

    monkeypatch.setattr(direct_module, "_generate", slightly_off)
    with worker_warnings() as warnings:
        assert direct_forward(module, program, [torch.rand(2, 4)]) is None
    assert any("disagrees" in m for m in warnings)


def test_check_inputs_the_module_refuses_leave_the_module_called_without_a_warning(scaled):
    module, program = prepared(scaled)
    with worker_warnings() as warnings:
        # Past the program's Dim: the module's own guard refuses them, so there is nothing to
        # check a direct forward against, and nothing has gone wrong.
        assert direct_forward(module, program, [torch.rand(9, 4)]) is None
    assert warnings == []


def test_generating_the_code_leaves_the_modules_graph_as_it_was(scaled):
    module, program = prepared(scaled)
    before = [(n.op, n.target) for n in module.graph.nodes]
    code = module.code
    assert direct_forward(module, program, [torch.rand(2, 4)]) is not None
    assert [(n.op, n.target) for n in module.graph.nodes] == before
    assert module.code == code


class Branchy(torch.nn.Module):
    """A data-dependent branch (torch.cond: subgraphs the graph reads as attributes) and a dict of
    outputs, one of them integers."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(4, 4)
        self.down = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = torch.cond(x.sum() > 0, lambda t: self.up(t), lambda t: self.down(t), (x,))
        return {"y": y, "positive": (y > 0).sum(dim=-1)}


def test_subgraphs_and_structured_outputs_come_through_the_direct_forward(tmp_path):
    torch.manual_seed(0)
    module, program = prepared(exported(tmp_path / "model.pt2", Branchy()))
    forward = direct_forward(module, program, [torch.rand(2, 4)])
    assert forward is not None
    with torch.inference_mode():
        for x in (torch.rand(3, 4), -torch.rand(3, 4)):  # both branches
            want, got = module(x), forward(x)
            assert list(got) == ["y", "positive"]
            assert all(torch.equal(got[k], want[k]) for k in want)
