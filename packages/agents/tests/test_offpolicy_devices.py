"""Many devices (``num_devices``) for the off-policy loop: DQN, SAC, TQC, DDPG and discrete SAC
with their envs split over 4 simulated CPU devices equal the one-device run of the same global
batch (TD3 is lamella-gcrl's TD3+HER case); bad requests fail before anything compiles.

The 4-device runs happen in a child process (``offpolicy_devices_child.py``), because the
device count is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.agents.devices import DeviceAxis
from lamella.agents.offpolicy import DQNTrainConfig, SACTrainConfig, make_offpolicy_runner, make_sac
from lamella.agents.testing import device_child

CHILD = os.path.join(os.path.dirname(__file__), "offpolicy_devices_child.py")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    # Once per session, however pytest-xdist spreads this module's tests over workers.
    return device_child(CHILD, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("algorithm", ["dqn", "sac", "tqc", "ddpg", "discrete_sac"])
def test_four_devices_train_as_one_device_on_the_same_global_batch(child, algorithm):
    assert child["device_count"] == 4
    run = child[algorithm]
    one, four = run["metrics"]["1"], run["metrics"]["4"]
    assert sorted(one) == sorted(four)
    # Three evaluations, and every training metric (losses, targets, epsilon or temperature, returns).
    assert len(one) >= 20 and any(k.endswith("train_loss") for k in one)
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    # The train states (parameters, targets, optimiser states) and the replicated buffers.
    assert run["train_state_max_abs_diff"] <= 1e-5 * max(1.0, run["train_state_max_abs"])
    assert run["buffer_max_abs_diff"] <= 1e-5
    # Training changed something, so the comparison compares something: 29 updates (learning
    # starts at env step 32 of 256, 8 envs), losses, and online networks away from their targets.
    assert run["updates"] == [29, 29]
    assert all(v[0] != 0 for k, v in one.items() if k.endswith("train_loss"))
    assert run["moved"] > 1e-4
    assert run["layout"]["batch"] == "num_envs"
    assert (run["layout"]["batch_size"], run["layout"]["per_device"]) == (8, 2)


def test_four_devices_record_every_env_in_order(child):
    # DQN recorded on 4 devices (2 envs each): 8 envs x 32 steps, equal to the 1-device run's
    # replay buffer, and training unchanged by recording.
    recorded = child["dqn_recorded"]
    assert recorded["shapes"]["observations"] == [8, 32, 4] and recorded["shapes"]["actions"] == [8, 32]
    differences = recorded["vault_vs_one_device_buffer"]
    assert sorted(differences) == ["actions", "observations", "rewards", "terminals", "truncations"]
    assert max(differences.values()) <= 1e-5, differences
    assert recorded["episode_ends"] > 0  # CartPole's early episodes end within 32 steps
    assert recorded["train_state_vs_unrecorded"] <= 1e-6


def test_bad_device_requests_fail_before_anything_compiles(child):
    errors = child["errors"]
    assert errors["num_envs"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4"), errors
    assert errors["batch_size"].startswith(
        "ConfigError: SACTrainConfig: batch_size=6 is not divisible by num_devices=4: each device learns from "
        "an equal block of every sampled batch. Set batch_size to a multiple of 4 (for example 8)"
    ), errors
    assert child["compiled_before_errors"] == 0
    assert child["dirs_written"] == [], "a refused run writes nothing"


def test_the_runner_declares_its_envs_axis_and_checks_the_sampled_batch():
    config = DQNTrainConfig(num_envs=8, batch_size=16, rollout_steps=8, total_timesteps=64, hidden_sizes=(8,))
    sharding = make_offpolicy_runner(config).sharding
    assert (sharding.batch, sharding.size) == ("num_envs", 8)
    # The env states split; everything else, observations and buffer included, replicated.
    axes = sharding.state_axes(None)
    assert axes.env_state == 0 and axes.obs is None and axes.buffer_state is None
    assert sharding.make(DeviceAxis(size=4)).sharding is None  # a per-device runner is not split again
    with pytest.raises(ConfigError, match=r"batch_size=16 is not divisible by num_devices=3"):
        sharding.make(DeviceAxis(size=3))
    # An agent given from outside takes no device axis, unless it says it does (lamella-marl's
    # independent learners).
    sac = SACTrainConfig(num_envs=2, batch_size=8, rollout_steps=8, total_timesteps=16, hidden_sizes=(8,))
    assert make_offpolicy_runner(sac, make_agent=make_sac).sharding is None
    sharding = make_offpolicy_runner(sac, make_agent=make_sac, agent_takes_devices=True).sharding
    assert (sharding.batch, sharding.size) == ("num_envs", 2)
    assert sharding.make(DeviceAxis(size=2)).sharding is None
