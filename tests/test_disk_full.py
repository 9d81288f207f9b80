"""A full disk or an unwritable checkpoint dir: the run says so, and the previous checkpoint stays intact.

Each case runs the CLI body in-process (4 steps, a checkpoint every 2) and makes the second
save fail at one point of the save path: the file being written is opened as `FullDiskFile`,
which takes the first 64 bytes and then fails with OSError(ENOSPC) exactly where a full disk's
write(2) would, or the final rename fails with EACCES as on a read-only / foreign-owned
directory. Then: exit code 2, the
message names the checkpoint and the OS error, checkpoint step 2 is byte-for-byte unchanged
and loadable, and the failed save left no `.tmp-` directory behind. One more test fills a
real 9 MB tmpfs when this machine lets us mount one (root with CAP_SYS_ADMIN).
"""

from __future__ import annotations

import errno
import io
import os
import pathlib
import re
import subprocess
from contextlib import contextmanager

import pytest
import reliability_runs as runs
import torch.distributed.checkpoint.filesystem as dcp_fs
from reliability_report import record

import flamia_train.checkpoint as ckpt
from flamia_train.checkpoint import validate_checkpoint

FAILING = "step_00000004"  # the second save; step 2 must survive it
COMMON = ["train.steps=4", "checkpoint.interval=2", "checkpoint.keep=3"]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return runs.small_corpus(tmp_path_factory)


class FullDiskFile(io.FileIO):
    """A real file on a disk that fills up after `ROOM` bytes: later writes raise ENOSPC."""

    ROOM = 64  # smaller than every file a save writes (meta.json is ~500 bytes)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        room = max(0, self.ROOM - self.tell())
        if len(view) > room:
            super().write(view[:room])  # what fitted stays, as on a real disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.name)
        return super().write(view)


def _failing(path, suffix: str) -> bool:
    return FAILING in str(path) and str(path).endswith(suffix)


def _dcp_shard(monkeypatch):
    real = dcp_fs.FileSystem.create_stream

    @contextmanager
    def create_stream(self, path, mode):
        if "w" in mode and _failing(path, ".distcp"):
            with FullDiskFile(path, "wb") as stream:
                yield stream
        else:
            with real(self, path, mode) as stream:
                yield stream

    monkeypatch.setattr(dcp_fs.FileSystem, "create_stream", create_stream)


def _pt_file(name: str):
    def inject(monkeypatch):
        def fake_open(file, mode="r", *args, **kwargs):
            if "w" in mode and _failing(file, name):
                return FullDiskFile(file, "wb")
            return open(file, mode, *args, **kwargs)

        monkeypatch.setattr(ckpt, "open", fake_open, raising=False)  # the module's global `open` only
    return inject


def _meta_json(monkeypatch):
    real = pathlib.Path.write_text

    def write_text(self, data, *args, **kwargs):
        if _failing(self, "meta.json"):
            with FullDiskFile(self, "wb") as fh:
                return fh.write(data.encode())
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)


def _rename(monkeypatch):
    real = os.rename

    def rename(src, dst, *args, **kwargs):
        if _failing(dst, FAILING):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(ckpt.os, "rename", rename)


CASES = {  # fault label -> (injector, text the error must contain)
    "ENOSPC in a DCP shard": (_dcp_shard, "No space left on device"),
    "ENOSPC in rank_0.pt": (_pt_file("rank_0.pt"), "No space left on device"),
    "ENOSPC in app_state.pt": (_pt_file("app_state.pt"), "No space left on device"),
    "ENOSPC in meta.json": (_meta_json, "No space left on device"),
    "EACCES on the final rename": (_rename, "Permission denied"),
}


@pytest.mark.parametrize("label", list(CASES))
def test_failed_save_is_reported_and_keeps_the_previous_checkpoint(label, tmp_path, corpus, monkeypatch, capsys):
    inject, needle = CASES[label]
    run = tmp_path / "run"
    before = {}

    real_save = ckpt.CheckpointManager.save

    def save(self, step, *args, **kwargs):
        if step == 4:  # snapshot step 2 just before the failing save, then arm the fault
            before.update(runs.tree_digest(run / "checkpoints" / "step_00000002"))
            inject(monkeypatch)
        return real_save(self, step, *args, **kwargs)

    monkeypatch.setattr(ckpt.CheckpointManager, "save", save)
    code = runs.run_inprocess(run, corpus, *COMMON, "checkpoint.export_safetensors=false")
    err = capsys.readouterr().err
    monkeypatch.undo()
    record("injected faults", label)
    assert code == 2, err
    assert f"could not write checkpoint {run / 'checkpoints' / FAILING}" in err and needle in err, err
    assert "earlier checkpoints are intact" in err
    step2 = run / "checkpoints" / "step_00000002"
    assert before and runs.tree_digest(step2) == before
    validate_checkpoint(step2)
    assert [p.name for p in (run / "checkpoints").iterdir() if ".tmp-" in p.name or p.name == FAILING] == []
    if label == "ENOSPC in a DCP shard":  # and it loads: the next run resumes from it and finishes
        assert runs.run_inprocess(run, corpus, *COMMON, "checkpoint.export_safetensors=false") == 0
        assert "resumed from" in capsys.readouterr().err
        assert (run / "checkpoints" / FAILING).is_dir()


def test_failed_export_is_reported_and_leaves_no_partial_file(tmp_path, corpus, monkeypatch, capsys):
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", lambda tensors, path, metadata=None: _raise_io(path))
    code = runs.run_inprocess(tmp_path / "run", corpus, "train.steps=2", "checkpoint.interval=0")
    err = capsys.readouterr().err
    record("injected faults", "I/O error in the safetensors export")
    assert code == 2 and "could not write" in err and "No space left on device" in err, err
    assert list((tmp_path / "run" / "export").iterdir()) == []
    validate_checkpoint(tmp_path / "run" / "checkpoints" / "step_00000002")


def _raise_io(path):
    from safetensors import SafetensorError

    open(path, "wb").close()  # as a real failure would: a partial file is there
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=9m", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_real_full_tmpfs(tiny_tmpfs, corpus):
    """A 9 MB filesystem holds one 6 MB checkpoint: the second save hits the real ENOSPC."""
    run = tiny_tmpfs / "run"
    proc = runs.run_cli(run, corpus, *COMMON, check=False)
    record("injected faults", "real full tmpfs")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "could not write checkpoint" in proc.stderr and "earlier checkpoints are intact" in proc.stderr
    # DCP's pickled items fail inside torch.save ("unexpected pos"): the free space names the cause.
    free = re.search(r"([\d.]+) MiB free under", proc.stderr)
    assert free and float(free.group(1)) < 6.0, proc.stderr[-3000:]
    validate_checkpoint(run / "checkpoints" / "step_00000002")
    assert not list((run / "checkpoints").glob("*.tmp-*"))
