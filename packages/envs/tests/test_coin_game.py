"""CoinGame: step-by-step parity with JaxMARL 0.2.0's port of Pax, rules on hand-built states, conformance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxmarl.environments.coin_game.coin_game import CoinGame as ReferenceCoinGame
from jaxmarl.environments.coin_game.coin_game import EnvState as ReferenceState

import lamella.envs as le
from lamella.envs.multi_agent.coin_game import CoinGame, CoinGameState
from lamella.envs.testing import assert_parity_coverage, check_env

RIGHT, LEFT, UP, DOWN, STAY = range(5)
# Every entry different, so a reward names the entries that made it.
PAYOFF = [[1.0, 2.0, -4.0], [8.0, 16.0, -32.0]]
INNER, OUTER = 4, 3


def make_state(red, blue, red_coin, blue_coin, time=0, outer_time=0) -> CoinGameState:
    return CoinGameState(
        agent_positions=jnp.asarray([red, blue], jnp.int32),
        coin_positions=jnp.asarray([red_coin, blue_coin], jnp.int32),
        time=jnp.asarray(time, jnp.int32),
        outer_time=jnp.asarray(outer_time, jnp.int32),
    )


@pytest.fixture(scope="module")
def game():
    """A bare env with distinct payoff entries and its jitted step (correct rule)."""
    env = CoinGame(payoff=PAYOFF, num_inner_steps=INNER, num_outer_steps=OUTER)
    return env, env.default_params, jax.jit(env.step)


@pytest.fixture(scope="module")
def quirky_game():
    env = CoinGame(payoff=PAYOFF, num_inner_steps=INNER, num_outer_steps=OUTER, pax_quirks=True)
    return env, env.default_params, jax.jit(env.step)


def step_once(game, state, actions, key=1):
    env, params, step = game
    return step(jax.random.key(key), state, jnp.asarray(actions, jnp.int32), params)


# Rules on hand-built states ----------------------------------------------------------------


# (red, blue, red coin, blue coin, actions, expected reward, own coins, other coins)
RULE_CASES = {
    "red takes red coin: rr": ((0, 0), (2, 2), (0, 1), (1, 1), (RIGHT, STAY), (1, 0), (1, 0), (0, 0)),
    "red takes blue coin: rb, blue b_pen": (
        (0, 0),
        (2, 2),
        (1, 1),
        (1, 0),
        (UP, STAY),
        (2, -32),
        (0, 0),
        (1, 0),
    ),
    "blue takes red coin: br, red r_pen": (
        (0, 0),
        (2, 2),
        (2, 0),
        (1, 1),
        (STAY, RIGHT),
        (-4, 8),
        (0, 0),
        (0, 1),
    ),
    "blue takes blue coin: bb": ((0, 0), (2, 2), (1, 1), (1, 2), (STAY, DOWN), (0, 16), (0, 1), (0, 0)),
    "both take the red coin": ((0, 0), (0, 2), (0, 1), (2, 2), (RIGHT, LEFT), (1 - 4, 8), (1, 0), (0, 1)),
    "both take both coins": (
        (1, 1),
        (1, 1),
        (1, 2),
        (1, 2),
        (RIGHT, RIGHT),
        (1 + 2 - 4, 8 + 16 - 32),
        (1, 1),
        (1, 1),
    ),
    "each takes its own": ((0, 0), (2, 2), (0, 1), (2, 1), (RIGHT, LEFT), (1, 16), (1, 1), (0, 0)),
    "each takes the other's": (
        (0, 0),
        (2, 2),
        (2, 1),
        (0, 1),
        (RIGHT, LEFT),
        (2 - 4, 8 - 32),
        (0, 0),
        (1, 1),
    ),
    "wrap right and left": ((0, 2), (0, 0), (0, 0), (0, 2), (RIGHT, LEFT), (1, 16), (1, 1), (0, 0)),
    "wrap up and down": ((2, 1), (0, 1), (0, 1), (2, 1), (UP, DOWN), (1, 16), (1, 1), (0, 0)),
    "standing on a coin pays again": ((1, 1), (0, 0), (1, 1), (2, 2), (STAY, STAY), (1, 0), (1, 0), (0, 0)),
    "out-of-range actions stay": ((1, 1), (0, 0), (1, 1), (0, 0), (7, -1), (1, 16), (1, 1), (0, 0)),
    "nothing taken": ((0, 0), (2, 2), (1, 1), (1, 2), (STAY, STAY), (0, 0), (0, 0), (0, 0)),
}


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_rewards_pickups_and_respawns(game, case):
    red, blue, red_coin, blue_coin, actions, expected, own, other = RULE_CASES[case]
    state = make_state(red, blue, red_coin, blue_coin, time=1)
    obs, new, reward, terminated, truncated, info = step_once(game, state, actions)
    np.testing.assert_array_equal(np.asarray(reward), np.asarray(expected, np.float32))
    np.testing.assert_array_equal(np.asarray(info["own_coins"]), own)
    np.testing.assert_array_equal(np.asarray(info["other_coins"]), other)
    moves = {RIGHT: (0, 1), LEFT: (0, -1), UP: (1, 0), DOWN: (-1, 0)}
    for i, start in enumerate((red, blue)):
        delta = moves.get(actions[i], (0, 0))
        expected_cell = ((start[0] + delta[0]) % 3, (start[1] + delta[1]) % 3)
        assert tuple(np.asarray(new.agent_positions[i])) == expected_cell
    # A coin nobody took stays; a taken coin's new cell is drawn (it may be the same one).
    for c, coin in enumerate((red_coin, blue_coin)):
        if not (own[c] if c == 0 else own[1]) and not (other[1] if c == 0 else other[0]):
            assert tuple(np.asarray(new.coin_positions[c])) == coin
    assert int(new.time) == 2 and not bool(np.any(terminated)) and not bool(np.any(truncated))


def test_every_payoff_entry_is_exercised():
    """The cases above, read back from the rewards, use each of the six payoff entries."""
    used = set()
    for _, _, _, _, _, _, own, other in RULE_CASES.values():
        used |= {"rr"} if own[0] else set()
        used |= {"bb"} if own[1] else set()
        used |= {"rb", "b_pen"} if other[0] else set()
        used |= {"br", "r_pen"} if other[1] else set()
    assert used == {"rr", "rb", "r_pen", "br", "bb", "b_pen"}


def test_respawned_coins_cover_the_grid(game):
    """A taken coin reappears on a uniform cell (8000 draws: every cell 1/9 within 4 std. errors)."""
    env, params, _ = game
    state = make_state((0, 0), (2, 2), (0, 1), (2, 1), time=1)
    keys = jax.random.split(jax.random.key(3), 8000)
    step = jax.jit(jax.vmap(lambda k: env.step(k, state, jnp.array([RIGHT, LEFT]), params)))
    new = step(keys)[1]
    for c in range(2):
        cells = np.asarray(new.coin_positions[:, c, 0] * 3 + new.coin_positions[:, c, 1])
        freq = np.bincount(cells, minlength=9) / len(cells)
        assert np.all(np.abs(freq - 1 / 9) < 4 * np.sqrt((1 / 9) * (8 / 9) / len(cells))), freq
    assert not np.array_equal(np.asarray(new.coin_positions[:, 0]), np.asarray(new.coin_positions[:, 1]))


def test_egocentric_observation_and_colour_swap():
    env = CoinGame()
    state = make_state(red=(0, 0), blue=(0, 2), red_coin=(2, 2), blue_coin=(1, 0))
    obs = np.asarray(env.observation_of(state)).reshape(2, 3, 3, 4)
    # Red at (0, 0) -> shift (+1, +1): blue (1, 0), red coin (0, 0), blue coin (2, 1).
    expected_red = {0: (1, 1), 1: (1, 0), 2: (0, 0), 3: (2, 1)}
    # Blue at (0, 2) -> shift (+1, -1): red (1, 2), blue coin (2, 2), red coin (0, 1).
    expected_blue = {0: (1, 1), 1: (1, 2), 2: (2, 2), 3: (0, 1)}
    for agent, expected in enumerate((expected_red, expected_blue)):
        for channel, cell in expected.items():
            plane = np.zeros((3, 3), np.uint8)
            plane[cell] = 1
            np.testing.assert_array_equal(obs[agent, :, :, channel], plane, err_msg=f"{agent=} {channel=}")
    absolute = CoinGame(egocentric=False, grid_observation=True).observation_of(state)
    assert absolute.shape == (2, 3, 3, 4)
    assert absolute[0, 0, 0, 0] == 1 and absolute[0, 0, 2, 1] == 1 and absolute[0, 2, 2, 2] == 1
    np.testing.assert_array_equal(np.asarray(absolute[1]), np.asarray(absolute[0])[..., [1, 0, 3, 2]])


def test_inner_and_outer_episodes(game, quirky_game):
    """Inner ends every 4 steps, the episode after 3 of them; Pax's quirk zeroes inner-end rewards."""
    for current, quirk in ((game, False), (quirky_game, True)):
        env, params, step = current
        # Red stands on its coin and blue on its own, so every step pays (1, 16) under the rule.
        state = make_state((1, 1), (0, 0), (1, 1), (0, 0))
        inner, truncs, times, outers, rewards = [], [], [], [], []
        for t in range(INNER * OUTER):
            # Keep the players on their coins after each respawn or inner restart.
            state = state.replace(coin_positions=state.agent_positions)
            _, state, reward, terminated, truncated, info = step(
                jax.random.key(t), state, jnp.array([4, 4]), params
            )
            inner.append(bool(info["inner_episode_done"][0]))
            truncs.append(bool(truncated[0]))
            times.append(int(state.time))
            outers.append(int(state.outer_time))
            rewards.append(tuple(np.asarray(reward)))
            assert not bool(np.any(terminated))
        assert [t + 1 for t, d in enumerate(inner) if d] == [4, 8, 12]
        assert [t + 1 for t, d in enumerate(truncs) if d] == [12]
        # The env starts inner episodes 2 and 3 itself; the last one is left to the reset wrapper.
        assert times == [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4]
        assert outers == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
        for t, reward in enumerate(rewards):
            zeroed = quirk and inner[t]
            assert reward == ((0.0, 0.0) if zeroed else (1.0, 16.0)), (quirk, t, reward)


