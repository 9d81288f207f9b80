"""`flamia-train` entry point: compose (Hydra) → validate → build → train → close."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from flamia_train import parallel
from flamia_train.config import register_configs, to_dataclass, validate
from flamia_train.errors import FlamiaError

register_configs()


# An absolute directory, so the console script finds the configs from any working directory
# (a relative path makes Hydra look for an importable `configs` module instead).
CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def main(dict_cfg: DictConfig) -> None:
    from flamia_train.build import build_run
    from flamia_train.trainer import Trainer

    run = summary = env = None
    code = 0
    try:
        cfg = to_dataclass(dict_cfg)
        plan = validate(cfg, int(os.environ.get("WORLD_SIZE", "1")))
        env = parallel.init_distributed(cfg.parallel.device)
        run = build_run(cfg, env, plan)
        summary = Trainer(run).fit()
        if cfg.checkpoint.export_safetensors:
            run.export()
        if env.is_main:
            print(f"final step={summary['step']} heldout_loss={summary['heldout_loss']:.4f} "
                  f"tokens_per_s={summary['tokens_per_s']:.0f}", flush=True)
    except FlamiaError as err:
        print(f"flamia-train: error: {err}", file=sys.stderr, flush=True)
        code = getattr(err, "exit_code", 2)  # 2: bad input; 3: the run halted itself (guard.TrainingHalted)
    finally:
        if run is not None:
            run.close(summary)
        parallel.shutdown()
    if env is not None and env.world_size > 1 and env.device.type == "cpu":
        # gloo ranks can abort in interpreter teardown after the group is destroyed (seen under
        # load: "terminate called without an active exception"); the run is complete and flushed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
