"""Many devices (``num_devices``): IPPO (feed-forward, continuous actions) and recurrent MAPPO
(centralised critic, discrete actions) with their envs split over 4 simulated CPU devices equal
the one-device run of the same global batch; bad requests fail before anything compiles.

The 4-device runs happen in one child process (``devices_child.py``), because the device count
is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

from lamella.agents import devices
from lamella.agents.config import ConfigError
from lamella.agents.testing import device_child
from lamella.marl import IPPOConfig, make_ippo_runner, make_mappo_runner, make_rec_mappo_runner

CHILD = os.path.join(os.path.dirname(__file__), "devices_child.py")
RUNNERS = ("ippo", "rec_mappo")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    return device_child(CHILD, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("name", RUNNERS)
def test_four_devices_train_as_one_device_on_the_same_global_batch(child, name):
    assert child["device_count"] == 4
    run = child["runs"][name]
    one, four = run["metrics"]["1"], run["metrics"]["4"]
    assert sorted(one) == sorted(four)
    # Evaluations, per-agent returns and rewards, and every training metric.
    for key in (
        "train_loss",
        "train_value_loss",
        "train_return_agent_1",
        "train_reward_agent_0",
        "return_agent_0",
    ):
        assert any(k.endswith(key) for k in one), (key, sorted(one))
    # Three evaluations (before training, after 2 and 4 iterations) with the training metrics.
    assert sum(k.startswith("seed_0/step_2/") for k in one) >= 15
    assert all(
        any(one[k]) for k in one if k.startswith("seed_0/step_2/") and ("return" in k or "reward" in k)
    )
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
    # The parameters after training, and the envs' states. With discrete actions (rec_mappo) the
    # actions are the same (keys and samples sliced exactly): one different action would move a
    # particle by about 1e-2; what is left is rounding, as the two programs fuse the dynamics
    # differently (XLA's CPU backend makes a*b+c one FMA inside a fusion, so the 1- and the
    # 4-device program can round a step apart by an ulp). Continuous actions carry the network's
    # rounding into positions too.
    assert run["params_max_abs_diff"] <= 1e-5 * max(1.0, run["params_max_abs"])
    assert run["env_state_max_abs_diff"] <= (1e-5 if name == "rec_mappo" else 1e-4)
    # The updates ran (Adam's count: 4 iterations x 2 epochs x 2 minibatches), and every value
    # target of the 4 rollouts was counted, on 1 and on 4 devices.
    assert run["adam_counts"] == [16] and run["adam_moment_max"] > 0
    targets = 4 * 8 * 8 * 2  # iterations x num_steps x num_envs x agents
    np.testing.assert_allclose(run["value_stats_count"], [targets + 1e-4] * 2, rtol=1e-6)


@pytest.mark.parametrize("name", RUNNERS)
def test_the_run_log_records_the_device_layout(child, name):
    layout = child["runs"][name]["layout"]
    assert layout == {
        "num_devices": 4,
        "platform": "cpu",
        "device_kind": layout["device_kind"],
        "mesh_axis": "devices",
        "batch": "num_envs",
        "batch_size": 8,
        "per_device": 2,
    }


def test_bad_device_requests_fail_before_anything_compiles(child):
    errors = child["errors"]
    assert errors["too_many"].startswith("ConfigError: num_devices=8, but only 4 cpu device(s) are present")
    assert errors["not_divisible"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4"), (
        errors["not_divisible"]
    )
    assert (
        "a minibatch (num_envs * num_steps / num_minibatches = 2) must be a multiple of num_devices (4)"
        in (errors["minibatch"])
    ), errors["minibatch"]
    assert (
        "a minibatch (num_envs / num_minibatches = 2) must be a multiple of num_devices (4)"
        in (errors["recurrent_minibatch"])
    ), errors["recurrent_minibatch"]
    assert child["compiled_before_errors"] == 0
    assert child["dirs_written"] == [], "a refused run writes nothing"


def test_the_runners_declare_their_envs_axis():
    config = IPPOConfig(env_id="Foraging-5x5-2p-1f-coop-v3", num_envs=8, num_steps=8, total_timesteps=64)
    for make in (make_ippo_runner, make_mappo_runner, make_rec_mappo_runner):
        sharding = make(config).sharding
        assert (sharding.batch, sharding.size) == ("num_envs", 8)
        # The per-device runner is not split again.
        assert sharding.make(devices.DeviceAxis(devices.MESH_AXIS, 2)).sharding is None
    assert jax.device_count() == 1
    with pytest.raises(ConfigError, match=r"num_devices=2, but only 1 cpu device\(s\) are present"):
        devices.check_devices(2, make_ippo_runner(config).sharding)
