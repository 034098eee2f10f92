"""Many devices (``num_devices``): PPO's envs split over 4 simulated CPU devices equal the
one-device run of the same global batch; bad requests fail before anything compiles.

The 4-device checks run in a child process (``devices_child.py``), because the device count
is fixed when jax starts; this process keeps its one device.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import devices
from lamella.agents.config import ConfigError
from lamella.agents.distributions import Categorical, Gaussian
from lamella.agents.ppo import PPOConfig, make_ppo_runner
from lamella.agents.ppo_update import check_ppo_sizes
from lamella.agents.runner import hashed_keys
from lamella.agents.testing import BanditConfig, device_child, make_bandit_runner
from lamella.envs import random as fast_random
from lamella.envs.wrappers import RunningMeanStd

CHILD = os.path.join(os.path.dirname(__file__), "devices_child.py")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    # Once per session, however pytest-xdist spreads this module's tests over workers.
    return device_child(CHILD, tmp_path_factory.getbasetemp())


def test_a_child_past_its_timeout_fails_once_and_says_so(tmp_path):
    """A device child that runs too long fails naming the timeout, and a second ask (another
    xdist worker) reads that failure instead of starting the child again. About 2 s wall."""
    script = tmp_path / "sleeping_child.py"
    script.write_text("import time\ntime.sleep(60)\n")
    base = tmp_path / "base"
    base.mkdir()
    with pytest.raises(AssertionError, match="ran past its timeout of 2 s"):
        device_child(str(script), base, timeout=2)
    script.write_text("print('{}')\n")  # would succeed if it ran again
    with pytest.raises(AssertionError, match="ran past its timeout of 2 s"):
        device_child(str(script), base, timeout=2)


def test_four_devices_train_as_one_device_on_the_same_global_batch(child):
    assert child["device_count"] == 4
    one, four = child["metrics"]["1"], child["metrics"]["4"]
    assert sorted(one) == sorted(four)
    # Evaluations and every training metric (losses, KL, clip fraction, entropy, returns).
    assert any(k.endswith("train_loss") for k in one) and any(k.endswith("mean_episode_return") for k in one)
    assert len(one) >= 3 * 8, "at least three evaluations with their metrics"
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    # The parameters after training, and the env states (keys sliced exactly: equal bits).
    assert child["params_max_abs_diff"] <= 1e-5 * max(1.0, child["params_max_abs"])
    assert child["obs_equal"]
    # Training changed the parameters, so the comparison compares something.
    assert any(
        one[k] != one[k.replace("step_2", "step_0")] for k in one if "step_2" in k and "return" in k
    ) or any(abs(v) > 0 for k in one if k.endswith("train_loss") for v in one[k])


@pytest.mark.parametrize("run", ["compiled_after_ahead", "sweep_compiled_after_ahead"])
def test_the_sharded_programs_compiled_ahead_are_the_ones_called(child, run):
    late = [name for name in child[run] if any(p in name for p in ("chunk", "evaluate", "init", "shard"))]
    assert late == [], f"compiled again at their first call: {late}"
    assert "jit(sharded_chunk)" in child["compiled_chunks"], "the compile log must see the programs it checks"


def test_the_run_log_records_the_device_layout(child):
    assert child["layout"] == {
        "num_devices": 4,
        "platform": "cpu",
        "device_kind": child["layout"]["device_kind"],
        "mesh_axis": "devices",
        "batch": "num_envs",
        "batch_size": 8,
        "per_device": 2,
    }
    assert child["checkpoint_devices"] == 4
    # Resumed on 4 devices (the stored count) after one chunk: the same run log, bit for bit.
    assert child["resumed_iterations"] == [2, 4]
    assert child["resumed_equal"]
    assert child["resume_error"].startswith("ConfigError: Cannot resume with num_devices=4: the run used 1")


def test_a_sweep_on_four_devices_is_the_sweep_on_one(child):
    # Two learning rates x two seeds, each member's envs split over the devices.
    one, four = child["sweep_metrics"]["1"], child["sweep_metrics"]["4"]
    assert sorted(one) == sorted(four)
    names = {key.split("/")[0] for key in one}
    assert names == {"ppo[learning_rate=0.0003]", "ppo[learning_rate=0.003]"}
    assert {key.split("/")[1] for key in one} == {"seed_0", "seed_1"}
    assert len(one) >= 4 * 3 * 8, "every member, three evaluations with their metrics"
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    # The variants train differently, so the comparison compares something.
    slow, fast = sorted(names)
    losses = [
        key for key in one if key.startswith(slow) and key.endswith("train_loss") and "step_0" not in key
    ]
    assert losses and any(one[k] != one[k.replace(slow, fast, 1)] for k in losses)
    assert (child["sweep_layout"]["num_devices"], child["sweep_layout"]["per_device"]) == (4, 2)
    assert child["sweep_devices"] == 4


def test_es_on_four_devices_is_es_on_one(child):
    # The population split over the devices: every device plays its block of members and tells
    # the strategy every member's return (gathered in order), so the strategy states agree.
    one, four = child["es_metrics"]["1"], child["es_metrics"]["4"]
    assert sorted(one) == sorted(four)
    assert len(one) >= 3 * 5, "three evaluations with their metrics"
    for key in one:
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    # Pendulum returns differ from member to member and generation to generation: a member
    # told another's return would change the strategy's state.
    assert len({one[k][0] for k in one if k.endswith("train_max_return")}) >= 2
    # The state includes the observation statistics, pooled over the devices' blocks.
    assert child["es_state_max_abs_diff"] <= 1e-5
    assert child["es_obs_count"] == [pytest.approx(8 * 20 * 4 + 1e-4)] * 2
    assert child["es_layout"]["batch"] == "population_size"
    assert (child["es_layout"]["batch_size"], child["es_layout"]["per_device"]) == (8, 2)
    assert child["errors"]["es_not_divisible"].startswith(
        "ConfigError: population_size=6 is not divisible by num_devices=4"
    )


def test_a_device_block_of_a_rollout_is_that_block_of_the_one_device_rollout(child):
    # Bare Pendulum with 12-step episodes: the collector's resets and Gaussian sampling are covered.
    assert child["rollout_dones"] >= 8
    obs, raw_action, reward, done = child["rollout_max_abs_diff"]
    assert done == 0.0 and obs <= 1e-5 and raw_action <= 1e-5 and reward <= 1e-4


def test_four_devices_record_every_env_in_order(child):
    # PPO recorded on 4 devices (2 envs each) holds the 1-device run's steps: 8 envs x 4
    # iterations x 16 steps, in order (the floats up to the rounding of statistics pooled over
    # devices; actions and flags exactly).
    recorded = child["recorded"]
    assert recorded["shapes"]["observations"] == [8, 64, 4] and recorded["shapes"]["actions"] == [8, 64]
    differences = recorded["max_abs_diff"]
    assert sorted(differences) == ["actions", "observations", "rewards", "terminals", "truncations"]
    assert differences["actions"] == differences["terminals"] == differences["truncations"] == 0, differences
    assert max(differences.values()) <= 1e-4, differences
    assert recorded["episode_ends"] > 0


def test_bad_device_requests_fail_before_anything_compiles(child):
    errors = child["errors"]
    assert errors["too_many"].startswith("ConfigError: num_devices=8, but only 4 cpu device(s) are present")
    assert "--xla_force_host_platform_device_count=8" in errors["too_many"]
    assert errors["not_divisible"].startswith("ConfigError: num_envs=6 is not divisible by num_devices=4"), (
        errors["not_divisible"]
    )
    assert "Set num_envs to a multiple of 4 (for example 8), or num_devices=3" in errors["not_divisible"]
    assert (
        "a minibatch (num_envs * num_steps / num_minibatches = 2) must be a multiple of num_devices (4)"
        in (errors["minibatch"])
    )
    assert "does not split its batch over devices" in errors["no_sharding"]
    assert errors["sweep_not_divisible"].startswith(
        "ConfigError: num_envs=6 is not divisible by num_devices=4"
    )
    assert errors["sweep_plan_not_divisible"].startswith(
        "ConfigError: num_envs=6 is not divisible by num_devices=4"
    )
    assert child["compiled_before_errors"] == 0
    assert child["dirs_written"] == [], "a refused run writes nothing"


def test_more_devices_than_present_in_this_process(tmp_path):
    assert jax.device_count() == 1
    with pytest.raises(ConfigError, match=r"num_devices=2, but only 1 cpu device\(s\) are present"):
        devices.check_devices(2, make_ppo_runner(PPOConfig()).sharding)
    with pytest.raises(ConfigError, match="num_devices must be a positive int"):
        devices.check_devices(0, None)
    assert devices.check_devices(1, make_bandit_runner(BanditConfig()).sharding) == 1


def test_ppo_sizes_with_devices():
    check_ppo_sizes(PPOConfig(num_envs=8, num_steps=16, num_minibatches=4), num_devices=4)
    with pytest.raises(ConfigError, match=r"num_envs \(6\) must be a multiple of num_devices \(4\)"):
        check_ppo_sizes(PPOConfig(num_envs=6, num_steps=16, num_minibatches=2), num_devices=4)
    with pytest.raises(ConfigError, match=r"a minibatch \(num_envs / num_minibatches = 2\)"):
        check_ppo_sizes(
            PPOConfig(num_envs=8, num_minibatches=4, recurrent=True), recurrent=True, num_devices=4
        )


def test_bits_at_an_index_are_the_full_draws_bits():
    @jax.jit
    def draws(key):
        out = []
        for stream in (0, 1, 2):  # stream 0 starts with the key's own words: positions 0 and 1
            full = fast_random.bits(key, (5, 12), stream, vector=True)
            block = fast_random.bits(key, stream=stream, index=devices.block_index((5, 12), 1, 3, 4))
            whole = fast_random.bits(key, stream=stream, index=devices.block_index((60,), 0, 0, 60))
            out += [(block, full[:, 3:7]), (whole, full.ravel())]
        return out

    for got, expected in draws(jax.random.key(7)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_a_block_of_hashed_keys_and_of_samples():
    @jax.jit
    def draws(key):
        keys = jax.random.key_data(hashed_keys(key, (6, 8)))
        block = jax.random.key_data(hashed_keys(key, (6, 8), block=(1, jnp.int32(4), 2)))
        logits = jax.random.normal(jax.random.key(0), (8, 3))
        mean = jnp.linspace(-1.0, 1.0, 16).reshape(8, 2)
        low, high, log_std = -jnp.ones(2), jnp.ones(2), jnp.zeros(2)
        return (
            (block, keys[:, 4:6]),
            (Categorical(logits[4:6]).sample(key, 4), Categorical(logits).sample(key)[4:6]),
            (
                Gaussian(mean[2:4], log_std, low, high).sample(key, 2),
                Gaussian(mean, log_std, low, high).sample(key)[2:4],
            ),
        )

    for got, expected in draws(jax.random.key(3)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_one_device_axis_is_the_identity():
    axis = devices.DeviceAxis()
    x = {"a": jnp.arange(4.0)}
    assert axis.mean(x) is x and axis.sum(x) is x and axis.gather(x) is x and axis.take(x) is x
    assert int(axis.position()) == 0 and axis.axis_names("envs") == "envs"
    stats = RunningMeanStd.zeros((2,))
    batch = jnp.arange(12.0).reshape(3, 2, 2)
    for got, expected in zip(
        jax.tree.leaves(axis.update_stats(stats, batch)),
        jax.tree.leaves(stats.update_batch(batch)),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
