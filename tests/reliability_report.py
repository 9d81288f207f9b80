"""pytest plugin: the reliability tests' counts (kill points, bad inputs, injected faults) in the summary.

Registered by `pytest_plugins` in tests/conftest.py. A test calls `record(kind, label)` once per
kill point / bad input / fault it exercised; the terminal summary prints one line per kind with
the total and a breakdown by label, e.g.

    kill points: 3 (random moment 2, during checkpoint write 1)

docs/reliability.md lists what each kind covers and the counts of the default and --runslow runs.
"""

from __future__ import annotations

from collections import Counter, defaultdict

KINDS = ("kill points", "bad inputs", "injected faults")
_COUNTS: dict[str, Counter] = defaultdict(Counter)


def record(kind: str, label: str, n: int = 1) -> None:
    """Count `n` items of `kind` (one of KINDS) under `label` (the breakdown shown in the summary)."""
    if kind not in KINDS:
        raise ValueError(f"unknown reliability count {kind!r}; allowed: {', '.join(KINDS)}")
    _COUNTS[kind][label] += n


def counts() -> dict[str, int]:
    """Totals so far, by kind."""
    return {kind: sum(_COUNTS[kind].values()) for kind in KINDS if _COUNTS[kind]}


def summary_lines() -> list[str]:
    lines = []
    for kind in KINDS:
        if _COUNTS[kind]:
            parts = ", ".join(f"{label} {n}" for label, n in sorted(_COUNTS[kind].items()))
            lines.append(f"{kind}: {sum(_COUNTS[kind].values())} ({parts})")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = summary_lines()
    if lines:
        terminalreporter.section("reliability")
        for line in lines:
            terminalreporter.write_line(line)
