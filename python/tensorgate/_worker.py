"""The worker's request loop (docs/worker-protocol.md).

One process serves one model. Requests are run one at a time and answered in order: a forward
pass already uses the cores it was given (``threads``), so overlapping requests would only
contend. On CUDA the worker pipelines (``pipeline``, on by default there): while the device runs
one request's work, an ``infer`` that has already arrived is begun (its inputs copied and its
forward pass launched behind the first), and only then is the first waited for and answered, so
the device is not left idle while the host answers one request and prepares the next.
A failing request is logged with its id and traceback, answered with a structured error, and
the loop goes on; only a corrupt control stream ends the process.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import _protocol
from ._arena import InArena, OutArena, can_read_gateway_files, read_files, write_files
from ._cpus import place_on_cpus, requested_cpus
from ._dtypes import NAMES, to_torch
from ._errors import (
    BAD_PARAMETER,
    BAD_TENSOR,
    INFERENCE_FAILED,
    LOAD_FAILED,
    WorkerError,
)
from ._loader import ModelSpec, load_model, supported_formats
from ._processing import Geometry, Processing, split_items
from ._runner import Named, Runner
from ._variants import VariantOptions

log = logging.getLogger("tensorgate.worker")

#: The code an unexpected exception gets, by op: the caller sees what kind of step failed.
_FALLBACK_CODE = {"load": LOAD_FAILED, "infer": INFERENCE_FAILED}

Message = dict[str, Any]
#: A begun request's rest: waits for its work and gives its answer (None: it has none).
Finish = Callable[[], "Message | None"]


def _no_answer() -> None:
    return None


#: The spin when the load request sets none, by device type (docs/worker-protocol.md#spinning):
#: a GPU host's cores wait on the device anyway, a CPU model's cores are its compute.
_DEFAULT_SPIN_US = {"cuda": 1000}


def _requested_pipeline(value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise WorkerError(BAD_PARAMETER, f"pipeline must be true or false, not {value!r}")


def _requested_spin_us(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100_000:
        raise WorkerError(
            BAD_PARAMETER, f"spin_us must be an integer from 0 to 100000, not {value!r}"
        )
    return value


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000.0, 3)


class Worker:
    def __init__(
        self,
        sock: socket.socket,
        arena_in: InArena,
        arena_out: OutArena,
        gateway_pid: int | None = None,
    ) -> None:
        self.sock = sock
        #: Whose descriptors this worker opens through /proc: its parent unless a fork server is.
        self.gateway_pid = os.getppid() if gateway_pid is None else gateway_pid
        self.channel = _protocol.Channel(sock)
        self.arena_in = arena_in
        self.arena_out = arena_out
        self.runner: Runner | None = None
        self.processing: Processing | None = None
        self.running = True
        #: Whether an infer that has arrived is begun before the one in flight is answered.
        self.pipeline = False
        #: Requests begun while the one before was still in flight.
        self.pipelined = 0
        self._handlers: dict[str, Callable[[Message], Message]] = {
            "load": self._load,
            "ping": lambda _msg: {"channel": self.channel.stats(), "pipelined": self.pipelined},
            "shutdown": self._shutdown,
        }

    def hello(self) -> Message:
        return {
            "op": "hello",
            "pid": os.getpid(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.cuda.is_available(),
            "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "formats": supported_formats(),
            "reads_files": can_read_gateway_files(self.arena_in.path, self.gateway_pid),
        }

    def serve(self) -> int:
        """Answers requests until EOF or ``shutdown`` (exit status 0) or a corrupt stream (1)."""
        channel = self.channel
        try:
            channel.write_message(self.hello())
            #: The request begun and not answered yet (pipelining only).
            in_flight: Finish | None = None
            while self.running:
                if in_flight is None:
                    message = channel.read_message()
                    if message is None:
                        log.info("control channel closed; exiting")
                        return 0
                else:
                    # Only what has already arrived: the one in flight is not kept waiting.
                    message = channel.poll_message()
                    if message is None or not self._pipelines(message):
                        self._answer(in_flight())
                        in_flight = None
                        if message is None:
                            continue
                finish = self.begin(message)
                if in_flight is not None:
                    self.pipelined += 1
                    self._answer(in_flight())
                    in_flight = None
                if self._pipelines(message):
                    in_flight = finish
                else:
                    self._answer(finish())
        except _protocol.ProtocolError as exc:
            log.error("control channel is corrupt: %s; exiting", exc)
            return 1
        except (BrokenPipeError, ConnectionResetError):
            log.info("gateway went away; exiting")
        return 0

    def _pipelines(self, message: Message) -> bool:
        return self.pipeline and message.get("op") == "infer"

    def _answer(self, reply: Message | None) -> None:
        if reply is not None:
            self.channel.write_message(reply)

    def begin(self, message: Message) -> Finish:
        """Starts on one message; what it returns finishes it and gives its answer.

        Only an ``infer`` leaves work between the two (on CUDA, its device work in flight); every
        other op is done here and its answer only handed over.
        """
        op = message.get("op")
        if op == "release":
            self._release(message.get("offsets"))
            return _no_answer
        # Any message may carry output slots the gateway is done with, so that freeing them
        # costs no message (and no wake-up) of its own.
        if "release" in message:
            self._release(message["release"])
        request_id = message.get("id")
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            log.error("dropped a %r request without an integer id: nothing can match an answer", op)
            return _no_answer
        try:
            if op == "infer":
                rest = self._begin_infer(message)
            else:
                handler = self._handlers.get(op)  # type: ignore[arg-type]
                if handler is None:
                    raise WorkerError(BAD_PARAMETER, f"unknown op {op!r}")
                answer = {"id": request_id, "ok": True, "result": handler(message)}
                return lambda: answer
        except Exception as exc:
            failure = self._failure(request_id, op, exc)
            return lambda: failure

        def finish() -> Message:
            try:
                return {"id": request_id, "ok": True, "result": rest()}
            except Exception as exc:
                return self._failure(request_id, op, exc)

        return finish

    def _failure(self, request_id: int, op: object, exc: Exception) -> Message:
        """A failed request's answer, logged."""
        error = exc if isinstance(exc, WorkerError) else None
        if error is None:
            error = WorkerError(_FALLBACK_CODE.get(str(op), BAD_PARAMETER), str(exc))
            error.__cause__ = exc
        log.error(
            "request id=%s op=%s failed: %s %s",
            request_id,
            op,
            error.code,
            error.message,
            # A refusal of the worker's own (a precision whose variant cannot serve) has no
            # traceback worth reading; a failure with a cause has.
            exc_info=exc if error.__cause__ is not None or error is not exc else None,
        )
        return {"id": request_id, "ok": False, "error": error.to_json()}

    def _load(self, message: Message) -> Message:
        spec = ModelSpec.from_json(message.get("model"))
        requested_spin_us = _requested_spin_us(message.get("spin_us"))
        requested_pipeline = _requested_pipeline(message.get("pipeline"))
        cpus = requested_cpus(message.get("cpus"))
        if self.runner is not None:
            held = self.runner.spec
            raise WorkerError(
                BAD_PARAMETER,
                f"this worker already serves {held.name} v{held.version}; "
                "one worker loads one model",
            )
        threads = max(1, spec.threads)
        if cpus is not None:
            # Before the first forward pass starts torch's threads, so that they start placed.
            cpus = place_on_cpus(cpus)
            if threads > len(cpus):
                # More threads than cores wait on each other at every barrier of a parallel
                # region: a forward pass 50x slower was seen. (The gateway's config check refuses
                # this; a load request may still ask.)
                log.warning(
                    "%d threads asked on %d CPU%s (%s): running %d",
                    threads,
                    len(cpus),
                    "" if len(cpus) == 1 else "s",
                    ",".join(map(str, cpus)),
                    len(cpus),
                )
                threads = len(cpus)
        torch.set_num_threads(threads)
        if spec.processing is not None:
            model_inputs = {s.name: (NAMES[s.dtype], len(s.shape)) for s in spec.inputs}
            first_output = spec.outputs[0].name if spec.outputs else ""
            self.processing = Processing(
                spec.processing, model_inputs, Path(spec.code_dir), first_output
            )
        start = time.perf_counter()
        model = load_model(spec)
        loaded = time.perf_counter()
        runner = Runner(model, spec)
        try:
            warmup_ms = runner.warmup(spec.warmup_runs)
        except WorkerError as exc:
            raise WorkerError(LOAD_FAILED, f"warm-up failed: {exc.message}") from exc.__cause__
        if self.processing is not None:
            self.processing.warm()
        checked = time.perf_counter()
        variants = runner.build_variants(VariantOptions.from_json(message.get("variants")))
        variants_ms = _ms(checked, time.perf_counter())
        self.runner = runner
        if model.device.type == "cuda":
            self.arena_in.pin_for_cuda()
            self.arena_out.pin_for_cuda()
        pinned_bytes = self.arena_in.pinning.pinned_bytes + self.arena_out.pinning.pinned_bytes
        spin_us = (
            requested_spin_us
            if requested_spin_us is not None
            else _DEFAULT_SPIN_US.get(model.device.type, 0)
        )
        self.channel.set_spin(spin_us / 1e6)
        # On the CPU a forward pass is done when it returns, and a model with processing decodes
        # and reads its outputs on the host: a request begun early would only hold back the
        # answer before it. Tests turn it on on the CPU to check the ordering.
        self.pipeline = (
            requested_pipeline
            if requested_pipeline is not None
            else model.device.type == "cuda" and self.processing is None
        )
        log.info(
            "loaded %s v%s (%s%s) on %s%s in %.1f ms, warm-up %.1f ms",
            spec.name,
            spec.version,
            spec.format,
            ", forward called directly" if model.direct is not None else "",
            model.device,
            f" (CPUs {','.join(map(str, cpus))})" if cpus is not None else "",
            _ms(start, loaded),
            warmup_ms,
        )
        return {
            "device": str(model.device),
            **({"cpus": cpus} if cpus is not None else {}),
            "spin_us": spin_us,
            "pipeline": self.pipeline,
            "pinned_bytes": pinned_bytes,
            "load_ms": _ms(start, loaded),
            "warmup_ms": round(warmup_ms, 3),
            "weights_bytes": model.weights_bytes,
            "variants": variants.reports(),
            "variants_ms": variants_ms,
        }

    def _begin_infer(self, message: Message) -> Callable[[], Message]:
        """Reads a request's inputs, launches its forward pass and queues its output copies;
        what it returns waits for them (once, on CUDA) and gives the result."""
        runner = self.runner
        if runner is None:
            raise WorkerError(BAD_PARAMETER, "infer before load: this worker holds no model yet")
        headers = message.get("inputs")
        if not isinstance(headers, list):
            raise WorkerError(BAD_TENSOR, "infer needs 'inputs': a list of tensor headers")
        parameters = message.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise WorkerError(BAD_PARAMETER, "'parameters' must be an object")
        variant = runner.variants.get(parameters.get("precision") or "fp32")  # type: ignore[union-attr]
        processing = self.processing
        # Only the stages a request has are timed and reported: a plain tensor request is the
        # hot path, where every clock read and dict entry is a share of the fixed cost.
        timings: Message = {}
        t0 = time.perf_counter()
        reads = message.get("reads")
        if reads is not None:
            read_files(self.arena_in, reads)
            t1 = time.perf_counter()
            timings["read_ms"] = _ms(t0, t1)
            t0 = t1
        items: dict[str, list[bytes]] = {}
        geometry: dict[str, list[Geometry]] | None = None
        if processing is None:
            inputs = self._tensor_inputs(headers, runner)
        else:
            geometry = {} if processing.wants_geometry else None
            inputs, items = self._inputs(headers, runner, geometry)
            t1 = time.perf_counter()
            timings["preprocess_ms"] = _ms(t0, t1)
            t0 = t1
        stages = runner.stages_for_request()
        reply: Message = {}
        written: list[Message] = []

        def give_up() -> None:
            # Waited out first: no queued copy may land in a slot after it is freed and handed
            # out again.
            runner.abandon(stages)
            self._release([entry["offset"] for entry in written])

        try:
            inputs = runner.to_device(inputs, stages)
            t1 = time.perf_counter()
            outputs = runner.run(variant, inputs, stages)
            del inputs  # the arena views are only valid until we answer
            t2 = time.perf_counter()
            # The host's times; on CUDA the device's replace them when the request is waited for.
            timings["h2d_ms"] = _ms(t0, t1)
            timings["compute_ms"] = _ms(t1, t2)
            if processing is not None:
                runner.wait_computed(stages)
                t2 = time.perf_counter()
                answers = processing.answers(outputs, items)
                if answers is not None:
                    reply["answers"] = answers
                    t_post = time.perf_counter()
                    timings["postprocess_ms"] = _ms(t2, t_post)
                    t2 = t_post
            self._queue_outputs(outputs, written)
            runner.outputs_queued(stages)
            timings["d2h_ms"] = _ms(t2, time.perf_counter())
        except BaseException:
            give_up()
            raise
        writes = message.get("writes")

        def finish() -> Message:
            try:
                runner.finish(stages, timings)
                if writes is not None:
                    t3 = time.perf_counter()
                    reply["written"] = write_files(
                        self.arena_out,
                        {e["name"]: (e["offset"], e["nbytes"], e["shape"]) for e in written},
                        writes,
                    )
                    timings["write_ms"] = _ms(t3, time.perf_counter())
            except BaseException:
                give_up()
                raise
            reply["outputs"] = written
            if geometry:
                reply["geometry"] = {k: [g.json() for g in v] for k, v in geometry.items()}
            reply["timings"] = timings
            return reply

        return finish

    def _queue_outputs(self, outputs: Named, written: list[Message]) -> None:
        """Copies the outputs into output-arena slots, adding their headers to ``written`` as
        each slot is taken (so that a failure part way frees those). A CUDA tensor's copy is only
        queued (``OutArena.write``), behind its forward pass: the request waits for them all at
        once when it is finished (:meth:`Runner.finish`)."""
        for spec, tensor in outputs:
            offset, nbytes = self.arena_out.write(tensor, spec.dtype)
            written.append(
                {
                    "name": spec.name,
                    "dtype": NAMES[spec.dtype],
                    "shape": list(tensor.shape),
                    "offset": offset,
                    "nbytes": nbytes,
                }
            )

    def _tensor_inputs(self, headers: list[Any], runner: Runner) -> list[torch.Tensor]:
        """The inputs of a model without processing, in its declared order: tensors viewed in
        the arena where they are."""
        arena = self.arena_in
        by_name: dict[str, torch.Tensor] = {}
        for h in headers:
            if not isinstance(h, dict):
                raise WorkerError(BAD_TENSOR, "infer needs 'inputs': a list of tensor headers")
            if h.get("bytes"):
                raise WorkerError(
                    BAD_TENSOR, f"input {h.get('name')!r} is BYTES but this model has no processing"
                )
            by_name[str(h.get("name"))] = arena.tensor(
                to_torch(h.get("dtype")), h.get("shape"), h.get("offset"), h.get("nbytes")
            )
        try:
            return [by_name[name] for name in runner.input_names]
        except KeyError:
            missing = [name for name in runner.input_names if name not in by_name]
            raise WorkerError(BAD_TENSOR, f"infer is missing model inputs {missing}") from None

    def _inputs(
        self,
        headers: list[Any],
        runner: Runner,
        geometry: dict[str, list[Geometry]] | None = None,
    ) -> tuple[list[torch.Tensor], dict[str, list[bytes]]]:
        """The inputs of a model with processing, in its declared order: tensors viewed in the
        arena as they are, BYTES inputs (image files, texts, recordings) decoded by the model's
        processing; and, for a model with a handler, the items it was given (its postprocess sees
        them again). Image items' geometry goes into ``geometry`` when one is given."""
        processing = self.processing
        assert processing is not None
        by_name: dict[str, torch.Tensor] = {}
        handed: dict[str, list[bytes]] = {}
        for h in headers:
            if not isinstance(h, dict):
                raise WorkerError(BAD_TENSOR, "infer needs 'inputs': a list of tensor headers")
            if not h.get("bytes"):
                by_name[str(h.get("name"))] = self.arena_in.tensor(
                    to_torch(h.get("dtype")), h.get("shape"), h.get("offset"), h.get("nbytes")
                )
                continue
            shape = h.get("shape")
            if not isinstance(shape, list) or len(shape) != 1 or not isinstance(shape[0], int):
                raise WorkerError(BAD_TENSOR, f"a BYTES input has shape [items], not {shape!r}")
            view = self.arena_in.view(h.get("offset"), h.get("nbytes"))
            items = split_items(view, shape[0], str(h.get("name")))
            try:
                if processing.handler is not None:
                    handed[str(h.get("name"))] = [bytes(item) for item in items]
                else:
                    by_name.update(processing.tensors(str(h.get("name")), items, geometry))
            finally:
                # The decoded tensors are copies: the arena views go now, so a remap can retire
                # the old mapping.
                for item in items:
                    item.release()
                view.release()
        if handed:
            by_name.update(processing.handled(handed))
        missing = [name for name in runner.input_names if name not in by_name]
        if missing:
            made = " (the processing handler did not make them)" if handed else ""
            raise WorkerError(BAD_TENSOR, f"infer is missing model inputs {missing}{made}")
        return [by_name[name] for name in runner.input_names], handed

    def _release(self, offsets: object) -> None:
        for offset in offsets if isinstance(offsets, list) else []:
            try:
                self.arena_out.release(offset)
            except (KeyError, TypeError):
                log.warning("release of offset %r, which is not an allocated output slot", offset)

    def _shutdown(self, _message: Message) -> Message:
        self.running = False
        return {}
