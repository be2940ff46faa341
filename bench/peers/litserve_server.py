"""LitServe serving the same model file with its dynamic batching: JSON in, JSON out.

    .tensorgate/peers/bin/python bench/peers/litserve_server.py \\
        --model-dir models/tabular-classifier --port 9102 \\
        [--max-batch-size 64 --batch-timeout 0.0005]

POST http://127.0.0.1:PORT/predict with ``{"inputs": [[...]]}`` (one request's rows); the answer
is ``{"outputs": [[...]]}``. One worker process, the model's thread count, ``inference_mode``.
LitServe's MCP endpoint (Streamable HTTP at ``/mcp/``) serves the same API as the tool
``predict``, called with ``{"request": {"inputs": [[...]]}}``; it goes through the same batching.
No ``from __future__ import annotations`` here: LitServe's MCP bridge inspects the annotation of
``decode_request`` at run time and needs a class, not a string.
"""

import argparse
import sys
from pathlib import Path

import litserve as ls
import torch
from litserve.mcp import MCP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model_file import load_version  # noqa: E402

MCP_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "request": {
            "type": "object",
            "properties": {"inputs": {"type": "array", "description": "rows of numbers"}},
            "required": ["inputs"],
        }
    },
    "required": ["request"],
}


class TorchAPI(ls.LitAPI):
    def __init__(self, model_dir: Path, max_batch_size: int, batch_timeout: float) -> None:
        super().__init__(
            max_batch_size=max_batch_size,
            batch_timeout=batch_timeout,
            mcp=MCP(
                name="predict",
                description="Runs the model on the given rows.",
                input_schema=MCP_INPUT_SCHEMA,
            ),
        )
        self.model_dir = model_dir

    def setup(self, device: str) -> None:
        self.model, config = load_version(self.model_dir, "1")
        torch.set_num_threads(config.get("resources", {}).get("threads", 1))
        torch.set_num_interop_threads(1)

    def decode_request(self, request: dict) -> torch.Tensor:
        return torch.tensor(request["inputs"], dtype=torch.float32)

    def batch(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(inputs)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            out = self.model(x)
        return next(iter(out.values())) if isinstance(out, dict) else out

    def unbatch(self, output: torch.Tensor) -> list[torch.Tensor]:
        # One row per request: bench requests send one row each.
        return list(output.split(1))

    def encode_response(self, output: torch.Tensor) -> dict:
        return {"outputs": output.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--batch-timeout", type=float, default=0.0005)
    args = parser.parse_args()
    api = TorchAPI(args.model_dir, args.max_batch_size, args.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1, timeout=60)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False)


if __name__ == "__main__":
    main()
