"""scripts/kernel_registers.py: the sm_90 register/spill report compiles a real kernel on a CPU machine."""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from kernel_registers import parse_config  # noqa: E402


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """python ARGS from the repo root, without this test run's TRITON_INTERPRET=1: under it the kernels are
    interpreter objects, which cannot compile for sm_90."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_parse_config():
    assert parse_config("8x2x32:atomic") == {"num_warps": 8, "num_stages": 2, "sub": 32, "dq": "atomic"}
    assert parse_config("4x3") == {"num_warps": 4, "num_stages": 3}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown part 'fast'"):
        parse_config("8x2:fast")
    with pytest.raises(argparse.ArgumentTypeError, match="WARPSxSTAGES"):
        parse_config("eight")


def test_reports_the_dq_kernel_on_sm90():
    """A subprocess: under this test run's TRITON_INTERPRET=1 the kernels are interpreter objects."""
    out = _run("scripts/kernel_registers.py", "--kernels", "dq")
    assert out.returncode == 0, out.stderr[-2000:]
    row = [line for line in out.stdout.splitlines() if line.startswith("dq ")]
    assert len(row) == 1 and "4x3x32:bm64:pre (default)" in row[0], out.stdout  # launch_config's fp8 fast path
    regs, stores, loads = (int(x) for x in row[0].split()[-3:])
    # compiled with the JIT's divisibility hints, the dQ kernel holds its tiles in registers (0 bytes spilled)
    assert 0 < regs <= 255 and stores == 0 and loads == 0, row


def test_parse_config_forward_option():
    assert parse_config("8x3:bptr") == {"num_warps": 8, "num_stages": 3, "BPTR": True}
    assert parse_config("8x2x32:half") == {"num_warps": 8, "num_stages": 2, "sub": 32, "bn": 64}
    assert parse_config("4x2:gluon:chunk8:pdl") == {"num_warps": 4, "num_stages": 2, "gluon": True, "head_chunk": 8,
                                                    "pdl": True}


def test_blackwell_block_scaled_qk_compiles_for_sm100():
    """The forward's Blackwell path (mxfp8 QKᵀ through tl.dot_scaled) compiles for sm_100 to the
    block-scaled tcgen05 MMA: the only check possible here (no Blackwell GPU is lent)."""
    out = _run("scripts/kernel_registers.py", "--kernels", "fwd", "--spec", "mxfp8", "--qk-mx", "--target", "100",
               "--mma")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tcgen05.mma" in out.stdout and "mxf8f6f4.block_scale" in out.stdout, out.stdout


def test_gluon_forward_compiles_for_sm90():
    """The sm_90 Gluon forward (attention_fwd_gluon; Gluon has no interpreter, so this compile and the
    GPU tier are its checks): the default, one chained accumulator, fits 168 registers (three programs
    of 4 warps per SM; what it spills is the diagonal tile's and the epilogue's, outside the loop); the
    fresh-product variant with QKᵀ(t + 1) in flight keeps every tile in registers; both FP8 wgmma."""
    out = _run("scripts/kernel_registers.py", "--kernels", "fwd_gluon", "--configs", "4x3:gluon:pipe2",
               "4x2:gluon:chain:chunk0:nopdl:fulldiag", "--mma")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("fwd_gluon ")]
    assert len(rows) == 3 and "4x2:gluon:chain (default)" in rows[0] and "4x3:gluon:pipe2" in rows[1], out.stdout
    chain, pipe2, ordered = ([int(x) for x in row.split()[-3:]] for row in rows)
    assert chain[0] <= 168 and chain[1] <= 512, rows[0]
    assert ":chunk0:nopdl:fulldiag" in rows[2] and ordered[0] <= 168 and ordered[1] <= 512, rows[2]  # the launch before
    assert 0 < pipe2[0] <= 255 and pipe2[1:] == [0, 0], rows[1]
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in out.stdout, out.stdout
    assert "serialized" not in out.stdout, out.stdout  # a C751x would undo the products in flight