def test_one_outer_step_truncates_like_the_iterated_matrix_games():
    env, params = le.make("CoinGame-v0", autoreset=False, num_inner_steps=3)
    assert params.num_outer_steps == 1
    _, state = env.reset(jax.random.key(5), params)
    step = jax.jit(env.step)
    flags = []
    for t in range(3):
        _, state, _, _, truncated, info = step(jax.random.key(t), state, jnp.array([0, 1]), params)
        flags.append((bool(truncated.all()), bool(info["inner_episode_done"].all())))
    assert flags == [(False, False), (False, False), (True, True)]
    assert int(state.time) == 3  # the bare env does not reset; AutoReset does


def test_bad_payoffs_and_lengths_fail_clearly():
    with pytest.raises(ValueError, match=r"shape \(2, 3\).*got shape \(2, 2\)"):
        le.make("CoinGame-v0", payoff=[[1, 1], [1, 1]])
    with pytest.raises(ValueError, match="transposed"):
        CoinGame(payoff=np.ones((3, 2)))
    with pytest.raises(ValueError, match="dtype bool"):
        CoinGame(payoff=np.ones((2, 3), bool))
    env = CoinGame()
    bad = env.default_params.replace(payoff=jnp.ones((4, 2)))
    with pytest.raises(ValueError, match=r"params.payoff.*\(2, 3\)"):
        jax.eval_shape(env.reset, jax.random.key(0), bad)
    with pytest.raises(ValueError, match="num_inner_steps must be an integer >= 1"):
        CoinGame(num_inner_steps=0)
    with pytest.raises(ValueError, match="num_outer_steps must be an integer >= 1"):
        CoinGame(num_outer_steps=2.5)
    # "no" was truthy: egocentric observations and Pax's quirks, silently.
    for name in ("egocentric", "grid_observation", "pax_quirks"):
        with pytest.raises(ValueError, match=f"CoinGame: {name} must be True or False, got 'no'"):
            le.make("CoinGame-v0", **{name: "no"})


