"""Many devices (``num_devices``) for M-FOS-RL (PPO's envs split) and DiCE-LOLA (each batch's
sampled episodes split) on 4 simulated CPU devices, each equal to the one-device run of the same
global batch; bad requests fail before anything compiles.

The 4-device runs happen in one child process (``devices_mfos_dice_child.py``), because the
device count is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.agents.devices import DeviceAxis
from lamella.agents.testing import device_child
from lamella.marl.shaping import DiceConfig, MFOSConfig, make_dice_runner, make_mfos_runner

CHILD = os.path.join(os.path.dirname(__file__), "devices_mfos_dice_child.py")
DICE = ("lola", "lola_v_nl")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    # Once per session, however pytest-xdist spreads this module's tests over workers.
    return device_child(CHILD, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("name", ("mfos_rl", *DICE))
def test_four_devices_train_as_one_device_on_the_same_global_batch(child, name):
    assert child["device_count"] == 4
    run = child["runs"][name]
    one, four = run["metrics"]["1"], run["metrics"]["4"]
    assert sorted(one) == sorted(four)
    # Three evaluations (before training, after 2 and 4 iterations) and every training metric.
    assert len(one) >= 30 and any(k.startswith("seed_0/step_2/") and k.endswith("train_loss") for k in one)
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
    assert run["state_max_abs_diff"] <= 1e-5 * max(1.0, run["state_max_abs"])


def test_mfos_rl_learned_the_same_on_every_device_count(child):
    run = child["runs"]["mfos_rl"]
    # 4 iterations x 2 epochs x 2 minibatches of Adam steps; the co-players' logits (the
    # meta-games' states) are the one-device ones: the same policies were played.
    assert run["adam_counts"] == [[16], [16]]
    assert run["env_state_max_abs_diff"] <= 1e-4
    one = run["metrics"]["1"]
    # Every outer episode (5 steps of 8 meta-games) ended within each iteration.
    assert all(one[f"seed_0/step_{step}/train_episodes"] == [8.0] for step in (1, 2))
    assert one["seed_0/step_0/mean_episode_return"] != one["seed_0/absolute_metrics/mean_episode_return"]
    layout = run["layout"]
    assert (layout["batch"], layout["batch_size"], layout["per_device"]) == ("num_envs", 8, 2)


@pytest.mark.parametrize("name", DICE)
def test_dice_learned_the_same_on_every_device_count(child, name):
    run = child["runs"][name]
    assert run["iterations"] == [4, 4]
    assert run["moved"] > 1e-2, "the learners' logits left 0"
    one = run["metrics"]["1"]
    for key in ("train_cooperation_CC_agent_1", "train_visits_START_agent_0", "train_reward_agent_1"):
        assert any(k.endswith(key) for k in one), (key, sorted(one))
    # Every episode starts in START: its visit frequency is 1 / rounds in the pooled batch too.
    assert one["seed_0/step_1/train_visits_START_agent_0"] == pytest.approx([1 / 5])
    layout = run["layout"]
    assert (layout["batch"], layout["batch_size"], layout["per_device"]) == ("batch_size", 8, 2)


def test_bad_device_requests_fail_before_anything_compiles(child):
    errors = child["errors"]
    assert errors["num_envs"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4"), errors
    assert (
        "a minibatch (num_envs * num_steps / num_minibatches = 10) must be a multiple of num_devices (4)"
        in errors["minibatch"]
    ), errors
    assert errors["batch_size"].startswith(
        "ConfigError: batch_size=6 is not divisible by num_devices=4: each device takes an equal block of "
        "batch_size."
    ), errors
    assert child["compiled_before_errors"] == 0
    assert child["dirs_written"] == [], "a refused run writes nothing"


def test_the_runners_declare_their_batch_axes():
    mfos = make_mfos_runner(MFOSConfig(num_envs=8, num_steps=5, num_outer_steps=5, total_timesteps=8 * 5))
    sharding = mfos.sharding
    assert (sharding.batch, sharding.size) == ("num_envs", 8)
    axes = sharding.state_axes(None)  # PPO's: the envs split, the meta-agent replicated
    assert axes.env_state == 0 and axes.obs == 0 and axes.train_state is None and axes.key is None
    per_device = sharding.make(DeviceAxis(size=2))
    assert per_device.sharding is None and per_device.record_step is None  # not split again
    with pytest.raises(ConfigError, match=r"must be a multiple of num_devices \(8\)"):
        sharding.make(DeviceAxis(size=8))
    dice = make_dice_runner(DiceConfig(batch_size=8, num_inner_steps=5, total_timesteps=3 * 8 * 5))
    sharding = dice.sharding
    assert (sharding.batch, sharding.size) == ("batch_size", 8)
    assert sharding.state_axes(None) is None  # the episodes are sampled afresh every iteration
    assert sharding.make(DeviceAxis(size=4)).sharding is None
    with pytest.raises(
        ConfigError, match=r"DiceConfig.batch_size \(8\) must be a multiple of num_devices \(3\)"
    ):
        sharding.make(DeviceAxis(size=3))
