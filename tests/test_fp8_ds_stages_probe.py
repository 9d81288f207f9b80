"""scripts/device/fp8_ds_stages_probe.py, the GPU probe of the fp8 dS path stage by stage, run on the CPU with a
stand-in for the sm_90 ws dK/dV kernel (it fills the dS buffer from a fixed causal Y as the kernel would: bf16 Y, or
E4M3(Y/ρ) with 1/ρ from the statistics' row DS_IRHO_ROW) and the rest real (the copies pass, ρ's kernel, `dq_from_ds`,
under the interpreter): every stage reads right, and a buffer whose keys are shuffled is caught at stage 3 — so one
device call's output can be trusted to say where the path breaks."""
import sys
from pathlib import Path

import pytest
import torch
from attention_saved import ws_ds_out_launch
from flamia_kernels import attention_bwd, attention_bwd_gluon, attention_dkdv_ws
from test_dq_from_ds import _pack

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "device"))
import fp8_ds_stages_probe as probe  # noqa: E402


def _stand_in(shuffle: bool):
    def dkdv(q, k, v, do, copies, stats, tau, sm_scale, fp8_dk=None, ds_out=None, heads=None, out=None,
             fold_k=False, fold_v=False):
        b, hq, seq, _ = q.vals.shape
        gen = torch.Generator().manual_seed(5)
        y = torch.randn(b, hq, seq, seq, generator=gen) * 0.01
        y = torch.where(torch.arange(seq)[None, :] <= torch.arange(seq)[:, None], y, 0.0)
        if ds_out.dtype == torch.float8_e4m3fn:
            irho = stats.view(b, hq, -1, seq)[:, :, attention_bwd_gluon.DS_IRHO_ROW]
            tiles = _pack((y * irho[..., None]).to(torch.float8_e4m3fn).float(), torch.float8_e4m3fn)
            if shuffle:  # the keys of every tile out of place
                tiles = tiles.view(-1, 64)[:, torch.randperm(64, generator=gen)]
        else:
            tiles = _pack(y, torch.bfloat16)
        ds_out.view(-1)[:tiles.numel()].copy_(tiles.reshape(-1))
        return out
    return dkdv


@pytest.mark.parametrize("shuffle", [False, True])
def test_stages_probe_reads_each_stage(monkeypatch, capsys, shuffle):
    monkeypatch.setattr(attention_bwd_gluon, "eligible", lambda *a, **kw: None)
    monkeypatch.setattr(attention_dkdv_ws, "dkdv", _stand_in(shuffle))
    monkeypatch.setattr(attention_bwd, "launch_config", lambda d, ds, emulated=False: ws_ds_out_launch())
    probe.main(["--device", "cpu", "--seq", "256", "--hq", "2", "--hkv", "1"])
    out = capsys.readouterr().out
    assert "equal to the reference True (mismatches 0); stats row 5 == 1/rho True" in out, out
    assert "K8t (1, 1, 128, 256) torch.float8_e4m3fn: bytes equal True" in out, out
    assert "KB8t (1, 1, 128, 256) torch.float8_e4m3fn: bytes equal True" in out, out
    beyond = int(out.split("places beyond E4M3's rounding: ")[1].split(";")[0])
    assert (beyond > 1000) if shuffle else (beyond == 0), out
    host_packed = float(out.split("over a host-packed buffer of the same values: rel-L2 ")[1].split()[0])
    assert host_packed < 1e-2, out  # dq_from_ds against its sums: bf16's rounding of dQ
