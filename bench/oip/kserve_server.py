"""The KServe model server (PyPI `kserve`) serving one of the demo models over OIP v2, for
bench/oip and bench/remote to compare with tensorgate and for the remote engine's tests: the model
file loaded once by plain PyTorch (bench/model_file.py), `torch.inference_mode()`, the config's
thread count, binary tensor data out when asked. Runs in a venv with kserve over tensorgate's
runtime torch (.tensorgate/kserve or .tensorgate/peers).

  python kserve_server.py --model-dir models/tabular-classifier --port 8090
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

import torch
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model_file import load_version  # noqa: E402


class TorchModel(Model):
    def __init__(self, model_dir: Path, version: str) -> None:
        self.config = json.loads((model_dir / "config.json").read_text())
        super().__init__(self.config["name"])
        self.model_dir, self.version = model_dir, version
        self.output = self.config["outputs"][0]["name"]
        self.threads = int(self.config.get("resources", {}).get("threads", 1))

    def load(self) -> bool:
        torch.set_num_threads(self.threads)
        self.model, _ = load_version(self.model_dir, self.version)
        self.ready = True
        return True

    def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        x = torch.from_numpy(payload.inputs[0].as_numpy())
        with torch.inference_mode():
            y = self.model(x)
        binary = bool(payload.parameters and payload.parameters.get("binary_data_output")) or any(
            o.binary_data for o in payload.request_outputs or []
        )
        out = InferOutput(name=self.output, shape=list(y.shape), datatype="FP32")
        out.set_data_from_numpy(y.numpy(), binary_data=binary)
        return InferResponse(
            model_name=self.name, infer_outputs=[out], response_id=payload.id or str(uuid.uuid4())
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--model-version", default="1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    model = TorchModel(args.model_dir, args.model_version)
    model.load()
    sys.argv = sys.argv[:1]  # kserve parses the command line too
    ModelServer(http_port=args.port, enable_grpc=False, workers=1).start([model])


if __name__ == "__main__":
    main()
