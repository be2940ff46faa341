"""The run file: one file per training run in the runs directory (``/dev/shm/tensorgate-runs``).

It is the only channel between a training process and the gateway. Layout (little-endian; the
gateway's ``src/training/run-file.ts`` mirrors it and docs/training.md draws it)::

    HEADER    0      16384  magic, layout numbers, then the run's declaration as JSON
    CONTROL   16384    512  written by the gateway only, guarded by a seqlock
    SLOTS     16896  64x512 one per rank, written by that rank only (step, acks, applied changes)
    NAMES     49664   4160  metric names, appended by rank 0
    RING      53824  64+32n metrics ring: head counter, then n entries (step, time, metric, value)

Every region has a single writer, so no process ever takes a lock another one holds. Readers
check consistency instead: the control block and the slots by a sequence number that is odd
while a write is under way; the ring by re-reading the writer's head after copying entries.

This module only knows bytes. It is imported by the training SDK (``tensorgate.train``) and keeps
to the standard library so that importing it costs nothing.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
import sys
from dataclasses import dataclass

MAGIC = b"TGRUN01\0"
LAYOUT_VERSION = 1

HEADER_SIZE = 16384
JSON_OFFSET = 64
MAX_JSON = HEADER_SIZE - JSON_OFFSET

CONTROL = HEADER_SIZE
CONTROL_SIZE = 512
MAX_HPARAMS = 32

SLOTS = CONTROL + CONTROL_SIZE
SLOT_SIZE = 512
MAX_RANKS = 64
APPLIED_LOG = 16
CHECKPOINT_PATH_BYTES = 128

NAMES = SLOTS + SLOT_SIZE * MAX_RANKS
NAME_BYTES = 64
MAX_METRICS = 64
NAMES_SIZE = 64 + NAME_BYTES * MAX_METRICS

RING = NAMES + NAMES_SIZE
RING_ENTRIES = RING + 64
ENTRY_SIZE = 32
DEFAULT_RING_CAPACITY = 16384

# Header: magic, layout version, json length, max ranks, max hparams, max metrics, ring capacity.
_HEADER = struct.Struct("<8sIIIIII")

# Control block, after its seq (u64 at +0): version, apply_at_step, flags, value count,
# checkpoint_seq, then the values (f64 each) at +64.
_CONTROL = struct.Struct("<QqIIQ")
CONTROL_VALUES = 64
FLAG_PAUSED = 1
FLAG_STOP = 2

# Slot: step (i64, +0, written alone each step), seq (+8) guarding the rest: seen_version,
# applied_version, applied_step, state, pid, checkpoint_done, checkpoint_step, applied-log head,
# process start time, then the applied log (version, step pairs) and the last checkpoint path.
SLOT_STEP = 0
SLOT_SEQ = 8
_SLOT = struct.Struct("<QQqIIQqIxxxxQ")
SLOT_FIELDS = 16
SLOT_LOG = 80
SLOT_CHECKPOINT_PATH = SLOT_LOG + 16 * APPLIED_LOG

STATE_EMPTY = 0
STATE_RUNNING = 1
STATE_PAUSED = 2
STATE_STOPPED = 3
STATE_FINISHED = 4

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_PAIR = struct.Struct("<Qq")


#: Word indexes (8-byte units) of the fields read or written every step.
CONTROL_SEQ_WORD = CONTROL // 8


def step_word(rank: int) -> int:
    return (SLOTS + SLOT_SIZE * rank + SLOT_STEP) // 8


def file_size(ring_capacity: int = DEFAULT_RING_CAPACITY) -> int:
    return RING_ENTRIES + ENTRY_SIZE * ring_capacity


@dataclass
class Control:
    """One consistent snapshot of the control block."""

    version: int
    apply_at_step: int
    paused: bool
    stop: bool
    checkpoint_seq: int
    values: tuple[float, ...]


@dataclass
class SlotState:
    seen_version: int = 0
    applied_version: int = 0
    applied_step: int = -1
    state: int = STATE_EMPTY
    pid: int = 0
    checkpoint_done: int = 0
    checkpoint_step: int = -1
    log_head: int = 0
    start_time: int = 0


def process_start_time(pid: int) -> int:
    """The process start time in clock ticks (field 22 of /proc/PID/stat), 0 where unknown.

    With the pid it names a process for good: a pid reused after the trainer died has another.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    # The command name (field 2) is in parentheses and may hold spaces: split after its end.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else 0


