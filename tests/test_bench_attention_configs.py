"""scripts/bench_attention.py's launch-config sweep syntax (what a profile run's --bwd-configs means)."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_attention import _configs, named_launch  # noqa: E402
from launch_configs import launch_overrides, load_launch  # noqa: E402
from pick_launch import best_per_kernel, launch_file  # noqa: E402


def test_configs_parse_every_part():
    assert _configs("8x3:bptr")[0]["BPTR"] is True
    assert _configs("8x2x32:half")[0]["bn"] == 64
    assert _configs("4x3x32:fp8dk:fp8dq")[0] == {"num_warps": 4, "num_stages": 3, "sub": 32, "fp8_dk": True,
                                                 "fp8_dq": True}
    assert _configs("8x3,4x2x32:atomic:dkdv,8x3:fresh,8x2x64:kernel") == [
        {"num_warps": 8, "num_stages": 3},
        {"num_warps": 4, "num_stages": 2, "sub": 32, "dq": "atomic", "which": "dkdv"},
        {"num_warps": 8, "num_stages": 3, "CHAIN": False},
        {"num_warps": 8, "num_stages": 2, "sub": 64, "dq": "kernel"},
    ]


def test_configs_name_an_unknown_part():
    allowed = ("allowed fresh, bptr, bm64, fuseq, qpass, keyorder, porder, refillqk, refillpv, chunk0, chunk4, "
               "chunk8, chunk16, pdl, nopdl, keepq, halfdiag, fulldiag, gluon, pipe0, pipe1, "
               "pipe2, chain, ws, pp, nopp, ws2, ws4, "
               "wsdkdv, gluondq, gluondq32, fp8dk, fp8dq, dsfp8, dqserial, dqside, dqhigh, half, pre, late, atomic")
    with pytest.raises(argparse.ArgumentTypeError, match=f"'8x2:fast'.*'fast'.*{allowed}"):
        _configs("8x2:fast")


def test_configs_forward_v_copy_order_and_ring_refill():
    assert _configs("4x2:gluon:keyorder:refillqk")[0] == {"num_warps": 4, "num_stages": 2, "gluon": True,
                                                          "p_order": False, "refill_qk": True}
    assert _configs("4x2:porder:refillpv")[0] == {"num_warps": 4, "num_stages": 2, "p_order": True, "refill_qk": False}


def test_configs_forward_launch_order_dependent_launch_and_diagonal():
    assert _configs("4x2:gluon:chunk16:nopdl:fulldiag:keepq")[0] == {
        "num_warps": 4, "num_stages": 2, "gluon": True, "head_chunk": 16, "pdl": False, "half_diag": False,
        "keep_q": True}
    assert _configs("4x2:chunk0:pdl:halfdiag")[0] == {"num_warps": 4, "num_stages": 2, "head_chunk": 0, "pdl": True,
                                                      "half_diag": True}


def test_configs_warp_specialized_forward():
    assert _configs("4x3:gluon:ws")[0] == {"num_warps": 4, "num_stages": 3, "gluon": True, "pipe": 4}
    assert _configs("4x3:gluon:ws:pp:ws4")[0] == {"num_warps": 4, "num_stages": 3, "gluon": True, "pipe": 4,
                                                  "pingpong": True, "gluon_stages": 4}


def test_configs_half_tile_rows():
    assert _configs("4x3:bm64")[0] == {"num_warps": 4, "num_stages": 3, "bm": 64}
    assert _configs("4x2x32:bm64:dq")[0] == {"num_warps": 4, "num_stages": 2, "sub": 32, "bm": 64, "which": "dq"}
    assert _configs("4x3:bm64:fuseq")[0] == {"num_warps": 4, "num_stages": 3, "bm": 64, "fuse_q": True}
    assert _configs("4x2x32:half:pre:dkdv")[0] == {"num_warps": 4, "num_stages": 2, "sub": 32, "bn": 64, "pre": True,
                                                   "which": "dkdv"}


def _row(kernel, cfg, ms, seq=8192):
    return {"kind": "profile", "name": f"x {cfg}", "S": seq, "ms": ms, "kernel": kernel, "config": cfg}


def test_pick_launch_keeps_the_baseline_unless_beaten_by_the_margin():
    rows = [
        _row(None, None, 2.0),  # a whole-stage row: not a per-kernel sweep
        _row("fwd", {"num_warps": 8, "num_stages": 3}, 1.95),
        _row("fwd", {"num_warps": 4, "num_stages": 3, "bm": 64}, 1.60),
        _row("fwd", {"num_warps": 4, "num_stages": 2, "bm": 64}, float("nan")),  # failed: never picked
        _row("dkdv", {"num_warps": 8, "num_stages": 2, "sub": 32, "which": "dkdv"}, 9.0),
        _row("dkdv", {"num_warps": 8, "num_stages": 3, "sub": 32, "which": "dkdv"}, 8.9),  # within 2%
        _row("dq", {"num_warps": 8, "num_stages": 2, "sub": 32, "which": "dq"}, 6.0),
        _row("dq", {"num_warps": 4, "num_stages": 3, "sub": 32, "bm": 64, "which": "dq"}, 4.5),
        _row("dq", {"num_warps": 4, "num_stages": 3, "sub": 32, "bm": 64, "which": "dq"}, 1.0, seq=16384),
    ]
    picks = best_per_kernel(rows, margin=0.02)
    assert picks["fwd"]["best"]["ms"] == 1.60 and picks["dkdv"]["best"]["ms"] == 9.0
    assert picks["dq"]["best"]["ms"] == 4.5  # the 16k row belongs to another shape
    assert launch_file(picks) == {
        "fwd": {"num_warps": 4, "num_stages": 3, "bm": 64},
        "bwd": {"num_warps": 8, "num_stages": 2, "sub": 32, "dq_warps": 4, "dq_stages": 3, "dq_sub": 32, "bm": 64},
    }


def test_launch_file_and_overrides(tmp_path):
    from flamia_kernels import attention_bwd, attention_fwd

    good = tmp_path / "launch.json"
    good.write_text('{"fwd": {"bm": 64}, "bwd": {"dq_sub": 64}}')
    launch = load_launch(str(good))
    before = attention_fwd.launch_config(128, False), attention_bwd.launch_config(128, "bf16")
    before_emulated, before_fp8_ds = attention_fwd.launch_config(128, True), attention_bwd.launch_config(128, "fp8")
    with launch_overrides(launch):
        assert attention_fwd.launch_config(128, False) == {**before[0], "bm": 64}
        assert attention_bwd.launch_config(128, "bf16") == {**before[1], "dq_sub": 64}
        # swept on the fp8 fast path: emulated forwards and scaled-dS backwards keep their defaults
        assert attention_fwd.launch_config(128, True) == before_emulated
        assert attention_bwd.launch_config(128, "fp8") == before_fp8_ds
    assert (attention_fwd.launch_config(128, False), attention_bwd.launch_config(128, "bf16")) == before
    bad = tmp_path / "bad.json"
    bad.write_text('{"forward": {}}')
    with pytest.raises(argparse.ArgumentTypeError, match="want .*fwd.*bwd"):
        load_launch(str(bad))
    with pytest.raises(argparse.ArgumentTypeError, match="missing.json"):
        load_launch(str(tmp_path / "missing.json"))


def test_ab_forward_variants_are_forward_launch_options():
    """scripts/ab_forward.py's variants: "default" adds nothing, "a+b" the flags' forward options."""
    from ab_forward import variant_launch

    assert variant_launch("default") == {}
    assert variant_launch("qpass") == {"fwd": {"fuse_q": False}}
    assert variant_launch("pipe2+qpass") == {"fwd": {"pipe": 2, "fuse_q": False}}
    with pytest.raises(SystemExit, match="unknown flag 'fast'"):
        variant_launch("pipe2+fast")


def test_launch_files_take_names(tmp_path):
    """--launch [NAME=]FILE, repeatable: each file's rows are tagged with its NAME ('launch' without one); an empty
    NAME or one with brackets (the row tag's delimiters) is refused, naming the argument."""
    path = tmp_path / "p.json"
    path.write_text('{"fwd": {"p_order": true}}')
    assert named_launch(f"porder={path}") == ("porder", {"fwd": {"p_order": True}})
    assert named_launch(str(path)) == ("launch", {"fwd": {"p_order": True}})
    odd = tmp_path / "a=b.json"  # a path with "=" in it is a path, not NAME=FILE
    odd.write_text('{"fwd": {}}')
    assert named_launch(str(odd)) == ("launch", {"fwd": {}})
    for bad in (f"={path}", f"a[b={path}"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME must be non-empty and without brackets"):
            named_launch(bad)


def test_profile_dim_allows_the_heads_the_bench_shapes_and_names_them_otherwise(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_attention.py"
    bad = subprocess.run([sys.executable, str(script), "--profile-dim", "96", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "--profile-dim" in bad.stderr and "96" in bad.stderr and "64, 128" in bad.stderr
