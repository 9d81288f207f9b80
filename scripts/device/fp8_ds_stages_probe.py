"""Launch options ds_out with fp8_dq, stage by stage on the GPU: where the fp8 dS path's dQ departs from the reference
(session 27: the GPU tests found its dQ NaN / far off while dK and dV kept the default's bits).

    python scripts/device/fp8_ds_stages_probe.py [--b 1 --hq 2 --hkv 2 --seq 512]

Each stage against what it must equal, from one backward under each launch (the stages' inputs captured by wrapping
`attention_bwd`'s calls of `dq_row_scale_fast` and `dq_from_ds`):
  1. ρ from the one-launch kernel against `reference.dq_row_scale` over the same statistics; 1/ρ in the statistics'
     row `DS_IRHO_ROW`;
  2. the copies' K8ᵀ and KB8ᵀ against K's and its token-block copy's bytes transposed into `DS_KEY_ORDER`;
  3. the fp8 buffer's E4M3(dS·s_k/ρ)·ρ against the bf16 buffer's dS·s_k (the same values from the default ds_out),
     over the places the dK/dV kernel writes, with the first mismatching places;
  4. `dq_from_ds` over the captured fp8 buffer against its sums in PyTorch (`tests/test_dq_from_ds.py`'s), and
     over a buffer packed on the host.
Needs CUDA (sm_90)."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # attention_saved, test_dq_from_ds: the tests' layouts and sums
from attention_saved import backward_args  # noqa: E402
from flamia_kernels import AttentionSpec, attention_bwd, reference  # noqa: E402
from flamia_kernels.attention_bwd_gluon import BN, DS_IRHO_ROW  # noqa: E402
from flamia_kernels.dq_from_ds import QB  # noqa: E402
from test_dq_from_ds import _pack, _want, key_order  # noqa: E402


def unpack(buf: torch.Tensor, b: int, hq: int, seq: int) -> torch.Tensor:
    """The dense [B, Hq, S, S] (queries, keys) fp32 of a dS buffer (`_pack`'s inverse); NaN where no tile lies."""
    fp8 = buf.dtype == torch.float8_e4m3fn
    flat = buf.reshape(-1).float() if not fp8 else buf.view(torch.float8_e4m3fn).reshape(-1).float()
    out = torch.full((b * hq, seq, seq), float("nan"), device=buf.device)
    order = key_order(BN).flatten().to(buf.device)
    i = 0
    for bh in range(b * hq):
        for qb in range(seq // QB):
            for kb in range((qb + 1) * QB // BN):
                t = flat[i:i + QB * BN]
                i += QB * BN
                if fp8:  # [QB queries, BN keys in key order]
                    tile = torch.empty(QB, BN, device=buf.device)
                    tile[:, order] = t.view(QB, BN)
                else:  # [BN keys, QB queries]
                    tile = t.view(BN, QB).t()
                out[bh, qb * QB:(qb + 1) * QB, kb * BN:(kb + 1) * BN] = tile
    return out.view(b, hq, seq, seq)


def capture(args, config: dict) -> dict:
    """One backward under `config`, the inputs of its dq_row_scale_fast and dq_from_ds calls cloned."""
    got: dict = {}
    orig_rho, orig_dq = attention_bwd.dq_row_scale_fast, attention_bwd.dq_from_ds

    def rho_spy(do, k, v, stats, irho_row, causal=True, do_l1=None):
        rho = orig_rho(do, k, v, stats, irho_row, causal, do_l1=do_l1)
        got.update(do=do, k=k, v=v, stats=stats.clone(), rho=rho.clone())
        return rho

    def dq_spy(ds, kbf, kbbf, b, hq, seq, sm_scale, heads=None, out=None, rho=None):
        got.update(ds=ds.clone(), kbf=kbf.clone(), kbbf=kbbf.clone(), heads=heads, rho_dq=rho)
        return orig_dq(ds, kbf, kbbf, b, hq, seq, sm_scale, heads=heads, out=out, rho=rho)

    attention_bwd.dq_row_scale_fast, attention_bwd.dq_from_ds = rho_spy, dq_spy
    try:
        got["grads"] = attention_bwd.backward(*args, config=config)
    finally:
        attention_bwd.dq_row_scale_fast, attention_bwd.dq_from_ds = orig_rho, orig_dq
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return got


def rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--hq", type=int, default=2)
    ap.add_argument("--hkv", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--device", default="cuda", help="cuda (the kernels' run); cpu only with stand-in kernels, to "
                    "check this script")
    a = ap.parse_args(argv)
    b, hq, hkv, seq = a.b, a.hq, a.hkv, a.seq
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    print(f"{name}, torch {torch.__version__}; B={b} Hq={hq} Hkv={hkv} S={seq}", flush=True)
    spec = AttentionSpec.parse("fp8-bf16dq")  # bf16 dS by default: the fp8 buffer by launch options
    gen = torch.Generator(device=dev).manual_seed(67)
    mk = lambda h: torch.randn(b, h, seq, 128, device=dev, generator=gen).to(torch.bfloat16)  # noqa: E731
    q, k, v, do = mk(hq), mk(hkv), mk(hkv), mk(hq)
    sm = 1.0 / math.sqrt(128)
    args = backward_args(spec, q, k, v, do, safeguards=True, sm_scale=sm)
    base = attention_bwd.launch_config(128, spec.ds)
    f8 = capture(args, {**base, "fp8_dq": True, "ds_fp8": True})
    bf = capture(args, base)
    print(f"captured: fp8 {sorted(f8)}; bf16 {sorted(bf)}")

    # 1. ρ
    st = f8["stats"].view(b, hq, -1, seq)
    do_op, k_op, v_op = f8["do"], f8["k"], f8["v"]
    want_rho = reference.dq_row_scale(do_op, st[:, :, 3], st[:, :, 2], k_op.scale, k_op.off.per_token_scale(),
                                      v_op.scale, v_op.off.per_token_scale(), True)
    rho = f8["rho"]
    print(f"1. rho finite {rho.isfinite().all().item()}, range {rho.min().item():.3g}..{rho.max().item():.3g}; "
          f"equal to the reference {torch.equal(rho, want_rho)} (mismatches {(rho != want_rho).sum().item()}); "
          f"stats row {DS_IRHO_ROW} == 1/rho {torch.equal(st[:, :, DS_IRHO_ROW], 1.0 / rho)}; "
          f"rho passed to dq_from_ds is the same {f8['rho_dq'] is not None and torch.equal(f8['rho_dq'], rho)}")

    # 2. K8ᵀ and KB8ᵀ
    order = key_order(seq).flatten().to(q.device)
    for label, got, src in (("K8t", f8["kbf"], k_op.vals), ("KB8t", f8["kbbf"], k_op.off.vals)):
        want = src.transpose(-1, -2)[..., order].contiguous()
        eq = got.view(torch.uint8) == want.view(torch.uint8)
        bad = (~eq).nonzero()
        print(f"2. {label} {tuple(got.shape)} {got.dtype}: bytes equal {eq.all().item()} ({(~eq).sum().item()} differ)"
              f"{'; first at ' + str(bad[:6].tolist()) if len(bad) else ''}")

    # 3. the buffer
    y8 = unpack(f8["ds"], b, hq, seq) * rho[..., None]
    y16 = unpack(bf["ds"], b, hq, seq)
    causal = torch.arange(seq, device=q.device)[None, :] <= torch.arange(seq, device=q.device)[:, None]
    written = y16.isfinite() & causal
    print(f"3. fp8 buffer: NaN at written causal places {(y8.isnan() & written).sum().item()} of "
          f"{written.sum().item()}; rel-L2 vs bf16 {rel(y8[written].nan_to_num(), y16[written]):.3e}")
    scale = y16[written].abs().max()
    off = (y8 - y16).abs() > 0.07 * y16.abs() + 1e-3 * scale
    off &= written
    bad = off.nonzero()
    print(f"   places beyond E4M3's rounding: {off.sum().item()}; first {bad[:8].tolist()}")
    for i, h, qi, kj in bad[:4].tolist():
        got, want = y8[i, h, qi, kj].item(), y16[i, h, qi, kj].item()
        near = ((y16[i, h, qi] - got).abs() < 1e-3 * scale).nonzero().flatten()[:6].tolist()
        print(f"   b {i} h {h} q {qi} k {kj}: fp8·rho {got:.4g} bf16 {want:.4g}; keys of the row whose bf16 is near "
              f"it {near}")

    # 4. dq_from_ds over the captured buffer and over a host-packed one
    from flamia_kernels.dq_from_ds import dq_from_ds
    y8raw = unpack(f8["ds"], b, hq, seq).cpu()
    y8raw = torch.where(causal.cpu(), y8raw.nan_to_num(0.0), 0.0)
    k8 = k_op.vals.float().cpu().to(torch.bfloat16)
    kb8 = k_op.off.vals.float().cpu().to(torch.bfloat16)
    want = _want(y8raw * rho.cpu()[..., None], k8, kb8, sm)
    got = dq_from_ds(f8["ds"], f8["kbf"], f8["kbbf"], b, hq, seq, sm, rho=rho)
    print(f"4. dq_from_ds over the captured buffer: finite {got.isfinite().all().item()}; rel-L2 vs its sums "
          f"{rel(got.cpu(), want):.3e}; the backward's dQ vs the same {rel(f8['grads'][0].cpu(), want):.3e}")
    packed = _pack(y8raw.to(torch.float8_e4m3fn).float(), torch.float8_e4m3fn).to(dev)
    got2 = dq_from_ds(packed, f8["kbf"], f8["kbbf"], b, hq, seq, sm, rho=rho)
    print(f"   over a host-packed buffer of the same values: rel-L2 {rel(got2.cpu(), want):.3e}")


if __name__ == "__main__":
    main()
