"""scripts/device/fused_dq_probe.py: each way its `atomics` table adds dQ tiles compiles, for sm_90 on the CPU, to the
instruction its label names — so the table compares what it says (docs/benchmarks.md, session 24) — and the TMA
reduce-add builtin, which Gluon 3.6's `tma` module does not wrap, compiles to the bulk tensor reduce."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_each_way_compiles_to_its_instruction():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled, not interpreted
    out = subprocess.run([sys.executable, "scripts/device/fused_dq_probe.py", "ptx"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ops = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert ops == {
        "nvmma v2": "atom.global.gpu.relaxed.add.v2.f32",  # the accumulator's layout: two consecutive queries a thread
        "blocked v4": "atom.global.gpu.relaxed.add.v4.f32",
        "stores": "st.global.v4.b32",
        "tma reduce": "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group",
    }, out.stdout
