"""Many devices (``num_devices``): DR, ACCEL, Parallel ACCEL and population PAIRED with their envs
(levels) split over 4 simulated CPU devices equal the one-device run of the same global batch,
level buffer and every agent's parameters included; bad requests fail before anything compiles.

ACCEL's step runs PLR's new and replayed branches and its mutation branch (each asserted to have
run), Parallel ACCEL's runs Parallel PLR's batches and the batch of edits, and population PAIRED
runs PAIRED's runner and step (that of the minimax adversary too) with three students: four
cases, every UED runner's code, for the compile time of four runners.

The 4-device runs happen in one child process (``devices_child.py``), because the device count
is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from lamella.agents import devices
from lamella.agents.testing import device_child
from lamella.ued.paired import MinimaxConfig, PAIREDConfig, PopulationPAIREDConfig, make_paired_runner
from lamella.ued.runners import (
    ACCELConfig,
    DRConfig,
    ParallelACCELConfig,
    ParallelPLRConfig,
    PLRConfig,
    make_ued_runner,
)

CHILD = os.path.join(os.path.dirname(__file__), "devices_child.py")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    # Once per session, however pytest-xdist spreads this module's tests over workers.
    return device_child(CHILD, tmp_path_factory.getbasetemp())


# Metrics each run must log (three evaluations with the training metrics), and the ones whose
# first value shows that training did something the comparison can see (losses, returns, KL).
LOGGED = {
    "dr": ("train_loss", "train_score_max_mc", "train_train_return", "level_return_level_0"),
    "accel": ("train_loss", "train_score_max_mc", "train_buffer_mean_score", "level_return_level_0"),
    "parallel_accel": ("train_loss", "train_replay_solve_rate", "train_buffer_mean_score", "train_mutate"),
    "population_paired": (
        "train_teacher_loss",
        "train_student_loss_student_1",
        "train_student_return_student_2",
    ),
}
TRAINED = {
    "dr": ("train_value_loss", "train_train_return"),
    "accel": ("train_value_loss", "train_train_return"),
    "parallel_accel": ("train_value_loss", "train_approx_kl", "train_train_return"),
    "population_paired": (
        "train_teacher_value_loss",
        "train_teacher_approx_kl",
        "train_student_approx_kl_student_0",
        "train_student_approx_kl_student_1",
        "train_student_approx_kl_student_2",
        "train_teacher_return",
    ),
}
CASES = ["dr", "accel", "parallel_accel", "population_paired"]


def train_values(run: dict[str, Any], key: str) -> list[float]:
    """The 1-device run's training metric ``key`` at every evaluation (each a mean over iterations)."""
    one = run["metrics"]["1"]
    return [one[k][0] for k in sorted(one) if k.endswith(f"/{key}")]


@pytest.mark.parametrize("name", CASES)
def test_four_devices_train_as_one_device_on_the_same_global_batch(child, name):
    assert child["device_count"] == 4
    run = child["runs"][name]
    one, four = run["metrics"]["1"], run["metrics"]["4"]
    assert sorted(one) == sorted(four)
    for key in LOGGED[name]:
        assert any(k.endswith(key) for k in one), (key, sorted(one))
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
    for key in TRAINED[name]:
        assert any(abs(one[k][0]) > 0 for k in one if k.endswith(key)), key
    assert run["params_max_abs_diff"] <= 1e-5 * max(1.0, run["params_max_abs"])
    num_envs = 4 if name == "parallel_accel" else 8
    assert run["layout"] == {
        "num_devices": 4,
        "platform": "cpu",
        "device_kind": run["layout"]["device_kind"],
        "mesh_axis": "devices",
        "batch": "num_envs",
        "batch_size": num_envs,
        "per_device": num_envs // 4,
    }


