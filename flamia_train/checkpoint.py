"""Checkpoints: atomic, resumable torch.distributed.checkpoint (DCP) snapshots of a run.

```
run_dir/checkpoints/
  step_00000100/              one complete checkpoint (only complete ones carry this name)
    .metadata  __0_0.distcp   DCP: model + optimizer (sharded DTensors or plain tensors)
    app_state.pt              global Statefuls (LR schedule, data loader), written by rank 0
    rank_0.pt  rank_1.pt      per-rank Statefuls (RNG states), one file per rank
    meta.json                 step, run id, model config, world size, format version: written LAST
  step_00000200.tmp-1a2b3c4d/ a save in progress (or interrupted): never resumed from
```

A save writes into the ``.tmp-<id>`` directory, rank 0 checks that every file
is there, then renames it to its final name, so a reader sees a checkpoint
whole or not at all. Directories that look wrong are skipped with a warning
and never deleted; pruning (``keep``) removes only complete checkpoints this
module wrote. See docs/checkpoints.md for the user-facing story.
"""
from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.optim import Optimizer

from flamia_train.errors import CheckpointError

FORMAT_VERSION = 1
WRITER = "flamia_train.checkpoint"  # marks meta.json files this module wrote (pruning trusts only those)
_FINAL = re.compile(r"^step_(\d{8})$")
_TMP = re.compile(r"^step_(\d{8})\.tmp-[0-9a-f]+$")
_TIED_KEY = "flamia_tied"  # safetensors metadata: JSON {alias: stored name} for deduplicated tensors


@dataclass
class CheckpointConfig:
    """When to checkpoint, how many to keep, and whether to export weights at the end."""

    interval: int = 100  # steps between checkpoints; 0 = never during training (a final one is still written)
    keep: int = 3  # keep the newest N complete checkpoints; older ones this module wrote are removed
    export_safetensors: bool = True  # write a consolidated model.safetensors at the end of training


class CorruptCheckpointError(CheckpointError):
    """A checkpoint directory is incomplete or unreadable (as opposed to incompatible)."""


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


# ---------------------------------------------------------------- RNG states


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from on this rank: torch CPU and CUDA, python, numpy."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # the current device: one device per rank
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state()`` returned (a CUDA state is ignored on a machine without CUDA)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def reseed_rng(seed: int, step: int, rank: int) -> None:
    """Seed every RNG from (seed, step, rank): used when a resume changes the world size."""
    # SeedSequence mixes the three numbers so neighbouring ranks/steps get unrelated streams.
    derived = int(np.random.SeedSequence([seed, step, rank]).generate_state(1)[0])
    torch.manual_seed(derived)  # also seeds every CUDA device
    random.seed(derived)
    np.random.seed(derived)


class RNGState:
    """Per-rank Stateful for ``CheckpointManager(per_rank=...)``: the RNGs of this process."""

    def __init__(self, seed: int, rank: int):
        self.seed, self.rank = seed, rank

    def state_dict(self) -> dict:
        return rng_state()

    def load_state_dict(self, state: dict) -> None:
        set_rng_state(state)

    def reseed(self, step: int) -> None:
        reseed_rng(self.seed, step, self.rank)


# ---------------------------------------------------------------- directory checks


def _read_meta(path: Path) -> dict:
    """meta.json of ``path``, or ``CorruptCheckpointError`` saying why it cannot be used."""
    if not path.is_dir():
        raise CorruptCheckpointError(f"checkpoint {path}: not a directory")
    if not (path / ".metadata").is_file():
        raise CorruptCheckpointError(f"checkpoint {path}: incomplete, no DCP .metadata file")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise CorruptCheckpointError(f"checkpoint {path}: incomplete, no meta.json (interrupted save?)") \
            from None
    except (OSError, ValueError) as err:
        raise CorruptCheckpointError(f"checkpoint {path}: unreadable meta.json ({err})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("format_version"), int):
        raise CorruptCheckpointError(f"checkpoint {path}: meta.json has no integer format_version")
    if meta["format_version"] > FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"checkpoint {path}: format_version {meta['format_version']} is newer than this code "
            f"reads ({FORMAT_VERSION}); upgrade flamia-train"
        )
    return meta


def _check_files(path: Path, meta: dict) -> None:
    """Every file DCP's metadata refers to is long enough, and every rank file exists."""
    try:
        storage = dcp.FileSystemReader(str(path)).read_metadata().storage_data
    except Exception as err:  # pickle can fail in many ways on a damaged file
        raise CorruptCheckpointError(f"checkpoint {path}: unreadable DCP .metadata ({err!r})") from None
    needed: dict[str, int] = {}
    for info in storage.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    names = [f"rank_{r}.pt" for r in range(int(meta.get("world_size", 1)))] + ["app_state.pt"]
    needed.update({n: max(needed.get(n, 0), 1) for n in names})
    for name, size in sorted(needed.items()):
        file = path / name
        if not file.is_file():
            raise CorruptCheckpointError(f"checkpoint {path}: missing file {name}")
        if file.stat().st_size < size:
            raise CorruptCheckpointError(
                f"checkpoint {path}: file {name} is truncated ({file.stat().st_size} < {size} bytes)"
            )


