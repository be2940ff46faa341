"""Ray Serve serving the same model file with ``@serve.batch``: JSON in, JSON out.

    .tensorgate/peers/bin/python bench/peers/ray_server.py \\
        --model-dir models/tabular-classifier --port 9104 \\
        [--max-batch-size 64 --batch-timeout 0.0005]

POST http://127.0.0.1:PORT/predict with ``{"inputs": [[...]]}`` (one request's rows); the answer
is ``{"outputs": [[...]]}``. A local Ray instance (no dashboard), one replica with the model's
thread count and ``max_ongoing_requests`` raised to the batch size (Ray's default of 5 would cap
a batch at 5 requests), ``inference_mode``. Prints ``ready`` once the application answers.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import ray
import torch
from ray import serve
from starlette.requests import Request

#: bench/, where model_file.py is: the replica processes Ray starts import it too.
BENCH = str(Path(__file__).resolve().parents[1])
sys.path.insert(0, BENCH)
from model_file import load_version  # noqa: E402


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class TorchModel:
    def __init__(self, model_dir: str, max_batch_size: int, batch_timeout: float) -> None:
        self.model, config = load_version(Path(model_dir), "1")
        torch.set_num_threads(config.get("resources", {}).get("threads", 1))
        self.predict.set_max_batch_size(max_batch_size)
        self.predict.set_batch_wait_timeout_s(batch_timeout)

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.0005)
    async def predict(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        with torch.inference_mode():
            out = self.model(torch.cat(inputs))
        out = next(iter(out.values())) if isinstance(out, dict) else out
        return list(out.split([x.shape[0] for x in inputs]))

    async def __call__(self, request: Request) -> dict:
        body = await request.json()
        out = await self.predict(torch.tensor(body["inputs"], dtype=torch.float32))
        return {"outputs": out.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--batch-timeout", type=float, default=0.0005)
    args = parser.parse_args()

    ray.init(
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": BENCH}},
    )
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    app = TorchModel.options(max_ongoing_requests=args.max_batch_size).bind(
        str(args.model_dir.resolve()), args.max_batch_size, args.batch_timeout
    )
    serve.run(app, route_prefix="/predict", blocking=False)

    # serve.run has waited for the replica and the HTTP proxy.
    print("ready", flush=True)
    # Ray's actors run in process groups of their own: `ray stop --force` (bench/peers/run.ts runs
    # it after SIGTERM) is what stops them all.
    threading.Event().wait()


if __name__ == "__main__":
    main()
