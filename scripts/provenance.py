"""The commit a benchmark script labels its results with (shared by scripts/bench_*.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def commit_label(root: Path) -> str:
    """FLAMIA_COMMIT if set, else `git rev-parse --short HEAD` in root, else "unknown".

    The environment comes first: the device machines get a copy of the tree without .git, or with
    a .git left from an earlier call that names another commit (a run labelled 4e8fe1d ran e7b3f6e).
    """
    commit = os.environ.get("FLAMIA_COMMIT", "")
    if commit:
        return commit
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
