#!/usr/bin/env python3
"""Turns a Hugging Face sequence classifier saved locally (``save_pretrained``) into a tensorgate
model folder that takes text: ``model.pt2`` (a ``torch.export`` program from token ids and
attention mask to logits), the model's own ``tokenizer.json``, and a ``config.json`` whose
``processing`` tokenizes what an agent sends and answers the model's labels.

  python examples/transformers/export_classifier.py SAVED_DIR MODELS/NAME [--max-length 128]

Runs offline: nothing is downloaded (``local_files_only``). docs/processing.md#a-hugging-face-
sequence-classifier walks through it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


class Logits(torch.nn.Module):
    """The classifier with positional tensor inputs and its logits as the one output."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, tensors, strict=True))).logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved", type=Path, help="the folder save_pretrained wrote")
    parser.add_argument("out", type=Path, help="the model folder to write, e.g. models/sentiment")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per text")
    parser.add_argument("--description", default=None, help="what the model tells, for agents")
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.saved, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(args.saved, local_files_only=True)
    model.eval()
    # The inputs the tokenizer makes, in the order the model's forward takes them.
    taken = tokenizer.model_input_names
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in taken]
    example = tokenizer(["an example", "a longer example text"], padding=True, return_tensors="pt")
    batch = torch.export.Dim("batch", min=1, max=1024)
    tokens = torch.export.Dim("tokens", min=1, max=args.max_length)
    program = torch.export.export(
        Logits(model, names),
        tuple(example[n] for n in names),
        # One entry, the *tensors tuple, holding each input's dynamic dimensions.
        dynamic_shapes=(tuple({0: batch, 1: tokens} for _ in names),),
    )
    version = args.out / "1"
    version.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(version / "model.pt2"))
    # The fast tokenizer's own file: what the worker's tokenizers library reads.
    tokenizer.backend_tokenizer.save(str(version / "tokenizer.json"))

    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    name = args.out.name
    config = {
        "name": name,
        "description": args.description or f"Classifies a text into {', '.join(labels)}.",
        "engine": "torch",
        "inputs": [{"name": n, "dtype": "int64", "shape": [-1, -1]} for n in names],
        "outputs": [
            {"name": "logits", "dtype": "float32", "shape": [-1, len(labels)], "labels": labels}
        ],
        "batching": {"max_batch_size": 32, "max_queue_delay_us": 2000},
        "versions": {"1": {"format": "export", "file": "model.pt2"}},
        "processing": {
            "inputs": {"text": {"type": "text", "max_length": args.max_length}},
            "output": {"type": "classification", "top_k": min(5, len(labels))},
        },
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {args.out}: {', '.join(names)} -> logits over {len(labels)} labels")


if __name__ == "__main__":
    main()
