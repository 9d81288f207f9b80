"""Config tier: every shipped YAML composes, command-line overrides work, bad values get clear errors."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from flamia_train.config import register_configs, to_dataclass, validate
from flamia_train.errors import ConfigError
from flamia_train.precision import resolve_attention_specs, select_layers

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
register_configs()


def load(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return to_dataclass(compose(config_name="train", overrides=list(overrides)))


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


@pytest.mark.parametrize("group", ["model", "precision", "data", "schedule", "logger"])
def test_every_shipped_option_composes_and_validates(group, tmp_path):
    assert options(group), f"configs/{group}/ is empty"
    for option in options(group):
        extra = ["data.hub_name=some/dataset"] if (group, option) == ("data", "hub") else []
        cfg = load(f"{group}={option}", f"run_dir={tmp_path}/run", *extra)
        plan = validate(cfg)
        assert len(plan.policy_at(0).attention) == cfg.model.n_layers


def test_defaults_are_the_cpu_sized_run():
    cfg = load()
    picked = (cfg.model.name, cfg.precision.name, cfg.data.source, cfg.logger.backend)
    assert picked == ("tiny", "bf16", "stdlib", "wandb")
    assert cfg.logger.mode == "offline"
    assert cfg.resume == "auto"


def test_command_line_overrides(tmp_path):
    cfg = load("model=gpt-125m", "precision=bf16", "train.steps=17", "train.lr=0.0001", "data=files",
               "data.path=corpus/*.jsonl", "logger=none", "checkpoint.interval=5", "checkpoint.keep=2",
               "resume=never", f"run_dir={tmp_path}/x", "train.seq_len=512", "schedule.warmup_steps=5")
    assert cfg.model.name == "gpt-125m" and cfg.model.d_model == 768
    assert (cfg.train.steps, cfg.train.lr, cfg.train.seq_len) == (17, 0.0001, 512)
    assert (cfg.data.source, cfg.data.path, cfg.logger.backend) == ("files", "corpus/*.jsonl", "none")
    assert (cfg.checkpoint.interval, cfg.checkpoint.keep, cfg.resume) == (5, 2, "never")
    validate(cfg)


def test_misspelt_key_fails_at_composition():
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        load("train.stpes=3")


def test_wrong_type_fails_at_composition():
    with pytest.raises((ConfigCompositionException, ValidationError)):
        load("train.steps=many")


def test_unknown_group_option_fails():
    with pytest.raises(ConfigCompositionException, match="gpt-7t"):
        load("model=gpt-7t")


BAD_VALUES = [
    (["train.lr=-0.1"], "train.lr"),
    (["train.steps=0", "schedule.warmup_steps=0"], "train.steps"),
    (["train.seq_len=200"], "train.seq_len"),
    (["model.n_heads=5"], "model.n_heads"),
    (["model.n_kv_heads=3"], "model.n_kv_heads"),
    (["model.rope_theta=0"], "model.rope_theta"),
    (["train.tokens_per_step=1000"], "train.tokens_per_step"),
    (["precision.default.attention=fp7"], "precision.default.attention"),
    (["precision.default.linear=fp7"], "precision.default.linear"),
    (["+precision.layers.L9=fp8"], "precision.layers.L9"),
    (["+precision.layers.banana=fp8"], "precision.layers.banana"),
    (["logger.backend=tensorboard"], "logger.backend"),
    (["parallel.activation_checkpoint=some"], "parallel.activation_checkpoint"),
    (["data.source=ftp"], "data.source"),
    (["data=hub", "data.hub_name="], "data.hub_name"),
    (["checkpoint.keep=0"], "checkpoint.keep"),
    (["resume=/no/such/checkpoint"], "resume"),
    (["parallel.dp_replicate=3"], "parallel.dp_replicate"),
    (["parallel.reshard_after_forward=sometimes"], "parallel.reshard_after_forward"),
    (["train.optimizer_impl=adafactor"], "train.optimizer_impl"),
]


@pytest.mark.parametrize("overrides,key", BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_bad_value_names_key_value_and_rule(overrides, key, tmp_path):
    cfg = load(*overrides, f"run_dir={tmp_path}/run")
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.key == key
    assert key in str(err.value) and "=" in str(err.value)


def test_unwritable_run_dir_is_a_config_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("user data")
    cfg = load(f"run_dir={blocker}/run")
    with pytest.raises(ConfigError, match="run_dir"):
        validate(cfg)
    assert blocker.read_text() == "user data"


@pytest.mark.parametrize(
    "selector,expected",
    [("3", [3]), ("L3", [3]), ("Lm1", [7]), ("-2", [6]), ("L0_3", [0, 1, 2, 3]), ("0-3", [0, 1, 2, 3]),
     ("first2", [0, 1]), ("first:2", [0, 1]), ("last2", [6, 7]), ("last:2", [6, 7]),
     ("last25pct", [6, 7]), ("last:15%", [6, 7]), ("first:50%", [0, 1, 2, 3])],
)
def test_layer_selectors(selector, expected):
    assert select_layers(selector, 8) == expected


def test_overrides_resolve_in_order_later_wins():
    cfg = load("precision=fp8", "+precision.layers.L0_3=bf16", "+precision.layers.L2=fp8")
    specs = [s.name for s in resolve_attention_specs(cfg.precision, cfg.model.n_layers)]
    assert specs == ["bf16", "bf16", "fp8", "bf16"]


def test_default_attention_override_and_last_layers():
    cfg = load("precision.default.attention=fp8", "+precision.layers.last2=bf16")
    specs = [s.name for s in resolve_attention_specs(cfg.precision, cfg.model.n_layers)]
    assert specs == ["fp8", "fp8", "bf16", "bf16"]
