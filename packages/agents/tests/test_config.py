"""Config parsing: types, overrides, presets, and errors raised before anything compiles."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from lamella.agents import config as config_lib
from lamella.agents.config import (
    ConfigError,
    apply_overrides,
    check_numbers,
    config_defaults,
    config_diff,
    config_from_dict,
    config_to_dict,
    field_types,
    parse_overrides,
    parse_value,
    register_algorithm,
    resolve_config,
    unregister_algorithm,
    unused_setting_message,
    unused_settings_of,
)
from lamella.agents.ppo import PPOConfig
from lamella.agents.testing import BanditConfig, make_bandit_runner


@dataclasses.dataclass(frozen=True)
class OptionalConfig:
    env_id: str = "X"
    total_timesteps: int = 10
    eval_episodes: int = 1
    clip: float | None = None
    widths: tuple[float, ...] = (0.5,)
    pair: tuple[int, str] = (1, "a")


@pytest.fixture
def bandit_registered():
    presets = {
        "Bandit-v0": BanditConfig(),
        "Bandit-slow": BanditConfig(env_id="Bandit-v0", learning_rate=0.01),
        "Bandit-v1": BanditConfig(env_id="Bandit-v1", total_timesteps=1280),
    }
    register_algorithm("bandit_cfg", BanditConfig, make_bandit_runner, presets)
    yield presets
    unregister_algorithm("bandit_cfg")


@pytest.mark.parametrize(
    ("text", "tp", "expected"),
    [
        ("12", int, 12),
        ("1_000", int, 1000),
        ("1e6", int, 1_000_000),
        ("-3", int, -3),
        ("3e-4", float, 3e-4),
        ("2", float, 2.0),
        ("true", bool, True),
        ("False", bool, False),
        ("yes", bool, True),
        ("0", bool, False),
        ("hello world", str, "hello world"),
        ("", str, ""),
        ("64,64", tuple[int, ...], (64, 64)),
        ("(32, 16, 8)", tuple[int, ...], (32, 16, 8)),
        ("[7]", tuple[int, ...], (7,)),
        ("()", tuple[int, ...], ()),
        ("0.5, 1e-2", tuple[float, ...], (0.5, 0.01)),
        ("none", float | None, None),
        ("0.25", float | None, 0.25),
        ("3,b", tuple[int, str], (3, "b")),
    ],
)
def test_parse_value(text, tp, expected):
    value = parse_value("key", text, tp)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("text", "tp", "expected_name"),
    [
        ("3.5", int, "int"),
        ("ten", int, "int"),
        ("fast", float, "float"),
        ("maybe", bool, "bool"),
        ("64,x", tuple[int, ...], "tuple[int, ...]"),
        ("1,2,3", tuple[int, str], "tuple[int, str]"),
        ("big", float | None, "float | None"),
    ],
)
def test_parse_value_errors_name_key_type_and_value(text, tp, expected_name):
    with pytest.raises(ConfigError) as info:
        parse_value("the_key", text, tp)
    message = str(info.value)
    assert "the_key" in message
    assert expected_name in message
    assert repr(text) in message


def test_field_types_resolve_string_annotations():
    types = field_types(BanditConfig)
    assert types["total_timesteps"] is int
    assert types["learning_rate"] is float
    assert types["greedy_eval"] is bool
    assert types["label"] is str
    assert types["param_shape"] == tuple[int, ...]
    with pytest.raises(ConfigError, match="not a dataclass"):
        field_types(dict)


def test_apply_overrides_from_strings_and_values():
    config = apply_overrides(BanditConfig(), ["learning_rate=0.5", "param_shape=2,2", "greedy_eval=false"])
    assert config.learning_rate == 0.5
    assert config.param_shape == (2, 2)
    assert config.greedy_eval is False
    config = apply_overrides(BanditConfig(), {"learning_rate": 1, "param_shape": [4], "label": "x"})
    assert config.learning_rate == 1.0 and isinstance(config.learning_rate, float)
    assert config.param_shape == (4,)
    assert apply_overrides(config, {}) is config


def test_unknown_key_lists_every_valid_key_and_suggests():
    with pytest.raises(ConfigError) as info:
        apply_overrides(BanditConfig(), ["learning_rat=0.1", "zzz=1"])
    message = str(info.value)
    assert "'learning_rat'" in message and "'zzz'" in message
    assert "did you mean 'learning_rate'" in message
    for field in dataclasses.fields(BanditConfig):
        assert field.name in message
    assert "param_shape: tuple[int, ...]" in message


def test_an_abbreviated_key_is_matched_to_its_field():
    with pytest.raises(ConfigError) as info:
        apply_overrides(PPOConfig(), ["lr=0.1", "ent=0.01"])
    message = str(info.value)
    assert "'lr' (did you mean 'learning_rate'?)" in message, message
    assert "'ent' (did you mean 'ent_coef'?)" in message, message


@pytest.mark.parametrize(
    "overrides",
    [
        {"total_timesteps": 1.5},
        {"total_timesteps": True},
        {"greedy_eval": 1},
        {"label": 3},
        {"param_shape": 3},
    ],
)
def test_programmatic_values_are_type_checked(overrides):
    key = next(iter(overrides))
    with pytest.raises(ConfigError, match=key):
        apply_overrides(BanditConfig(), overrides)


@pytest.mark.parametrize("item", ["noequals", "=3", "a=1 a=2"])
def test_malformed_overrides(item):
    with pytest.raises(ConfigError):
        parse_overrides(item.split(" "))


def test_optional_and_heterogeneous_tuple_fields():
    config = apply_overrides(OptionalConfig(), ["clip=0.1", "widths=1,2", "pair=(5, z)"])
    assert config.clip == 0.1 and config.widths == (1.0, 2.0) and config.pair == (5, "z")
    assert apply_overrides(config, ["clip=None"]).clip is None


def test_unused_settings_of_gives_one_message_a_field():
    config = OptionalConfig(clip=0.5)
    meanings = {"clip": "bounds the update", "widths": "sizes the layers"}
    unused = unused_settings_of(config, meanings, "mode='plain' clips nothing", "set mode='clipped'")
    assert list(unused) == ["clip", "widths"]
    assert unused["clip"] == (
        "OptionalConfig.clip=0.5 bounds the update, but mode='plain' clips nothing, so it is never read; "
        "set mode='clipped', or leave clip at None."
    )
    assert unused["widths"] == unused_setting_message(
        config, "widths", "sizes the layers", "mode='plain' clips nothing", "set mode='clipped'"
    )


def test_dict_round_trip_and_diff():
    config = BanditConfig(param_shape=(2, 3), label="run")
    as_dict = config_to_dict(config)
    assert as_dict["param_shape"] == [2, 3]
    assert config_from_dict(BanditConfig, as_dict) == config
    other = dataclasses.replace(config, learning_rate=0.3, num_envs=2)
    assert config_diff(as_dict, config_to_dict(other)) == {"learning_rate": (0.2, 0.3), "num_envs": (4, 2)}
    with pytest.raises(ConfigError, match="bogus"):
        config_from_dict(BanditConfig, {**as_dict, "bogus": 1})
    # A config stored before a field existed: the field's default is what that run did.
    defaults = config_defaults(BanditConfig)
    assert defaults == config_to_dict(BanditConfig())
    stored = {key: value for key, value in as_dict.items() if key != "num_envs"}
    assert config_diff(stored, as_dict) == {"num_envs": (None, 4)}
    assert config_diff(stored, as_dict, defaults) == {}
    assert config_diff(stored, config_to_dict(other), defaults) == {
        "learning_rate": (0.2, 0.3),
        "num_envs": (4, 2),
    }


def test_an_infinite_setting_round_trips_through_json():
    """max_grad_norm=inf ("no clipping", as documented) stopped every run with a ValueError
    traceback: config.json holds JSON numbers only."""
    import json

    from lamella.agents.driver import RunSpec

    config = dataclasses.replace(PPOConfig(), max_grad_norm=float("inf"), clip_eps=float("inf"))
    as_dict = config_to_dict(config)
    assert (as_dict["max_grad_norm"], as_dict["clip_eps"]) == ("inf", "inf")
    assert RunSpec("ppo", config=as_dict).config == as_dict  # JSON-compatible now
    assert config_from_dict(PPOConfig, json.loads(json.dumps(as_dict, allow_nan=False))) == config
    optional = config_to_dict(OptionalConfig(clip=float("-inf"), widths=(0.5, float("inf"))))
    assert config_from_dict(OptionalConfig, optional) == OptionalConfig(
        clip=float("-inf"), widths=(0.5, float("inf"))
    )


def test_resolve_config_presets(bandit_registered):
    assert resolve_config("bandit_cfg") == bandit_registered["Bandit-v0"]
    assert resolve_config("bandit_cfg", env_id="Bandit-v1") == bandit_registered["Bandit-v1"]
    assert resolve_config("bandit_cfg", preset="Bandit-slow").learning_rate == 0.01
    # --preset with a different --env: the preset's settings on that env.
    config = resolve_config("bandit_cfg", env_id="Bandit-v7", preset="Bandit-slow")
    assert (config.env_id, config.learning_rate) == ("Bandit-v7", 0.01)
    # No preset for the env: the config class defaults on that env.
    assert resolve_config("bandit_cfg", env_id="Other-v0") == BanditConfig(env_id="Other-v0")
    config = resolve_config("bandit_cfg", env_id="Bandit-v1", overrides=["num_envs=2"])
    assert (config.total_timesteps, config.num_envs) == (1280, 2)


def test_resolve_config_errors(bandit_registered):
    with pytest.raises(ConfigError, match=r"Unknown algorithm 'nope'.*bandit_cfg"):
        resolve_config("nope")
    with pytest.raises(ConfigError, match=r"Unknown preset 'Bandit-v9'.*Bandit-slow"):
        resolve_config("bandit_cfg", preset="Bandit-v9")
    with pytest.raises(ConfigError, match="Valid keys"):
        resolve_config("bandit_cfg", overrides=["nope=1"])


def test_register_algorithm_twice_is_refused(bandit_registered):
    with pytest.raises(ValueError, match="already registered"):
        register_algorithm("bandit_cfg", BanditConfig, make_bandit_runner)
    register_algorithm("bandit_cfg", BanditConfig, make_bandit_runner, overwrite=True)
    assert config_lib.algorithm_table()["bandit_cfg"] == (BanditConfig, make_bandit_runner)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"gamma": 1.5}, "PPOConfig.gamma must be in [0, 1] (a discount), got 1.5"),
        ({"gae_lambda": -0.1}, "gae_lambda must be in [0, 1] (GAE's lambda)"),
        (
            {"learning_rate": -3e-4},
            "learning_rate must be >= 0 and finite (a step size; 0 freezes what it trains)",
        ),
        (
            {"learning_rate": float("inf")},
            "must be >= 0 and finite (a step size; 0 freezes what it trains), got inf",
        ),
        ({"learning_rate": float("nan")}, "PPOConfig.learning_rate is NaN"),
        ({"clip_eps": 0.0}, "clip_eps must be > 0 (a positive bound; inf for none), got 0"),
        ({"max_grad_norm": -1.0}, "max_grad_norm must be > 0 (a positive bound; inf for none)"),
        ({"ent_coef": float("inf")}, "ent_coef must be finite"),
        # Was silently the env's own limit, as 0 is.
        (
            {"eval_max_steps": -1},
            "PPOConfig.eval_max_steps must be >= 0 (a step cap: 0 for the env's own limit, else a positive "
            "number of steps), got -1",
        ),
    ],
)
def test_numbers_that_cannot_train_are_refused_by_name(change, words):
    with pytest.raises(ConfigError) as info:
        check_numbers(dataclasses.replace(PPOConfig(), **change))
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_envs": 4.0}, "PPOConfig.num_envs must be an int, got 4.0 (float). Write 4."),
        (
            {"learning_rate": "3e-4"},
            "PPOConfig.learning_rate must be a number, got '3e-4' (str). Write the value itself, not a "
            "string (the command line parses text; Python does not).",
        ),
        (
            {"normalize_observations": "false"},
            "PPOConfig.normalize_observations must be True or False, got 'false' (str). Write the value "
            "itself, not a string (the command line parses text; Python does not).",
        ),
        (
            {"hidden_sizes": 64},
            "PPOConfig.hidden_sizes must be a tuple (tuple[int, ...]), got 64 (int). Write a tuple: "
            "hidden_sizes=(64,).",
        ),
        (
            {"hidden_sizes": (64.0, 64.0)},
            "PPOConfig.hidden_sizes must be a tuple of int (tuple[int, ...]), got (64.0, 64.0) (tuple).",
        ),
        ({"hidden_sizes": (64, 0)}, "PPOConfig.hidden_sizes must hold sizes >= 1, got (64, 0)."),
        ({"env_id": None}, "PPOConfig.env_id must be a string, got None (NoneType)."),
    ],
)
def test_python_values_of_the_wrong_type_are_refused_by_name(change, message):
    # The command line parses its text into these types; a Python user writes the values.
    with pytest.raises(ConfigError) as info:
        check_numbers(dataclasses.replace(PPOConfig(), **change))
    assert str(info.value) == message


def test_plain_values_of_the_declared_types_pass():
    # An int where a float goes, a list of widths, an empty torso.
    check_numbers(dataclasses.replace(PPOConfig(), learning_rate=1, hidden_sizes=[32, 32]))
    check_numbers(dataclasses.replace(PPOConfig(), hidden_sizes=()))


def test_numbers_at_their_bounds_and_every_preset_pass():
    # A learning rate of 0 (a frozen learner), gamma 1, no gradient clipping: all meant.
    check_numbers(dataclasses.replace(PPOConfig(), learning_rate=0.0, gamma=1.0, max_grad_norm=float("inf")))
    for presets in config_lib.preset_table().values():
        for preset in presets.values():
            check_numbers(preset)


def test_a_swept_number_is_left_to_the_driver():
    import jax

    def build(gamma):
        check_numbers(dataclasses.replace(PPOConfig(), gamma=gamma))  # a tracer: not checked
        return gamma

    assert float(jax.jit(build)(1.5)) == 1.5


@pytest.mark.parametrize(
    ("make", "config", "message"),
    [
        (
            "lamella.agents.ppo:make_ppo_runner",
            "ppo",
            r"^make_ppo_runner: config must be a PPOConfig, got the str 'ppo'\. Build one: PPOConfig\(\.\.\.\), "
            r"or a preset: lamella\.agents\.config\.resolve_config\('ppo', env_id\)",
        ),
        (
            "lamella.agents.ppo:make_ppo_runner",
            {"learning_rate": 1e-3},
            r"got dict\. That is a dict: build PPOConfig\(\*\*settings\), or config_from_dict\(PPOConfig, settings\)",
        ),
        (
            "lamella.agents.ppo:make_ppo_runner",
            {"CartPole-v1": PPOConfig(), "Acrobot-v1": PPOConfig()},
            r"got dict\. That is a dict of configs \(presets\?\): pick one by its key \('CartPole-v1', 'Acrobot-v1'\)",
        ),
        (
            "lamella.agents.es:make_es_runner",
            PPOConfig(),
            r"^make_es_runner: config must be an ESConfig, got PPOConfig\.",
        ),
        (
            "lamella.agents.offpolicy.loop:make_offpolicy_runner",
            PPOConfig(),
            r"^make_offpolicy_runner: config must be a LoopConfig, got PPOConfig\. Build one: a train config such as "
            r"lamella\.agents\.offpolicy\.configs\.SACTrainConfig",
        ),
        (
            "lamella.agents.offpolicy.host:train_host",
            {"learning_rate": 1e-3},
            r"^train_host: config must be a LoopConfig, got dict\. That is a dict\. Build one: a train config",
        ),
    ],
)
def test_a_runner_given_a_name_a_dict_or_another_config_names_the_fix(make, config, message):
    """Before: ``'str' object has no attribute 'validate'`` from inside the runner."""
    module, name = make.split(":")
    factory = getattr(importlib.import_module(module), name)
    with pytest.raises(ConfigError, match=message):
        factory(config) if name != "train_host" else factory(config, "CartPole-v1")
