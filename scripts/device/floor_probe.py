"""Write a copy of the kernels whose Gluon kernels skip their off-diagonal elementwise work: the floor a tiling sets.

    python scripts/device/floor_probe.py .gpu/probe          # .gpu/probe/kernels: the probe tree
    python scripts/device/floor_probe.py .gpu/probe64 --sub 64   # the dK/dV kernel on 64-query sub-tiles too

In the copy, the fp8 fast path's Gluon forward keeps its products, TMA ring, waits and stores but not the off-diagonal
softmax (P is S, unscaled); the dK/dV kernels' off-diagonal sub-tiles feed Sᵀ and dPᵀ to the dV and dK products as they
come; the dQ kernel's feeds S + dP to its dQ product. The diagonal tiles stay as they are. Values are garbage; only the
time means anything: with launch_gaps.py under PYTHONPATH (scripts/device/session23_floor.sh), each kernel's time
without its elementwise work, beside the real kernel's. Session 23 (docs/benchmarks.md) found the elementwise work
adds to the products' time almost in full in all three kernels.

Each replacement is checked to apply, so a kernel edit that moves the code stops the probe instead of measuring the
real kernel twice. Never imported by the package.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FORWARD = ("attention_fwd_gluon.py", '''        c = qs * kbs
        m_new = gl.maximum(m_i, gl.ceil(_row_max(s) * c))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s * c[:, None] - (m_new - 8.0)[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        return p, m_new, l_i, alpha''',
           '''        return s, m_i, l_i, m_i * 0.0 + 1.0  # FLOOR PROBE: no softmax''')

DKDV = ("attention_bwd_gluon.py", '''        qs, m, linv, delta, sdo = stats
        st = st * (kbs * (qs * qk_scale))[None, :]
        pt = gl.exp2(st - (m - 8.0)[None, :])
        return (_dv_operand(pt, linv, sdo, itau, A8_L),
                _dk_operand(pt, dpt, vbs, qs, linv, delta, sdo, isig, A_L, A8_L, FP8_DK, kbs, yout, c, DS_OUT))''',
        '''        qs, m, linv, delta, sdo = stats  # FLOOR PROBE: the scores as the products' operands
        if DS_OUT:  # the dS stores stay (launch option ds_out): their traffic is not elementwise work
            _store_ds(dpt, kbs, yout, c)
        if FP8_DK:
            ds = gl.convert_layout(dpt.to(gl.float8e4nv), A8_L)
        else:
            ds = gl.convert_layout(dpt.to(gl.bfloat16), A_L)
        return gl.convert_layout(st.to(gl.float8e4nv), A8_L), ds''')

DQ = ("attention_bwd_gluon.py", '''            s, dp = _dq_scores(q_s, do_s, k_s, v_s, ready, j, zero, STAGES)
            s = s * (qs * kbs)[:, None]
            p = gl.exp2(s - (m - 8.0)[:, None])
            dp = dp * (sdo * vbs)[:, None]
            ds = (p * (linv * (1.0 / 256.0))[:, None]) * (dp - delta[:, None])
            y = gl.convert_layout((ds * kbs).to(A_T), A_L)''',
      '''            s, dp = _dq_scores(q_s, do_s, k_s, v_s, ready, j, zero, STAGES)
            y = gl.convert_layout((s + dp).to(A_T), A_L)  # FLOOR PROBE: the scores as the product's operand''')

# 64-query dK/dV sub-tiles (--sub 64): the module constant and a ring of two 41 KB stages (two programs per SM)
SUB64 = [("attention_bwd_gluon.py", "BM = 32  # queries per sub-tile", "BM = 64  # FLOOR PROBE: queries per sub-tile"),
         ("attention_dkdv_ws.py", "STAGES = 4\n", "STAGES = 2  # FLOOR PROBE: 64-query stages\n")]


def write_probe(out: Path, sub: int) -> Path:
    """out/kernels: this checkout's kernels with the replacements above; refuses to overwrite a non-probe folder."""
    dest = out / "kernels"
    if dest.exists():
        if not any("FLOOR PROBE" in f.read_text() for f in dest.glob("*.py")):
            raise SystemExit(f"{dest} exists and is not a floor probe: not overwritten")
        shutil.rmtree(dest)
    shutil.copytree(ROOT / "kernels", dest, ignore=shutil.ignore_patterns("__pycache__"))
    for name, old, new in [FORWARD, DKDV, DQ] + (SUB64 if sub == 64 else []):
        path = dest / name
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{name}: the code the probe replaces was not found once; update scripts/device/"
                             f"floor_probe.py to the kernel as it is now")
        path.write_text(text.replace(old, new))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for the probe tree (out/kernels), e.g. .gpu/probe")
    ap.add_argument("--sub", type=int, choices=(32, 64), default=32, help="dK/dV query sub-tile")
    args = ap.parse_args()
    print(write_probe(args.out, args.sub))


if __name__ == "__main__":
    main()
