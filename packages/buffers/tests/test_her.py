"""HER on device: exact goals and rewards on hand-built episodes, relabel rate, episode boundaries."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.buffers as lb


def compute_reward(achieved_goal, desired_goal):
    """Sparse goal reward, as Fetch: 0 on success, -1 otherwise (one pair of goals)."""
    return -(jnp.linalg.norm(achieved_goal - desired_goal) > 0.1).astype(jnp.float32)


def goal_stream(done):
    """Transitions whose goals encode (env, time): achieved goal of next_obs = 1000 env + time + 0.5."""
    num_envs, steps = done.shape
    code = np.arange(steps, dtype=np.float32) + 1000 * np.arange(num_envs, dtype=np.float32)[:, None]
    obs = {
        "observation": jnp.asarray(code[..., None]),
        "achieved_goal": jnp.asarray(code[..., None]),
        "desired_goal": jnp.full((num_envs, steps, 1), -7.0),
    }
    next_obs = {**obs, "achieved_goal": jnp.asarray(code[..., None] + 0.5)}
    return lb.Transition(
        obs=obs,
        action=jnp.zeros((num_envs, steps, 2)),
        reward=jnp.full((num_envs, steps), -1.0),
        terminated=jnp.zeros((num_envs, steps), bool),
        truncated=jnp.asarray(done),
        next_obs=next_obs,
    )


def fill(buffer, data, chunk):
    add = jax.jit(buffer.add)
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    steps = data.reward.shape[1]
    for lo in range(0, steps, chunk):
        state = add(state, jax.tree.map(lambda x: x[:, lo : lo + chunk], data))
    return state


# Hand-built: T = 6 slots per env, 8 steps added, so steps 0 and 1 are overwritten.
# env 0: episodes [0, 2], [3, 5], [6, 7 running];  env 1: [0, 1], [2, 3], [4, 5], [6, 7].
HAND_DONE = np.array([[0, 0, 1, 0, 0, 1, 0, 0], [0, 1, 0, 1, 0, 1, 0, 1]], bool)
# (env, time) -> (first, last) stored step of its episode.
HAND_BOUNDS = {
    (0, 2): (2, 2),
    **{(0, t): (3, 5) for t in (3, 4, 5)},
    **{(0, t): (6, 7) for t in (6, 7)},
    **{(1, t): (2, 3) for t in (2, 3)},
    **{(1, t): (4, 5) for t in (4, 5)},
    **{(1, t): (6, 7) for t in (6, 7)},
}


BATCH = 2048


@pytest.fixture(scope="module")
def buffer():
    return lb.make_episode_buffer(num_envs=2, max_length_time_axis=6, sample_batch_size=BATCH)


@pytest.fixture(scope="module")
def samplers(buffer):
    """One compiled sampler per strategy, shared by every test (p = 0.8)."""
    return {
        strategy: jax.jit(lb.make_her_sampler(buffer, compute_reward, strategy, relabel_probability=0.8))
        for strategy in ("future", "final", "episode")
    }


@pytest.fixture(scope="module")
def hand_state(buffer):
    return fill(buffer, goal_stream(HAND_DONE), chunk=4)


@pytest.mark.parametrize("strategy", ["final", "future", "episode"])
def test_hand_built_goals_and_rewards_exact(buffer, samplers, hand_state, strategy):
    out = jax.device_get(samplers[strategy](hand_state, jax.random.key(0)))
    tr = out.transition
    assert 0 < out.relabelled.sum() < BATCH
    assert set(zip(out.env_index.tolist(), out.time.tolist())) == set(HAND_BOUNDS)  # every stored step
    seen_goal_times = set()
    for i in range(BATCH):
        env, t, j = int(out.env_index[i]), int(out.time[i]), int(out.goal_time[i])
        assert tr.obs["achieved_goal"][i, 0] == 1000 * env + t  # the rest is as stored
        assert tr.next_obs["achieved_goal"][i, 0] == 1000 * env + t + 0.5
        if not out.relabelled[i]:
            assert tr.obs["desired_goal"][i, 0] == tr.next_obs["desired_goal"][i, 0] == -7.0
            assert tr.reward[i] == -1.0
            continue
        first, last = HAND_BOUNDS[(env, t)]
        expected_range = {"final": (last, last), "future": (t, last), "episode": (first, last)}[strategy]
        assert expected_range[0] <= j <= expected_range[1], (strategy, env, t, j)
        seen_goal_times.add((env, t, j))
        goal = 1000 * env + j + 0.5
        assert tr.obs["desired_goal"][i, 0] == goal and tr.next_obs["desired_goal"][i, 0] == goal
        assert tr.reward[i] == (0.0 if j == t else -1.0)  # success exactly when the goal is this step's
    # Every allowed goal step shows up, e.g. for env 0 at t = 4 in its episode [3, 5].
    allowed = {"final": {5}, "future": {4, 5}, "episode": {3, 4, 5}}[strategy]
    assert {j for e, s, j in seen_goal_times if (e, s) == (0, 4)} == allowed


def test_relabel_fraction_is_the_probability(samplers, hand_state):
    fractions = [float(samplers["future"](hand_state, jax.random.key(k)).relabelled.mean()) for k in range(4)]
    # Binomial standard deviation over 8192 draws: sqrt(0.16 / 8192) = 0.0044.
    assert abs(np.mean(fractions) - 0.8) < 0.02, fractions


def reference_bounds(done, T):
    """Plain-Python episode bounds of every stored (env, time) after adding all of ``done``."""
    num_envs, steps = done.shape
    oldest = max(steps - T, 0)
    bounds = {}
    for env in range(num_envs):
        start = 0
        for t in range(steps):
            end = next((u for u in range(t, steps) if done[env, u]), steps - 1)
            if t >= oldest:
                bounds[(env, t)] = (max(start, oldest), end)
            if done[env, t]:
                start = t + 1
    return bounds


@pytest.fixture(scope="module")
def random_episodes(buffer):
    rng = np.random.default_rng(0)
    done = rng.random((2, 32)) < 0.25  # 32 steps into 6 slots per env: wraps around 5 times
    return fill(buffer, goal_stream(done), chunk=4), reference_bounds(done, 6)


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_goals_never_cross_episode_boundaries(samplers, random_episodes, strategy):
    state, bounds = random_episodes
    out = jax.device_get(samplers[strategy](state, jax.random.key(2)))
    goal = out.transition.obs["desired_goal"][:, 0]
    assert set(zip(out.env_index.tolist(), out.time.tolist())) == set(bounds)
    for env, t, j, r, g in zip(out.env_index, out.time, out.goal_time, out.relabelled, goal):
        first, last = bounds[(int(env), int(t))]
        low = {"future": t, "final": last, "episode": first}[strategy]
        assert low <= j <= last
        assert g == (1000 * env + j + 0.5 if r else -7.0)
    if strategy != "final":  # uniform on [low, end]: mean relative offset near 1/2
        first_last = np.array([bounds[(int(e), int(t))] for e, t in zip(out.env_index, out.time)])
        low = out.time if strategy == "future" else first_last[:, 0]
        span = first_last[:, 1] - low
        rel = (out.goal_time - low)[span > 0] / span[span > 0]
        assert abs(rel.mean() - 0.5) < 0.05


def test_bad_arguments_fail_early(buffer):
    with pytest.raises(ValueError, match="strategy"):
        lb.make_her_sampler(buffer, compute_reward, "futures")
    with pytest.raises(ValueError, match="relabel_probability"):
        lb.make_her_sampler(buffer, compute_reward, relabel_probability=1.5)
    with pytest.raises(TypeError, match="make_episode_buffer"):
        lb.make_her_sampler(object(), compute_reward)
    plain = lb.make_episode_buffer(num_envs=1, max_length_time_axis=4, sample_batch_size=2)
    plain_state = plain.init(lb.transition_like(jnp.zeros(3), jnp.zeros(())))
    sample = lb.make_her_sampler(plain, compute_reward)
    with pytest.raises(TypeError, match="achieved_goal"):
        jax.eval_shape(functools.partial(sample, plain_state), jax.random.key(0))


def test_second_call_compiles_nothing(samplers, hand_state, random_episodes):
    sample = samplers["episode"]
    sample(hand_state, jax.random.key(5))
    sample(random_episodes[0], jax.random.key(6))  # another state of the same shapes
    assert sample._cache_size() == 1


def test_compute_reward_must_give_one_reward_per_pair(buffer, hand_state):
    """keepdims=True gave a (batch, 1) reward, silently broadcast to a (batch, batch) one."""

    def keepdims_reward(achieved_goal, desired_goal):
        return -(jnp.linalg.norm(achieved_goal - desired_goal, axis=-1, keepdims=True) > 0.1).astype(
            jnp.float32
        )

    sample = lb.make_her_sampler(buffer, keepdims_reward, batch_size=8)
    with pytest.raises(
        ValueError,
        match=r"compute_reward\(achieved_goal, desired_goal\) returned shape \(1,\) for one pair of goals, expected \(\)",
    ):
        jax.eval_shape(sample, hand_state, jax.random.key(0))


def test_goal_shapes_must_match(buffer):
    """An achieved goal of another shape than the desired one: an internal broadcasting error before."""
    data = goal_stream(HAND_DONE)
    data = data.replace(
        obs={**data.obs, "desired_goal": jnp.zeros((2, 8, 3))},
        next_obs={**data.next_obs, "desired_goal": jnp.zeros((2, 8, 3))},
    )
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    sample = lb.make_her_sampler(buffer, compute_reward, batch_size=8)
    with pytest.raises(ValueError, match=r"achieved_goal has shape \(1,\) per step but desired_goal \(3,\)"):
        jax.eval_shape(sample, state, jax.random.key(0))


def test_relabel_probability_may_be_traced(buffer, hand_state):
    """A sweep over the relabel probability inside one compiled program."""

    def relabelled(probability):
        return lb.make_her_sampler(buffer, compute_reward, relabel_probability=probability, batch_size=8)(
            hand_state, jax.random.key(0)
        ).relabelled

    assert jax.eval_shape(jax.vmap(relabelled), jnp.array([0.2, 0.8])).shape == (2, 8)