def test_check_env_on_the_other_options():
    """The defaults run through check_env in test_matrix_games.py (every multi_agent id)."""
    options = {"num_outer_steps": 3, "pax_quirks": True, "egocentric": False, "grid_observation": True}
    env, params = le.make("CoinGame-v0", autoreset=False, num_inner_steps=5, **options)
    check_env(env, params, num_steps=20)


def test_global_state_and_render(game):
    env, params, _ = game
    state = make_state((0, 0), (2, 1), (1, 2), (0, 0), time=2, outer_time=1)
    gs = np.asarray(env.global_state(state, params))
    assert gs.shape == env.global_state_space(params).shape == (38,) and gs.dtype == np.float32
    grid = gs[:36].reshape(3, 3, 4)
    assert grid[0, 0, 0] == 1 and grid[2, 1, 1] == 1 and grid[1, 2, 2] == 1 and grid[0, 0, 3] == 1
    assert grid.sum() == 4
    np.testing.assert_allclose(gs[36:], [2 / INNER, 1 / OUTER])
    frames = jax.jit(jax.vmap(lambda s: env.render(s, params)))(
        jax.tree.map(lambda x: jnp.stack([x, x]), state)
    )
    assert frames.shape == (2, 208, 192, 3) and frames.dtype == jnp.uint8
    # The red player's cell (row 0, column 0) holds red pixels; the blue one's (row 2, column 1) blue.
    assert np.any(np.all(np.asarray(frames[0, :64, :64]) == (215, 50, 45), -1))
    assert np.any(np.all(np.asarray(frames[0, 128:192, 64:128]) == (40, 90, 210), -1))


