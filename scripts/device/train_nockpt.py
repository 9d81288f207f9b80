"""`flamia-train` that writes no checkpoint: the measurement runs of scripts/device/close_out.sh.

    python3 scripts/device/train_nockpt.py model=gpt-1b precision=fp8 ...            # as python -m flamia_train.train
    torchrun --standalone --nproc_per_node=2 scripts/device/train_nockpt.py ...

The trainer always writes a final checkpoint (and one when SIGTERM stops it); for gpt-1b that is
~12 GB of fp32 weights and AdamW state per run, seconds of disk time that a speed, memory or loss
agreement measurement never reads. Everything else is `flamia_train.train.main` unchanged: the same
Hydra overrides, validation, build, loop and run_dir/metrics.jsonl.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, as `python -m` from it

from flamia_train import build  # noqa: E402


def _no_checkpoint(self) -> None:
    """Run.save_checkpoint replaced: nothing written (callers ignore the path it would return)."""
    return None


build.Run.save_checkpoint = _no_checkpoint

from flamia_train.train import main  # noqa: E402

if __name__ == "__main__":
    main()
