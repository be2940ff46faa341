"""An exported program's forward pass, called without the module around it.

``ExportedProgram.module()`` returns a GraphModule that does more per call than its graph:

- every call goes through ``nn.Module.__call__`` and three hooks, which do nothing once the
  argument-structure check has run at load (``skip_per_call_structure_check``) and no input is a
  module;
- every weight is fetched through a chain of ``nn.Module.__getattr__`` calls
  (``getattr(getattr(self.stages, "0"), "0").conv1.weight``: four lookups, for each of the demo
  ResNet's 122 weights and buffers);
- the shape guards run through a Dynamo config patch (``dont_skip_tracing``), entered and left
  on every call, which only matters while Dynamo traces.

On the CPU that is 20 µs of the tabular model's 40 µs forward and 0.4 ms of the ResNet's: host
time that, on a GPU, is spent before the kernels are launched.

``direct_forward`` generates the same graph's Python again (torch.fx's own code generator), with
every weight, buffer, constant and submodule the graph reads bound once, by reference, to a flat
attribute of a plain object, and the guards' own function called without the patch. The tensors
are the module's: nothing is copied, and a buffer the graph updates in place is updated in the
module. The result must agree with the module on seeded inputs before it is used; where anything
is not as expected (hooks it does not know, a guard wrapper of another shape, a disagreement),
the module is called as before.
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

log = logging.getLogger("tensorgate.worker")

#: The submodule ``module()`` makes of the program's shape guards.
_GUARDS = "_guards_fn"
#: What the hooks ``module()`` registers are named (torch.export's ``_unlift``).
_STRUCTURE_CHECK = "_check_input_constraints_pre_hook"
_HOOK_MAKER = "_create_stateful_graph_module."
#: The wrapper ``dont_skip_tracing`` puts around the guards' function.
_PATCH_WRAPPER = "wrap_dunder_call_ctx_manager.<locals>.inner"


def direct_forward(
    module: Any, program: Any, inputs: Sequence[torch.Tensor]
) -> Callable[..., Any] | None:
    """The forward pass of ``module`` (``program.module()``, its structure check turned off)
    without the module around it; None where that cannot be done safely, or where it does not
    give the module's outputs on ``inputs``."""
    if not isinstance(module, torch.fx.GraphModule) or getattr(module, "validate_inputs", True):
        return None
    if not _hooks_do_nothing(module, program):
        return None
    try:
        forward = _generate(module)
    except Exception as exc:  # torch's code generator refused: the module is called as before
        log.debug("no direct forward: %s", exc)
        return None
    try:
        with torch.inference_mode():
            want = module(*inputs)
    except Exception as exc:  # nothing to check the direct forward against
        log.debug("no direct forward: the module fails on the check inputs: %s", exc)
        return None
    problem = _disagreement(forward, want, inputs)
    if problem is not None:
        log.warning("the direct forward %s; calling the module", problem)
        return None
    return forward


def _hooks_do_nothing(module: torch.fx.GraphModule, program: Any) -> bool:
    """Whether the module's hooks are exactly those ``module()`` registers, and do nothing here.

    They are the structure check (off: ``validate_inputs`` is False) and a pair that registers
    and unregisters the types of inputs that are modules as pytree nodes (none are here).
    """
    if module._backward_hooks or module._backward_pre_hooks or _global_hooks():
        return False
    pre = list(module._forward_pre_hooks.values())
    post = list(module._forward_hooks.values())
    names = sorted(getattr(h, "__qualname__", "") for h in pre)
    if len(pre) != 2 or len(post) != 1 or names[0] != _STRUCTURE_CHECK:
        return False
    if not (names[1].startswith(_HOOK_MAKER) and post[0].__qualname__.startswith(_HOOK_MAKER)):
        return False
    examples = getattr(program, "example_inputs", None)
    leaves = pytree.tree_leaves(examples) if examples is not None else []
    return not any(isinstance(leaf, torch.nn.Module) for leaf in leaves)


def _global_hooks() -> bool:
    """Whether hooks for every module are registered (``register_module_forward_hook`` and its
    kin), which ``nn.Module.__call__`` would run and the direct forward would not."""
    registry = torch.nn.modules.module
    names = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_hooks")
    return any(getattr(registry, name, None) for name in names)


def _generate(module: torch.fx.GraphModule) -> Callable[..., Any]:
    """The graph's forward as torch.fx writes it, reading flat attributes of a plain object."""
    graph = module.graph
    bound: dict[str, Any] = {"_in_spec": module._in_spec, "_out_spec": module._out_spec}
    renamed: dict[torch.fx.Node, Any] = {}
    try:
        # The nodes' targets are renamed only while the code is generated: the module's graph
        # is left as it was (the module still serves other variants, torch.compile's among them).
        for node in graph.nodes:
            if node.op not in ("get_attr", "call_module"):
                continue
            value = _fetch(module, node.target)
            if node.op == "call_module" and node.target == _GUARDS:
                value = _unpatched_guards(value)
            name = f"bound_{len(renamed)}"
            bound[name] = value
            renamed[node] = node.target
            node.target = name
        code = graph.python_code(root_module="self")
    finally:
        for node, target in renamed.items():
            node.target = target
    namespace = dict(code.globals)
    exec(compile(code.src, "<tensorgate direct forward>", "exec"), namespace)
    return functools.partial(namespace["forward"], types.SimpleNamespace(**bound))


def _fetch(module: torch.nn.Module, target: str) -> Any:
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _unpatched_guards(guards: Any) -> Any:
    """The guards' own function (its ``torch._assert`` s on the inputs' sizes), taken out of the
    Dynamo config patch around it; the submodule itself where it is not as expected."""
    if not isinstance(guards, torch.nn.Module):
        return guards
    if guards._forward_pre_hooks or guards._forward_hooks:
        return guards
    wrapper = guards.__dict__.get("forward")
    code = getattr(wrapper, "__code__", None)
    if code is None or getattr(wrapper, "__qualname__", "") != _PATCH_WRAPPER:
        return guards
    cells = dict(zip(code.co_freevars, wrapper.__closure__ or (), strict=False))
    inner = cells.get("func")
    function = inner.cell_contents if inner is not None else None
    return function if callable(function) else guards


def _disagreement(forward: Callable[..., Any], want: Any, inputs: Sequence[Any]) -> str | None:
    """How ``forward`` fails to give the module's outputs ``want`` on ``inputs``; None where it
    gives the same structure and the same values bit for bit (the same operations run in the same
    order)."""
    try:
        with torch.inference_mode():
            got = forward(*inputs)
    except Exception as exc:
        return f"fails where the module does not ({type(exc).__name__}: {exc})"
    want_leaves, want_spec = pytree.tree_flatten(want)
    got_leaves, got_spec = pytree.tree_flatten(got)
    if want_spec != got_spec:
        return "gives outputs of another structure than the exported module"
    if not all(_same(a, b) for a, b in zip(want_leaves, got_leaves, strict=True)):
        return "disagrees with the exported module"
    return None


def _same(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor):
        return a == b
    if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point() or a.is_complex():  # a NaN where the module gives one agrees
        return torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)
    return torch.equal(a, b)


__all__ = ["direct_forward"]
