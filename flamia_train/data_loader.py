"""Packing documents into fixed-length rows, sharded by data-parallel rank, resumable to the token.

    epoch e: documents in a seeded order, each ending in EOS
    stream:  [d0 ........ EOS][d1 .... EOS][d2 ............ EOS] [next epoch ...
    rows:    |--- row 0 ---|                  row j = stream[p + j*S : p + j*S + S + 1]
                          |--- row 1 ---|     (consecutive rows share one token, so every
                                        |---  token after p is a target exactly once)
    step:    global rows j = 0 .. W*B-1; rank r takes j = r, r+W, r+2W, ...;  p += W*B*S

The cursor (epoch, doc, token) names the first token of the next step's row 0.
It is the same on every rank and does not depend on W, B or S, so a checkpoint
restores the exact next token under any world size (with the same global
rows per step the global order is unchanged), and `set_seq_len` re-packs from
the cursor without losing or repeating a token.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np
import torch

from flamia_train.document_mask import document_ids_from_starts
from flamia_train.errors import DataError

STREAM_TOKENIZE_BATCH = 64  # documents tokenized per call on the streaming path


class LocalDocs:
    """Random access to a tokenized split (a Dataset with an `ids` column), re-ordered each epoch."""

    kind = "local"

    def __init__(self, dataset, seed: int):
        column = dataset.with_format("arrow")[:].column("ids")
        # Per arrow chunk: its flat token buffer (a zero-copy view of the memory-mapped file).
        self._values = [chunk.values.to_numpy() for chunk in column.chunks]
        starts, lengths, owner = [], [], []
        for i, chunk in enumerate(column.chunks):
            offsets = chunk.offsets.to_numpy().astype(np.int64)
            starts.append(offsets[:-1])
            lengths.append(np.diff(offsets))
            owner.append(np.full(len(chunk), i, dtype=np.int32))
        self._start = np.concatenate(starts)
        self._len = np.concatenate(lengths)
        self._owner = np.concatenate(owner)
        self.num_docs = len(self._start)
        self.num_tokens = int(self._len.sum())
        self._seed = seed
        self._orders: dict[int, np.ndarray] = {}

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            if len(self._orders) >= 2:  # a row spans at most two epochs at a time
                del self._orders[min(self._orders)]
            self._orders[epoch] = np.random.default_rng([self._seed, epoch]).permutation(self.num_docs)
        return self._orders[epoch]

    def doc(self, epoch: int, k: int) -> np.ndarray | None:
        """Tokens of the k-th document of `epoch`, or None when the epoch has fewer documents."""
        if k >= self.num_docs:
            return None
        i = self._order(epoch)[k]
        start = self._start[i]
        return self._values[self._owner[i]][start : start + self._len[i]]

    def forget(self, epoch: int, k: int) -> None:
        """Nothing to release: every document stays addressable."""

    def reset(self) -> None:
        """Nothing to drop: positions are computed, not buffered."""


class StreamDocs:
    """Sequential documents from a text stream, tokenized in small batches as the packer reaches them.

    `texts(epoch)` must yield the same texts in the same order each time it is called
    with the same epoch: resuming at document k re-opens the stream and skips k texts
    (without tokenizing them).
    """

    kind = "stream"
    num_docs = -1

    def __init__(self, texts: Callable[[int], Iterator[str]], tokenizer, name: str):
        self._texts, self._tok, self._name = texts, tokenizer, name
        self._epochs: dict[int, dict] = {}  # epoch -> {it, first, docs, ended}

    def _open(self, epoch: int, skip: int) -> dict:
        it = self._texts(epoch)
        for _ in range(skip):
            if next(it, None) is None:
                raise DataError(
                    f"'{self._name}' ended before document {skip} of epoch {epoch}: "
                    "the stream changed since the checkpoint was written"
                )
        self._epochs[epoch] = {"it": it, "first": skip, "docs": [], "ended": False}
        return self._epochs[epoch]

    def doc(self, epoch: int, k: int) -> np.ndarray | None:
        buf = self._epochs.get(epoch) or self._open(epoch, k)
        while k >= buf["first"] + len(buf["docs"]) and not buf["ended"]:
            batch = list(itertools.islice(buf["it"], STREAM_TOKENIZE_BATCH))
            buf["ended"] = len(batch) < STREAM_TOKENIZE_BATCH
            eos = self._tok.eos_id
            buf["docs"] += [np.asarray(ids + [eos], dtype=np.int32) for ids in self._tok.encode_batch(batch)]
        if k < buf["first"]:
            raise DataError(f"internal: document {k} of epoch {epoch} was already released")
        if buf["first"] + len(buf["docs"]) == 0:
            raise DataError(f"'{self._name}' yielded no documents with non-empty text in epoch {epoch}")
        pos = k - buf["first"]
        return buf["docs"][pos] if pos < len(buf["docs"]) else None

    def forget(self, epoch: int, k: int) -> None:
        """Release the documents before (epoch, k); the cursor never moves back past them."""
        for e in [e for e in self._epochs if e < epoch]:
            del self._epochs[e]
        buf = self._epochs.get(epoch)
        if buf is not None and k > buf["first"]:
            del buf["docs"][: k - buf["first"]]
            buf["first"] = k

    def reset(self) -> None:
        """Drop every open stream; the next read re-opens at the cursor (used on resume)."""
        self._epochs.clear()


class PackedLoader:
    """Infinite iterator of (inputs, targets) LongTensor[B, S] pairs; Stateful for resume.

    Rank `rank` of `world_size` takes global rows rank, rank+W, ... of each step (see the
    module docstring). `state_dict()` is identical on every rank.
    """

    def __init__(self, docs, *, seq_len: int, micro_batch: int, rank: int, world_size: int, name: str = ""):
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is outside world_size {world_size}")
        self.docs, self.rank, self.world_size, self.name = docs, rank, world_size, name
        self.set_seq_len(seq_len, micro_batch)
        self._cursor = (0, 0, 0)  # (epoch, document index within the epoch's order, token within it)

    @property
    def epoch(self) -> int:
        return self._cursor[0]

    def set_seq_len(self, seq_len: int, micro_batch: int) -> None:
        """Change the row shape; rows restart at the cursor, so no token is lost or repeated."""
        for key, value in (("seq_len", seq_len), ("micro_batch", micro_batch)):
            if not isinstance(value, int) or value < 1:
                raise DataError(f"loader {key} = {value!r} is invalid; allowed: a positive integer")
        self.seq_len, self.micro_batch = seq_len, micro_batch

    def _walk(self, cursor, n: int, collect: bool):
        """Read (if `collect`) the n tokens starting at `cursor`; return ((tokens, starts), cursor after them).

        `starts` marks (1) each token that is the first of its document: the document
        boundaries, exact whatever the tokens are (document masking reads them).
        """
        epoch, k, t = cursor
        pieces, starts = [], []
        while n:
            d = self.docs.doc(epoch, k)
            if d is None:  # end of this epoch's documents: the stream continues with the next epoch
                epoch, k, t = epoch + 1, 0, 0
                continue
            piece = d[t : t + n]
            if collect:
                pieces.append(piece)
                starts.append(np.zeros(len(piece), dtype=np.int8))
                starts[-1][:1] = t == 0
            n -= len(piece)
            t += len(piece)
            if t == len(d):
                k, t = k + 1, 0
        return ((np.concatenate(pieces), np.concatenate(starts)) if collect else None), (epoch, k, t)

    def next_batch(self, doc_ids: bool = False):
        """(inputs, targets), each LongTensor[micro_batch, seq_len]; targets are inputs shifted by one.

        With `doc_ids=True`, (inputs, targets, doc_ids): doc_ids LongTensor[micro_batch, seq_len]
        numbers the documents of each input row from 0 (a new id at each document's first token).
        """
        S, B, W = self.seq_len, self.micro_batch, self.world_size
        step = W * B * S
        (span, first), after = self._walk(self._cursor, step, collect=True)
        (last, _), _ = self._walk(after, 1, collect=True)  # the final target, also row 0 of the next step
        span = np.concatenate([span, last])
        index = ((self.rank + W * np.arange(B)) * S)[:, None] + np.arange(S + 1)  # (B, S+1) into span
        rows = torch.from_numpy(span[index].astype(np.int64))
        self._cursor = after
        self.docs.forget(after[0], after[1])
        inputs, targets = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
        if not doc_ids:
            return inputs, targets
        return inputs, targets, document_ids_from_starts(torch.from_numpy(first[index[:, :-1]]))

    def __iter__(self):
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        epoch, doc, token = self._cursor
        return {
            "epoch": epoch,
            "doc": doc,
            "token": token,
            "kind": self.docs.kind,
            "num_docs": self.docs.num_docs,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue at the exact token the saved loader would have read next."""
        missing = {"epoch", "doc", "token", "kind", "num_docs"} - set(state)
        if missing:
            raise DataError(
                f"loader state for '{self.name}' lacks {sorted(missing)}; not a PackedLoader state"
            )
        if state["kind"] != self.docs.kind or int(state["num_docs"]) != self.docs.num_docs:
            raise DataError(
                f"loader state was saved for a {state['kind']} source of {state['num_docs']} documents, "
                f"but '{self.name}' is a {self.docs.kind} source of {self.docs.num_docs}: the data changed"
            )
        self._cursor = (int(state["epoch"]), int(state["doc"]), int(state["token"]))
        self.docs.reset()
