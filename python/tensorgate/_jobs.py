"""The errands the gateway's CLI gives the Python package (``tensorgate export``, ``init``):
``python -m tensorgate.<module> JOB.json`` reads a JSON job and prints one JSON line, the result or
``{"ok": false, "code", "message"}`` for a WorkerError (src/cli/python-job.ts reads it)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._errors import WorkerError


def run_job(work: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    try:
        result = work(job)
    except WorkerError as exc:
        result = {"ok": False, "code": exc.code, "message": exc.message}
    print(json.dumps(result))
    return 0
