"""Placing a worker on the CPUs its model's config names (``resources.cpus``).

A forward pass is short next to the time between calls, and whatever runs on the worker's core
in between (the gateway, a client, another model's worker) takes the caches the next pass needs:
on a core of its own the pass runs as fast as in a loop. Whether the whole call gains depends on
what the other cores are then left to carry (docs/architecture.md#cpu-placement).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ._errors import BAD_PARAMETER, LOAD_FAILED, WorkerError

#: Where Linux says which CPUs exist and which this process's cgroup may use.
_ONLINE = Path("/sys/devices/system/cpu/online")
_CGROUP_CPUS = Path("/sys/fs/cgroup/cpuset.cpus.effective")


def requested_cpus(value: object) -> list[int] | None:
    """The load request's ``cpus``: None, or a non-empty list of CPU ids."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value)
    ):
        raise WorkerError(BAD_PARAMETER, f"cpus must be a non-empty list of CPU ids, not {value!r}")
    return sorted(set(value))


def place_on_cpus(cpus: list[int]) -> list[int]:
    """Runs every thread of this process on ``cpus`` from now on; returns them.

    Threads started later (torch's intra-op pool starts with the first forward pass) take the
    affinity of the thread that starts them; those already running are placed one by one.
    LOAD_FAILED when the set cannot be had whole: the kernel would otherwise drop a CPU the
    machine or the container lacks without a word, and the model would run somewhere else
    than its config says.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise WorkerError(
            LOAD_FAILED, "resources.cpus needs Linux (sched_setaffinity); leave it out here"
        )
    wanted = set(cpus)
    before = os.sched_getaffinity(0)
    try:
        _set_all(wanted)
    except OSError as exc:
        _set_all(before)
        # EINVAL: not one of them is online and allowed to this process.
        why = "none of them is" if exc.errno == errno.EINVAL else f"{exc.strerror}: they are not"
        raise WorkerError(LOAD_FAILED, _unavailable(cpus, f"{why} available")) from None
    got = os.sched_getaffinity(0)
    if got != wanted:
        _set_all(before)
        missing = sorted(wanted - got)
        raise WorkerError(LOAD_FAILED, _unavailable(cpus, f"CPUs {missing} are not available"))
    return sorted(got)


def _set_all(cpus: set[int]) -> None:
    for tid in _thread_ids():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def _thread_ids() -> list[int]:
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [0]  # no /proc: the calling thread, which starts all later ones


def _unavailable(cpus: list[int], why: str) -> str:
    online, cpuset = _read(_ONLINE), _read(_CGROUP_CPUS)
    here = [f"online {online}"] if online else []
    if cpuset:
        here.append(f"this container's cpuset {cpuset}")
    where = f" (CPUs here: {', '.join(here)})" if here else ""
    return f"resources.cpus {cpus} cannot be had: {why}{where}; name CPUs this machine has"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
