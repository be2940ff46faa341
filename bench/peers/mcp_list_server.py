"""The setup from the user report, made fair: an MCP server on the official Python SDK (FastMCP)
whose tool takes the tensor as a JSON list and returns the output as one. The model file is
loaded once at start, with the thread count tensorgate's worker uses, under ``inference_mode``.

    .tensorgate/peers/bin/python bench/peers/mcp_list_server.py \\
        --model-dir models/image-classifier --port 9101

Serves MCP Streamable HTTP at http://127.0.0.1:PORT/mcp with one tool, ``predict(inputs)``;
prints ``{"ready": ...}`` once the model is warm.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from mcp.server.fastmcp import FastMCP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model_file import load_version  # noqa: E402


def load(model_dir: Path) -> tuple[Callable[..., Any], dict]:
    model, config = load_version(model_dir, "1")
    torch.set_num_threads(config.get("resources", {}).get("threads", 1))
    torch.set_num_interop_threads(1)
    return model, config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    model, config = load(args.model_dir)
    shape = [1 if d == -1 else d for d in config["inputs"][0]["shape"]]
    with torch.inference_mode():
        for _ in range(5):
            model(torch.zeros(shape))

    server = FastMCP("list-server", host="127.0.0.1", port=args.port)

    @server.tool()
    def predict(inputs: list) -> list:
        """Runs the model on a nested list of floats; returns the output as a nested list."""
        with torch.inference_mode():
            out = model(torch.tensor(inputs, dtype=torch.float32))
        if isinstance(out, dict):
            out = next(iter(out.values()))
        return out.tolist()

    print(json.dumps({"ready": str(args.model_dir)}), flush=True)
    sys.stdout.flush()
    server.run("streamable-http")


if __name__ == "__main__":
    main()
