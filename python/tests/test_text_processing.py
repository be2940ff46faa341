"""Text inputs: UTF-8 items through a tokenizer.json into token ids, attention mask and token
type ids. The reference is the same tokenizer file used plainly (no padding, no truncation) with
the padding done by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from tensorgate._errors import BAD_TEXT, LOAD_FAILED, TEXT_TOO_LONG, WorkerError
from tensorgate._processing import Processing

CORPUS = [
    "what is the weather in paris tomorrow",
    "set an alarm for seven in the morning",
    "play some jazz music in the kitchen",
    "translate good morning into french",
    "add milk and eggs to my shopping list",
] * 20
MODEL_INPUTS = {
    "input_ids": ("int64", 2),
    "attention_mask": ("int64", 2),
    "token_type_ids": ("int32", 2),
}


@pytest.fixture(scope="module")
def version_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    folder = tmp_path_factory.mktemp("version")
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def text_processing(version_dir: Path, **options: object) -> Processing:
    config = {
        "type": "text",
        "max_length": 16,
        "tensors": {
            "input_ids": "input_ids",
            "attention_mask": "attention_mask",
            "token_type_ids": "token_type_ids",
        },
        **options,
    }
    return Processing({"inputs": {"text": config}}, MODEL_INPUTS, version_dir)


def items(*texts: str | bytes) -> list[memoryview]:
    return [memoryview(t.encode() if isinstance(t, str) else t) for t in texts]


def test_texts_become_ids_and_masks_padded_to_the_longest(version_dir: Path) -> None:
    texts = ["Play some JAZZ!", "what is the weather in paris tomorrow", ""]
    out = text_processing(version_dir).tensors("text", items(*texts))
    plain = Tokenizer.from_file(str(version_dir / "tokenizer.json"))
    ids = [plain.encode(t).ids for t in texts]
    longest = max(len(i) for i in ids)
    pad = plain.token_to_id("[PAD]")
    assert out["input_ids"].dtype == torch.int64
    assert out["input_ids"].tolist() == [i + [pad] * (longest - len(i)) for i in ids]
    assert out["attention_mask"].tolist() == [[1] * len(i) + [0] * (longest - len(i)) for i in ids]
    assert out["token_type_ids"].dtype == torch.int32
    assert out["token_type_ids"].tolist() == [[0] * longest] * 3
    # The empty text is [CLS] [SEP]: two tokens, not none.
    assert out["attention_mask"][2].sum().item() == 2


def test_padding_to_max_length_gives_fixed_shapes(version_dir: Path) -> None:
    out = text_processing(version_dir, padding="max_length").tensors("text", items("hi"))
    plain = Tokenizer.from_file(str(version_dir / "tokenizer.json"))
    assert out["input_ids"].shape == (1, 16)
    assert out["attention_mask"].sum().item() == len(plain.encode("hi").ids)


def test_long_texts_are_truncated_keeping_the_special_tokens(version_dir: Path) -> None:
    long = " ".join(CORPUS[:10])
    out = text_processing(version_dir, max_length=8).tensors("text", items(long, "hi"))
    plain = Tokenizer.from_file(str(version_dir / "tokenizer.json"))
    full = plain.encode(long).ids
    assert out["input_ids"].shape == (2, 8)
    assert out["input_ids"][0].tolist() == [*full[:7], plain.token_to_id("[SEP]")]


def test_long_texts_are_refused_when_asked(version_dir: Path) -> None:
    processing = text_processing(version_dir, max_length=8, truncation="refuse")
    assert processing.tensors("text", items("play jazz"))["input_ids"].shape == (1, 4)
    long = " ".join(CORPUS[:3])
    tokens = len(Tokenizer.from_file(str(version_dir / "tokenizer.json")).encode(long).ids)
    with pytest.raises(WorkerError) as caught:
        processing.tensors("text", items("hi", long))
    assert caught.value.code == TEXT_TOO_LONG
    assert f'input "text" item 1: {tokens} tokens, over' in caught.value.message
    assert "max_length of 8" in caught.value.message


def test_invalid_utf8_is_refused_naming_the_item(version_dir: Path) -> None:
    with pytest.raises(WorkerError) as caught:
        text_processing(version_dir).tensors("text", items("fine", b"caf\xe9"))
    assert caught.value.code == BAD_TEXT
    assert caught.value.message.startswith('input "text" item 1: not valid UTF-8')


def test_a_missing_or_broken_tokenizer_fails_the_load_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(WorkerError) as caught:
        text_processing(tmp_path)
    assert caught.value.code == LOAD_FAILED
    assert "processing.inputs.text.tokenizer: no tokenizer file" in caught.value.message
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(WorkerError) as caught:
        text_processing(tmp_path)
    assert caught.value.code == LOAD_FAILED
    assert "is not a tokenizer.json" in caught.value.message


def test_the_tokenizers_own_pad_id_is_kept(tmp_path: Path, version_dir: Path) -> None:
    tokenizer = Tokenizer.from_file(str(version_dir / "tokenizer.json"))
    unk = tokenizer.token_to_id("[UNK]")
    tokenizer.enable_padding(pad_id=unk, pad_token="[UNK]")
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    out = text_processing(tmp_path).tensors("text", items("hi", "play some jazz music"))
    assert out["input_ids"][0, -1].item() == unk
