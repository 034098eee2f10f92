"""Many devices (``num_devices``): DR and PLR with their envs (levels) split over 4 simulated CPU
devices equal the one-device run of the same global batch, level buffer included; bad requests
fail before anything compiles.

The 4-device runs happen in one child process (``devices_child.py``), because the device count
is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from lamella.agents import devices
from lamella.agents.testing import device_child
from lamella.ued.runners import DRConfig, ParallelPLRConfig, PLRConfig, make_ued_runner

CHILD = os.path.join(os.path.dirname(__file__), "devices_child.py")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    # Once per session, however pytest-xdist spreads this module's tests over workers.
    return device_child(CHILD, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("name", ["dr", "plr"])
def test_four_devices_train_as_one_device_on_the_same_global_batch(child, name):
    assert child["device_count"] == 4
    run = child["runs"][name]
    one, four = run["metrics"]["1"], run["metrics"]["4"]
    assert sorted(one) == sorted(four)
    # Three evaluations with the training metrics: losses, every level score, returns.
    for key in ("train_loss", "train_score_max_mc", "train_train_return", "level_return_level_0"):
        assert any(k.endswith(key) for k in one), (key, sorted(one))
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
    # Training did something the comparison can see: non-zero losses and training returns.
    assert any(abs(one[k][0]) > 0 for k in one if k.endswith("train_value_loss"))
    assert any(one[k][0] > 0 for k in one if k.endswith("train_train_return"))
    assert run["params_max_abs_diff"] <= 1e-5 * max(1.0, run["params_max_abs"])
    assert run["layout"] == {
        "num_devices": 4,
        "platform": "cpu",
        "device_kind": run["layout"]["device_kind"],
        "mesh_axis": "devices",
        "batch": "num_envs",
        "batch_size": 8,
        "per_device": 2,
    }


def test_plr_buffer_is_the_one_device_buffer(child):
    # Scores come from the gathered rollout, so every device inserts and updates the same levels.
    run = child["runs"]["plr"]
    one = run["metrics"]["1"]
    replays = [one[k][0] for k in one if k.endswith("train_replay")]
    assert 0 < max(replays), "the buffer replayed levels (scores from the gathered rollout were used)"
    assert min(replays) < 1, "and inserted new ones"
    assert run["buffer_levels_equal"]
    assert run["buffer_max_abs_diff"] <= 1e-4


def test_bad_device_requests_fail_before_anything_compiles(child):
    errors = child["errors"]
    assert errors["not_divisible"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4")
    # Parallel PLR / ACCEL play several batches in one rollout: not split yet, and they say so.
    assert "does not split its batch over devices" in errors["parallel"]
    assert child["compiled_before_errors"] == 0
    assert child["dirs_written"] == [], "a refused run writes nothing"


def test_the_runners_declare_their_envs_axis():
    tiny = {"height": 5, "width": 5, "n_walls": 3, "max_episode_steps": 12, "num_envs": 8, "num_steps": 24}
    tiny |= {
        "num_minibatches": 1,
        "recurrent": False,
        "total_timesteps": 8 * 24 * 3,
        "eval_levels": ("random",),
    }
    for config in (DRConfig(**tiny), PLRConfig(**tiny, buffer_size=16)):
        sharding = make_ued_runner(config).sharding
        assert (sharding.batch, sharding.size) == ("num_envs", 8)
        assert sharding.make(devices.DeviceAxis(devices.MESH_AXIS, 2)).sharding is None
    assert make_ued_runner(ParallelPLRConfig(**tiny, buffer_size=16)).sharding is None