def test_gluon_forward_of_a_no_grad_call_keeps_its_products_in_flight():
    """The Gluon forward a no_grad call launches (no O8 copy, no Q bytes: a compile of its own) keeps its wgmma
    asynchronous, at the default launch, with the whole diagonal tile, and on the ws kernel. Before session 37 ptxas
    serialized every wgmma of that compile (C7512; LLVM had sunk the accumulator's rescale past the diagonal's QKᵀ),
    the loop's included, while the compile with O8, the only one this file checked, kept them in flight:
    `attention_fwd_gluon.PIN_RESCALE`."""
    out = _run("scripts/kernel_registers.py", "--kernels", "fwd_gluon", "--no-grad", "--configs",
               "4x2:gluon:chain:fulldiag", "4x3:gluon:ws")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("fwd_gluon ")]
    assert len(rows) == 3 and all(" no_grad" in row for row in rows), out.stdout
    assert all(int(row.split()[-3]) <= 168 for row in rows), rows
    assert "serialized" not in out.stdout, out.stdout


def test_ws_forward_compiles_for_sm90():
    """The warp-specialized forward (attention_fwd_ws, launch option pipe 4) compiles for sm_90 with FP8 wgmma at
    168 registers a launch thread (its consumers at 240 by setmaxnreg), with the ping-pong and without, and ptxas
    keeps its products asynchronous: with the diagonal mask written as `where(keep, s, -inf)` it serialized every
    wgmma (C7511) and the kernel ran 1.97 ms at 8k against 1.84 unserialized (docs/kernels.md)."""
    out = _run("scripts/kernel_registers.py", "--kernels", "fwd_gluon", "--configs", "4x3:gluon:ws", "4x3:gluon:ws:pp",
               "--mma")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("fwd_gluon ") and ":ws" in line]
    assert len(rows) == 2 and "4x3:gluon:ws " in rows[0] + " " and "4x3:gluon:ws:pp" in rows[1], out.stdout
    assert all(int(row.split()[-3]) == 168 for row in rows), rows
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in out.stdout, out.stdout
    assert "serialized" not in out.stdout, out.stdout


def test_gluon_dkdv_compiles_for_sm90_with_its_products_in_flight():
    """The sm_90 Gluon dK/dV kernel (attention_bwd_gluon) and its warp-specialized form (attention_dkdv_ws):
    compile, use FP8 wgmma for S, dP and dV (m64n128k32) and bf16 for dK, and ptxas keeps them asynchronous. An
    accumulator in flight across the loop's back edge made ptxas serialize every wgmma of the kernel (C7514) in its
    first version: this catches that."""
    out = _run("scripts/kernel_registers.py", "--kernels", "dkdv_gluon", "--mma")
    assert out.returncode == 0, out.stderr[-2000:]
    row = [line for line in out.stdout.splitlines() if line.startswith("dkdv_gluon ")]
    assert len(row) == 8 and "4x3x32:bn64:pre:gluon " in row[0] and 0 < int(row[0].split()[-3]) <= 255, out.stdout
    # the warp-specialized form (attention_dkdv_ws, the default): within its launch's 128 (two programs per SM); and
    # its FP8 dK probe (launch option fp8_dk) and its dS stores for dq_from_ds (launch option ds_out) likewise, the
    # latter without spills (its loop runs at the register wall)
    assert "4x4x32:bn64:pre:gluon:wsdkdv (default)" in row[1] and 0 < int(row[1].split()[-3]) <= 128, row
    assert ":wsdkdv:fp8dk" in row[2] and 0 < int(row[2].split()[-3]) <= 128, row
    assert ":wsdkdv:dsout" in row[3] and 0 < int(row[3].split()[-3]) <= 128, row
    assert row[3].split()[-2:] == ["0", "0"], row
    # and its fp8 dS stores (ds_out with fp8_dq: E4M3 pairs transposed by stmatrix) within its 128, spilling nothing
    # inside the loops that issue its products (24 bytes of loop invariants around them, reloaded once a program)
    assert ":wsdkdv:dsout:fp8" in row[4] and 0 < int(row[4].split()[-3]) <= 128, row
    assert row[4].split()[-2:] == ["0", "0"] or "inside its innermost wgmma loops: 0" in out.stdout, out.stdout
    # and launch option fold_k (K's backward copies made in the kernel): within its 128, and what it spills (20 bytes:
    # the address of K's bf16 rows, written at the program's start and its copy's at the switch) outside the loops
    assert ":wsdkdv:dsout:foldk" in row[5] and 0 < int(row[5].split()[-3]) <= 128, row
    assert int(row[5].split()[-2]) <= 32, row
    after = out.stdout.split(row[5], 1)[1].split("dkdv_gluon ", 1)[0]  # the lines printed under that row
    assert row[5].split()[-2:] == ["0", "0"] or "inside its innermost wgmma loops: 0" in after, out.stdout
    # and fold_k over the fp8 buffer (K's bytes stored K-major in 16-byte vectors, transposed in the shared-memory
    # read): no more than the bf16 fold spills (one byte a store, session 31's version, spilled 128 bytes of their
    # addresses), likewise nothing spilled inside the loops that issue its products
    assert ":wsdkdv:dsout:fp8:foldk" in row[6] and 0 < int(row[6].split()[-3]) <= 128, row
    assert int(row[6].split()[-2]) <= 32, row
    after = out.stdout.split(row[6], 1)[1].split("dkdv_gluon ", 1)[0]
    assert row[6].split()[-2:] == ["0", "0"] or "inside its innermost wgmma loops: 0" in after, out.stdout
    # and with V's copies folded as well (attention_bwd.FOLD_V: V's rows transposed from Vᵀ's bytes in shared memory
    # and re-quantized there), the same bounds
    assert ":wsdkdv:dsout:fp8:foldk:foldv" in row[7] and 0 < int(row[7].split()[-3]) <= 128, row
    assert int(row[7].split()[-2]) <= 32, row
    after = out.stdout.split(row[7], 1)[1].split("dkdv_gluon ", 1)[0]
    assert row[7].split()[-2:] == ["0", "0"] or "inside its innermost wgmma loops: 0" in after, out.stdout
    assert "serialized" not in out.stdout, out.stdout
    for mma in ("m64n32k32.f32.e4m3.e4m3", "m64n128k32.f32.e4m3.e4m3", "m64n128k16.f32.bf16.bf16"):
        assert mma in out.stdout, (mma, out.stdout)


