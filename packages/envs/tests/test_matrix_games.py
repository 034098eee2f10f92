"""Iterated matrix games and the infinite matrix game: hand-computed values, rollouts, conformance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs import multi_agent as ma
from lamella.envs.testing import check_env

# The integrator registers these ids in lamella.envs; registering the same factories again is a no-op.
ma.register_all(le.register)
_IDS: list[str] = []
ma.register_all(lambda env_id, factory: _IDS.append(env_id))

# payoff[(a0, a1)] = (r0, r1), written out by hand from the documented tables.
EXPECTED_PAYOFFS = {
    "IteratedPrisonersDilemma-v0": {(0, 0): (-1, -1), (0, 1): (-3, 0), (1, 0): (0, -3), (1, 1): (-2, -2)},
    "IteratedMatchingPennies-v0": {(0, 0): (1, -1), (0, 1): (-1, 1), (1, 0): (-1, 1), (1, 1): (1, -1)},
    "IteratedStagHunt-v0": {(0, 0): (4, 4), (0, 1): (1, 3), (1, 0): (3, 1), (1, 1): (2, 2)},
    "IteratedChicken-v0": {(0, 0): (0, 0), (0, 1): (-1, 1), (1, 0): (1, -1), (1, 1): (-10, -10)},
    "IteratedBattleOfTheSexes-v0": {(0, 0): (3, 2), (0, 1): (0, 0), (1, 0): (0, 0), (1, 1): (2, 3)},
}
JOINT_ACTIONS = [(0, 0), (0, 1), (1, 0), (1, 1)]
IPD = np.array([[[-1, -1], [-3, 0]], [[0, -3], [-2, -2]]], np.float32)

ALL_C = [1.0, 1.0, 1.0, 1.0, 1.0]
ALL_D = [0.0, 0.0, 0.0, 0.0, 0.0]
TIT_FOR_TAT = [1.0, 1.0, 0.0, 1.0, 0.0]  # start C; copy the other's last action
# Cooperates only after DC from its own perspective (it defected, the other cooperated).
ONLY_AFTER_DC = [1.0, 0.0, 0.0, 1.0, 0.0]


@pytest.fixture(scope="module")
def iterated():
    """One bare env and jitted functions shared by every payoff (payoff and length are params)."""
    env = ma.IteratedMatrixGame()
    reset = jax.jit(env.reset)
    step = jax.jit(env.step)
    # Rewards and observations of one step from the start, for all four joint actions at once.
    first_step = jax.jit(
        jax.vmap(
            lambda action, params: env.step(
                jax.random.key(0), env.reset(jax.random.key(0), params)[1], action, params
            ),
            in_axes=(0, None),
        )
    )
    return env, reset, step, first_step


@pytest.fixture(scope="module")
def values_fn():
    return jax.jit(ma.memory_one_values)


@pytest.mark.parametrize("env_id", sorted(EXPECTED_PAYOFFS))
def test_preset_payoffs_for_every_joint_action(iterated, env_id):
    _, _, _, first_step = iterated
    _, params = le.make(env_id, autoreset=False)
    _, _, reward, terminated, truncated, _ = first_step(jnp.array(JOINT_ACTIONS, jnp.int32), params)
    expected = np.array([EXPECTED_PAYOFFS[env_id][a] for a in JOINT_ACTIONS], np.float32)
    np.testing.assert_array_equal(np.asarray(reward), expected)
    assert reward.dtype == jnp.float32 and reward.shape == (4, 2)
    assert not np.any(np.asarray(terminated)) and not np.any(np.asarray(truncated))


def test_matrix_game_id_takes_a_payoff_override(iterated):
    _, _, _, first_step = iterated
    payoff = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    env, params = le.make("IteratedMatrixGame-v0", payoff=payoff, autoreset=False)
    np.testing.assert_array_equal(np.asarray(params.payoff), payoff)
    _, _, reward, *_ = first_step(jnp.array(JOINT_ACTIONS, jnp.int32), params)
    np.testing.assert_array_equal(np.asarray(reward), [[0, 1], [2, 3], [4, 5], [6, 7]])
    # Integer payoffs are accepted and stored as float32; the default is the prisoner's dilemma.
    _, int_params = le.make("IteratedMatrixGame-v0", payoff=payoff.astype(np.int32).tolist())
    assert int_params.payoff.dtype == jnp.float32
    _, default_params = le.make("IteratedMatrixGame-v0")
    np.testing.assert_array_equal(np.asarray(default_params.payoff), IPD)


def test_observations_start_state_and_role_swap(iterated):
    env, reset, _, first_step = iterated
    params = env.default_params
    obs, _ = reset(jax.random.key(0), params)
    np.testing.assert_array_equal(np.asarray(obs), [[0, 0, 0, 0, 1], [0, 0, 0, 0, 1]])
    assert obs.dtype == jnp.float32 and obs.shape == (2, 5)
    obs, *_ = first_step(jnp.array(JOINT_ACTIONS, jnp.int32), params)
    # (a0, a1) -> player 0 sees index 2*a0 + a1, player 1 sees 2*a1 + a0 (own action first).
    expected = {
        (0, 0): ([1, 0, 0, 0, 0], [1, 0, 0, 0, 0]),  # CC / CC
        (0, 1): ([0, 1, 0, 0, 0], [0, 0, 1, 0, 0]),  # CD / DC
        (1, 0): ([0, 0, 1, 0, 0], [0, 1, 0, 0, 0]),  # DC / CD
        (1, 1): ([0, 0, 0, 1, 0], [0, 0, 0, 1, 0]),  # DD / DD
    }
    for i, joint in enumerate(JOINT_ACTIONS):
        np.testing.assert_array_equal(np.asarray(obs[i]), expected[joint], err_msg=f"joint action {joint}")


def test_truncation_after_inner_steps_and_autoreset():
    env, params = le.make("IteratedPrisonersDilemma-v0", num_inner_steps=3)
    assert params.num_inner_steps == 3
    step = jax.jit(env.step)
    obs, state = env.reset(jax.random.key(0), params)
    action = jnp.array([0, 1], jnp.int32)
    flags = []
    for _ in range(3):
        obs, state, _, terminated, truncated, info = step(jax.random.key(1), state, action, params)
        flags.append((np.asarray(terminated).tolist(), np.asarray(truncated).tolist()))
    assert flags == [
        ([False, False], [False, False]),
        ([False, False], [False, False]),
        ([False, False], [True, True]),
    ]
    # AutoReset: the returned observation is the new episode's start, the final one the last round.
    np.testing.assert_array_equal(np.asarray(obs), [[0, 0, 0, 0, 1]] * 2)
    np.testing.assert_array_equal(np.asarray(info["final_observation"]), [[0, 1, 0, 0, 0], [0, 0, 1, 0, 0]])
    assert int(env.unwrapped_state(state).time) == 0


def test_vmap_over_params_mixes_games_in_one_batch(iterated):
    env, reset, step, _ = iterated
    ids = sorted(EXPECTED_PAYOFFS)
    batch = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *[le.make(i)[1] for i in ids])
    keys = jax.random.split(jax.random.key(0), len(ids))
    _, states = jax.vmap(reset)(keys, batch)
    actions = jnp.tile(jnp.array([1, 0], jnp.int32), (len(ids), 1))
    _, _, reward, *_ = jax.vmap(step)(keys, states, actions, batch)
    np.testing.assert_array_equal(np.asarray(reward), [EXPECTED_PAYOFFS[i][(1, 0)] for i in ids])


def test_exact_values_hand_computed(values_fn):
    gamma = 0.9
    cases = [
        # CD forever: the per-round payoff, since values are normalised by (1 - gamma).
        (ALL_C, ALL_D, (-3.0, 0.0)),
        (ALL_D, ALL_C, (0.0, -3.0)),
        (TIT_FOR_TAT, TIT_FOR_TAT, (-1.0, -1.0)),
        # CD in round 0, then DD forever: (1-g)(-3) + g(-2) = -3 + g and (1-g)(0) + g(-2) = -2g.
        (TIT_FOR_TAT, ALL_D, (-3.0 + gamma, -2.0 * gamma)),
        (ALL_D, TIT_FOR_TAT, (-2.0 * gamma, -3.0 + gamma)),
        # Player 1 cooperates in round 0 (DC from player 0's view), then sees CD from its own view
        # and defects: DD forever. Reading player 0's view instead would give DC forever, (0, -3).
        (ALL_D, ONLY_AFTER_DC, (-2.0 * gamma, -3.0 + gamma)),
    ]
    for policy_0, policy_1, expected in cases:
        values = values_fn(jnp.array(policy_0), jnp.array(policy_1), IPD, gamma)
        np.testing.assert_allclose(
            np.asarray(values), expected, atol=1e-5, err_msg=f"{policy_0} vs {policy_1}"
        )


def test_exact_values_match_a_long_power_series(values_fn):
    # Independent check: sum the discounted state distribution step by step in float64.
    rng = np.random.default_rng(0)
    gamma = 0.8
    for payoff in (IPD, ma.PAYOFFS["battle_of_the_sexes"]):
        p, q = rng.uniform(size=5), rng.uniform(size=5)
        q_view = q[[0, 1, 3, 2, 4]]  # player 1's probabilities indexed by player 0's joint states
        d = np.array([p[0] * q[0], p[0] * (1 - q[0]), (1 - p[0]) * q[0], (1 - p[0]) * (1 - q[0])])
        pc, qc = p[1:], q_view[1:]
        transition = np.stack([pc * qc, pc * (1 - qc), (1 - pc) * qc, (1 - pc) * (1 - qc)], axis=1)
        total = np.zeros(2)
        for t in range(400):
            total += gamma**t * d @ payoff.reshape(4, 2)
            d = d @ transition
        values = values_fn(jnp.asarray(p, jnp.float32), jnp.asarray(q, jnp.float32), payoff, gamma)
        np.testing.assert_allclose(np.asarray(values), (1 - gamma) * total, atol=1e-5)


def test_solve_dominant_and_its_derivatives_match_lapacks_solve():
    # (I - gamma P)^T for a random row-stochastic P, as the games build it; derivatives up to the
    # second order (LOLA differentiates up to three times) against jnp.linalg.solve's.
    from lamella.envs.multi_agent.infinite_matrix_game import solve_dominant

    rng = np.random.default_rng(3)
    transition = rng.uniform(size=(4, 4))
    transition /= transition.sum(axis=1, keepdims=True)
    matrix = jnp.asarray((np.eye(4) - 0.96 * transition).T, jnp.float32)
    rhs = jnp.asarray(rng.uniform(size=4), jnp.float32)
    x = solve_dominant(matrix, rhs)
    np.testing.assert_allclose(np.asarray(matrix @ x), np.asarray(rhs), atol=1e-5)

    def derivatives(solve_fn):
        first = jax.jacfwd(solve_fn, argnums=(0, 1))(matrix, rhs)
        second = jax.hessian(lambda m: jnp.sin(solve_fn(m, rhs)).sum())(matrix)
        return first, second

    got, expected = derivatives(solve_dominant), derivatives(jnp.linalg.solve)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-3)
    # Reverse mode through the transpose solve, batched.
    batch = jnp.stack([matrix, matrix.T])
    grads = jax.vmap(jax.grad(lambda m: solve_dominant(m, rhs)[0]))(batch)
    expected = jax.vmap(jax.grad(lambda m: jnp.linalg.solve(m, rhs)[0]))(batch)
    np.testing.assert_allclose(np.asarray(grads), np.asarray(expected), rtol=1e-4, atol=1e-4)
    # No call into LAPACK (whose batched calls can deadlock XLA's CPU thread pool, jaxlib 0.10.2).
    lowered = jax.jit(jax.vmap(jax.grad(lambda m: solve_dominant(m, rhs).sum()))).lower(batch).as_text()
    assert "lapack" not in lowered.lower()


def test_exact_values_match_monte_carlo_rollouts(iterated, values_fn):
    """Memory-one policies in the iterated game; 4096 envs x 2 games in one vmap.

    gamma = 0.9 and 150 rounds leave a truncation bias below 1e-6; the tolerance
    is 4 standard errors of the Monte-Carlo mean (about 0.03 here).
    """
    env, _, _, _ = iterated
    gamma, num_rounds, num_envs = 0.9, 150, 4096
    policy_0 = jnp.array([0.6, 0.9, 0.2, 0.7, 0.3])
    policy_1 = jnp.array([0.4, 0.8, 0.1, 0.5, 0.6])
    policies = jnp.stack([policy_0, policy_1])
    payoffs = jnp.stack([jnp.asarray(IPD), jnp.asarray(ma.PAYOFFS["stag_hunt"])])

    def rollout(key, payoff):
        params = ma.IteratedMatrixGameParams(payoff=payoff, num_inner_steps=num_rounds)
        obs, state = env.reset(key, params)

        def round_(carry, key_t):
            obs, state, discounted = carry
            # Observation index 0..3 = CC..DD, 4 = start; the policy puts start first.
            index = jnp.argmax(obs, axis=-1)
            cooperate = policies[jnp.arange(2), (index + 1) % 5]
            action = jnp.where(jax.random.uniform(key_t, (2,)) < cooperate, 0, 1).astype(jnp.int32)
            obs, state, reward, *_ = env.step(key_t, state, action, params)
            return (obs, state, discounted * gamma), discounted * reward

        keys = jax.random.split(key, num_rounds)
        _, rewards = jax.lax.scan(round_, (obs, state, jnp.ones(())), keys)
        return (1 - gamma) * rewards.sum(0)

    batched = jax.jit(jax.vmap(jax.vmap(rollout, in_axes=(0, None)), in_axes=(0, 0)))
    keys = jax.random.split(jax.random.key(42), (2, num_envs))
    returns = np.asarray(batched(keys, payoffs))  # (2 games, num_envs, 2 players)
    for game in range(2):
        exact = np.asarray(values_fn(policy_0, policy_1, payoffs[game], gamma))
        mean = returns[game].mean(0)
        stderr = returns[game].std(0) / np.sqrt(num_envs)
        assert np.all(np.abs(mean - exact) < 4 * stderr + 1e-3), (game, mean, exact, stderr)
        assert np.all(stderr < 0.02)


def test_infinite_game_step_observations_and_truncation():
    env, params = le.make("InfiniteMatrixGame-v0", gamma=0.9, num_steps=2, autoreset=False)
    step = jax.jit(env.step)
    obs, state = env.reset(jax.random.key(0), params)
    assert obs.shape == (2, 10) and obs.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(obs[0, :5]), np.asarray(obs[1, 5:]))
    policies = jnp.array([TIT_FOR_TAT, ALL_D])
    obs, state, reward, terminated, truncated, _ = step(jax.random.key(1), state, policies, params)
    np.testing.assert_allclose(np.asarray(reward), [-3.0 + 0.9, -1.8], atol=1e-5)
    np.testing.assert_array_equal(np.asarray(obs), [TIT_FOR_TAT + ALL_D, ALL_D + TIT_FOR_TAT])
    assert not np.any(np.asarray(terminated)) and not np.any(np.asarray(truncated))
    # Out-of-range probabilities are clipped: 2 -> 1, -1 -> 0.
    _, _, reward, _, truncated, _ = step(jax.random.key(2), state, 3 * policies - 1, params)
    np.testing.assert_allclose(np.asarray(reward), [-3.0 + 0.9, -1.8], atol=1e-5)
    assert np.all(np.asarray(truncated))


def test_infinite_game_vmaps_over_payoff_and_gamma():
    env = ma.InfiniteMatrixGame()
    gammas = jnp.array([0.5, 0.9])
    payoffs = jnp.stack([jnp.asarray(IPD), jnp.asarray(ma.PAYOFFS["chicken"])])
    params = ma.InfiniteMatrixGameParams(payoff=payoffs, gamma=gammas, num_steps=jnp.array([5, 5]))
    keys = jax.random.split(jax.random.key(0), 2)
    _, states = jax.vmap(env.reset)(keys, params)
    actions = jnp.stack([jnp.array([TIT_FOR_TAT, ALL_D])] * 2)
    _, _, reward, *_ = jax.jit(jax.vmap(env.step))(keys, states, actions, params)
    # IPD, gamma 0.5: (-3 + g, -2g) = (-2.5, -1). Chicken, gamma 0.9: CD = (-1, 1) once, then DD = (-10, -10).
    g = 0.9
    chicken = ((1 - g) * -1 + g * -10, (1 - g) * 1 + g * -10)
    np.testing.assert_allclose(np.asarray(reward), [[-2.5, -1.0], chicken], atol=1e-5)


@pytest.mark.parametrize("env_id", _IDS)
def test_check_env_on_every_registered_id(env_id):
    # Episodes of 5 steps, so check_env's 12 steps cross two auto-resets.
    length = {"num_steps": 5} if env_id == "InfiniteMatrixGame-v0" else {"num_inner_steps": 5}
    env, params = le.make(env_id, **length)
    check_env(env, params, num_steps=12)


@pytest.mark.parametrize(
    "bad, given",
    [
        (np.zeros((3, 2)), "(3, 2)"),
        (np.zeros((4, 2)), "(4, 2)"),
        (np.zeros((2, 2)), "(2, 2)"),
        (np.zeros((2, 2, 2), np.complex64), "complex64"),
        (np.zeros((2, 2, 2), bool), "bool"),
    ],
)
def test_wrong_payoff_is_rejected_with_expected_shape(bad, given):
    for build in (
        lambda: ma.IteratedMatrixGame(payoff=bad),
        lambda: le.make("IteratedMatrixGame-v0", payoff=bad),
        lambda: le.make("InfiniteMatrixGame-v0", payoff=bad),
        lambda: le.make("IteratedChicken-v0", payoff=bad),
    ):
        with pytest.raises(ValueError, match=r"\(2, 2, 2\)") as error:
            build()
        assert given in str(error.value)


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize(
    "env_id, shape",
    [
        ("IteratedMatrixGame-v0", (2, 2, 2)),
        ("InfiniteMatrixGame-v0", (2, 2, 2)),
        ("CoinGame-v0", (2, 3)),
        ("IteratedTensorGame-v0", (4, 2)),
        ("IPDInTheMatrix-v0", (2, 2, 2)),
    ],
)
def test_payoff_with_nan_or_inf_is_rejected_naming_the_entry(env_id, shape, value):
    # Before, make accepted it and every reward (and the infinite game's values) came out NaN or inf.
    payoff = np.ones(shape, np.float32)
    payoff[(0,) * (len(shape) - 1) + (1,)] = value
    entry = ", ".join(["0"] * (len(shape) - 1) + ["1"])
    with pytest.raises(ValueError, match=rf"payoff.*finite.*got {value} at \[{entry}\]"):
        le.make(env_id, payoff=payoff)


def test_wrong_payoff_in_hand_built_params_is_rejected_at_trace_time():
    env = ma.IteratedMatrixGame()
    params = env.default_params.replace(payoff=jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"\(2, 2, 2\).*\(4, 2\)"):
        jax.jit(env.reset)(jax.random.key(0), params)
    infinite = ma.InfiniteMatrixGame()
    params = infinite.default_params.replace(payoff=jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"\(2, 2, 2\).*\(2, 2\)"):
        jax.jit(infinite.reset)(jax.random.key(0), params)


def test_bad_static_settings_are_rejected():
    with pytest.raises(ValueError, match="num_inner_steps"):
        ma.IteratedMatrixGame(num_inner_steps=0)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\)"):
        le.make("InfiniteMatrixGame-v0", gamma=1.0)
    env = ma.IteratedMatrixGame()
    _, state = env.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(jax.random.key(0), state, jnp.int32(1))


def test_memory_one_values_refuses_concrete_inputs_out_of_range():
    # Probabilities outside [0, 1] (logits passed by mistake) or gamma >= 1 gave meaningless values.
    with pytest.raises(
        ValueError,
        match=r"policy_1 must be cooperation probabilities in \[0, 1\].*entries \[2\]: \[1\.5\].*"
        r"clips its actions.*jax\.nn\.sigmoid",
    ):
        ma.memory_one_values(ALL_C, [1.0, 1.0, 1.5, 0.0, 0.0], IPD, 0.9)
    with pytest.raises(ValueError, match=r"policy_0 must be.*entries \[0, 4\]: \[-2\.0, nan\]"):
        ma.memory_one_values(np.array([-2.0, 0.5, 0.5, 0.5, np.nan]), ALL_D, IPD, 0.9)
    for gamma in (1.0, -0.1, float("nan"), np.float32(1.0)):
        with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\) \(the infinite sum diverges at 1\)"):
            ma.memory_one_values(ALL_C, ALL_D, IPD, gamma)
    # Traced values (jit, vmap, grad: a sweep over gamma, logits through a sigmoid) are not read.
    out = jax.eval_shape(ma.memory_one_values, jnp.full(5, 2.0), jnp.zeros(5), IPD, 1.0)
    assert out.shape == (2,)
    grad = jax.eval_shape(jax.grad(lambda g: ma.memory_one_values(ALL_C, ALL_D, IPD, g)[0]), 0.9)
    assert grad.shape == ()


def test_render_highlights_last_joint_action_and_progress(iterated):
    env, reset, step, _ = iterated
    params = env.default_params.replace(num_inner_steps=4)
    render = jax.jit(env.render)
    _, state = reset(jax.random.key(0), params)
    frame = np.asarray(render(state, params))
    assert frame.shape == (140, 128, 3) and frame.dtype == np.uint8
    assert np.all(frame[64 + 3, 20] != 0), "no cell is framed before the first round"
    _, state, *_ = step(jax.random.key(0), state, jnp.array([1, 0], jnp.int32), params)
    frame = np.asarray(render(state, params))
    # Row = player 0's action, column = player 1's: the frame is around the bottom-left cell.
    np.testing.assert_array_equal(frame[64 + 3, 20], [0, 0, 0])
    assert (
        np.all(frame[3, 20] != 0) and np.all(frame[3, 64 + 20] != 0) and np.all(frame[64 + 3, 64 + 20] != 0)
    )
    # One round of four: the bar is green over the first quarter only.
    np.testing.assert_array_equal(frame[135, 10], [40, 160, 60])
    np.testing.assert_array_equal(frame[135, 100], [220, 220, 220])


def test_render_infinite_game_bars():
    env = ma.InfiniteMatrixGame()
    params = env.default_params
    _, state = env.reset(jax.random.key(0), params)
    _, state, *_ = env.step(jax.random.key(0), state, jnp.array([ALL_C, ALL_D]), params)
    frame = np.asarray(jax.jit(env.render)(state, params))
    assert frame.shape == (140, 130, 3) and frame.dtype == np.uint8
    # Player 0 cooperates everywhere: tall blue bars; player 1 never: no red bars.
    np.testing.assert_array_equal(frame[20, 10], [40, 70, 200])
    assert not np.any(np.all(frame[64:127] == [200, 50, 40], axis=-1))
