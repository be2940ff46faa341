"""Shared-memory arenas: the files under /dev/shm that hold tensor bytes, so that the control
channel carries only offsets.

The in-arena is written by the gateway and grows under our feet; the out-arena is ours to allocate
and grow. Both are mapped ``MAP_SHARED`` read-write: ``torch.frombuffer`` warns on read-only
buffers, and a tensor never promises read-only memory anyway.

Mappings are never closed while the process runs. ``mmap.close()`` succeeds even while a tensor
made by ``torch.frombuffer`` still points into the mapping, and the next read of that tensor would
then crash the process. When a file grows we map it again and keep the old mapping in
``_retired``: it views the same pages, so it costs address space, not memory, and growth by
doubling bounds it to the size of the current map.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import re
from typing import Any

import torch

from ._dtypes import ITEMSIZE
from ._errors import BAD_TENSOR, INFERENCE_FAILED, SHARED_MEMORY_OUT_OF_RANGE, WorkerError

#: Views an arena keeps for the layouts it saw last (a batching model sees one per batch size).
_KEPT_VIEWS = 64

#: Every tensor starts at a multiple of this (a cache line; enough for any dtype and SIMD load).
ALIGN = 64
_PAGE = mmap.PAGESIZE


log = logging.getLogger("tensorgate.worker")


class HostPinning:
    """Page-locks the arenas' mappings for a CUDA model (``cudaHostRegister``).

    A host tensor in pageable memory goes to or from the GPU through a staging buffer (a CPU copy,
    then the DMA); page-locked memory the copy engine reads and writes directly. The arenas are
    where every input and output lives, so registering them once spares every request the
    staging copy, both ways. Off until ``enable()``; a mapping the driver refuses stays pageable
    (logged once), and serving goes on.
    """

    def __init__(self) -> None:
        self.enabled = False
        self.pinned_bytes = 0
        self._warned = False

    def enable(self, mapping: mmap.mmap | None) -> None:
        """Pins ``mapping`` now, and every mapping passed to ``pin`` from now on."""
        self.enabled = True
        self.pin(mapping)

    def pin(self, mapping: mmap.mmap | None) -> None:
        if not self.enabled or mapping is None:
            return
        try:
            pointer = torch.frombuffer(mapping, dtype=torch.uint8).data_ptr()
            # flags 0: cudaHostRegisterDefault; the worker has one CUDA context
            status = int(torch.cuda.cudart().cudaHostRegister(pointer, len(mapping), 0))
            if status != 0:
                raise RuntimeError(f"cudaHostRegister returned {status}")
        except Exception as exc:  # noqa: BLE001 - pageable memory still works, only slower
            if not self._warned:
                log.warning("could not page-lock an arena (%s); copies stay staged", exc)
                self._warned = True
            return
        self.pinned_bytes += len(mapping)


def align_up(n: int, alignment: int = ALIGN) -> int:
    return (n + alignment - 1) // alignment * alignment


def _map(fd: int, size: int) -> mmap.mmap | None:
    if size == 0:
        return None  # mmap cannot map an empty file; the first request past the end re-maps
    return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _byte_count(nbytes: object) -> int:
    """``nbytes`` when it is a byte count; BAD_TENSOR otherwise."""
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise WorkerError(BAD_TENSOR, f"nbytes {nbytes!r} is not a byte count")
    return nbytes


def numel_of(shape: object) -> int:
    """Elements in a wire shape; BAD_TENSOR unless it is a list of non-negative integers."""
    if isinstance(shape, list):
        numel = 1
        for d in shape:
            if type(d) is not int or d < 0:  # not bool either: JSON's true is no dimension
                break
            numel *= d
        else:
            return numel
    raise WorkerError(BAD_TENSOR, f"shape {shape!r} is not a list of non-negative integers")


class FreeList:
    """First-fit allocator of ``ALIGN``-aligned slots in ``[0, capacity)``.

    Free blocks are a sorted list of ``[offset, size]``; freeing merges neighbours, so the list
    stays as short as the arena is fragmented. Pure Python and file-free, so it is unit-testable.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free: list[list[int]] = [[0, capacity]] if capacity else []
        self._used: dict[int, int] = {}

    @property
    def used_bytes(self) -> int:
        return sum(self._used.values())

    def allocate(self, nbytes: int) -> int | None:
        """Offset of a slot of at least ``nbytes`` (empty tensors get one too), or None if full."""
        size = align_up(max(nbytes, 1))
        for i, (offset, free) in enumerate(self._free):
            if free >= size:
                if free == size:
                    del self._free[i]
                else:
                    self._free[i] = [offset + size, free - size]
                self._used[offset] = size
                return offset
        return None

    def free(self, offset: int) -> None:
        """Returns a slot; KeyError if ``offset`` is not an allocated slot."""
        size = self._used.pop(offset)
        i = bisect.bisect_left(self._free, [offset, 0])
        self._free.insert(i, [offset, size])
        if i + 1 < len(self._free) and offset + size == self._free[i + 1][0]:
            self._free[i][1] += self._free.pop(i + 1)[1]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == offset:
            self._free[i - 1][1] += self._free.pop(i)[1]

    def grow(self, capacity: int) -> None:
        """Adds ``[self.capacity, capacity)`` as free space, merged with a free tail."""
        added = capacity - self.capacity
        if added <= 0:
            return
        if self._free and sum(self._free[-1]) == self.capacity:
            self._free[-1][1] += added
        else:
            self._free.append([self.capacity, added])
        self.capacity = capacity


