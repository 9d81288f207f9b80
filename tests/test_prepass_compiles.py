"""scripts/compile_prepass.py: every Triton pre-pass kernel compiles for sm_90 on this CPU machine.

The CPU tests run the kernels in Triton's interpreter, where the GPU-only branches (`_HW_FP8`,
`_FUSED_FMA` in kernels/quantize.py) are plain Python and never meet the compiler: a construct it
rejects there (session 7: `tl.max` of a scalar under `if _HW_FP8 and ...`) passed every CPU test and
failed on the H200. This compiles them as the GPU would.
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_prepass_kernel_compiles_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "scripts/compile_prepass.py"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    # 35 variants: dO's pass with and without its K-major copy (session 21) and its rows' L1 for ρ (session 32) among
    # them, the key copies with K's bytes K-major and ρ from dO's bytes or that L1 (an FP8 dQ product, session 26), the
    # key sides with V's copy in P's register order (session 33)
    assert len(lines) == 35 and all(line.startswith("ok") for line in lines), out.stdout
    assert any("p_order=True" in line for line in lines)
    assert sum("write_l1=True" in line for line in lines) == 2 and any("has_l1=True" in line for line in lines)