# Parity with JaxMARL's port of Pax's CoinGame ---------------------------------------------


def to_reference(state: CoinGameState, num_outer: int) -> ReferenceState:
    """JaxMARL's state for a lamella state (statistics zeroed: they feed nothing we compare)."""
    zeros = jnp.zeros((num_outer,), jnp.int8)
    return ReferenceState(
        red_pos=state.agent_positions[0],
        blue_pos=state.agent_positions[1],
        red_coin_pos=state.coin_positions[0],
        blue_coin_pos=state.coin_positions[1],
        step=state.time,
        outer_t=state.outer_time,
        done=jnp.zeros((), bool),
        red_coop=zeros,
        red_defect=zeros,
        blue_coop=zeros,
        blue_defect=zeros,
        counter=jnp.zeros(9),
        coop1=jnp.zeros(9),
        coop2=jnp.zeros(9),
        last_state=jnp.zeros(2),
    )


def from_reference(ref: ReferenceState) -> CoinGameState:
    return CoinGameState(
        agent_positions=jnp.stack([ref.red_pos, ref.blue_pos], -2).astype(jnp.int32),
        coin_positions=jnp.stack([ref.red_coin_pos, ref.blue_coin_pos], -2).astype(jnp.int32),
        time=ref.step.astype(jnp.int32),
        outer_time=ref.outer_t.astype(jnp.int32),
    )