def test_gluon_dq_compiles_for_sm90_within_its_programs_per_sm():
    """The sm_90 Gluon dQ kernel (attention_bwd_gluon.dq, launch option gluon_dq) compiles for both key
    sub-tiles within their MAXNREG_DQ registers (32 keys, the default: 128, four programs per SM; 64 keys: 168,
    three; the version with the next sub-tile's products in flight needed 203 and ran slower), with FP8 wgmma
    for S and dP, bf16 for dQ, none serialized."""
    out = _run("scripts/kernel_registers.py", "--kernels", "dq_gluon", "--mma")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("dq_gluon ")]
    assert len(rows) == 3 and ":gluondq " in rows[0] + " " and ":gluondq32 (default)" in rows[1], out.stdout
    assert ":gluondq32:fp8dq" in rows[2], rows  # the FP8 dQ probe (launch option fp8_dq)
    assert 0 < int(rows[0].split()[-3]) <= 168 and all(0 < int(r.split()[-3]) <= 128 for r in rows[1:]), rows
    assert "serialized" not in out.stdout, out.stdout
    assert "m64n64k32.f32.e4m3.e4m3" in out.stdout and "m64n32k32.f32.e4m3.e4m3" in out.stdout, out.stdout
    assert "m64n128k16.f32.bf16.bf16" in out.stdout, out.stdout


def test_gluon_backward_kernels_compile_at_128_rows():
    """The width constants are sweep knobs (`attention_bwd_gluon.BN`, `DQ_BM`: a warpgroup per 64 rows; 128 measured
    slower on the H200): at 128 the dK/dV and dQ kernels still compile for sm_90 with 8 warps, within their registers,
    none of their wgmma serialized."""
    out = _run("scripts/device/with_constants.py", "attention_bwd_gluon.BN=128", "attention_bwd_gluon.DQ_BM=128", "--",
               "scripts/kernel_registers.py", "--kernels", "dkdv_gluon", "dq_gluon")
    assert out.returncode == 0, out.stderr[-2000:]
    dkdv = [line for line in out.stdout.splitlines() if line.startswith("dkdv_gluon ")]
    dq = [line for line in out.stdout.splitlines()
          if line.startswith("dq_gluon ") and "gluondq32" in line and "fp8dq" not in line]
    assert len(dkdv) == 1 and "8x3x32:bn128:pre:gluon" in dkdv[0], out.stdout
    assert len(dq) == 1 and "8x2x32:bm128:pre:gluondq32" in dq[0], out.stdout
    assert 0 < int(dkdv[0].split()[-3]) <= 255 and 0 < int(dq[0].split()[-3]) <= 128, (dkdv, dq)
    assert "serialized" not in out.stdout, out.stdout


