"""The training loop: gradient accumulation, clipping, evaluation, logging and checkpoints.

The loop knows no parallelism and no formats: `build.build_run` hands it a model that is
already sharded and a loader that already yields this rank's rows. One optimizer step
consumes `tokens_per_step` tokens over all ranks (micro-batches × accumulation × ranks).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from flamia_train import parallel
from flamia_train.context import ContextController
from flamia_train.guard import FaultPlan, TrainingHalted, Verdict
from flamia_train.metrics import Throughput, peak_memory_bytes
from flamia_train.signals import StopSignals

if TYPE_CHECKING:
    from flamia_train.build import Run


OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "for-loop")  # train.optimizer_impl (build.optimizer_kernels)


@dataclass
class TrainConfig:
    """Optimizer, batch and loop settings (the `train:` node)."""

    steps: int = 200  # optimizer steps in the whole run
    seq_len: int = 256  # tokens per row; a multiple of the attention block
    micro_batch_size: int = 8  # rows per rank per forward/backward
    tokens_per_step: int = 0  # global tokens per optimizer step; 0 = one micro-batch on every rank
    document_masking: bool = False  # attention stays inside each packed document (every attention spec)
    lr: float = 3e-3  # peak learning rate (after warm-up)
    weight_decay: float = 0.1  # AdamW decoupled weight decay (matrices only, not norms/embeddings)
    beta1: float = 0.9  # AdamW beta1
    beta2: float = 0.95  # AdamW beta2
    eps: float = 1e-8  # AdamW epsilon
    optimizer_impl: str = "auto"  # AdamW kernels: auto (fused on CUDA, for-loop on CPU) | fused | foreach | for-loop
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    eval_interval: int = 100  # evaluate held-out loss every N steps (and at 0 and the end); 0 = only at the end
    eval_batches: int = 8  # micro-batches per held-out evaluation (the same ones every time)
    seed: int = 1234  # seeds weights and every rank's RNG
    spike_sigma: float = 6.0  # skip a step whose loss/grad norm is above mean + this many std of recent ones; 0 = off
    spike_window: int = 128  # good steps the spike statistics cover (the test starts once half are in)
    max_bad_steps: int = 8  # consecutive skipped steps (non-finite or spike) that stop the run with a checkpoint
    inject_fault: str = ""  # TESTING AID only: corrupt chosen steps' loss, e.g. "nan@3+spike@5-7" (guard.FaultPlan)


class TrainState:
    """The loop's own resumable counters."""

    def __init__(self) -> None:
        self.step = 0
        self.tokens_seen = 0

    def state_dict(self) -> dict:
        return {"step": self.step, "tokens_seen": self.tokens_seen}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.tokens_seen = int(state["step"]), int(state["tokens_seen"])


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss in fp32. logits [B, S, V], targets [B, S]."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class Trainer:
    """Runs `cfg.train.steps` optimizer steps on a built `Run`, from its resumed state."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.cfg = run.cfg.train
        # The context schedule sets seq_len, RoPE, micro-batch and accumulation per step; tokens/step is constant.
        self.context = ContextController(run.context, run.model, (run.train_loader, run.heldout_loader),
                                         run.env.device)
        self.tokens_per_step = run.context.tokens_per_step
        self.accum = run.context.at(run.state.step).accum
        self.throughput = Throughput()
        self.last_eval: float = math.nan
        self.faults = FaultPlan.parse(self.cfg.inject_fault)
        self.verdict = Verdict(ok=True)  # the guard's verdict on the last step
        self.signals = StopSignals(run.env.device)
        self.stopped_by: str | None = None  # the signal that ended the loop early, if any

    # -- one step ----------------------------------------------------------------------------
    def _batch(self, loader):
        """(inputs, targets) on the device, plus doc_ids with train.document_masking."""
        batch = loader.next_batch(doc_ids=True) if self.cfg.document_masking else loader.next_batch()
        device = self.run.env.device
        return tuple(t.to(device, non_blocking=True) for t in batch)

    def enter_context(self, step: int) -> None:
        """The context point of `step` (loader shape, RoPE, accumulation); a new stage restarts tokens/s."""
        if self.context.enter(step):
            self.throughput = Throughput()
        self.accum = self.context.point.accum

    def train_step(self, step: int) -> dict:
        run, cfg = self.run, self.cfg
        lr = run.lr_schedule.lr_at(step)
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=run.env.device)
        for _ in range(self.accum):
            inputs, targets, *doc_ids = self._batch(run.train_loader)
            loss = cross_entropy(run.model(inputs, *doc_ids), targets) / self.accum
            if (scale := self.faults.loss_scale(step + 1)) != 1.0:  # testing aid only (train.inject_fault)
                loss = loss * scale
            loss.backward()
            loss_sum += loss.detach()
        if cfg.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in run.model.parameters() if p.grad is not None])
        if hasattr(grad_norm, "full_tensor"):  # FSDP2 returns a DTensor
            grad_norm = grad_norm.full_tensor()
        loss_value, norm_value = parallel.all_reduce_mean(loss_sum).item(), grad_norm.item()
        self.verdict = run.guard.check(loss_value, norm_value)  # global values: the same verdict on every rank
        if self.verdict.ok:
            run.optimizer.step()
        run.optimizer.zero_grad(set_to_none=True)  # a skipped step's gradients are dropped
        return {"loss": loss_value, "lr": lr, "grad_norm": norm_value, **run.guard.metrics()}

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean held-out loss over the same `eval_batches` micro-batches every time."""
        run = self.run
        run.heldout_loader.load_state_dict(run.heldout_start)
        run.model.eval()
        total = torch.zeros((), device=run.env.device)
        for _ in range(self.cfg.eval_batches):
            inputs, targets, *doc_ids = self._batch(run.heldout_loader)
            total += cross_entropy(run.model(inputs, *doc_ids), targets)
        run.model.train()
        self.last_eval = parallel.all_reduce_mean(total / max(1, self.cfg.eval_batches)).item()
        return self.last_eval

    # -- the loop ----------------------------------------------------------------------------
    def _record(self, metrics: dict, step: int) -> None:
        """Log to the metric logger and append to run_dir/metrics.jsonl (rank 0), the local record."""
        clean = {k: v for k, v in metrics.items() if v is not None}
        self.run.logger.log(clean, step=step)
        if self.run.env.is_main:
            with open(self.run.metrics_path, "a") as f:
                f.write(json.dumps({"step": step, **clean}) + "\n")
            if "eval/loss" in clean:
                print(f"eval step={step} heldout_loss={clean['eval/loss']:.6f}", flush=True)

    def _should_eval(self, step: int) -> bool:
        every = self.cfg.eval_interval
        return self.cfg.eval_batches > 0 and (step == self.cfg.steps or (every > 0 and step % every == 0))

    def fit(self) -> dict:
        """Train to `steps`; on SIGTERM/SIGUSR1 checkpoint and return early; TrainingHalted from the guard."""
        self.signals.install()
        try:
            return self._loop()
        finally:
            self.signals.uninstall()

    def _say(self, text: str) -> None:
        if self.run.env.is_main:
            print(text, file=sys.stderr, flush=True)

    def _skipped(self, step: int) -> None:
        """Report a step the guard skipped; after max_bad_steps in a row, checkpoint and halt."""
        guard, why = self.run.guard, self.verdict.reason
        self._say(f"guard: step {step} skipped ({why}); {guard.streak} in a row, {guard.skipped} in total")
        if not self.verdict.stop:
            return
        guard.reset_streak()  # a resume after fixing the cause gets max_bad_steps fresh chances
        path = self.run.save_checkpoint()
        raise TrainingHalted(
            f"stopped at step {step} after {self.cfg.max_bad_steps} consecutive bad steps (train.max_bad_steps); "
            f"last: {why}. Checkpoint {path} holds the last good weights (no bad update was applied); "
            "fix the cause (e.g. a lower train.lr, the data) and resume"
        )

    def _loop(self) -> dict:
        run, state = self.run, self.run.state
        self.enter_context(state.step)
        if state.step == 0 and self.cfg.eval_batches > 0:
            self._record({"eval/loss": self.evaluate()}, step=0)
        start_step = state.step
        while state.step < self.cfg.steps:
            self.enter_context(state.step)
            t0 = time.perf_counter()
            run.precision.begin_step(state.step)  # the recipe's phase for this step (precision_schedule)
            metrics = self.train_step(state.step)
            state.step += 1
            state.tokens_seen += self.tokens_per_step
            self.throughput.update(self.tokens_per_step, time.perf_counter() - t0)
            tps = self.throughput.tokens_per_s()
            metrics.update(
                tokens_per_s=tps,
                **run.precision.end_step(state.step, tps),  # mfu, mfu_weighted, FLOP split, quant stats
                peak_memory_gb=peak_memory_bytes(run.env.device) / 2**30,
                tokens_seen=state.tokens_seen,
                stage=self.context.point.stage,
                seq_len=self.context.point.seq_len,
            )
            if self._should_eval(state.step):
                metrics["eval/loss"] = self.evaluate()
            quant = any(k.startswith("quant/") for k in metrics)  # telemetry steps are always recorded
            if state.step % run.cfg.logger.log_interval == 0 or "eval/loss" in metrics or quant:
                self._record(metrics, state.step)
            run.progress.update(state.step, metrics)
            if not self.verdict.ok:
                self._skipped(state.step)
            stop = self.signals.requested()  # collective: every rank leaves at the same step
            interval = run.cfg.checkpoint.interval
            if interval and state.step % interval == 0 and state.step < self.cfg.steps and not stop:
                run.save_checkpoint()
            if stop:
                self.stopped_by = self.signals.describe()
                self._say(f"received {self.stopped_by}: stopping after step {state.step} with a checkpoint "
                          "(resume=auto continues)")
                break
        if state.step > start_step:  # the final state, unless this process ran no step (already done)
            run.save_checkpoint()
        return self.summary()

    def summary(self) -> dict:
        return {
            "step": self.run.state.step,
            "heldout_loss": self.last_eval,
            "tokens_per_s": self.throughput.tokens_per_s() or 0.0,
            "tokens_seen": self.run.state.tokens_seen,
            "skipped_steps": self.run.guard.skipped,
            **({"stopped_by": self.stopped_by} if self.stopped_by else {}),
        }
