"""Shared fixtures: the package on sys.path, model repositories built by the real scripts, and
/dev/shm file names that are removed after each test."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))


def _run_script(name: str, out: Path, *args: str) -> Path:
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / name), str(out), *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


@pytest.fixture(scope="session")
def test_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture repository of scripts/make_test_models.py (sleepy, flaky, adder, ...)."""
    return _run_script("make_test_models.py", tmp_path_factory.mktemp("test-models"))


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo repository of scripts/make_demo_models.py (tabular- and image-classifier, the
    vision pipeline), without the models of processing, which the e2e tests serve: digits, whose
    training data comes with scikit-learn (not installed on every torch the tests run on), and
    intents and dtmf (dtmf's spectrum is an FFT, which torch 2.6's export cannot trace)."""
    skipped = [arg for part in ("digits", "intents", "dtmf") for arg in ("--skip", part)]
    return _run_script("make_demo_models.py", tmp_path_factory.mktemp("demo-models"), *skipped)


@pytest.fixture
def shm_path():
    """Makes unique /dev/shm paths and removes whatever exists at them afterwards."""
    paths: list[str] = []

    def make(suffix: str) -> str:
        path = f"/dev/shm/tensorgate-test-{os.getpid()}-{uuid.uuid4().hex[:8]}-{suffix}"
        paths.append(path)
        return path

    yield make
    for path in paths:
        if os.path.exists(path):
            os.unlink(path)
