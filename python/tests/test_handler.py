"""A model's own processing code (processing.handler): loaded from the version folder, called
with the items, its failures turned into HANDLER_FAILED (or LOAD_FAILED when it cannot be set
up), naming the handler and what it raised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tensorgate import _protocol
from tensorgate._errors import HANDLER_FAILED, LOAD_FAILED, WorkerError
from tensorgate._processing import Processing

HANDLER = """
import torch

class Lengths:
    def __init__(self, version_dir):
        self.version_dir = version_dir

    def preprocess(self, items):
        if items["text"] and items["text"][0] == b"raise":
            raise ValueError("cannot take this")
        if items["text"] and items["text"][0] == b"list":
            return [1, 2]
        return {"x": torch.tensor([[len(t)] for t in items["text"]])}

    def postprocess(self, outputs, items):
        if items["text"][0] == b"short":
            return [{"n": 1}]
        if items["text"][0] == b"set":
            return [{1, 2} for _ in items["text"]]
        if items["text"][0] == b"nan":
            return [{"score": float("nan")} for _ in items["text"]]
        return [{"n": int(v)} for v in outputs["y"].flatten().tolist()]
"""


def processing(folder: Path, entry: str = "handler:Lengths") -> Processing:
    raw = {"handler": entry, "inputs": {"text": {"type": "text"}}}
    return Processing(raw, {"x": ("float32", 2)}, folder)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "handler.py").write_text(HANDLER)
    return tmp_path


def test_the_handler_makes_the_model_inputs_in_their_declared_dtype(folder: Path) -> None:
    p = processing(folder)
    assert p.handler is not None and p.handler.instance.version_dir == folder
    tensors = p.handled({"text": [b"ab", b"abcd"]})
    assert tensors["x"].dtype == torch.float32
    assert tensors["x"].tolist() == [[2.0], [4.0]]
    answers = p.handler.postprocess({"y": torch.tensor([3, 5])}, {"text": [b"a", b"b"]}, 2)
    assert answers == [{"n": 3}, {"n": 5}]


def test_answers_holding_a_float_json_cannot_hold_reach_the_gateway_as_null(folder: Path):
    # The handler's check lets NaN through (Python's json writes it); the channel's frame must
    # still be JSON, or the worker could not answer at all.
    p = processing(folder)
    answers = p.handler.postprocess({"y": torch.tensor([1, 2])}, {"text": [b"nan", b"x"]}, 2)  # type: ignore[union-attr]
    frame = _protocol.encode({"id": 1, "ok": True, "result": {"answers": answers}})
    assert json.loads(frame[4:])["result"]["answers"] == [{"score": None}, {"score": None}]


@pytest.mark.parametrize(
    ("text", "method", "message"),
    [
        ("raise", "pre", "handler:Lengths.preprocess raised ValueError: cannot take this"),
        ("list", "pre", "must return the model inputs as a dict of tensors by name, not list"),
        ("short", "post", "must return a list of one answer per item (2), not list of 1"),
        ("set", "post", "handler:Lengths.postprocess raised TypeError: Object of type set"),
    ],
)
def test_a_failing_handler_is_handler_failed(folder: Path, text: str, method: str, message: str):
    p = processing(folder)
    items = {"text": [text.encode(), b"x"]}
    with pytest.raises(WorkerError) as caught:
        if method == "pre":
            p.handled(items)
        else:
            p.handler.postprocess({"y": torch.tensor([1, 2])}, items, 2)  # type: ignore[union-attr]
    assert caught.value.code == HANDLER_FAILED
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("missing:Lengths", "no file"),
        ("handler:Nope", "could not be set up: AttributeError"),
    ],
)
def test_a_handler_that_cannot_be_set_up_fails_the_load(folder: Path, entry: str, message: str):
    with pytest.raises(WorkerError) as caught:
        processing(folder, entry)
    assert caught.value.code == LOAD_FAILED
    assert f"processing.handler '{entry}'" in caught.value.message
    assert message in caught.value.message