@pytest.mark.parametrize("egocentric", [True, False])
def test_parity_with_jaxmarl(egocentric):
    """State injection, random actions, 64 envs x 40 steps; every outcome asserted to occur.

    Each step copies lamella's state into JaxMARL, steps both with the same actions and
    compares rewards, the inner-episode flag, the episode end (JaxMARL's ``done`` against
    lamella's ``truncated``), the moved players, untaken coins and the clocks; lamella's
    observation of JaxMARL's next state must equal JaxMARL's observation (resets and respawns
    included). Then both continue from JaxMARL's next state. With ``pax_quirks=False`` the
    rewards equal JaxMARL's everywhere except on inner-episode ends, where they equal what
    JaxMARL pays for the same move in the middle of an inner episode.
    """
    num_envs, num_steps = 64, 40
    reference = ReferenceCoinGame(
        num_inner_steps=INNER, num_outer_steps=OUTER, egocentric=egocentric, payoff_matrix=PAYOFF
    )
    quirky = CoinGame(PAYOFF, INNER, OUTER, egocentric=egocentric, pax_quirks=True)
    correct = CoinGame(PAYOFF, INNER, OUTER, egocentric=egocentric)
    params = quirky.default_params

    def ref_step(key, state, action):
        ref_state = to_reference(state, OUTER)
        obs, new, reward, done, info = reference.step_env(key, ref_state, {"0": action[0], "1": action[1]})
        mid_state = ref_state.replace(step=jnp.zeros_like(ref_state.step))
        _, _, mid_reward, _, _ = reference.step_env(key, mid_state, {"0": action[0], "1": action[1]})
        return (
            jnp.stack([obs["0"], obs["1"]]),
            new,
            jnp.stack([reward["0"], reward["1"]]),
            done["__all__"],
            info["inner_episode_done"],
            jnp.stack([mid_reward["0"], mid_reward["1"]]),
        )

    def both(key, state, action):
        ref = ref_step(key, state, action)
        ours = quirky.step(key, state, action, params)
        ours_correct = correct.step(key, state, action, params)
        return ref, ours, ours_correct[2], quirky.observation_of(from_reference(ref[1]), params)

    reset = jax.vmap(lambda k: quirky.reset(k, params)[1])

    @jax.jit
    def advance(keys, state, actions):
        out = jax.vmap(both)(keys, state, actions)
        ref_state, ref_done = out[0][1], out[0][3]

        # Continue from JaxMARL's state; an episode that ended starts again from a fresh reset.
        def select(fresh, cont):
            return jnp.where(jnp.reshape(ref_done, (-1,) + (1,) * (cont.ndim - 1)), fresh, cont)

        return out, jax.tree.map(select, reset(keys), from_reference(ref_state))

    state = jax.jit(reset)(jax.random.split(jax.random.key(7), num_envs))
    rng = np.random.default_rng(0)
    log = {k: [] for k in ("reward", "done", "inner", "own", "other")}
    for t in range(num_steps):
        actions = jnp.asarray(rng.integers(0, 5, (num_envs, 2)), jnp.int32)
        keys = jax.random.split(jax.random.key(100 + t), num_envs)
        out, next_state = advance(keys, state, actions)
        out = jax.device_get(out)
        (
            (ref_obs, ref_state, ref_reward, ref_done, ref_inner, mid_reward),
            ours,
            correct_reward,
            obs_of_ref,
        ) = out
        obs, new, reward, terminated, truncated, info = ours
        np.testing.assert_array_equal(np.asarray(reward), np.asarray(ref_reward), err_msg=f"step {t}")
        np.testing.assert_array_equal(np.asarray(info["inner_episode_done"][:, 0]), np.asarray(ref_inner))
        np.testing.assert_array_equal(np.asarray(truncated[:, 0]), np.asarray(ref_done))
        assert not np.any(np.asarray(terminated))
        np.testing.assert_array_equal(np.asarray(obs_of_ref), np.asarray(ref_obs).reshape(obs_of_ref.shape))
        expected_correct = np.where(
            np.asarray(ref_inner)[:, None], np.asarray(mid_reward), np.asarray(ref_reward)
        )
        np.testing.assert_array_equal(np.asarray(correct_reward), expected_correct)
        ref_next = from_reference(ref_state)
        restarted = np.asarray(ref_inner)
        # Deterministic parts of the next state (random ones: inner restarts and respawns).
        same = ~restarted[:, None]
        np.testing.assert_array_equal(
            np.where(same[..., None], np.asarray(new.agent_positions), 0),
            np.where(same[..., None], np.asarray(ref_next.agent_positions), 0),
        )
        taken = np.asarray(info["own_coins"] + info["other_coins"][:, ::-1]) > 0  # per coin
        kept = same & ~taken
        np.testing.assert_array_equal(
            np.where(kept[..., None], np.asarray(new.coin_positions), 0),
            np.where(kept[..., None], np.asarray(ref_next.coin_positions), 0),
        )
        last = np.asarray(ref_done)
        np.testing.assert_array_equal(np.asarray(new.outer_time), np.asarray(ref_next.outer_time))
        np.testing.assert_array_equal(np.where(last, 0, np.asarray(new.time)), np.asarray(ref_next.time))
        for name, value in (
            ("reward", ref_reward),
            ("done", ref_done),
            ("inner", ref_inner),
            ("own", info["own_coins"]),
            ("other", info["other_coins"]),
        ):
            log[name].append(np.asarray(value))
        state = next_state
    done = np.stack(log["done"])
    assert_parity_coverage(
        "CoinGame",
        terminated=np.zeros_like(done),
        truncated=done,
        reward=np.stack(log["reward"]),
        auto_reset=np.zeros_like(done),
        never_terminates="CoinGame has no terminal state",
        no_auto_reset="JaxMARL's step_env is compared, which leaves the reset to its wrapper",
    )
    own, other = np.stack(log["own"]), np.stack(log["other"])
    inner = np.stack(log["inner"])
    # Each kind of pickup (and so each payoff entry) and inner restarts occurred many times.
    assert own[..., 0].sum() > 50 and own[..., 1].sum() > 50, (own.sum((0, 1)),)
    assert other[..., 0].sum() > 50 and other[..., 1].sum() > 50, (other.sum((0, 1)),)
    assert (inner & ~done).sum() > 100 and done.sum() > 50