class InArena:
    """The gateway's file of input tensors, viewed in place with ``torch.frombuffer``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR)
        self._map = _map(self._fd, os.fstat(self._fd).st_size)
        self._retired: list[mmap.mmap] = []
        self.pinning = HostPinning()
        #: Input views by (offset, nbytes, dtype, *shape), with what they must still be: the same
        #: request layout comes back call after call (see ``tensor``).
        self._views: dict[
            tuple[Any, ...], tuple[torch.Tensor, int, torch.Size, tuple[int, ...]]
        ] = {}

    def pin_for_cuda(self) -> None:
        """Page-locks the mapping now and every mapping made after growth (see HostPinning)."""
        self.pinning.enable(self._map)

    @property
    def mapped_bytes(self) -> int:
        return len(self._map) if self._map is not None else 0

    def _remap(self) -> None:
        size = os.fstat(self._fd).st_size
        if size > self.mapped_bytes:
            if self._map is not None:
                self._retired.append(self._map)
            self._map = _map(self._fd, size)
            self.pinning.pin(self._map)
            self._views.clear()

    def tensor(
        self, dtype: torch.dtype, shape: object, offset: object, nbytes: object
    ) -> torch.Tensor:
        """A zero-copy tensor over ``[offset, offset + nbytes)``; BAD_TENSOR if that is invalid.

        The gateway's allocator hands the same slot to the same layout request after request, so
        the view made for it is kept and handed out again: making a tensor and freeing it cost the
        worker 3 µs a call (a forward pass of the tabular model is 45). A view is only handed out
        again while it is as it was made: a model that changed its input's shape, strides or
        storage in place (``unsqueeze_``, ``set_``) gets a fresh one.
        """
        try:
            key: tuple[Any, ...] | None = (offset, nbytes, dtype, *shape)  # type: ignore[misc]
            kept = self._views.get(key)  # type: ignore[arg-type]
        except TypeError:  # a shape that is not a list of numbers: refused below
            key = kept = None
        if kept is not None:
            view, pointer, size, stride = kept
            if view.data_ptr() == pointer and view.shape == size and view.stride() == stride:
                return view
        numel = numel_of(shape)
        if not _is_int(nbytes) or nbytes != numel * ITEMSIZE[dtype]:
            raise WorkerError(
                BAD_TENSOR,
                f"nbytes {nbytes!r} is not {numel} elements x {ITEMSIZE[dtype]} bytes "
                f"for shape {shape}",
            )
        self._check_range(offset, nbytes)
        if numel == 0:
            return torch.empty(shape, dtype=dtype)  # frombuffer refuses a count of 0
        view = torch.frombuffer(self._map, dtype=dtype, count=numel, offset=offset).view(shape)
        if key is not None:
            if len(self._views) >= _KEPT_VIEWS:
                self._views.clear()
            self._views[key] = (view, view.data_ptr(), view.shape, view.stride())
        return view

    def view(self, offset: object, nbytes: object) -> memoryview:
        """A zero-copy view of ``[offset, offset + nbytes)`` (a BYTES tensor's serialised items)."""
        count = _byte_count(nbytes)
        self._check_range(offset, count)
        return self._slice(offset, count)  # type: ignore[arg-type]

    def span(self, offset: object, nbytes: object) -> memoryview:
        """A writable view of ``[offset, offset + nbytes)`` at any byte offset: where a part of a
        batched tensor is read into its rows (``read_files``)."""
        count = _byte_count(nbytes)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise WorkerError(BAD_TENSOR, f"offset {offset!r} is not a byte offset")
        self._check_end(offset, count)
        return self._slice(offset, count)

    def _slice(self, offset: int, nbytes: int) -> memoryview:
        if self._map is None:
            return memoryview(bytearray())
        return memoryview(self._map)[offset : offset + nbytes]

    def _check_range(self, offset: object, nbytes: int) -> None:
        if not _is_int(offset) or offset < 0 or offset % ALIGN:
            raise WorkerError(BAD_TENSOR, f"offset {offset!r} is not a multiple of {ALIGN}")
        self._check_end(offset, nbytes)

    def _check_end(self, offset: int, nbytes: int) -> None:
        if offset + nbytes > self.mapped_bytes:
            self._remap()  # the gateway grew the file since we last looked
            if offset + nbytes > self.mapped_bytes:
                raise WorkerError(
                    BAD_TENSOR,
                    f"bytes [{offset}, {offset + nbytes}) lie outside the input arena "
                    f"({self.mapped_bytes} bytes)",
                )

    def close(self) -> None:
        """Closes the file; the mappings go when the last tensor viewing them does."""
        os.close(self._fd)
        self._map = None
        self._retired.clear()
        self._views.clear()


#: The only files ``read_files`` opens: the gateway's own descriptors, never a name.
_PROC_FD = re.compile(r"/proc/\d+/fd/\d+")


def read_files(arena: InArena, reads: object) -> None:
    """Reads the spans the gateway left to the worker (shared-memory regions, ``.npy`` files)
    into the input arena.

    ``reads`` is a list of ``{offset, nbytes, path, position, what[, code]}``: ``nbytes`` at
    ``position`` of the file at ``path``, a ``/proc/<gateway>/fd/<fd>`` link to a file the gateway
    holds open until the request is answered, go to ``[offset, offset + nbytes)`` of the arena.
    Each file is opened once per request and read with ``preadv`` straight into the arena: one
    copy, in this process, not the gateway's. A file shorter than its span (a client truncated its
    region, a ``.npy`` file was rewritten) is the span's ``code`` (``SHARED_MEMORY_OUT_OF_RANGE``
    unless it says ``BAD_TENSOR``) naming the input, as the gateway's own read would say.
    """
    if not isinstance(reads, list):
        raise WorkerError(BAD_TENSOR, "'reads' must be a list of file spans")
    fds: dict[str, int] = {}
    try:
        for read in reads:
            path, position, what, code = _file_span(read)
            view = arena.span(read.get("offset"), read.get("nbytes"))
            if path not in fds:
                try:
                    fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError as exc:
                    message = f"{what}: cannot open {path}: {exc}"
                    raise WorkerError(INFERENCE_FAILED, message) from exc
            done = 0
            while done < len(view):
                n = os.preadv(fds[path], [view[done:]], position + done)
                if n == 0:
                    message = f"{what} ended after {done} of {len(view)} bytes"
                    raise WorkerError(code, message)
                done += n
    finally:
        for fd in fds.values():
            os.close(fd)


#: What a span the file no longer holds may be answered with (a region, a file).
_TRUNCATED_CODES = (SHARED_MEMORY_OUT_OF_RANGE, BAD_TENSOR)


def _file_span(read: object) -> tuple[str, int, str, str]:
    """A file span's path, position, name for errors and code for a file cut short;
    BAD_TENSOR when malformed."""
    if not isinstance(read, dict):
        raise WorkerError(BAD_TENSOR, f"file span {read!r} is not an object")
    path, position = read.get("path"), read.get("position")
    if not isinstance(path, str) or not _PROC_FD.fullmatch(path):
        raise WorkerError(BAD_TENSOR, f"file span path {path!r} is not /proc/<pid>/fd/<fd>")
    if not _is_int(position) or position < 0:
        raise WorkerError(BAD_TENSOR, f"file span position {position!r} is not a byte offset")
    code = read.get("code", SHARED_MEMORY_OUT_OF_RANGE)
    if code not in _TRUNCATED_CODES:
        raise WorkerError(BAD_TENSOR, f"file span code {code!r} is not one of {_TRUNCATED_CODES}")
    return path, position, str(read.get("what", "input")), str(code)


def write_files(
    arena: OutArena, outputs: dict[str, tuple[int, int, list[int]]], writes: object
) -> list[int]:
    """Copies output rows the gateway asked for from the output arena straight into files (a
    client's shared-memory regions), so that their bytes never pass through the gateway's thread;
    returns the indices of the writes done.

    ``outputs`` maps each output's name to its arena slot ``(offset, nbytes, shape)``. ``writes``
    is a list of ``{output, row[, rows], path, position, capacity}``: rows ``[row, row + rows)``
    of the output (all from ``row`` when ``rows`` is absent; a batch member's rows) go to
    ``position`` of the file at ``path``, a ``/proc/<gateway>/fd/<fd>`` link as for
    ``read_files``, if they fit in ``capacity`` bytes. A write that cannot be done (an output too
    large for its space, a file shorter than the span, a file this process may not write) is
    left out, not failed: the gateway writes that output itself and answers as it always has.
    Nothing is written past a file's end, so a region is never grown.
    """
    if not isinstance(writes, list):
        raise WorkerError(BAD_TENSOR, "'writes' must be a list of file spans")
    done: list[int] = []
    fds: dict[str, int | None] = {}
    try:
        for index, write in enumerate(writes):
            path, position, _, _ = _file_span(write)
            name, row, rows, capacity = _write_target(write)
            slot = outputs.get(name)
            if slot is None:
                continue
            offset, nbytes, shape = slot
            total = shape[0] if shape else 0
            if rows is None:
                rows = total - row
            if total <= 0 or rows < 0 or row + rows > total:
                continue
            row_bytes = nbytes // total
            size = rows * row_bytes
            if size > capacity:
                continue
            if path not in fds:
                try:
                    fds[path] = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                except OSError:
                    fds[path] = None
            fd = fds[path]
            if fd is None or os.fstat(fd).st_size < position + size:
                continue
            view = arena.span(offset + row * row_bytes, size)
            try:
                written = 0
                while written < size:
                    written += os.pwritev(fd, [view[written:]], position + written)
            except OSError:
                continue
            finally:
                view.release()
            done.append(index)
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    return done


def _write_target(write: dict[str, Any]) -> tuple[str, int, int | None, int]:
    """A write's output name, first row, row count (None: to the end) and capacity;
    BAD_TENSOR when malformed."""
    name, row, rows, capacity = (
        write.get("output"),
        write.get("row", 0),
        write.get("rows"),
        write.get("capacity"),
    )
    if not isinstance(name, str):
        raise WorkerError(BAD_TENSOR, f"file write output {name!r} is not an output name")
    for label, value in (("row", row), ("capacity", capacity), ("rows", rows)):
        if value is not None and not (_is_int(value) and value >= 0):
            raise WorkerError(BAD_TENSOR, f"file write {label} {value!r} is not a count")
    if capacity is None:
        raise WorkerError(BAD_TENSOR, "file write needs a capacity")
    return name, row, rows, capacity


def can_read_gateway_files(arena_path: str, gateway_pid: int) -> bool:
    """Whether this worker may open its gateway's descriptors through /proc: it tries on the
    input arena, which the gateway holds open. Same user, /proc mounted and no ptrace rule
    against it, as is usual; when not, the gateway reads regions itself, as before."""
    fd_dir = f"/proc/{gateway_pid}/fd"
    arena_path = os.path.realpath(arena_path)
    try:
        for name in os.listdir(fd_dir):
            link = f"{fd_dir}/{name}"
            try:
                if os.readlink(link) != arena_path:
                    continue
                os.close(os.open(link, os.O_RDONLY | os.O_CLOEXEC))
                return True
            except OSError:
                continue
    except OSError:
        pass
    return False


class OutArena:
    """The worker's file of output tensors: created at start, grown by doubling, slots first-fit."""

    def __init__(self, path: str, nbytes: int) -> None:
        self.path = path
        capacity = align_up(max(nbytes, _PAGE), _PAGE)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(self._fd, capacity)
        self._map = _map(self._fd, capacity)
        self._retired: list[mmap.mmap] = []
        self.slots = FreeList(capacity)
        self.pinning = HostPinning()
        #: Slot views by (offset, dtype, shape): first-fit gives the same slot to the same output
        #: call after call. Only ``write`` uses them, so they stay as they were made.
        self._slot_views: dict[tuple[int, torch.dtype, torch.Size], torch.Tensor] = {}

    def pin_for_cuda(self) -> None:
        """Page-locks the mapping now and every mapping made after growth (see HostPinning)."""
        self.pinning.enable(self._map)

    @property
    def capacity(self) -> int:
        return self.slots.capacity

    def _grow(self, nbytes: int) -> None:
        capacity = max(2 * self.capacity, align_up(self.capacity + align_up(nbytes), _PAGE))
        os.ftruncate(self._fd, capacity)
        self._retired.append(self._map)
        self._map = _map(self._fd, capacity)
        self.pinning.pin(self._map)
        self.slots.grow(capacity)
        self._slot_views.clear()

    def allocate(self, nbytes: int) -> int:
        offset = self.slots.allocate(nbytes)
        if offset is None:
            self._grow(nbytes)
            offset = self.slots.allocate(nbytes)
            assert offset is not None, "a grown arena has room for the slot it grew for"
        return offset

    def view(self, offset: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
        """A tensor over the slot at ``offset``, for writing outputs (and for tests to read)."""
        numel = numel_of(shape)
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self._map, dtype=dtype, count=numel, offset=offset).view(shape)

    def span(self, offset: int, nbytes: int) -> memoryview:
        """The bytes of ``[offset, offset + nbytes)`` of the mapping (a slot, or rows of one)."""
        if self._map is None or offset < 0 or offset + nbytes > len(self._map):
            raise WorkerError(INFERENCE_FAILED, f"{nbytes} bytes at {offset} are not in the arena")
        return memoryview(self._map)[offset : offset + nbytes]

    def write(self, tensor: torch.Tensor, dtype: torch.dtype) -> tuple[int, int]:
        """Copies ``tensor`` (any device, layout or dtype) into a new slot as C-contiguous
        ``dtype``: one ``copy_`` does the device transfer, the cast and the layout change.

        A CUDA tensor's copy is only queued (``non_blocking``): a model's outputs then go back
        one after another without a synchronise each, and the caller synchronises once before the
        slots are read (the worker does, before it answers). Into page-locked arenas the copies
        are DMA; into pageable memory CUDA completes them before returning anyway."""
        numel = tensor.numel()
        nbytes = numel * ITEMSIZE[dtype]
        offset = self.allocate(nbytes)
        if numel == 0:
            return offset, 0
        try:
            key = (offset, dtype, tensor.shape)
            slot = self._slot_views.get(key)
            if slot is None:
                slot = torch.frombuffer(self._map, dtype=dtype, count=numel, offset=offset)
                slot = slot.view(tensor.shape)
                if len(self._slot_views) >= _KEPT_VIEWS:
                    self._slot_views.clear()
                self._slot_views[key] = slot
            slot.copy_(tensor, non_blocking=tensor.is_cuda)
        except BaseException:
            self.slots.free(offset)
            raise
        return offset, nbytes

    def release(self, offset: int) -> None:
        self.slots.free(offset)

    def close(self) -> None:
        os.close(self._fd)
        self._map = None
        self._retired.clear()
        self._slot_views.clear()
