"""Graceful stop on SIGTERM / SIGUSR1: finish the step, write a checkpoint, exit 0.

    scheduler ──SIGTERM / SIGUSR1──▶ handler sets a flag (nothing else: a handler may run
                                     between any two bytecodes, even inside a collective)
    trainer, between steps ─▶ StopSignals.requested(): all_reduce_max(flag) over all ranks
                            ─▶ every rank sees the same answer ─▶ checkpoint ─▶ leave the loop

Why a collective: a scheduler may signal one rank (or one node) before the others, or a
signal may land on rank 0 just after rank 1 polled. If each rank decided alone, one would
enter the checkpoint's collectives while another started the next step's all-gathers and
both would hang. Taking the max of the flags makes the decision a step-synchronous one.

SIGUSR1 is what SLURM sends ahead of the time limit with `#SBATCH --signal=B:USR1@120`
(scripts/slurm/requeue.sbatch); SIGTERM is what SLURM, Kubernetes and torchrun send to stop
a job. SIGINT is left alone so Ctrl-C still interrupts at once.
"""

from __future__ import annotations

import signal
import threading

import torch

from flamia_train import parallel

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopSignals:
    """Install with `install()`, poll `requested()` between steps (every rank), `uninstall()` at the end."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.received: str | None = None  # name of the first signal this process got
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name

    def install(self) -> StopSignals:
        """Route STOP_SIGNALS to the flag; a no-op off the main thread (Python allows handlers only there)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        """Put back the handlers that were there before `install()`."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def requested(self) -> bool:
        """True on every rank if any rank has received a stop signal (a collective: call it on all ranks)."""
        flag = torch.tensor([1.0 if self.received else 0.0], device=self.device)
        return bool(parallel.all_reduce_max(flag).item() > 0)

    def describe(self) -> str:
        """The signal as seen by this rank, for the exit message."""
        return self.received or "a stop signal (on another rank)"
