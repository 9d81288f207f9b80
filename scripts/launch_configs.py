"""The launch-config syntax the kernel scripts share (scripts/bench_attention.py's --fwd-configs /
--bwd-configs, scripts/kernel_registers.py's --configs). Imports nothing of the kernels, so a
script may parse its arguments before it decides how the kernels are built (`launch_overrides`
imports them when it runs).

    WARPSxSTAGES[xSUB] then any of
      :fresh   forward: a fresh P·V product per tile (CHAIN off)
      :bptr    forward: block-pointer K/V loads off the diagonal (BPTR)
      :bm64    forward, and the backward's dQ kernel: programs of 64 query rows (bm = 64), half the tile
      :fuseq   forward: the kernel quantizes Q itself (fuse_q; fp8 qk, safeguards on; the Gluon kernel's default)
      :qpass   forward: Q through the pre-pass (fuse_q off)
      :keyorder / :porder   forward: V's token-block copy in key order, or in P's register order where the Gluon
               kernel runs (p_order; `attention_fwd.plan`; the default is `attention_fwd_gluon.P_ORDER`)
      :refillqk / :refillpv   forward, the Gluon kernel's chained loop: a ring stage refilled under the next QKᵀ or
               after its P·V (refill_qk; `attention_fwd_gluon.REFILL_UNDER_QK`)
      :chunk0 / :chunk4 / :chunk8 / :chunk16   forward, the Gluon kernel: programs launched head after head, or
               longest rows first across groups of 4 / 8 / 16 heads (head_chunk; `attention_fwd_gluon.HEAD_CHUNK`)
      :pdl / :nopdl   forward, the Gluon kernel: launched as a programmatic dependent of the key-sides pass, or not
               (pdl; `attention_fwd_gluon.PDL`)
      :halfdiag / :fulldiag   forward, the Gluon kernel's chained variant: the diagonal tile over the first half of
               its keys where the program's rows start their key block, or always whole (half_diag;
               `attention_fwd_gluon.HALF_DIAG`)
      :keepq   forward with the fused Q: its bytes written even where nothing will be differentiated (keep_q)
      :gluon   forward: the sm_90 Gluon kernel where it applies (attention_fwd_gluon; 4 warps, its ring's
               stages follow the variant, WARPSxSTAGES then only sets the Triton kernel's launch for the
               other cases); :chain (its default) one accumulator through the P·V products, 168 registers,
               three programs per SM; :pipe2 / :pipe1 / :pipe0 fresh P·V products, with the next QKᵀ, the
               previous P·V or nothing in flight during the softmax; :ws the warp-specialized kernel
               (attention_fwd_ws: a TMA producer warp, two consumer warpgroups of 64 rows), :pp / :nopp with or
               without (its default) the ping-pong between the consumers, :ws2 / :ws4 its ring at 2 / 4 stages
               (default 3)
      :atomic / :kernel   backward: dQ summed atomically in the dK/dV kernel, or its own kernel
      :half    backward: dK/dV programs of 64 keys (bn = 64)
      :pre     backward: read the per-row copies of Q, K and V (pre; fp8 operands)
      :late    backward: issue dP after the softmax work instead of before it (dp_early off)
      :dkdv / :dq         backward: run one kernel only
      :gluon   backward too: the sm_90 Gluon dK/dV kernel where it applies (attention_bwd_gluon; the fast
               path's pre / half / x32 launch); :wsdkdv that kernel warp-specialized (attention_dkdv_ws: a
               TMA producer warp); :gluondq / :gluondq32 its dQ kernel likewise, on key sub-tiles of 64 / 32;
               :fp8dk that kernel's dK product in FP8, :fp8dq the dQ kernel's dQ product (probes:
               attention_bwd.backward's fp8_dk, fp8_dq), :dsfp8 with :fp8dq the dS buffer in E4M3 (ds_fp8);
               :dqhigh (the fast path's default) / :dqside the dQ kernel on a side stream of a higher / the same
               priority, beside the dK/dV kernel; :dqserial both kernels on the caller's stream
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

_FLAGS = {"fresh": ("CHAIN", False), "bptr": ("BPTR", True), "bm64": ("bm", 64), "fuseq": ("fuse_q", True),
          "qpass": ("fuse_q", False), "keyorder": ("p_order", False), "porder": ("p_order", True),
          "refillqk": ("refill_qk", True), "refillpv": ("refill_qk", False),
          "chunk0": ("head_chunk", 0), "chunk4": ("head_chunk", 4), "chunk8": ("head_chunk", 8),
          "chunk16": ("head_chunk", 16), "pdl": ("pdl", True), "nopdl": ("pdl", False), "keepq": ("keep_q", True),
          "halfdiag": ("half_diag", True), "fulldiag": ("half_diag", False),
          "gluon": ("gluon", True), "pipe0": ("pipe", 0), "pipe1": ("pipe", 1),
          "pipe2": ("pipe", 2), "chain": ("pipe", 3), "ws": ("pipe", 4),
          "pp": ("pingpong", True), "nopp": ("pingpong", False), "ws2": ("gluon_stages", 2), "ws4": ("gluon_stages", 4),
          "wsdkdv": ("ws_dkdv", True), "gluondq": ("gluon_dq", 64),
          "gluondq32": ("gluon_dq", 32), "fp8dk": ("fp8_dk", True), "fp8dq": ("fp8_dq", True),
          "dsfp8": ("ds_fp8", True),
          "dqserial": ("dq_stream", None), "dqside": ("dq_stream", "same"), "dqhigh": ("dq_stream", "high"),
          "half": ("bn", 64), "pre": ("pre", True), "late": ("dp_early", False),
          "atomic": ("dq", "atomic"),
          "kernel": ("dq", "kernel"), "dkdv": ("which", "dkdv"), "dq": ("which", "dq")}


def parse_config(text: str) -> dict:
    """"8x2x32:atomic" -> {"num_warps": 8, "num_stages": 2, "sub": 32, "dq": "atomic"}."""
    spec, *extras = text.split(":")
    parts = spec.split("x")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"config {text!r}: WARPSxSTAGES[xSUB][:option...], e.g. 8x2x32")
    cfg = {"num_warps": int(parts[0]), "num_stages": int(parts[1])}
    if len(parts) == 3:
        cfg["sub"] = int(parts[2])
    for extra in extras:
        if extra not in _FLAGS:
            raise argparse.ArgumentTypeError(
                f"config {text!r}: unknown part {extra!r}; allowed {', '.join(_FLAGS)}")
        key, value = _FLAGS[extra]
        cfg[key] = value
    return cfg


def parse_configs(text: str) -> list[dict]:
    """Comma-separated configs, e.g. "8x3,8x3:bptr,8x2x32:half:atomic"."""
    return [parse_config(part) for part in text.split(",") if part]


def load_launch(path: str) -> dict:
    """A launch file (scripts/pick_launch.py writes it; bench_attention's --launch, bench_train's
    --attention-launch): a JSON object with optional "fwd" and "bwd" objects of launch options."""
    try:
        launch = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise argparse.ArgumentTypeError(f"launch file {path}: {err}") from err
    if not isinstance(launch, dict) or set(launch) - {"fwd", "bwd"} or \
            not all(isinstance(v, dict) for v in launch.values()):
        raise argparse.ArgumentTypeError(f"launch file {path}: want {{\"fwd\": {{...}}, \"bwd\": {{...}}}}, "
                                         f"got {launch!r:.200}")
    return launch


@contextlib.contextmanager
def launch_overrides(launch: dict | None):
    """Run the FLAMIA kernels with `launch` on top of their default launch configs
    (attention_fwd / attention_bwd.launch_config), in this process, until the block ends. The
    options were swept on the fp8 fast path, so they apply where it runs: the forward of the
    non-emulated specs and the backward with dS in bf16 (every preset); other specs keep the defaults."""
    from flamia_kernels import attention_bwd, attention_fwd

    if not launch:
        yield
        return
    fwd, bwd = attention_fwd.launch_config, attention_bwd.launch_config
    attention_fwd.launch_config = lambda d, emulated: fwd(d, emulated) if emulated else {
        **fwd(d, emulated), **launch.get("fwd", {})}
    attention_bwd.launch_config = lambda d, ds, emulated=False: (
        {**bwd(d, ds, emulated), **launch.get("bwd", {})} if ds == "bf16" else bwd(d, ds, emulated))
    try:
        yield
    finally:
        attention_fwd.launch_config, attention_bwd.launch_config = fwd, bwd
