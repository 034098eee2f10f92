"""Fixed and scripted agents stand in any agent slot."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents import evaluate_agent, make_constant_agent, make_random_agent, make_scripted_agent
from lamella.envs import spaces

OBS = jnp.zeros((6, 4))


@pytest.mark.parametrize(
    "space",
    [spaces.Discrete(3), spaces.MultiDiscrete([2, 5]), spaces.Box(-1.0, 2.0, (2,))],
    ids=["discrete", "multidiscrete", "box"],
)
def test_random_agent_samples_the_space(space):
    agent = make_random_agent(space)
    train_state, memory = agent.init(jax.random.key(0), OBS)
    action, train_state, memory = jax.jit(agent.policy)(jax.random.key(1), train_state, OBS, memory)
    assert action.shape == (6, *space.shape)
    assert bool(jnp.all(jax.vmap(space.contains)(action)))
    other, _, _ = agent.policy(jax.random.key(2), train_state, OBS, memory)
    assert not np.array_equal(action, other)
    assert agent.update(None, train_state, memory) == ((), (), {})


def test_constant_agent_checks_and_repeats_its_action():
    agent = make_constant_agent(1, spaces.Discrete(2))
    action, _, _ = agent.policy(jax.random.key(0), (), OBS, ())
    np.testing.assert_array_equal(action, np.ones(6))
    with pytest.raises(ValueError, match="not in the action space"):
        make_constant_agent(3, spaces.Discrete(2))
    with pytest.raises(ValueError, match="shape"):
        make_constant_agent([0.0, 1.0], spaces.Box(-1, 1, (3,)))


def test_scripted_agent_balances_cartpole_better_than_random():
    env, params = lamella.envs.make("CartPole-v1")
    # Push towards the side the pole leans to.
    scripted = make_scripted_agent(lambda obs: (obs[2] + obs[3] > 0).astype(jnp.int32))
    random_agent = make_random_agent(env.action_space(params))
    run = jax.jit(
        lambda agent_index, key: jax.lax.switch(
            agent_index,
            [
                lambda k: evaluate_agent(scripted, (), env, params, k, 8, 500, ())["episode_return"],
                lambda k: evaluate_agent(random_agent, (), env, params, k, 8, 500, ())["episode_return"],
            ],
            key,
        )
    )
    scripted_returns = run(0, jax.random.key(0))
    random_returns = run(1, jax.random.key(0))
    assert scripted_returns.shape == (8,)
    assert scripted_returns.mean() > 150 > random_returns.mean()