@pytest.mark.parametrize("name", ["accel", "parallel_accel"])
def test_plr_buffer_is_the_one_device_buffer(child, name):
    # Scores come from the gathered rollout, so every device inserts and updates the same levels.
    run = child["runs"][name]
    replays, mutates = train_values(run, "train_replay"), train_values(run, "train_mutate")
    assert len(replays) == len(mutates) >= 2
    assert 0 < max(replays), "the buffer replayed levels (scores from the gathered rollout were used)"
    assert 0 < max(mutates), "and edits of replayed levels were played"
    assert max(train_values(run, "train_buffer_mean_edits")) > 0, "and inserted"
    if name == "accel":
        # The new-level branch: the first iteration (cold buffer) plays new levels, and an
        # evaluation interval in which no iteration replayed or mutated inserted only new ones.
        assert any(r == m == 0 for r, m in zip(replays, mutates, strict=True)), "and new levels were played"
        assert max(train_values(run, "train_buffer_size")) > 8, "and inserted"
    else:
        # Parallel ACCEL inserts new levels every iteration: the buffer filled past its first batch.
        assert max(train_values(run, "train_buffer_size")) > 12
    assert run["buffer_levels_equal"]
    assert run["buffer_max_abs_diff"] <= 1e-4


# The screenshots each case writes in its 6 iterations with screenshot_every=2 (intervals 0, 2, 4).
# ACCEL: the first interval is cold (new levels; the buffer grid once it holds a level), replays
# and their edits follow; Parallel ACCEL: the first iteration's three batches are all new levels.
SCREENSHOT_KINDS = {
    "dr": {"generated"},
    "accel": {"generated", "replayed", "mutated", "buffer"},
    "parallel_accel": {"generated", "replayed", "mutated", "buffer"},
}


@pytest.mark.parametrize("name", sorted(SCREENSHOT_KINDS))
def test_screenshots_on_four_devices_are_the_one_device_screenshots(child, name):
    """Each device runs the step's host callback with the same (replicated) levels: the run on 4
    devices writes exactly the files of the run on 1, pixel for pixel (the levels and the buffer
    are equal, see above), not 4 copies nor a device's block of levels."""
    one, four = (child["runs"][name]["screenshots"][n] for n in ("1", "4"))
    assert sorted(four) == sorted(one)
    assert {path.split(os.sep)[0] for path in one} == {"seed_0"}
    starts = {path.split(os.sep)[1].split("_")[1] for path in one}
    assert starts == {"000000", "000002", "000004"}, sorted(one)
    kinds = {path.rsplit("_", 1)[1].removesuffix(".png") for path in one}
    assert kinds == SCREENSHOT_KINDS[name], sorted(one)
    for path, picture in one.items():
        # A grid of all 8 (Parallel ACCEL: 4 per batch) levels of 5x5 cells, 7 * 8 pixels each.
        assert picture["shape"][0] > 7 * 8 and picture["shape"][2] in (3, 4), (path, picture)
        assert four[path] == picture, f"{name}: {path} differs on 4 devices"


def test_bad_device_requests_fail_before_anything_compiles(child):
    errors = child["errors"]
    assert errors["not_divisible"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4")
    # Parallel PLR / ACCEL split num_envs (each batch of their rollout), so that is what must divide.
    assert errors["parallel_not_divisible"].startswith(
        "ConfigError: num_envs=6 is not divisible by num_devices=4"
    )
    assert errors["teacher_minibatch"].startswith(
        "ConfigError: PAIREDConfig: a teacher minibatch (num_envs / teacher_num_minibatches = 2) must be "
        "a multiple of num_devices (4)"
    )
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
    paired = {"teacher_recurrent": False, "teacher_conv_filters": 4, "teacher_noise_dim": 4}
    runners = [
        make_ued_runner(config)
        for config in (
            DRConfig(**tiny),
            PLRConfig(**tiny, buffer_size=16),
            ParallelPLRConfig(**tiny, buffer_size=16),
            ACCELConfig(**tiny, buffer_size=16),
            ParallelACCELConfig(**tiny, buffer_size=16),
        )
    ]
    runners += [
        make_paired_runner(config(**tiny | paired))
        for config in (PAIREDConfig, PopulationPAIREDConfig, MinimaxConfig)
    ]
    for runner in runners:
        sharding = runner.sharding
        assert (sharding.batch, sharding.size) == ("num_envs", 8)
        assert sharding.make(devices.DeviceAxis(devices.MESH_AXIS, 2)).sharding is None
