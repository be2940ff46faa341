"""The Python peers of bench/processing, each serving "photo path -> top-5 labels" on the same
model file with the same pipeline (photo_pipeline.py):

    .tensorgate/peers/bin/python bench/processing/peer_servers.py litserve|fastmcp \\
        --model-dir DIR --port N

- ``litserve``: LitServe with its dynamic batching (``decode_request`` decodes the file, the
  batch goes through one forward pass): POST /predict ``{"path": ...}``, and its MCP endpoint
  (Streamable HTTP at /mcp/) with the tool ``predict``.
- ``fastmcp``: an MCP server on the official Python SDK (FastMCP) whose tool ``classify(path)``
  does everything in the call, as a hand-written MCP wrapper does.

No ``from __future__ import annotations``: LitServe's MCP bridge inspects ``decode_request``'s
annotation at run time and needs a class, not a string.
"""

import argparse
import json
import sys
from pathlib import Path

import litserve as ls
import torch
from litserve.mcp import MCP
from mcp.server.fastmcp import FastMCP
from photo_pipeline import load, preprocess, top5

PATH_SCHEMA = {
    "type": "object",
    "properties": {
        "request": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "an image file"}},
            "required": ["path"],
        }
    },
    "required": ["request"],
}


class PhotoAPI(ls.LitAPI):
    """At module level: LitServe pickles the API into its inference worker process."""

    def __init__(self, model_dir: Path) -> None:
        super().__init__(
            max_batch_size=16,
            batch_timeout=0.0005,
            mcp=MCP(
                name="predict",
                description="Top 5 labels of an image file.",
                input_schema=PATH_SCHEMA,
            ),
        )
        self.model_dir = model_dir

    def setup(self, device: str) -> None:
        self.model, self.labels = load(self.model_dir)

    def decode_request(self, request: dict) -> torch.Tensor:
        return preprocess(request["path"])

    def batch(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(inputs)

    def predict(self, x: torch.Tensor) -> list:
        with torch.inference_mode():
            return top5(self.model(x), self.labels)

    def unbatch(self, output: list) -> list:
        return output

    def encode_response(self, output: list) -> dict:
        return {"predictions": output}


def serve_litserve(model_dir: Path, port: int) -> None:
    server = ls.LitServer(PhotoAPI(model_dir), accelerator="cpu", workers_per_device=1, timeout=60)
    server.run(host="127.0.0.1", port=port, generate_client_file=False)


def serve_fastmcp(model_dir: Path, port: int) -> None:
    model, labels = load(model_dir)
    server = FastMCP("photo-server", host="127.0.0.1", port=port)

    @server.tool()
    def classify(path: str) -> list:
        """Top 5 labels of an image file."""
        with torch.inference_mode():
            return top5(model(preprocess(path).unsqueeze(0)), labels)[0]

    print(json.dumps({"ready": str(model_dir)}), flush=True)
    sys.stdout.flush()
    server.run("streamable-http")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=["litserve", "fastmcp"])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    (serve_litserve if args.system == "litserve" else serve_fastmcp)(args.model_dir, args.port)


if __name__ == "__main__":
    main()
