"""Many devices (``num_devices``) for the independent off-policy learners and opponent shaping:
IDQN and ISAC (the off-policy loop), recurrent IQL and the shaping RL runner with their envs split
over 4 simulated CPU devices, ``mfos_es`` and ``meta_es`` with their population split, each equal
to the one-device run of the same global batch; bad requests fail before anything compiles.

The 4-device runs happen in one child process (``devices_offpolicy_shaping_child.py``), because
the device count is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.agents.devices import DeviceAxis
from lamella.agents.testing import device_child
from lamella.marl import IDQNConfig, ISACConfig, RecIQLConfig, make_idqn_runner, make_isac_runner
from lamella.marl.rec_iql import make_rec_iql_runner
from lamella.marl.shaping import (
    MetaConfig,
    MetaESConfig,
    ShapingConfig,
    make_meta_es_runner,
    make_meta_runner,
    make_shaping_runner,
)

CHILD = os.path.join(os.path.dirname(__file__), "devices_offpolicy_shaping_child.py")
ENVS_SPLIT = ("idqn", "isac", "rec_iql")
SHAPING = ("shaping_tft", "shaping_ppo")
POPULATION_SPLIT = ("mfos_es", "meta_es")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    # Once per session, however pytest-xdist spreads this module's tests over workers.
    return device_child(CHILD, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("name", ENVS_SPLIT + SHAPING + POPULATION_SPLIT)
def test_four_devices_train_as_one_device_on_the_same_global_batch(child, name):
    assert child["device_count"] == 4
    run = child["runs"][name]
    one, four = run["metrics"]["1"], run["metrics"]["4"]
    assert sorted(one) == sorted(four)
    # Three evaluations (before training, after 2 and 4 iterations) and every training metric.
    assert len(one) >= 15 and any(
        k.startswith("seed_0/step_") and "/train_" in k and k.endswith("loss") for k in one
    )
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
    assert run["state_max_abs_diff"] <= 1e-5 * max(1.0, run["state_max_abs"])


@pytest.mark.parametrize("name", ENVS_SPLIT)
def test_the_learners_learned_the_same_on_every_device_count(child, name):
    run = child["runs"][name]
    # The replicated buffers hold the same steps; training changed something, so the comparison
    # compares something: the updates ran, losses were logged, and the online networks moved away
    # from their target copies (which started equal).
    assert run["buffer_max_abs_diff"] <= 1e-5
    # Off-policy loop: learning starts at env step 32 of 256 (8 envs); rec_iql: 2 epochs in each
    # of the 4 iterations (each stores a whole 4-step window first).
    assert run["updates"] == ([8, 8] if name == "rec_iql" else [29, 29])
    one = run["metrics"]["1"]
    assert all(v[0] != 0 for k, v in one.items() if k.endswith("train_loss") and "step_0/" not in k)
    assert run["moved"] > 1e-4
    assert (run["layout"]["batch"], run["layout"]["batch_size"], run["layout"]["per_device"]) == (
        "num_envs",
        8,
        2,
    )


@pytest.mark.parametrize("name", SHAPING)
def test_the_shaping_learners_learned_the_same_on_every_device_count(child, name):
    run = child["runs"][name]
    # Every learner and instance took 4 iterations x 2 epochs x 2 minibatches of Adam steps.
    assert run["adam_counts"] == [[16], [16]]
    # The env states (the IPD's last actions) are the one-device ones: the same actions sampled.
    assert run["env_state_max_abs_diff"] == 0
    one = run["metrics"]["1"]
    # Episodes of 4 rounds ended in every iteration: the returns are every device's episodes.
    assert all(one[f"seed_0/step_{step}/train_episodes"] == [16.0] for step in (1, 2))
    # The watchers (every env's cooperation and visits) and each learner's PPO metrics are there.
    for key in ("train_cooperation_CC_agent_1", "train_visits_START_agent_0", "train_learner_0_policy_loss"):
        assert any(k.endswith(key) for k in one), (key, sorted(one))
    if name == "shaping_ppo":
        assert any(k.endswith("train_learner_1_policy_loss") for k in one)
    assert (run["layout"]["batch"], run["layout"]["batch_size"], run["layout"]["per_device"]) == (
        "num_envs",
        8,
        2,
    )


@pytest.mark.parametrize("name", POPULATION_SPLIT)
def test_the_searches_told_the_same_fitness_on_every_device_count(child, name):
    run = child["runs"][name]
    # Four generations told (the best fitness is +inf before the first tell), the same on both, to
    # float32 rounding: 2 members per device compile to other reductions than 8 on one (jax 0.10.2
    # gives the same bits; jax 0.12 1.7700634 and 1.7700642 for mfos_es, 5e-7 apart). A search told
    # one device's members only would differ in the first digits.
    assert run["generations"] == [4, 4]
    assert np.isfinite(run["best_fitness"]).all()
    np.testing.assert_allclose(run["best_fitness"][0], run["best_fitness"][1], rtol=1e-5)
    returns = run["metrics"]["1"]
    assert len({returns[k][0] for k in returns if k.endswith("/train_max_return")}) > 1, (
        "the population changed"
    )
    layout = run["layout"]
    assert (layout["batch"], layout["batch_size"], layout["per_device"]) == ("population_size", 8, 2)


def test_bad_device_requests_fail_before_anything_compiles(child):
    errors = child["errors"]
    assert errors["num_envs"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4"), errors
    assert errors["batch_size"].startswith(
        "ConfigError: ISACConfig: batch_size=6 is not divisible by num_devices=4: each device learns from "
        "an equal block of every sampled batch. Set batch_size to a multiple of 4 (for example 8)"
    ), errors
    assert errors["windows"].startswith(
        "ConfigError: sample_batch_size (6) must be a multiple of num_devices (4)"
    ), errors
    assert errors["opponents"].startswith(
        "ConfigError: ShapingConfig: agent 1's num_opponents (2) learning instances split over the devices: "
        "num_opponents must be a multiple of num_devices (4)."
    ), errors
    assert (
        "a minibatch (num_envs * num_steps / num_minibatches = 2) must be a multiple of num_devices (4)"
        in (errors["shaping_minibatch"])
    ), errors
    for key in ("population", "meta_population"):
        assert "population_size=" in errors[key] and "is not divisible by num_devices=4" in errors[key], (
            errors
        )
    assert child["compiled_before_errors"] == 0
    assert child["dirs_written"] == [], "a refused run writes nothing"


def test_the_runners_declare_their_batch_axes():
    loop = dict(num_envs=8, batch_size=8, rollout_steps=8, total_timesteps=64, hidden_sizes=(8,))
    idqn, isac = IDQNConfig(**loop), ISACConfig(**loop)
    rec_iql = RecIQLConfig(
        env_id="Foraging-5x5-2p-1f-coop-v3", num_envs=8, sample_batch_size=8, total_timesteps=64
    )
    for runner in (make_idqn_runner(idqn), make_isac_runner(isac), make_rec_iql_runner(rec_iql)):
        sharding = runner.sharding
        assert (sharding.batch, sharding.size) == ("num_envs", 8)
        # The env states split; observations, memories and buffers replicated.
        axes = sharding.state_axes(None)
        assert axes.env_state == 0 and axes.obs is None and axes.buffer_state is None
        assert sharding.make(DeviceAxis(size=2)).sharding is None  # a per-device runner is not split again
    with pytest.raises(ConfigError, match=r"batch_size=8 is not divisible by num_devices=3"):
        make_idqn_runner(idqn).sharding.make(DeviceAxis(size=3))
    with pytest.raises(ConfigError, match=r"sample_batch_size \(8\) must be a multiple of num_devices \(3\)"):
        make_rec_iql_runner(rec_iql).sharding.make(DeviceAxis(size=3))
    # The shaping RL runner: the env states split; a one-instance learner's parameters replicated
    # and its memory split on its envs axis, split opponent instances, a fixed agent replicated.
    config = ShapingConfig(
        agents=("ppo", "ppo"), num_opponents=4, num_envs=8, num_steps=4, total_timesteps=32
    )
    for agents, memory_axes in ((("ppo", "ppo"), (1, 0)), (("ppo", "tit_for_tat"), (1, None))):
        sharding = make_shaping_runner(config, agents=agents).sharding
        assert (sharding.batch, sharding.size) == ("num_envs", 8)
        axes = sharding.state_axes(None)
        assert axes.env_state == 0 and axes.obs == 0 and axes.reset == 0 and axes.key is None
        assert axes.memory == memory_axes and axes.train_states == (None, 0 if agents[1] == "ppo" else None)
        assert sharding.make(DeviceAxis(size=2)).sharding is None
    with pytest.raises(ConfigError, match=r"num_opponents must be a multiple of num_devices \(8\)"):
        make_shaping_runner(config).sharding.make(DeviceAxis(size=8))
    population = (
        make_meta_es_runner(MetaESConfig(population_size=8, num_outer_steps=2, total_timesteps=8 * 4 * 2)),
        make_meta_runner(
            MetaConfig(population_size=8, num_inner_steps=2, num_outer_steps=2, total_timesteps=8 * 4 * 2 * 2)
        ),
    )
    for runner in population:
        sharding = runner.sharding
        assert (sharding.batch, sharding.size) == ("population_size", 8)
        assert sharding.state_axes(None) is None  # the members are drawn afresh every generation
        assert sharding.make(DeviceAxis(size=4)).sharding is None
        with pytest.raises(
            ConfigError, match=r"population_size \(8\) must be a multiple of num_devices \(3\)"
        ):
            sharding.make(DeviceAxis(size=3))
