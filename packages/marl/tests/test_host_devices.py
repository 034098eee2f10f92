"""Many devices on the PettingZoo host loop: ``train_host(..., num_devices=4)`` splits each
update's envs over 4 simulated CPU devices and equals the one-device run (mpe2
speaker-listener: feed-forward IPPO with continuous actions, recurrent MAPPO with discrete ones);
bad requests fail before any env is made.

The runs happen in one child process (``host_devices_child.py``), because the device count is
fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from lamella.agents.testing import device_child

CHILD = os.path.join(os.path.dirname(__file__), "host_devices_child.py")
RUNS = ("ippo_continuous", "rec_mappo_discrete")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    return device_child(CHILD, tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("name", RUNS)
def test_four_devices_update_as_one_device(child, name):
    assert child["device_count"] == 4
    run = child["runs"][name]
    one, four = run["train_metrics"]["1"], run["train_metrics"]["4"]
    assert len(one) == len(four) == 3  # 3 updates
    for a, b in zip(one, four, strict=True):
        assert sorted(a) == sorted(b) and {"loss", "value_loss", "entropy", "first_minibatch_kl"} <= set(a)
        for key in a:
            np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-6, err_msg=f"{name}: {key}")
        assert abs(a["first_minibatch_kl"]) < 1e-5 and abs(b["first_minibatch_kl"]) < 1e-5
    # The evaluations after each update (the acting that followed each update) and the parameters.
    np.testing.assert_allclose(run["eval_agent_returns"]["4"], run["eval_agent_returns"]["1"], rtol=1e-4)
    assert run["params_max_abs_diff"] <= 1e-5 * max(1.0, run["params_max_abs"])
    assert run["params_changed"] > 1e-3  # training moved the parameters: the equality is not trivial
    # Every value target of the 3 rollouts counted once, pooled over the devices.
    np.testing.assert_allclose(run["value_stats_count"], [3 * 8 * 8 * 2 + 1e-4] * 2, rtol=1e-6)
    # The train state comes back to the first device, where the loop acts.
    assert run["state_on_first_device"]


def test_bad_device_requests_fail_before_any_env_is_made(child):
    errors = child["errors"]
    assert errors["too_many"].startswith("ConfigError: num_devices=8, but only 4 cpu device(s) are present")
    assert errors["not_divisible"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4")
    assert (
        "a minibatch (num_envs * num_steps / num_minibatches = 2) must be a multiple of num_devices (4)"
        in (errors["minibatch"])
    )
    assert (
        "a minibatch (num_envs / num_minibatches = 2) must be a multiple of num_devices (4)"
        in (errors["recurrent_minibatch"])
    )
    assert errors["not_an_int"].startswith("ConfigError: num_devices must be a positive int")
    assert child["envs_made_before_errors"] == 0
