"""A CPU training run an agent can watch and steer through tensorgate.

An MLP learns a synthetic 10-class problem. The loop attaches to tensorgate with its
hyperparameters and their allowed ranges, logs loss and accuracy every step, and applies whatever
the agent changed between optimizer steps. Start a tensorgate server (any transport) on the same
machine, then:

    PYTHONPATH=python .tensorgate/venv/bin/python examples/training/train_mlp.py --steps 20000

and ask the agent to "list the training runs", "show the loss curve of mlp-demo", "lower the
learning rate to 0.01", "pause it", "checkpoint and stop it". See README.md, "Steering training".
"""

from __future__ import annotations

import argparse
import os

import torch

from tensorgate import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args()

    torch.manual_seed(0)
    centers = torch.randn(10, 32) * 2
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)

    def save(step: int) -> str:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        path = os.path.abspath(os.path.join(args.checkpoint_dir, f"mlp-{step}.pt"))
        torch.save(
            {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, path
        )
        return path

    run = train.attach(
        "mlp-demo",
        hparams={"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
        spec={
            "lr": {"min": 1e-5, "max": 1.0},
            "momentum": {"min": 0.0, "max": 0.99},
            "weight_decay": {"min": 0.0, "max": 0.1},
        },
        on_checkpoint=save,
    )
    print(f"attached as {run.id} ({run.path})", flush=True)

    for step in range(args.steps):
        labels = torch.randint(0, 10, (args.batch_size,))
        inputs = centers[labels] + torch.randn(args.batch_size, 32)
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        accuracy = (logits.argmax(1) == labels).float().mean()
        run.log(step, loss=loss, accuracy=accuracy)  # tensors are fine, on any device
        run.apply(optimizer, step)  # the agent's changes, pauses and checkpoints, between steps
        optimizer.step()
        if run.should_stop:
            print(f"stopped by the agent at step {step}", flush=True)
            break
    run.close()


if __name__ == "__main__":
    main()
