"""Precision recipes (issue 4): resolution of every override form, errors, schedule, telemetry, CLI runs.

Unit tests compose configs with Hydra's compose API and resolve them; the end-to-end tests
run `flamia-train` on the tiny model (tests/test_train_e2e.py's `cli`). Every preset's
100-step run is `slow`; the default tier trains two presets for 20 steps.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_train_e2e as e2e
import torch
from hydra import compose, initialize_config_dir
from test_train_e2e import assert_same_weights, cli, exported, train_losses

from flamia_train.config import register_configs, to_dataclass, validate
from flamia_train.errors import ConfigError
from flamia_train.model import GPT, ModelConfig
from flamia_train.precision import LINEAR_OPS, resolve_recipe
from flamia_train.precision_schedule import PrecisionController, build_plan, load_recipe, recipe_names
from flamia_train.telemetry import PrecisionTelemetry, flops_by_format, gemm_format

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS = ["bf16", "fp8", "fp8-block", "mxfp8", "nvfp4", "flamia"]
register_configs()
corpus = e2e.corpus  # the session fixture: a small prepared slice of the embedded corpus


def load(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return to_dataclass(compose(config_name="train", overrides=list(overrides)))


def table(*overrides: str, n_layers: int = 6) -> list[list[str]]:
    """Resolved rows (layer, attention, qkv, out, mlp_up, mlp_down) + the lm_head row."""
    cfg = load(f"model.n_layers={n_layers}", *overrides)
    return resolve_recipe(cfg.precision, n_layers).rows()


def column(rows, op: str) -> list[str]:
    idx = ["layer", "attention", *LINEAR_OPS].index(op)
    return [r[idx] for r in rows[:-1]]


# ---------------------------------------------------------------- presets and override forms

def test_every_preset_is_shipped_and_resolves():
    assert recipe_names() == sorted(PRESETS)
    for name in PRESETS:
        rows = table(f"precision={name}")
        assert rows[-1][:3] == ["lm_head", "-", "bf16"], name  # every preset keeps the LM head in bf16


def test_preset_tables():
    fp8 = table("precision=fp8")
    assert all(r[1:] == ["fp8"] * 5 for r in fp8[:-1])
    assert set(column(table("precision=fp8-block"), "mlp_up")) == {"fp8-block"}
    nvfp4 = table("precision=nvfp4")
    assert column(nvfp4, "attention") == ["bf16"] + ["nvfp4"] * 4 + ["bf16"]  # first and last layer in bf16
    assert column(nvfp4, "mlp_down") == ["bf16"] + ["nvfp4"] * 4 + ["bf16"]
    flamia = table("precision=flamia")
    assert column(flamia, "attention") == ["bf16"] + ["fp8-bf16dq"] * 4 + ["bf16"]  # first and last layer in bf16
    assert flamia[2][4] == "fprop=nvfp4,dgrad=nvfp4,wgrad=fp8" and flamia[2][2] == "fp8"
    assert column(flamia, "mlp_down") == ["bf16"] + ["fprop=nvfp4,dgrad=nvfp4,wgrad=fp8"] * 4 + ["bf16"]


def test_default_attention_override_leaves_linears():
    rows = table("precision.default.attention=fp8")
    assert column(rows, "attention") == ["fp8"] * 6 and column(rows, "qkv") == ["bf16"] * 6


def test_layer_range_to_bf16_sets_every_op():
    rows = table("precision=fp8", "+precision.layers.last2=bf16")
    assert [r[1:] for r in rows[4:6]] == [["bf16"] * 5] * 2
    assert rows[3][1:] == ["fp8"] * 5


def test_one_gemm_of_one_op_in_a_range():
    rows = table("precision=fp8", "+precision.layers.L0_3.mlp_down.wgrad=bf16")
    assert column(rows, "mlp_down") == ["fprop=fp8,dgrad=fp8,wgrad=bf16"] * 4 + ["fp8"] * 2
    assert column(rows, "mlp_up") == ["fp8"] * 6 and column(rows, "attention") == ["fp8"] * 6


def test_op_mapping_attention_operand_and_later_wins():
    rows = table("precision=fp8", "+precision.layers.L1={qkv: bf16, attention: nvfp4}",
                 "+precision.layers.first2=mxfp8", "+precision.layers.Lm1.attention={ds: fp8, dsk: bf16}",
                 "+precision.layers.L3.attention.dsk=bf16", "+precision.layers.L4={attention: fp8-bf16dq}")
    assert rows[0][1:] == ["mxfp8"] * 5 and rows[1][1:] == ["mxfp8"] * 5  # first2 came after L1
    assert rows[5][1] == "qk=fp8,pv=fp8,do=fp8,ds=fp8" and rows[5][2] == "fp8"
    assert rows[3][1] == rows[4][1] == "fp8-bf16dq" and rows[2][1] == "fp8"  # fp8 with its dQ product in bf16


def test_attention_only_and_linear_only_strings():
    rows = table("+precision.layers.L2=nvfp4-fp8", "+precision.layers.L3=fp8-block")
    assert rows[2][1:3] == ["nvfp4-fp8", "bf16"] and rows[3][1:3] == ["bf16", "fp8-block"]


def test_yaml_spellings_and_default_ops():
    cfg = load_recipe("bf16")
    cfg.default.linear, cfg.default.mlp_up, cfg.default.lm_head = "fp8", {"fprop": "nvfp4", "wgrad": "fp8"}, "mxfp8"
    cfg.layers = {"0-1": "bf16", "-1": {"linear": "nvfp4"}, "last:34%": {"out": "fprop=fp8,dgrad=bf16,wgrad=bf16"}}
    rows = resolve_recipe(cfg, 6).rows()
    assert rows[0][1:] == ["bf16"] * 5 and rows[2][3:] == ["fp8", "fprop=nvfp4,dgrad=bf16,wgrad=fp8", "fp8"]
    assert rows[5][2:] == ["nvfp4", "fprop=fp8,dgrad=bf16,wgrad=bf16", "nvfp4", "nvfp4"]
    assert column(rows, "out") == ["bf16", "bf16", "fp8"] + ["fprop=fp8,dgrad=bf16,wgrad=bf16"] * 3  # ceil(34% of 6)
    assert rows[-1][2] == "mxfp8"


BAD = [
    (["+precision.layers.L1.mlp_sideways=fp8"], "precision.layers.L1.mlp_sideways"),  # unknown op
    (["+precision.layers.L1=fp9"], "precision.layers.L1"),  # unknown format
    (["+precision.layers.L1.qkv.wgrad=fp9"], "precision.layers.L1.qkv.wgrad"),
    (["+precision.layers.L1.qkv.xgrad=fp8"], "precision.layers.L1.qkv.xgrad"),  # unknown GEMM
    (["+precision.layers.L1.attention.qq=fp8"], "precision.layers.L1.attention.qq"),
    (["+precision.layers.L1.attention.dsk=nvfp4"], "precision.layers.L1.attention.dsk"),  # dsk: bf16 or fp8
    # fp8's FP8 dQ product (dsk=fp8) needs ds=bf16: the override must say dsk=bf16 too
    (["precision=fp8", "+precision.layers.L1.attention.ds=fp8"], "precision.layers.L1"),
    (["precision.default.mlp_up=fp9"], "precision.default.mlp_up"),
    (["+precision.layers.middle=bf16"], "precision.layers.middle"),  # unknown selector
    (["+precision.layers.L6=bf16"], "precision.layers.L6"),  # a layer that does not exist
    (["+precision.layers.last7=bf16"], "precision.layers.last7"),
    (["+precision.layers.L1.lm_head=fp8"], "precision.layers.L1.lm_head"),
    (["+precision.layers.L1={linear: fp8, mlp_down: bf16}"], "precision.layers.L1"),  # contradiction in one entry
    (["precision=nvfp4", "+precision.layers.first:1=fp8"], None),  # Hydra's grammar: no ':' in keys
]


@pytest.mark.parametrize("overrides,key", BAD, ids=[str(o) for o, _ in BAD])
def test_bad_recipes_name_the_key(overrides, key, tmp_path):
    if key is None:
        with pytest.raises(Exception, match="first:1"):
            load(*overrides)
        return
    cfg = load("model.n_layers=6", f"run_dir={tmp_path}/run", *overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.key == key, str(err.value)


def test_one_selector_in_two_spellings_with_different_values_is_a_contradiction():
    cfg = load_recipe("fp8")
    cfg.layers = {"last:2": "bf16", "last2": {"mlp_down": {"wgrad": "fp8", "dgrad": "bf16"}}}
    with pytest.raises(ConfigError, match="contradiction") as err:
        resolve_recipe(cfg, 6)
    assert err.value.key == "precision.layers.last2" and "mlp_down.wgrad" in str(err.value)
    cfg.layers = {"last:2": "bf16", "last2": {"mlp_down": {"wgrad": "bf16"}}, "L4_5": "fp8"}  # agree; L4_5 is later
    assert resolve_recipe(cfg, 6).rows()[4][1:] == ["fp8"] * 5


# ---------------------------------------------------------------- schedule

def test_schedule_phases_from_percent_step_and_tokens():
    cfg = load_recipe("fp8")
    cfg.schedule = [{"at": "50%", "recipe": "bf16"}, {"at": 8, "layers": {"L0": "nvfp4"}},
                    {"tokens": 9 * 512 + 1, "default": {"linear": "mxfp8"}}]
    plan = build_plan(cfg, 4, total_steps=12, tokens_per_step=512)
    assert [p.start for p in plan.phases] == [0, 6, 8, 10]
    assert [plan.index_at(s) for s in (0, 5, 6, 7, 8, 9, 10, 11)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert plan.phases[1].policy.rows()[0][1:] == ["bf16"] * 5
    assert plan.phases[2].policy.rows()[0][1:] == ["nvfp4"] * 5 and plan.phases[2].policy.rows()[1][1] == "fp8"
    assert plan.phases[3].policy.rows()[1][1:] == ["fp8"] + ["mxfp8"] * 4  # phases start from the run's recipe


@pytest.mark.parametrize("entry,key", [
    ({"at": 3, "tokens": 100, "recipe": "bf16"}, "precision.schedule[0]"),
    ({"at": 12, "recipe": "bf16"}, "precision.schedule[0]"),
    ({"at": "soon", "recipe": "bf16"}, "precision.schedule[0].at"),
    ({"at": 3, "recipe": "fp16"}, "precision.schedule[0].recipe"),
    ({"at": 3}, "precision.schedule[0]"),
    ({"at": 3, "when": 1, "recipe": "bf16"}, "precision.schedule[0].when"),
    ({"at": 3, "layers": {"L9": "bf16"}}, "precision.schedule[0].layers.L9"),
])
def test_bad_schedules_name_the_key(entry, key):
    cfg = load_recipe("fp8")
    cfg.schedule = [entry]
    with pytest.raises(ConfigError) as err:
        build_plan(cfg, 4, total_steps=12, tokens_per_step=512)
    assert err.value.key == key, str(err.value)


def test_controller_switches_the_model_at_the_step():
    cfg = load_recipe("fp8")
    cfg.schedule = [{"at": 2, "recipe": "bf16"}]
    mcfg = ModelConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=1, n_kv_heads=1)
    model = GPT(mcfg)
    plan = build_plan(cfg, 2, total_steps=4, tokens_per_step=64)
    telemetry = PrecisionTelemetry(model, mcfg, 64, model.flops_per_token(64), torch.device("cpu"))
    ctl = PrecisionController(model, plan, telemetry, verbose=False)
    assert model.layers[0].mlp.w_down.spec.name == "fp8" and model.output.spec.name == "bf16"
    ctl.begin_step(1)
    assert ctl.phase == 0 and model.attention_specs[1].name == "fp8"
    ctl.begin_step(2)
    assert ctl.phase == 1 and model.layers[1].attention.wq.spec.name == "bf16"
    assert model.attention_specs[0].name == "bf16"
    ctl.begin_step(0)  # a phase is a function of the step only
    assert model.layers[1].attention.wq.spec.name == "fp8"


# ---------------------------------------------------------------- telemetry

def test_flop_split_sums_to_the_model_flops_and_weights_the_peak(monkeypatch):
    mcfg = ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=1, n_kv_heads=1)
    model = GPT(mcfg)
    fpt = model.flops_per_token(128)
    bf16 = flops_by_format(mcfg, resolve_recipe(load_recipe("bf16"), 2), 128, fpt)
    assert bf16 == {"bf16": pytest.approx(fpt)}
    fp8 = flops_by_format(mcfg, resolve_recipe(load_recipe("fp8"), 2), 128, fpt)
    assert sum(fp8.values()) == pytest.approx(fpt)
    lm_head = 6 * mcfg.d_model * mcfg.vocab_size
    attn_ds = 2 * 2 * mcfg.n_heads * mcfg.head_dim * 128  # dQ and dK take dS in bf16, per layer
    norms = 6 * (2 * 2 + 1) * mcfg.d_model  # RMSNorm gains counted by GPT.flops_per_token
    assert fp8["bf16"] == pytest.approx(lm_head + attn_ds + norms)
    assert gemm_format("fp8", "nvfp4") == "nvfp4" and gemm_format("fp8", "fp8-block") == "fp8"

    monkeypatch.setattr("flamia_train.telemetry.peak_flops", lambda device, fmt: {"bf16": 1e12, "fp8": 2e12}[fmt])
    tel = PrecisionTelemetry(model, mcfg, 128, fpt, torch.device("cpu"), world_size=2)
    tel.set_policy(resolve_recipe(load_recipe("fp8"), 2))
    out = tel.end_step(1, tokens_per_s=1e6)
    time_at_peak = fp8["bf16"] / 1e12 + fp8["fp8"] / 2e12
    assert out["mfu"] == pytest.approx(fpt * 1e6 / 2e12)
    assert out["mfu_weighted"] == pytest.approx(fpt * 1e6 / (2 * fpt / time_at_peak))
    assert out["mfu"] > out["mfu_weighted"] > out["mfu"] / 2


def test_quantization_stats_every_n_steps():
    torch.manual_seed(0)
    mcfg = ModelConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=1, n_kv_heads=1)
    model = GPT(mcfg)
    cfg = load_recipe("fp8")
    cfg.default.attention = "bf16"  # linears only: attention's Triton interpreter is slow on CPU
    plan = build_plan(cfg, 2, total_steps=4, tokens_per_step=64)
    tel = PrecisionTelemetry(model, mcfg, 32, model.flops_per_token(32), torch.device("cpu"), interval=2)
    ctl = PrecisionController(model, plan, tel, verbose=False)
    seen = []
    for step in range(4):
        ctl.begin_step(step)
        model(torch.randint(0, 128, (2, 32))).float().square().mean().backward()
        seen.append(ctl.end_step(step + 1, None))
    assert not any(k.startswith("quant/") for k in seen[0] | seen[2])
    stats = {k: v for k, v in seen[1].items() if k.startswith("quant/")}
    assert set(seen[3]) == set(seen[1])
    for op in LINEAR_OPS:
        assert stats[f"quant/L1.{op}/fprop.x.amax"] > 0 and stats[f"quant/L0.{op}/wgrad.dy.amax"] > 0
        assert 0 <= stats[f"quant/L0.{op}/dgrad.dy.underflow"] <= 1
    assert not any("lm_head" in k for k in stats)  # bf16: nothing quantized
    assert not any(m.collect_stats for _, _, m in model.linear_modules())


# ---------------------------------------------------------------- end to end (CLI)

def _run(tmp_path: Path, corpus: Path, *overrides: str, steps: int = 3):
    return cli(tmp_path, corpus, f"train.steps={steps}", "train.eval_interval=0", "checkpoint.interval=0",
               "checkpoint.export_safetensors=false", *overrides)


@pytest.mark.parametrize("overrides,expect", [
    (["precision=fp8"], {0: "fp8 fp8 fp8 fp8 fp8", 3: "fp8 fp8 fp8 fp8 fp8"}),
    (["precision.default.attention=fp8"], {0: "fp8 bf16 bf16 bf16 bf16", 3: "fp8 bf16 bf16 bf16 bf16"}),
    (["precision=fp8", "+precision.layers.last2=bf16"], {1: "fp8 fp8 fp8 fp8 fp8", 2: "bf16 bf16 bf16 bf16 bf16"}),
    (["precision=fp8", "+precision.layers.L0_2.mlp_down.wgrad=bf16"],
     {2: "fp8 fp8 fp8 fp8 fprop=fp8,dgrad=fp8,wgrad=bf16", 3: "fp8 fp8 fp8 fp8 fp8"}),
], ids=["preset", "default-attention", "layers-to-bf16", "one-gemm-in-a-range"])
def test_cli_overrides_resolve_print_and_train(tmp_path, corpus, overrides, expect):
    proc = _run(tmp_path / "run", corpus, *overrides, steps=2)
    printed = {int(line.split()[0]): " ".join(line.split()[1:])
               for line in proc.stderr.splitlines() if line.split() and line.split()[0].isdigit()}
    assert {layer: printed[layer] for layer in expect} == expect, proc.stderr[-2000:]
    assert len(train_losses(tmp_path / "run")) == 2


def test_cli_bad_recipe_is_a_clear_error(tmp_path, corpus):
    proc = cli(tmp_path / "run", corpus, "precision=fp8", "+precision.layers.L2.mlp_down.wgrad=fp5", check=False)
    assert proc.returncode == 2 and "precision.layers.L2.mlp_down.wgrad" in proc.stderr


def _falls(tmp_path: Path, corpus: Path, preset: str, steps: int) -> None:
    run = tmp_path / preset
    cli(run, corpus, f"precision={preset}", f"train.steps={steps}", "train.eval_interval=0", "checkpoint.interval=0",
        "checkpoint.export_safetensors=false", f"schedule.warmup_steps={max(1, steps // 10)}", "train.eval_batches=0")
    losses = train_losses(run)
    assert len(losses) == steps and all(math.isfinite(x) for x in losses)
    head, tail = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert tail < head - (2.0 if steps >= 100 else 1.0), (preset, losses)


@pytest.mark.parametrize("preset", ["fp8", "flamia"])  # nvfp4 trains in the schedule test below
def test_presets_learn_short(tmp_path, corpus, preset):
    _falls(tmp_path, corpus, preset, steps=20)


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_learns_in_100_steps(tmp_path, corpus, preset):
    _falls(tmp_path, corpus, preset, steps=100)


def test_schedule_switches_in_run_and_resumes_bit_exact_on_both_sides(tmp_path, corpus):
    """nvfp4 (stochastic rounding, Hadamard) for steps 0-2, then bf16: resume from step 2 and from step 4."""
    common = ["precision=nvfp4", "precision.schedule=[{at: 3, recipe: bf16}]", "train.steps=6",
              "checkpoint.keep=5", "train.eval_interval=0", "schedule.warmup_steps=2", "model.n_layers=3"]
    full = tmp_path / "full"
    proc = cli(full, corpus, *common, "checkpoint.interval=2")
    assert "step 3 runs phase 1 (bf16, from step 3)" in proc.stderr
    rows = [json.loads(line) for line in (full / "metrics.jsonl").read_text().splitlines()]
    assert [r["precision/phase"] for r in rows if "loss" in r] == [0, 0, 0, 1, 1, 1]
    for ckpt in (2, 4):
        resumed = tmp_path / f"from{ckpt}"
        proc = cli(resumed, corpus, *common, "checkpoint.interval=0", f"resume={full}/checkpoints/step_0000000{ckpt}")
        assert f"step {max(ckpt, 3)} runs phase 1" in proc.stderr
        assert_same_weights(exported(full), exported(resumed))
        assert train_losses(full)[ckpt:] == train_losses(resumed)


def test_telemetry_and_flop_split_reach_the_metrics(tmp_path, corpus):
    run = tmp_path / "run"
    _run(run, corpus, "precision=flamia", "precision.telemetry_interval=2", "logger.log_interval=3", steps=4)
    rows = {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert rows[2]["quant/L1.mlp_up/fprop.x.amax"] > 0 and "quant/L1.qkv/wgrad.x.underflow" in rows[4]  # L0: bf16
    assert not any(k.startswith("quant/") for k in rows[3])
    assert rows[3]["flops_frac/nvfp4"] > 0.1 and rows[3]["flops_frac/fp8"] > 0.1
    assert sum(v for k, v in rows[3].items() if k.startswith("flops_frac/")) == pytest.approx(1.0)


def test_bench_recipes_script_runs_presets_in_one_process(tmp_path, corpus):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "scripts/bench_recipes.py", "--model", "tiny", "--steps", "2", "--warmup", "1",
         "--presets", "bf16", "fp8", "--device", "cpu", "--seq-len", "128", "--micro-batch", "2",
         "--corpus", str(corpus), "--out", str(out)],
        cwd=e2e.ROOT, env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "recipes.json").read_text())["rows"]
    assert [r["preset"] for r in rows] == ["bf16", "fp8"] and all(len(r["losses"]) == 2 for r in rows)
    assert rows[0]["losses"][0] == pytest.approx(rows[1]["losses"][0], rel=0.05)  # same weights, same first batch
    assert "| fp8 |" in (out / "recipes.md").read_text()