def validate_checkpoint(path: Path) -> dict:
    """meta of a complete, readable checkpoint at ``path``; else ``CorruptCheckpointError`` naming why."""
    meta = _read_meta(path)
    _check_files(path, meta)
    return meta


def _why(err: BaseException) -> str:
    """One line per failing rank instead of DCP's multi-rank traceback dump."""
    if isinstance(err, CheckpointException):
        return "; ".join(f"rank {r}: {type(exc).__name__}: {exc}" for r, (exc, _) in err.failures.items())
    return f"{type(err).__name__}: {err}"


def _torch_load(file: Path) -> dict:
    try:
        # Our own files: numpy RNG states and loader state are refused by the weights-only unpickler.
        return torch.load(file, weights_only=False)
    except Exception as err:  # a damaged pickle fails in many ways
        raise CorruptCheckpointError(f"checkpoint {file.parent}: unreadable {file.name} ({_why(err)})") \
            from None


def _write_pt(obj: Any, file: Path) -> None:
    """torch.save into memory, then one plain write, flushed to disk.

    torch.save's own writer turns a failed write (a full disk) into an opaque RuntimeError
    ("unexpected pos"); a plain write raises the OS error itself (ENOSPC, EDQUOT, EROFS). These
    files are small (RNG and loader states). fsync: the directory is renamed to its final name
    next, and a machine crash must not leave a final-named checkpoint whose files were never
    written back.
    """
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with open(file, "wb") as fh:
        fh.write(buffer.getbuffer())
        fh.flush()
        os.fsync(fh.fileno())


def _jsonable(value: Any) -> Any:
    # What json.dump writes and json.load reads back; comparing through it ignores tuple/list etc.
    return json.loads(json.dumps(value, default=str))


def _model_config_diff(saved: Any, current: Any) -> list[str]:
    if not isinstance(saved, dict) or not isinstance(current, dict):
        return [] if saved == current else [f"model: checkpoint {saved!r}, current {current!r}"]
    keys = sorted(set(saved) | set(current))
    return [
        f"{k}: checkpoint {saved.get(k, '<absent>')!r}, current {current.get(k, '<absent>')!r}"
        for k in keys
        if saved.get(k, "<absent>") != current.get(k, "<absent>")
    ]


# ---------------------------------------------------------------- the manager


