"""SentencePiece tokenizer: BPE training with byte fallback, and the loading wrapper the loader uses.

Every tokenizer we train has the same special ids, so configs and tests can rely
on them:

    0 <pad>   1 <unk>   2 <s> (BOS)   3 </s> (EOS)

Training keeps text exactly as written (identity normalisation, no whitespace
folding, no dummy prefix): the default corpus is Python source, where
indentation is meaning, and `decode(encode(text)) == text` holds for any UTF-8
string because unknown characters fall back to byte pieces.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from flamia_train.errors import ConfigError, DataError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
# 256 byte pieces + 4 specials + room for the most common characters.
MIN_VOCAB = 320
# Sentences sampled for training; bounds the BPE trainer's time (~5 s on 2 cores at vocab 8192).
INPUT_SENTENCE_SIZE = 500_000


class Tokenizer:
    """A loaded sentencepiece model: `encode(str) -> list[int]`, `decode(list[int]) -> str`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(
                f"tokenizer '{self.path}' does not exist: set data.tokenizer to a sentencepiece .model file, "
                "or use data=stdlib, which builds one (scripts/prepare_data.py)"
            )
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.Load(str(self.path))
        except (RuntimeError, OSError) as exc:
            raise DataError(
                f"tokenizer '{self.path}' is not a valid sentencepiece model ({exc}); "
                "allowed: a .model file written by sentencepiece"
            ) from None
        if self._sp.eos_id() < 0:
            raise DataError(
                f"tokenizer '{self.path}' has no EOS piece; the loader needs one to separate documents"
            )

    @property
    def vocab_size(self) -> int:
        return self._sp.GetPieceSize()

    @property
    def eos_id(self) -> int:
        return self._sp.eos_id()

    @property
    def bos_id(self) -> int:
        return self._sp.bos_id()

    @property
    def unk_id(self) -> int:
        return self._sp.unk_id()

    @property
    def pad_id(self) -> int:
        return self._sp.pad_id()

    def encode(self, text: str) -> list[int]:
        return self._sp.Encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Encode many documents at once; sentencepiece spreads them over the machine's cores."""
        return self._sp.Encode(texts, num_threads=os.cpu_count() or 1)

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp.Decode([int(i) for i in ids])


def check_vocab(tokenizer: Tokenizer, model_vocab_size: int) -> None:
    """Raise ConfigError('model.vocab_size', ...) when the model's embedding cannot hold every token id."""
    if tokenizer.vocab_size > model_vocab_size:
        raise ConfigError(
            "model.vocab_size",
            model_vocab_size,
            f"must be >= the tokenizer's vocab size {tokenizer.vocab_size} ('{tokenizer.path}')",
        )


def train_tokenizer(lines: Iterable[str], out_path: Path, vocab_size: int, seed: int) -> dict:
    """Train a BPE tokenizer on `lines` and write `out_path` (.model) and its .vocab next to it.

    Files are written under a temporary name and renamed, so a crash never leaves a
    half-written model at `out_path`; an existing file there is never overwritten.
    Returns a small report (vocab size, seconds).
    """
    if vocab_size < MIN_VOCAB:
        raise ConfigError(
            "data.vocab_size", vocab_size, f"must be >= {MIN_VOCAB} (256 byte pieces + specials)"
        )
    out_path = Path(out_path)
    if out_path.exists():
        raise DataError(f"tokenizer '{out_path}' already exists; refusing to overwrite it")
    start = time.time()
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(lines),
            model_writer=model,
            model_type="bpe",
            vocab_size=vocab_size,
            input_sentence_size=INPUT_SENTENCE_SIZE,
            shuffle_input_sentence=True,
            byte_fallback=True,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            add_dummy_prefix=False,
            allow_whitespace_only_pieces=True,
            split_digits=True,
            character_coverage=0.9995,
            max_sentencepiece_length=16,
            hard_vocab_limit=False,  # a small capped corpus yields fewer pieces instead of an error
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as exc:
        raise ConfigError("data.vocab_size", vocab_size, f"sentencepiece could not train it: {exc}") from None
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab_text = "".join(f"{sp.IdToPiece(i)}\t{sp.GetScore(i)}\n" for i in range(sp.GetPieceSize()))
    _publish(out_path, model.getvalue())
    vocab_path = out_path.with_suffix(".vocab")
    if not vocab_path.exists():
        _publish(vocab_path, vocab_text.encode("utf-8"))
    return {"vocab_size": sp.GetPieceSize(), "seconds": round(time.time() - start, 2)}


def _publish(path: Path, payload: bytes) -> None:
    """Write `payload` to a temporary sibling, then rename it into place."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(payload)
    os.replace(tmp, path)