class RunFile:
    """A mapped run file.

    The per-step methods (``publish_step``, ``control_seq``, ``append_metric``) go through
    typed memoryviews of the mapping instead of ``struct``: after a training step has pushed the
    SDK out of the CPU caches, every object and page it touches costs a cache miss, and an item
    assignment touches far fewer than ``pack_into`` (measured in bench/training).
    """

    def __init__(self, path: str, fd: int, mm: mmap.mmap, ring_capacity: int) -> None:
        if sys.byteorder != "little":
            raise ValueError("run files are little-endian; this machine is not")
        self.path = path
        self._fd = fd
        self.mm = mm
        self.ring_capacity = ring_capacity
        self._i64 = memoryview(mm).cast("q")
        self._u64 = memoryview(mm).cast("Q")
        #: Views the training loop's hot path indexes directly (see Run.apply).
        self.step_view = self._i64
        self.control_view = self._u64
        self._f64 = memoryview(mm).cast("d")
        self._u32 = memoryview(mm).cast("I")
        self._ring_head = self._u64[RING // 8]

    # ---------------------------------------------------------------- creation and opening

    @classmethod
    def create(
        cls,
        path: str,
        declaration: dict,
        initial_values: list[float],
        ring_capacity: int = DEFAULT_RING_CAPACITY,
    ) -> RunFile:
        """Creates the file, fills the header and control block, and writes the magic last, so
        that a gateway scanning the directory never takes a half-made file for a run."""
        body = json.dumps(declaration, separators=(",", ":")).encode()
        if len(body) > MAX_JSON:
            raise ValueError(
                f"the run declaration is {len(body)} bytes as JSON; at most {MAX_JSON}"
            )
        if len(initial_values) > MAX_HPARAMS:
            raise ValueError(f"at most {MAX_HPARAMS} hyperparameters per run")
        size = file_size(ring_capacity)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # Back every page now: on a full /dev/shm this fails here with ENOSPC instead of
            # killing the trainer with SIGBUS on its first write to an unbacked page.
            os.posix_fallocate(fd, 0, size)
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        mm[JSON_OFFSET : JSON_OFFSET + len(body)] = body
        _CONTROL.pack_into(mm, CONTROL + 8, 0, 0, 0, len(initial_values), 0)
        for i, value in enumerate(initial_values):
            struct.pack_into("<d", mm, CONTROL + CONTROL_VALUES + 8 * i, value)
        header = (MAGIC, LAYOUT_VERSION, len(body), MAX_RANKS, MAX_HPARAMS, MAX_METRICS)
        _HEADER.pack_into(mm, 0, b"\0" * 8, *header[1:], ring_capacity)
        mm[0:8] = MAGIC
        return cls(path, fd, mm, ring_capacity)

    @classmethod
    def open(cls, path: str) -> RunFile:
        """Maps another rank's run file; ValueError when it is not a whole run file."""
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < RING_ENTRIES:
                raise ValueError(f"{path} is {size} bytes, too short for a run file")
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            magic, layout, _json_len, ranks, hparams, metrics, capacity = _HEADER.unpack_from(mm, 0)
            fields = (layout, ranks, hparams, metrics)
            if magic != MAGIC or fields != (LAYOUT_VERSION, MAX_RANKS, MAX_HPARAMS, MAX_METRICS):
                mm.close()
                raise ValueError(f"{path} is not a tensorgate run file of layout {LAYOUT_VERSION}")
            if size < file_size(capacity):
                mm.close()
                raise ValueError(f"{path} is truncated: {size} of {file_size(capacity)} bytes")
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, mm, capacity)

    def declaration(self) -> dict:
        length = _HEADER.unpack_from(self.mm, 0)[2]
        return json.loads(bytes(self.mm[JSON_OFFSET : JSON_OFFSET + length]))

    def close(self) -> None:
        for view in (self._i64, self._u64, self._f64, self._u32):
            view.release()
        try:
            self.mm.close()
        finally:
            os.close(self._fd)

    # ---------------------------------------------------------------- control block (read)

    def control_seq(self) -> int:
        """The control block's sequence number: the one read made every step."""
        return self._u64[CONTROL_SEQ_WORD]

    def read_control(self, tries: int = 64) -> Control | None:
        """A consistent snapshot, or None when the gateway kept writing through every try (or
        died halfway through a write): the caller keeps its last snapshot and tries next step."""
        mm = self.mm
        for _ in range(tries):
            before = _U64.unpack_from(mm, CONTROL)[0]
            if before & 1:
                continue
            version, apply_at, flags, count, checkpoint_seq = _CONTROL.unpack_from(mm, CONTROL + 8)
            count = min(count, MAX_HPARAMS)
            values = struct.unpack_from(f"<{count}d", mm, CONTROL + CONTROL_VALUES)
            if _U64.unpack_from(mm, CONTROL)[0] == before:
                paused, stop = bool(flags & FLAG_PAUSED), bool(flags & FLAG_STOP)
                return Control(version, apply_at, paused, stop, checkpoint_seq, values)
        return None

    # ---------------------------------------------------------------- rank slot (write)

    def publish_step(self, rank: int, step: int) -> None:
        self._i64[step_word(rank)] = step

    def write_slot(
        self,
        rank: int,
        slot: SlotState,
        applied: tuple[int, int] | None = None,
        checkpoint_path: str | None = None,
    ) -> None:
        """Seqlock write of the slot: seq odd, fields, seq even. ``applied`` appends a
        (version, step) pair to the slot's applied log first."""
        base = SLOTS + SLOT_SIZE * rank
        mm = self.mm
        # The seq goes through the typed view: one aligned 8-byte store. struct's pack_into zeroes
        # its bytes before writing them, and a reader that read that transient 0 before and after
        # a copy would take 0 == 0 (even) as a consistent snapshot of fields being rewritten.
        seq_word = (base + SLOT_SEQ) // 8
        seq = self._u64[seq_word]
        self._u64[seq_word] = seq | 1
        if applied is not None:
            _PAIR.pack_into(mm, base + SLOT_LOG + 16 * (slot.log_head % APPLIED_LOG), *applied)
            slot.log_head += 1
        if checkpoint_path is not None:
            raw = checkpoint_path.encode()[: CHECKPOINT_PATH_BYTES - 1]
            mm[
                base + SLOT_CHECKPOINT_PATH : base + SLOT_CHECKPOINT_PATH + CHECKPOINT_PATH_BYTES
            ] = raw.ljust(CHECKPOINT_PATH_BYTES, b"\0")
        _SLOT.pack_into(
            mm,
            base + SLOT_FIELDS,
            slot.seen_version,
            slot.applied_version,
            slot.applied_step,
            slot.state,
            slot.pid,
            slot.checkpoint_done,
            slot.checkpoint_step,
            slot.log_head,
            slot.start_time,
        )
        self._u64[seq_word] = (seq | 1) + 1

    def read_seen_version(self, rank: int) -> int:
        return _U64.unpack_from(self.mm, SLOTS + SLOT_SIZE * rank + SLOT_FIELDS)[0]

    # ---------------------------------------------------------------- metrics (write, rank 0)

    def write_metric_name(self, index: int, name: str) -> None:
        """Writes a name, then the count that makes it visible, before any entry uses it."""
        raw = name.encode()[: NAME_BYTES - 1]
        offset = NAMES + 64 + NAME_BYTES * index
        self.mm[offset : offset + NAME_BYTES] = raw.ljust(NAME_BYTES, b"\0")
        _U32.pack_into(self.mm, NAMES, index + 1)

    def append_metric(self, step: int, when: float, index: int, value: float) -> None:
        """One ring entry, then the head. A reader copies entries and re-reads the head to drop
        any it may have read while they were overwritten."""
        head = self._ring_head
        word = (RING_ENTRIES + ENTRY_SIZE * (head % self.ring_capacity)) // 8
        self._i64[word] = step
        self._f64[word + 1] = when
        self._u32[2 * word + 4] = index
        self._f64[word + 3] = value
        self._ring_head = head = head + 1
        self._u64[RING // 8] = head


def is_finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