class CheckpointManager:
    """Saves, finds and restores checkpoints under ``run_dir/checkpoints``; every rank calls each method.

    ``barrier`` is the trainer's collective barrier; the process group is the
    default one (``parallel.init_distributed`` always creates it). ``model_config``
    (a plain dict) is stored in meta.json and compared on load.
    """

    def __init__(self, cfg: CheckpointConfig, run_dir: Path, rank: int, world_size: int,
                 barrier: Callable[[], None], model_config: dict | None = None):
        self.cfg, self.rank, self.world_size, self._barrier = cfg, rank, world_size, barrier
        self.dir = Path(run_dir) / "checkpoints"
        self.model_config = model_config
        probe = self.dir / f".write_probe_rank{rank}"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe.write_text("probe")
            probe.unlink()
        except OSError as err:
            raise CheckpointError(f"run_dir {run_dir} is not writable: cannot create {probe} ({err})") \
                from None

    # -- collectives that also carry errors, so one rank's failure cannot hang the others

    def _agree(self, error: str | None) -> str | None:
        """Every rank's error (None = fine) gathered; returns the first error any rank had."""
        errors = [error]
        if self.world_size > 1:
            errors = [None] * self.world_size
            dist.all_gather_object(errors, error)
        return next((e for e in errors if e), None)

    def _broadcast(self, value: Any) -> Any:
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def step_dir(self, step: int) -> Path:
        return self.dir / f"step_{step:08d}"

    # -- save

    def save(self, step: int, model: nn.Module, optimizer: Optimizer | None, app_state: dict[str, Stateful],
             meta: dict, per_rank: dict[str, Stateful] | None = None) -> Path:
        """Write checkpoint ``step`` atomically and prune old ones; returns its final path."""
        final = self.step_dir(step)
        if final.exists():
            raise CheckpointError(f"checkpoint {final} already exists; refusing to overwrite it")
        tmp = self.dir / f"{final.name}.tmp-{self._broadcast(uuid.uuid4().hex[:8])}"
        error = None
        try:
            dcp.save(self._dcp_state(model, optimizer), checkpoint_id=str(tmp))
            _write_pt({k: v.state_dict() for k, v in (per_rank or {}).items()}, tmp / f"rank_{self.rank}.pt")
            if self.rank == 0:
                _write_pt({k: v.state_dict() for k, v in app_state.items()}, tmp / "app_state.pt")
        except (OSError, RuntimeError, CheckpointException) as err:  # RuntimeError: torch's writer, any cause
            error = _why(err) if isinstance(err, CheckpointException) else f"rank {self.rank}: {_why(err)}"
        error = self._agree(error)
        if error is None and self.rank == 0:
            error = self._finalize(tmp, final, step, meta)
        error = self._agree(error)
        if error is not None:
            # Free space is measured before our .tmp dir is removed: it tells a full disk from other
            # causes even when the writer's own message is opaque (torch.save's "unexpected pos").
            free = shutil.disk_usage(self.dir).free / 2**20
            if self.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)  # ours alone; the previous checkpoint stays
            raise CheckpointError(f"could not write checkpoint {final}: {error}; {free:.1f} MiB free under "
                                  f"{self.dir}; earlier checkpoints are intact")
        if self.rank == 0:
            self._prune(keep_step=step)
        self._barrier()
        return final

    def _finalize(self, tmp: Path, final: Path, step: int, meta: dict) -> str | None:
        """Rank 0: write meta.json last, verify, rename. Returns an error string or None."""
        full = {**meta, "step": step, "format_version": FORMAT_VERSION, "world_size": self.world_size,
                "writer": WRITER}
        if self.model_config is not None:
            full.setdefault("model", self.model_config)
        try:
            (tmp / "meta.json").write_text(json.dumps(full, indent=2, sort_keys=True, default=str))
            validate_checkpoint(tmp)
            os.rename(tmp, final)
        except (OSError, CheckpointError) as err:
            return str(err)
        return None

    def _ours(self) -> list[tuple[int, Path]]:
        """Complete checkpoints this module wrote, oldest first."""
        found = []
        for entry in self.dir.iterdir():
            match = _FINAL.match(entry.name)
            if not match or not entry.is_dir():
                continue
            try:
                if _read_meta(entry).get("writer") == WRITER:
                    found.append((int(match.group(1)), entry))
            except CheckpointError:
                continue  # not ours to judge or delete
        return sorted(found)

    def _prune(self, keep_step: int) -> None:
        if self.cfg.keep <= 0:
            return
        ours = self._ours()
        for leftover in self.dir.glob("step_*.pruned-*"):  # our own half-deleted dirs from a crash
            shutil.rmtree(leftover, ignore_errors=True)
        for step, path in ours[: max(len(ours) - self.cfg.keep, 0)]:
            if step != keep_step:
                # Rename first: a crash during rmtree leaves a .pruned- dir, never a half checkpoint
                # under a final name that resume=auto would try (and warn about) forever.
                doomed = path.with_name(f"{path.name}.pruned-{uuid.uuid4().hex[:8]}")
                os.rename(path, doomed)
                shutil.rmtree(doomed)

    # -- find

    def _candidates(self) -> list[Path]:
        """Final and temporary step directories, newest step first (a final dir before its .tmp)."""
        entries = []
        for entry in self.dir.iterdir():
            match = _FINAL.match(entry.name) or _TMP.match(entry.name)
            if match:
                entries.append((int(match.group(1)), _FINAL.match(entry.name) is not None, entry))
        return [entry for *_, entry in sorted(entries, reverse=True)]

    def _valid_newest_first(self):
        """Yield (path, meta) of usable checkpoints, newest first, warning about each skipped one."""
        for path in self._candidates():
            if _TMP.match(path.name):
                warnings.warn(f"skipping checkpoint {path}: incomplete (.tmp dir of an interrupted save); "
                              "left in place", stacklevel=3)
                continue
            try:
                yield path, validate_checkpoint(path)
            except CorruptCheckpointError as err:
                warnings.warn(f"skipping {err}; left in place", stacklevel=3)

    def resolve(self, resume: str) -> Path | None:
        """``never`` -> None; ``auto`` -> newest complete checkpoint or None; a path -> that checkpoint."""
        if resume == "never":
            return None
        if resume == "auto":
            return next((path for path, _ in self._valid_newest_first()), None)
        path = Path(resume)
        if not path.exists():
            raise CheckpointError(f"resume={resume!r}: checkpoint {path} does not exist")
        validate_checkpoint(path)
        return path

    # -- load

    def load(self, path: Path, model: nn.Module, optimizer: Optimizer | None, app_state: dict[str, Stateful],
             per_rank: dict[str, Stateful] | None = None, model_config: dict | None = None) -> dict:
        """Restore everything from checkpoint ``path``; returns its meta dict.

        Per-rank states come back only when the world size is unchanged;
        otherwise objects with ``reseed(step)`` (``RNGState``) are re-seeded and a
        warning says so. Raises ``CheckpointError`` (``CorruptCheckpointError`` for
        a damaged checkpoint) before touching the model whenever it can tell.
        """
        path = Path(path)
        meta = validate_checkpoint(path)
        current = model_config if model_config is not None else self.model_config
        if current is not None:
            diff = _model_config_diff(meta.get("model"), _jsonable(current))
            if diff:
                raise CheckpointError(f"checkpoint {path} is for a different model: " + "; ".join(diff))
        state = self._dcp_state(model, optimizer)
        try:
            dcp.load(state, checkpoint_id=str(path))
        except (Exception, CheckpointException) as err:
            raise CorruptCheckpointError(f"checkpoint {path}: DCP load failed ({_why(err)})") from None
        if optimizer is None:
            set_model_state_dict(model, state["model"])
        else:
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self._load_extras(path, meta, app_state, per_rank or {})
        return meta

    def _load_extras(self, path: Path, meta: dict, app_state: dict, per_rank: dict) -> None:
        saved = _torch_load(path / "app_state.pt")
        for key, obj in app_state.items():
            if key not in saved:
                raise CheckpointError(f"checkpoint {path}: app_state.pt has no '{key}' (has {sorted(saved)})")
            obj.load_state_dict(saved[key])
        if not per_rank:
            return
        if meta.get("world_size") == self.world_size:
            mine = _torch_load(path / f"rank_{self.rank}.pt")
            for key, obj in per_rank.items():
                if key in mine:
                    obj.load_state_dict(mine[key])
            return
        if self.rank == 0:
            warnings.warn(f"checkpoint {path} was written by {meta.get('world_size')} ranks, this run has "
                          f"{self.world_size}: per-rank states ({', '.join(per_rank)}) are re-seeded, "
                          "not restored", stacklevel=3)
        for obj in per_rank.values():
            if hasattr(obj, "reseed"):
                obj.reseed(int(meta["step"]))

    def load_latest(self, model: nn.Module, optimizer: Optimizer | None, app_state: dict[str, Stateful],
                    per_rank: dict[str, Stateful] | None = None,
                    model_config: dict | None = None) -> dict | None:
        """Load the newest checkpoint that loads; corrupt ones are skipped with a warning (None: none found).

        A different model shape is not skipped: it raises, since an older
        checkpoint of the same run would be just as wrong.
        """
        touched = False
        for path, _ in self._valid_newest_first():
            try:
                return self.load(path, model, optimizer, app_state, per_rank, model_config)
            except CorruptCheckpointError as err:
                warnings.warn(f"skipping {err}; left in place", stacklevel=2)
                touched = True
        if touched:
            raise CheckpointError(f"no checkpoint under {self.dir} could be loaded, and a failed load may "
                                  "have overwritten part of the model; pass resume=never to start fresh")
        return None

    # -- helpers shared by save/load/export

    @staticmethod
    def _dcp_state(model: nn.Module, optimizer: Optimizer | None) -> dict:
        if optimizer is None:
            return {"model": get_model_state_dict(model)}
        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def export_safetensors(self, model: nn.Module, path: Path) -> Path:
        """Gather the full model state (collective) and write it with safetensors on rank 0.

        Tensors sharing storage (tied embeddings) are stored once; the aliases
        are listed in the file's metadata and restored by ``load_safetensors``.
        """
        from safetensors.torch import save_file

        path = Path(path)
        exists = self._broadcast(path.exists() if self.rank == 0 else None)
        if exists:
            raise CheckpointError(f"export target {path} already exists; refusing to overwrite it")
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        error = None
        if self.rank == 0:
            tensors, tied = _dedupe(full)
            tmp = path.with_name(path.name + ".tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                save_file(tensors, str(tmp), metadata={_TIED_KEY: json.dumps(tied), "writer": WRITER})
                os.rename(tmp, path)
            except Exception as err:  # safetensors reports I/O errors (a full disk) as its own SafetensorError
                tmp.unlink(missing_ok=True)
                error = f"could not write {path}: {type(err).__name__}: {err}"
        error = self._agree(error)
        if error:
            raise CheckpointError(error)
        return path


def _dedupe(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Drop tensors that alias an earlier one (same storage, offset, shape, stride)."""
    kept: dict[tuple, str] = {}
    tensors, tied = {}, {}
    for name, t in state.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if t.numel() and key in kept:
            tied[name] = kept[key]
            continue
        kept[key] = name
        tensors[name] = t.contiguous()
    return tensors, tied


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Full state dict from ``export_safetensors`` output, tied names re-pointed at their tensor."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
        tied = json.loads((f.metadata() or {}).get(_TIED_KEY, "{}"))
    state.update({alias: state[name] for alias, name in tied.items()})
    return state
