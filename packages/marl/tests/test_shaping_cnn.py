"""``torso="cnn"``: Pax's IPD-in-the-Matrix CNN on the view, for the shaping and meta runners.

The runners hand each agent one flat row (the 6 inventory values, then the 5 x 5 x 10 view,
:mod:`lamella.marl.shaping.observations`); with ``torso="cnn"`` a learner's network takes the view
back out of the row (lamella-agents' ``ViewCNN``: one 3 x 3 convolution of 16 channels, ReLU,
flattened, the inventory joined after it: Pax's ``CNN_ipditm``).

* The runner builds that network: its parameters are the view CNN's (shapes and count), and the
  network reads the view (one cell changed changes the policy and the value) and the inventory.
* A tiny run of two feed-forward CNN learners (2 iterations of 8 steps on 2 envs, 2 seeds in one
  program) gives finite metrics, and each update's first minibatch recomputes the policy the
  learners acted with (``first_minibatch_kl`` 0 up to float error).
* A tiny meta run (1 generation of 2 members; a recurrent CNN meta-agent against recurrent CNN
  co-players) gives finite metrics and ``co_player_update_kl`` 0 up to float error.
* ``torso="cnn"`` on an env without an image view is refused naming the fix.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.agents.ppo import PPOConfig, make_actor_critic
from lamella.agents.runner import make_train
from lamella.envs import spaces
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
from lamella.marl.shaping.runner import ShapingConfig, make_shaping_runner

ITM = "IPDInTheMatrix-v0"
INVENTORY, VIEW = 6, (5, 5, 10)
CONFIG = ShapingConfig(
    env_id=ITM,
    agents=("ppo", "ppo"),
    torso="cnn",
    hidden_sizes=(),
    num_inner_steps=8,
    num_envs=2,
    num_steps=8,
    num_minibatches=2,
    num_epochs=2,
    learning_rate=5e-3,
    total_timesteps=2 * 2 * 8,
)


@pytest.fixture(scope="module")
def shaping_run():
    runner = make_shaping_runner(CONFIG)
    keys = jax.random.split(jax.random.key(0), 2)
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(keys)
    return state, jax.device_get(metrics)


def test_the_runner_builds_the_view_cnn_and_it_reads_the_view_and_the_inventory(shaping_run):
    state, _ = shaping_run
    params = jax.tree.map(lambda x: x[0, 0], state.train_states[0].params)  # seed 0, agent 0's instance
    conv = params["params"]["actor_torso"]["cnn"]["Conv_0"]
    assert conv["kernel"].shape == (3, 3, 10, 16) and conv["bias"].shape == (16,)
    features = 5 * 5 * 16 + INVENTORY  # 406
    assert params["params"]["head"]["Dense_0"]["kernel"].shape == (features, 5)
    # Actor and critic each: the convolution; then the linear policy (5 actions) and value heads.
    assert (
        sum(x.size for x in jax.tree.leaves(params))
        == 2 * (3 * 3 * 10 * 16 + 16) + features * 5 + 5 + features + 1
    )

    network = make_actor_critic(
        PPOConfig(torso="view_cnn", view_shape=VIEW, view_start=INVENTORY, hidden_sizes=()),
        spaces.Discrete(5),
    )
    obs = np.asarray(state.obs[0, :, 0])  # seed 0: agent 0's rows on the 2 envs, (2, 256)
    assert obs.shape == (2, INVENTORY + 250)

    def outputs(rows):
        _, dist, value = network.step(params, (), jnp.asarray(rows), jnp.zeros((2,), bool))
        return np.asarray(dist.logits), np.asarray(value)

    logits, value = outputs(obs)
    # One view cell (row 2, column 3, channel 1 of env 0's view) flipped: env 0's outputs change,
    # env 1's do not.
    cell = INVENTORY + np.ravel_multi_index((2, 3, 1), VIEW)
    view_changed = obs.copy()
    view_changed[0, cell] = 1.0 - view_changed[0, cell]
    logits_v, value_v = outputs(view_changed)
    assert np.abs(logits_v[0] - logits[0]).max() > 1e-6 and abs(value_v[0] - value[0]) > 1e-6
    np.testing.assert_array_equal(logits_v[1], logits[1])
    # An inventory value changed (env 0 holds 3 more red coins).
    inventory_changed = obs.copy()
    inventory_changed[0, 0] += 3.0
    logits_i, value_i = outputs(inventory_changed)
    assert np.abs(logits_i[0] - logits[0]).max() > 1e-6 and abs(value_i[0] - value[0]) > 1e-6


def test_a_tiny_cnn_run_is_finite_and_the_update_recomputes_the_acting_policy(shaping_run):
    _, metrics = shaping_run
    for name, value in metrics.items():
        assert np.all(np.isfinite(np.asarray(value, np.float64))), name
    assert np.asarray(metrics["reward"]).shape == (2, 2, 2)  # (seeds, iterations, agents)
    for i in (0, 1):
        kl = np.abs(np.asarray(metrics[f"learner_{i}_first_minibatch_kl"]))
        assert kl.shape == (2, 2) and kl.max() < 1e-5, (i, kl)
        # The learners did update (a KL that is 0 because nothing ran would pass the check above).
        assert np.all(np.abs(np.asarray(metrics[f"learner_{i}_approx_kl"])) > 1e-5), i


def test_a_tiny_meta_run_with_cnn_meta_agent_and_co_players():
    config = MetaConfig(
        env_id=ITM,
        torso="cnn",
        meta_torso="cnn",
        meta_recurrent=True,
        meta_rnn_hidden_size=8,
        co_player_recurrent=True,
        co_player_rnn_hidden_size=8,
        hidden_sizes=(8,),
        num_inner_steps=8,
        num_outer_steps=2,
        num_envs=2,
        num_opponents=1,
        num_minibatches=2,
        strategy="Open_ES",
        population_size=2,
        eval_episodes=1,
        learning_rate=5e-3,
    )
    config = dataclasses.replace(config, total_timesteps=config.steps_per_iteration)
    runner = make_meta_runner(config)
    state = runner.init(jax.random.key(0))
    _, metrics = jax.jit(runner.step)(state)
    metrics = jax.device_get(metrics)
    for name, value in metrics.items():
        assert np.all(np.isfinite(np.asarray(value, np.float64))), name
    assert float(metrics["co_player_update_kl"]) < 1e-5, metrics["co_player_update_kl"]


def test_cnn_on_an_env_without_an_image_view_is_refused_naming_the_fix():
    with pytest.raises(
        ConfigError,
        match=r"ShapingConfig.torso='cnn'.*IteratedPrisonersDilemma-v0.*no such view.*torso='mlp'",
    ):
        make_shaping_runner(ShapingConfig(torso="cnn"))
    with pytest.raises(
        ConfigError, match=r"MetaConfig.meta_torso='cnn'.*CoinGame-v0.*no such view.*torso='mlp'"
    ):
        make_meta_runner(MetaConfig(env_id="CoinGame-v0", meta_torso="cnn", num_inner_steps=16))
    with pytest.raises(
        ConfigError, match=r"MetaConfig.torso='cnn'.*IteratedPrisonersDilemma-v0.*torso='mlp'"
    ):
        make_meta_runner(MetaConfig(torso="cnn"))
    with pytest.raises(ConfigError, match=r"ShapingConfig.torso must be one of \('mlp', 'cnn'\), got 'conv'"):
        ShapingConfig(torso="conv").validate()


def test_the_cnn_presets():
    from lamella.agents.algorithms import load_algorithm

    shaping = load_algorithm("shaping").presets["ppo_v_ppo_in_the_matrix_cnn"]
    shaping.validate()
    assert (shaping.env_id, shaping.torso, shaping.recurrent) == (ITM, "cnn", True)
    meta = load_algorithm("meta_es").presets
    for name, recurrent in (
        ("good_shepherd_v_ppo_in_the_matrix_cnn", False),
        ("shaper_v_ppo_in_the_matrix_cnn", True),
    ):
        config = meta[name]
        config.validate()
        assert (config.env_id, config.torso, config.meta_torso) == (ITM, "cnn", "cnn"), name
        assert config.co_player_recurrent and config.meta_recurrent is recurrent, name
