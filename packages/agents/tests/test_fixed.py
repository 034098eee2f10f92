"""Fixed and scripted agents stand in any agent slot."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents import evaluate_agent, make_constant_agent, make_random_agent, make_scripted_agent
from lamella.agents.runner import episode_frames
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


class _CountdownEnv:
    """An episode lasts 2 to 5 steps (drawn at reset); ``info["count"]`` is the step number and
    ``info["left"]`` the steps left, both changing past the episode's end, so only the value of
    the last step is right. The observation is ``[t, 1]`` at step ``t`` (counting on past the end)."""

    num_agents = 1

    def reset(self, key, params):
        length = 2 + jax.random.randint(key, (), 0, 4)
        return jnp.array([0.0, 1.0]), (jnp.zeros((), jnp.int32), length)

    def step(self, key, state, action, params):
        t, length = state
        t = t + 1
        info = {"count": t.astype(jnp.float32), "left": length - t, "tag": jnp.zeros(2)}
        obs = jnp.stack([t.astype(jnp.float32), jnp.ones(())])
        return obs, (t, length), jnp.ones(()), t >= length, jnp.zeros((), bool), info


def test_evaluate_agent_returns_info_entries_from_each_episodes_last_step():
    """``final_info`` gives ``info[name]`` of the step each episode ended on (lengths 2-5), or of
    the last step played when the step cap stops an episode first (cap 4)."""
    env, agent = _CountdownEnv(), make_constant_agent(0)
    final_info = ("count", "left")
    out = jax.jit(lambda key: evaluate_agent(agent, (), env, None, key, 16, 4, (), final_info=final_info))(
        jax.random.key(0)
    )
    lengths = np.asarray(out["episode_length"])
    assert set(lengths.tolist()) == {2, 3, 4}
    np.testing.assert_array_equal(np.asarray(out["count"]), lengths.astype(np.float32))
    # 0 left where the episode ended, 1 where the cap cut a 5-step episode at step 4.
    np.testing.assert_array_equal(np.asarray(out["left"]), np.where(lengths == 4, out["left"], 0.0))
    assert set(np.asarray(out["left"]).tolist()) == {0.0, 1.0}
    assert out["count"].dtype == out["left"].dtype == jnp.float32
    for names, match in (
        (("missing",), "does not report"),
        (("tag",), "one value per env"),
        (("success",), "own"),
    ):
        with pytest.raises(ValueError, match=match):
            evaluate_agent(agent, (), env, None, jax.random.key(0), 4, 4, (), final_info=names)


def test_evaluate_agent_sums_the_observations_each_episode_acted_on():
    """``observation_moments`` sums the observations ``[t, 1]`` of steps ``0 .. L - 1`` of an
    episode of ``L`` steps (lengths 2-4 under cap 4): not the observation after its last step,
    nor those past its end."""
    env, agent = _CountdownEnv(), make_constant_agent(0)
    out = jax.jit(lambda key: evaluate_agent(agent, (), env, None, key, 16, 4, (), observation_moments=True))(
        jax.random.key(0)
    )
    lengths = np.asarray(out["episode_length"]).astype(np.float32)
    assert set(lengths.tolist()) == {2.0, 3.0, 4.0}
    expected_sum = np.stack([lengths * (lengths - 1) / 2, lengths], -1)
    expected_sq = np.stack([(lengths - 1) * lengths * (2 * lengths - 1) / 6, lengths], -1)
    np.testing.assert_array_equal(np.asarray(out["observation_sum"]), expected_sum)
    np.testing.assert_array_equal(np.asarray(out["observation_sum_sq"]), expected_sq)
    with pytest.raises(ValueError, match="own"):
        evaluate_agent(agent, (), env, None, jax.random.key(0), 4, 4, (), final_info=("observation_sum",))


def test_episode_frames_end_on_the_state_the_episode_ended_in():
    # A constant push tips CartPole's pole over in about ten steps. Through AutoReset the step
    # that ends the episode returns the next episode's reset state; the frames must not show it.
    bare, params = lamella.envs.make("CartPole-v1", autoreset=False)
    wrapped, _ = lamella.envs.make("CartPole-v1")
    agent = make_constant_agent(0, spaces.Discrete(2))
    key = jax.random.key(3)
    frames, length = jax.jit(lambda k: episode_frames(agent, (), bare, params, k, 50, ()))(key)
    through_autoreset = jax.jit(lambda k: episode_frames(agent, (), wrapped, params, k, 50, ()))(key)
    frames, length = np.asarray(frames), int(length)
    assert frames.shape[0] == 51 and frames.dtype == np.uint8
    assert 3 < length < 51  # the pole fell: the episode ended before the step cap
    np.testing.assert_array_equal(np.asarray(through_autoreset[0]), frames)
    assert int(through_autoreset[1]) == length
    # After the end every frame repeats the last state, which is not where the episode began.
    assert (frames[length:] == frames[length - 1]).all()
    assert (frames[length - 1] != frames[0]).any()


def test_episode_frames_of_a_batch_draw_its_first_env():
    """``num_envs=3``: a policy that only takes batches of three acts on three envs; the frames
    and the length are the first env's. Env 0 is pushed over (about ten steps); envs 1 and 2 are
    balanced by the rule above (episodes of 150 steps and more on average), so a drawing of
    either would run far longer."""
    env, params = lamella.envs.make("CartPole-v1", autoreset=False)

    def act(obs):
        assert obs.shape == (3, 4), obs.shape  # traced once: the batch the drawing acts on
        balance = (obs[:, 2] + obs[:, 3] > 0).astype(jnp.int32)
        return balance.at[0].set(0)

    agent = make_scripted_agent(act, batched=True)
    frames, length = jax.jit(lambda k: episode_frames(agent, (), env, params, k, 50, (), num_envs=3))(
        jax.random.key(3)
    )
    frames, length = np.asarray(frames), int(length)
    assert frames.shape == (
        51,
        *np.asarray(env.render(env.reset(jax.random.key(0), params)[1], params)).shape,
    )
    assert 3 < length < 20  # env 0's episode: the pole fell long before the cap
    assert (frames[length:] == frames[length - 1]).all() and (frames[length - 1] != frames[0]).any()
