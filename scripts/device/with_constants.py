"""Run a script or module with some `flamia_kernels` module constants replaced, to time or test a kernel
variant (launch registers, ring stages) without editing the package:

    python scripts/device/with_constants.py attention_bwd_gluon.MAXNREG_DQ=128 attention_bwd_gluon.DQ_STAGES=2 \
        -- scripts/launch_gaps.py --seq 8192
    python scripts/device/with_constants.py attention_bwd_gluon.DQ_STAGES=2 -- -m pytest -m gpu tests/...

Each NAME=VALUE sets flamia_kernels.<module>.<constant> to VALUE, a Python literal (an int, or a dict such
as attention_bwd_gluon.DQ_STAGES={32:3,64:3}), before the target runs; the launchers read these module
globals at call time. Never imported by the package.
"""
from __future__ import annotations

import ast
import importlib
import runpy
import sys


def main(argv: list[str]) -> None:
    if "--" not in argv:
        raise SystemExit("usage: with_constants.py MODULE.NAME=LITERAL ... -- (SCRIPT | -m MODULE) [ARGS ...]")
    cut = argv.index("--")
    for item in argv[:cut]:
        name, _, value = item.partition("=")
        module, _, const = name.rpartition(".")
        mod = importlib.import_module(f"flamia_kernels.{module}")
        if not hasattr(mod, const):
            raise SystemExit(f"flamia_kernels.{module} has no constant {const!r}")
        try:
            literal = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise SystemExit(f"{item}: the value must be a Python literal (an int, a dict), got {value!r}") from None
        setattr(mod, const, literal)
        print(f"with flamia_kernels.{module}.{const} = {getattr(mod, const)!r}", flush=True)
    target = argv[cut + 1:]
    if target[:1] == ["-m"]:
        sys.argv = [target[1], *target[2:]]
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = target
        sys.path.insert(0, str(__import__("pathlib").Path(target[0]).resolve().parent))
        runpy.run_path(target[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