def test_ws_forward_probe_fits_fa3_schedule_on_sm90():
    """scripts/ws_forward_probe.py: FA3's forward loop shape (a one-warp TMA producer lowered to 24 registers, two
    consumer warpgroups at 240 with S(t + 1) in flight during the softmax of t) compiles for sm_90 in this Triton's
    Gluon with nothing spilled and no wgmma serialized — the registers the next forward kernel is planned around."""
    out = _run("scripts/ws_forward_probe.py")
    assert out.returncode == 0, out.stderr[-2000:]
    report = dict(line.split(None, 1) for line in out.stdout.splitlines() if line.strip())
    assert report["spill_stores"] == "0" and report["spill_loads"] == "0", out.stdout
    assert report["serialized"] == "False", out.stdout
    assert "'dec 24'" in report["setmaxnreg"] and "'inc 240'" in report["setmaxnreg"], out.stdout
    assert report["wgmma"] == "24", out.stdout  # 2 consumers × (S(0), S(t + 1), P·V(t)) × 4 k-steps of 32


def test_dq_from_ds_compiles_for_sm90_without_byte_transposes():
    """`dq_from_ds` (launch option ds_out's dQ product) compiles for sm_90 without spills, within two programs per SM
    (8 warps, at most 128 registers), with bf16 wgmma over a bf16 dS buffer and FP8 wgmma over an fp8 one (with
    fp8_dq), none serialized; the fp8 buffer is stored K-major so that the kernel moves no byte one by one through
    shared memory (its first form transposed the tiles here: a byte store a byte)."""
    out = _run("scripts/kernel_registers.py", "--kernels", "dq_from_ds", "--mma")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("dq_from_ds ")]
    assert len(rows) == 4 and ":fp8" in rows[1] and ":oneloop " in rows[2] + " " and ":oneloop:fp8" in rows[3], rows
    for row in rows:
        assert 0 < int(row.split()[-3]) <= 128 and row.split()[-2:] == ["0", "0"], row
    assert "serialized" not in out.stdout, out.stdout
    assert "m64n128k16.f32.bf16.bf16" in out.stdout and "m64n128k32.f32.e4m3.e4m3" in out.stdout, out.stdout
    assert out.stdout.count("byte-wide shared loads / stores: 0") == 4, out.stdout
    # ONE_LOOP: one pipelined loop, and fewer barriers than the two loops (whose diagonal tiles cross registers)
    loops = [tuple(map(int, re.findall(r"loops: (\d+), CTA barriers: (\d+)", out.stdout)[i])) for i in range(4)]
    assert [n for n, _ in loops] == [2, 2, 1, 1] and loops[2][1] < loops[0][1] and loops[3][1] < loops[1][1], loops


def test_triton_dq_kernel_with_an_fp8_dq_product_compiles_for_sm90():
    """The Triton dQ kernel under launch option fp8_dq (E4M3(dS·s_k/ρ) against K's bytes) compiles for sm_90 at the fast
    path's dQ launch with its dQ product as an FP8 wgmma, without spills."""
    out = _run("scripts/kernel_registers.py", "--kernels", "dq", "--configs", "4x3x32:bm64:pre:fp8dq", "--mma")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("dq ") and ":fp8dq" in line]
    assert len(at) == 1 and lines[at[0]].split()[-2:] == ["0", "0"], out.stdout
    mma = lines[at[0] + 1]  # its products (the default launch's row above it keeps a bf16 dQ product)
    assert "m64n128k32.f32.e4m3.e4m3" in mma and "bf16.bf16" not in mma, out.stdout


def test_dq_from_ds_pairs_compiles_for_sm90_unserialized_over_bf16():
    """`dq_from_ds.PAIRS` (two query blocks a program, one [256, D] accumulator; a module switch, off) compiles for
    sm_90 without spills, within one program's shared memory (227 KB), and the report says that ptxas serializes its
    wgmma over both buffers: C7513 over bf16 (non-wgmma instructions define a wgmma's input registers inside its
    pipeline stage), C7515 over fp8. Until session 37 the report matched C7511 / C7514 / C7515 only and called the
    bf16 form unserialized; the session-30 timing that found PAIRS 23% slower had it serialized."""
    out = _run("scripts/kernel_registers.py", "--kernels", "dq_from_ds_pairs")
    assert out.returncode == 0, out.stderr[-2000:]
    blocks = out.stdout.split("dq_from_ds_pairs ")[1:]
    assert len(blocks) == 6, out.stdout
    for block in blocks:
        head = block.splitlines()[0].split()
        assert head[-2:] == ["0", "0"], block
        assert int(block.split("shared memory: ")[1].split()[0]) <= 227 * 1024, block
        assert "serialized" in block, block
