"""Many devices (``num_devices``) with lamella-gcrl's plug-ins: HER relabels from the loop's
replicated buffer, and a goal setter runs on the gathered batch, so the off-policy loop with its
envs split over 4 simulated CPU devices equals the one-device run of the same global batch.

The 4-device runs happen in a child process (``devices_child.py``), because the device count
is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from lamella.agents.testing import device_child

CHILD = os.path.join(os.path.dirname(__file__), "devices_child.py")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    # Once per session, however pytest-xdist spreads this module's tests over workers.
    return device_child(CHILD, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("name", ["sac_her", "td3_her_setter"])
def test_her_and_goal_setters_on_four_devices_are_the_one_device_run(child, name):
    assert child["device_count"] == 4
    run = child[name]
    one, four = run["metrics"]["1"], run["metrics"]["4"]
    assert sorted(one) == sorted(four)
    assert any(k.endswith("train_success_rate") for k in one) and any(
        k.endswith("train_q_target") for k in one
    )
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
    assert run["train_state_max_abs_diff"] <= 1e-5 * max(1.0, run["train_state_max_abs"])
    assert run["setter_state_max_abs_diff"] <= 1e-6
    # Training changed something, so the comparison compares something: 29 updates on
    # relabelled batches moved the critics away from their target copies.
    assert run["updates"] == [29, 29]
    assert run["critic_moved"] > 1e-4
    assert all(v[0] != 0 for k, v in one.items() if k.endswith("train_critic_loss"))


def test_the_goal_setter_drew_goals(child):
    # goal_override's state (each env's goal and its age) is replicated and the same on 4 devices.
    assert child["td3_her_setter"]["setter_state_max_abs"] > 0.01
