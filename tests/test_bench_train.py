"""scripts/bench_train.py: a CPU run of the grid (tiny model, bf16 + fp8, one context) and its report logic.

The grid runs as a subprocess, as a user runs it, without TRITON_INTERPRET: on the CPU fp8
attention then takes the reference path (the same math), which is all a smoke test needs.
The rest checks the pure parts in-process: kernel classification, bf16 ratios, the
regression diff against a recorded baseline, recipe aliases and the synthetic loader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flamia_train.data import prepare_default_corpus

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_train  # noqa: E402
import bench_train_report as report  # noqa: E402

SMOKE = ["--model", "tiny", "--recipes", "bf16", "fp8", "--contexts", "128", "--warmup", "2", "--steps", "2",
         "--profile-steps", "1", "--tokens-per-step", "128", "--micro-tokens", "128", "--device", "cpu",
         # a 2-layer tiny with the tokenizer's 512 vocab keeps the fp8 emulation on the CPU within seconds
         "--extra", "parallel.param_dtype=fp32", "model.n_layers=2", "model.vocab_size=512"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench_corpus") / "stdlib"
    prepare_default_corpus(out, vocab_size=512, max_corpus_mb=0.3, seed=0)
    return out


def _row(recipe: str, status: str = "ok", tps: float | None = 100.0, **kw) -> dict:
    return {"model": "tiny", "recipe": recipe, "context": "128", "seq_len": 128, "micro_batch": 1, "accum": 1,
            "status": status, "tokens_per_s": tps, **kw}


def test_grid_on_cpu_writes_table_json_and_regression(corpus, tmp_path):
    baseline = tmp_path / "baseline.json"
    old = {"tiny/bf16/128": _row("bf16", tps=1e9), "tiny/fp8/128": _row("fp8", status="OOM", tps=None),
           "tiny/bf16/2k": _row("bf16", context="2k", tps=5.0)}
    baseline.write_text(json.dumps({"rows": old}))
    out = tmp_path / "out"
    launch = tmp_path / "launch.json"  # kept in each row's setup (the CPU runs no FLAMIA kernel launch)
    launch.write_text('{"fwd": {"bm": 64}, "bwd": {"bm": 64}}')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "scripts/bench_train.py", *SMOKE, "--corpus", str(corpus), "--out", str(out),
                           "--baseline", str(baseline), "--record", "--attention-launch", str(launch)], cwd=ROOT,
                          env={**env, "OMP_NUM_THREADS": "2"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    result = json.loads((out / "bench_train.json").read_text())
    assert result["meta"]["model"] == "tiny" and result["meta"]["device"] == "cpu"
    rows = result["rows"]
    assert [(r["recipe"], r["context"], r["status"]) for r in rows] == [("bf16", "128", "ok"), ("fp8", "128", "ok")]
    bf16, fp8 = rows
    for r in rows:
        assert r["tokens_per_s"] > 0 and r["step_ms"] > 0 and r["peak_mem_gb"] > 0
        assert (r["micro_batch"], r["accum"]) == (1, 1)
        assert r["mfu"] is None  # no peak FLOP/s for a CPU: n/a, never a made-up number
        assert set(r["breakdown"]["ms"]) == set(report.CATEGORIES)
        assert r["setup"]["attention_launch"] == {"fwd": {"bm": 64}, "bwd": {"bm": 64}}
        assert sum(r["breakdown"]["ms"].values()) > 0
    assert bf16["vs_bf16"] == 1.0
    assert fp8["vs_bf16"] == pytest.approx(fp8["tokens_per_s"] / bf16["tokens_per_s"], rel=1e-3)
    # regression: bf16 against a recorded 1e9 tok/s, fp8 against a recorded OOM
    assert bf16["previous"] == 1e9 and bf16["change"] == pytest.approx(bf16["tokens_per_s"] / 1e9 - 1, abs=1e-4)
    assert fp8["previous"] == "OOM" and fp8["change"] is None
    assert "vs last=-100.0% (was 1,000,000,000" in proc.stdout and "vs last=was OOM" in proc.stdout

    table = (out / "bench_train.md").read_text()
    assert table.startswith("# bench_train: tiny on cpu") and "Command: `python scripts/bench_train.py" in table
    lines = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    assert lines[0] == "| " + " | ".join(report.COLUMNS) + " |" and len(lines) == 3
    assert lines[1].startswith("| bf16 | 128 | 1x1 |") and lines[2].startswith("| fp8 | 128 | 1x1 |")

    recorded = json.loads(baseline.read_text())["rows"]
    assert recorded["tiny/bf16/128"]["tokens_per_s"] == bf16["tokens_per_s"]
    assert recorded["tiny/fp8/128"]["status"] == "ok" and recorded["tiny/bf16/2k"]["tokens_per_s"] == 5.0
    assert recorded["tiny/bf16/128"]["commit"] and recorded["tiny/bf16/128"]["setup"]["extra"][1] == "model.n_layers=2"


@pytest.mark.parametrize("name, category", [
    ("triton_poi_fused_add_0", "other"),
    ("_fwd_kernel", "attn_fwd"),  # FLAMIA Triton forward
    ("_dkdv_kernel", "attn_bwd"),
    ("_dq_kernel", "attn_bwd"),
    ("_fp8_tokens_kernel", "attn_quant"),
    ("_fp8_key_side_kernel", "attn_quant"),
    ("_fp8_tokens_delta_kernel", "attn_quant"),
    ("_fp8_operand_kernel", "linears"),  # the linears' FP8 quantizer
    ("_row_amax_kernel", "linears"),  # its split path for long rowwise rows (wgrad's dYᵀ, Xᵀ)
    ("_row_bytes_kernel", "linears"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", "attn_fwd"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_4_64x128x128_kernel0_0", "attn_bwd"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>", "attn_bwd"),
    ("fmha_cutlassB_bf16_aligned_64x64_k128_sm80", "attn_bwd"),
    ("nvjet_tst_192x192_64x4_1x2_h_bz_coopB_NTT", "linears"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "linears"),
    ("void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<cutlass::gemm::kernel", "linears"),
    ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>", "other"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "other"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attn_bwd"),
    ("aten::mm", "linears"),
])
def test_kernel_names_are_classified(name, category):
    assert report.classify(name) == category


def test_breakdown_is_per_step_with_busy_fraction_and_top_other():
    split = report.breakdown({"_fwd_kernel": 4000.0, "nvjet_x": 10000.0, "elementwise_a": 2000.0,
                              "elementwise_b": 6000.0}, steps=2, wall_ms=12.0, top=1)
    assert split["ms"] == {"attn_fwd": 2.0, "attn_bwd": 0.0, "attn_quant": 0.0, "linears": 5.0, "other": 4.0}
    assert split["busy"] == pytest.approx(11 / 12, abs=1e-3)
    assert split["top_other"] == [["elementwise_b", 3.0]]


def test_ratios_compare_and_record():
    rows = [_row("bf16", tps=100.0), _row("fp8", tps=150.0), _row("flamia", status="OOM", tps=None),
            _row("fp8", tps=80.0, context="2k")]
    report.add_bf16_ratios(rows)
    assert [r["vs_bf16"] for r in rows] == [1.0, 1.5, None, None]  # no bf16 row at 2k: no ratio
    baseline = {"rows": {"tiny/fp8/128": {**_row("fp8", tps=120.0), "setup": {"data": "corpus"}},
                         "tiny/flamia/128": _row("flamia", tps=90.0)}}
    report.compare(rows, baseline)
    assert [r["change"] for r in rows] == [None, 0.25, None, None]
    assert [r["previous"] for r in rows] == [None, 120.0, 90.0, None]
    assert rows[1]["setup_differs"] and "other setup" in report.console_line(rows[1])
    assert report.table_cells(rows[2])[3] == "OOM" and report.table_cells(rows[2])[-1] == "was 90"
    new = report.record(rows, baseline, {"commit": "abc", "date": "2026-01-01"})
    assert set(new["rows"]) == {"tiny/bf16/128", "tiny/fp8/128", "tiny/flamia/128", "tiny/fp8/2k"}
    assert new["rows"]["tiny/fp8/128"]["tokens_per_s"] == 150.0 and new["rows"]["tiny/fp8/128"]["commit"] == "abc"
    assert new["rows"]["tiny/flamia/128"]["status"] == "OOM"
    assert baseline["rows"]["tiny/fp8/128"]["tokens_per_s"] == 120.0  # the old baseline is not edited


def test_missing_baseline_is_empty(tmp_path):
    assert report.load_baseline(tmp_path / "none.json") == {"rows": {}}


def test_recipe_aliases_resolve_to_the_intended_policy(tmp_path):
    args = bench_train.parse_args(["--model", "tiny", "--corpus", str(tmp_path)])
    for recipe, attention, linear in (("fp8-linears", "bf16", "fp8"), ("flamia-attention", "fp8", "bf16"),
                                      ("bf16", "bf16", "bf16"), ("x:fp8 precision.default.linear=bf16", "fp8", "bf16")):
        label, cfg, plan, micro, accum = bench_train.compose_row(args, recipe, 2048, str(tmp_path / "run"))
        policy = plan.policy_at(0)
        assert cfg.precision.name == label == recipe.partition(":")[0]
        assert {s.name for s in policy.attention} == {attention}
        assert {d["mlp_up"].name for d in policy.linears} == {linear}
        assert (micro, accum) == (8, 2)
    with pytest.raises(SystemExit, match="unknown base 'fp9'"):
        bench_train.recipe_overrides("fp9")


def test_contexts_and_batch_shapes():
    assert [bench_train.parse_context(c) for c in ("2k", "8K", "32k", "384")] == [2048, 8192, 32768, 384]
    assert bench_train.context_label(32768) == "32k" and bench_train.context_label(384) == "384"
    shapes = [bench_train.batch_shape(s, 32768, 16384) for s in (2048, 8192, 32768)]
    assert shapes == [(8, 2), (2, 2), (1, 1)]  # tokens per step constant across contexts
    with pytest.raises(SystemExit, match="not a multiple"):
        bench_train.batch_shape(3072, 32768, 16384)


def test_synthetic_loader_matches_the_packed_loader_interface():
    loader = bench_train.SyntheticLoader(vocab_size=50, seq_len=16, micro_batch=3, seed=7)
    state = loader.state_dict()
    inputs, targets = loader.next_batch()
    assert inputs.shape == targets.shape == (3, 16) and inputs.dtype == torch.long
    assert torch.equal(inputs[:, 1:], targets[:, :-1]) and int(inputs.max()) < 50
    loader.load_state_dict(state)
    assert torch.equal(loader.next_batch()[0], inputs)  # resumable, deterministic
    loader.set_seq_len(32, 1)
    inputs, _, doc_ids = loader.next_batch(doc_ids=True)
    assert inputs.shape == doc_ids.shape == (1, 32) and not doc_ids.any()


def test_kernel_times_skip_cpu_ops_and_user_annotations():
    """A record_function range shows up on the device timeline too; its time is its kernels', so
    counting it would count them twice (the Optimizer.step range did, before session 4)."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def avg(key, device, us, annotation=False):
        return SimpleNamespace(key=key, device_type=device, self_device_time_total=us, self_cpu_time_total=us,
                               is_user_annotation=annotation)

    events = [avg("nvjet_tst_192x192", DeviceType.CUDA, 100.0),
              avg("Optimizer.step#AdamW.step", DeviceType.CUDA, 50.0, annotation=True),
              avg("aten::mm", DeviceType.CPU, 70.0),
              avg("multi_tensor_apply_kernel", DeviceType.CUDA, 40.0)]
    prof = SimpleNamespace(key_averages=lambda: events)
    assert report.kernel_times_us(prof, on_cuda=True) == {"nvjet_tst_192x192": 100.0,
                                                           "multi_tensor_apply_kernel": 40.0}
    assert report.kernel_times_us(prof, on_cuda=False)["aten::mm"] == 70.0
