"""InTheMatrix (STORM): parity with JaxMARL 0.2.0's port of Pax (storm_2p), rules on hand-built states."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxmarl.environments.storm.storm_2p import InTheGrid_2p as ReferenceStorm
from jaxmarl.environments.storm.storm_2p import State as ReferenceState

import lamella.envs as le
from lamella.envs.multi_agent.in_the_matrix import COIN_SPAWNS, PAYOFFS, InTheMatrix, InTheMatrixState
from lamella.envs.testing import assert_parity_coverage

LEFT, RIGHT, FORWARD, INTERACT, STAY = range(5)
EMPTY, RED_AGENT, BLUE_AGENT, RED_COIN, BLUE_COIN, WALL, BEAM = range(7)
# Every entry different, so a reward names the inventory mix that made it.
PAYOFF = np.array([[[3.0, 0.5], [5.0, 1.0]], [[3.5, 5.5], [0.25, 1.5]]], np.float32)
INNER, OUTER, FREEZE = 12, 3, 3


def make_state(red, blue, dirs=(0, 0), coins=(), inventories=((0, 0), (0, 0)), freeze=-1, time=0, beams=()):
    """A state with the players at ``red``/``blue`` and ``coins`` = [(x, y, code), ...] on the grid."""
    grid = np.zeros((8, 8), np.int8)
    for x, y, code in coins:
        grid[x, y] = code
    for x, y in beams:
        grid[x, y] = BEAM
    grid[red] = RED_AGENT
    grid[blue] = BLUE_AGENT
    return InTheMatrixState(
        agent_positions=jnp.asarray([red, blue], jnp.int32),
        agent_directions=jnp.asarray(dirs, jnp.int32),
        grid=jnp.asarray(grid),
        inventories=jnp.asarray(inventories, jnp.int32),
        coin_cells=jnp.asarray(np.stack([COIN_SPAWNS[0::2], COIN_SPAWNS[1::2]])),
        freeze=jnp.asarray(freeze, jnp.int32),
        time=jnp.asarray(time, jnp.int32),
        outer_time=jnp.asarray(0, jnp.int32),
    )


@pytest.fixture(scope="module")
def game():
    """The env (correct rules), its params and its jitted step (params traced: one compile)."""
    env = InTheMatrix(PAYOFF, freeze_penalty=FREEZE, num_inner_steps=INNER, num_outer_steps=OUTER)
    return env, env.default_params, jax.jit(env.step)


@pytest.fixture(scope="module")
def quirky_game():
    env = InTheMatrix(
        PAYOFF, freeze_penalty=FREEZE, num_inner_steps=INNER, num_outer_steps=OUTER, pax_quirks=True
    )
    return env, env.default_params, jax.jit(env.step)


def step_once(game, state, actions, key=1, params=None):
    _, default, step = game
    return step(
        jax.random.key(key), state, jnp.asarray(actions, jnp.int32), default if params is None else params
    )


# Rules on hand-built states ----------------------------------------------------------------


def test_turns_moves_walls_and_pickups(game):
    # Red faces +y (heading 0) at (3, 3) with a red coin ahead; blue faces -x (heading 3) at the wall.
    state = make_state((3, 3), (0, 5), dirs=(0, 3), coins=[(3, 4, RED_COIN), (5, 5, BLUE_COIN)])
    _, new, reward, *_, info = step_once(game, state, (FORWARD, FORWARD))
    np.testing.assert_array_equal(np.asarray(new.agent_positions), [[3, 4], [0, 5]])  # blue clamped
    np.testing.assert_array_equal(np.asarray(new.inventories), [[1, 0], [0, 0]])
    np.testing.assert_array_equal(np.asarray(info["coins"]), [[1, 0], [0, 0]])
    assert (
        int(new.grid[3, 4]) == RED_AGENT and int(new.grid[3, 3]) == EMPTY and np.all(np.asarray(reward) == 0)
    )
    _, turned, *_ = step_once(game, new, (LEFT, RIGHT))
    np.testing.assert_array_equal(np.asarray(turned.agent_directions), [1, 2])
    np.testing.assert_array_equal(np.asarray(turned.agent_positions), [[3, 4], [0, 5]])


def test_collisions(game):
    # Red moves into the cell blue stands on: red stays.
    state = make_state((3, 3), (3, 4), dirs=(0, 0))
    _, new, *_ = step_once(game, state, (FORWARD, STAY))
    np.testing.assert_array_equal(np.asarray(new.agent_positions), [[3, 3], [3, 4]])
    # Both move into (3, 4): a fair coin picks who gets it, over many keys about half each.
    state = make_state((3, 3), (3, 5), dirs=(0, 2))
    env, params, _ = game
    keys = jax.random.split(jax.random.key(0), 2000)
    new = jax.jit(jax.vmap(lambda k: env.step(k, state, jnp.array([FORWARD, FORWARD]), params)[1]))(keys)
    red_got = np.all(np.asarray(new.agent_positions[:, 0]) == [3, 4], -1)
    blue_got = np.all(np.asarray(new.agent_positions[:, 1]) == [3, 4], -1)
    assert np.all(red_got ^ blue_got) and 0.45 < red_got.mean() < 0.55
    # Walking through each other is allowed.
    state = make_state((3, 3), (3, 4), dirs=(0, 2))
    _, new, *_ = step_once(game, state, (FORWARD, FORWARD))
    np.testing.assert_array_equal(np.asarray(new.agent_positions), [[3, 4], [3, 3]])


@pytest.mark.parametrize(
    ("inventories", "expected"),
    [
        (((1, 0), (1, 0)), (3.0, 3.5)),  # C, C
        (((1, 0), (0, 2)), (0.5, 5.5)),  # C, D
        (((0, 3), (1, 0)), (5.0, 0.25)),  # D, C
        (((0, 1), (0, 1)), (1.0, 1.5)),  # D, D
        (((1, 1), (1, 3)), None),  # mixed: p_red^T payoff[k] p_blue
    ],
)
def test_interaction_pays_every_payoff_entry_then_freezes_and_respawns(game, inventories, expected):
    # Red at (3, 3) faces +y; blue 2 ahead at (3, 5).
    state = make_state((3, 3), (3, 5), dirs=(0, 2), inventories=inventories, coins=[(0, 0, RED_COIN)])
    _, new, reward, _, _, info = step_once(game, state, (INTERACT, STAY))
    if expected is None:
        p_red = np.array(inventories[0], np.float32) / sum(inventories[0])
        p_blue = np.array(inventories[1], np.float32) / sum(inventories[1])
        expected = tuple(p_red @ PAYOFF[k] @ p_blue for k in range(2))
    np.testing.assert_allclose(np.asarray(reward), expected, rtol=1e-6)
    assert bool(info["interaction"].all()) and int(new.freeze) == FREEZE
    # Beam marks: 1 ahead (3, 4), 2 ahead is blue, the sides (4, 4) and (2, 4).
    for cell in ((3, 4), (4, 4), (2, 4)):
        assert int(new.grid[cell]) == BEAM, cell
    # Frozen: actions are ignored, the other's inventory is shown, then the respawn.
    obs = InTheMatrix().observation_of(new)
    np.testing.assert_array_equal(np.asarray(obs["inventory"][0, 4:]), inventories[1])
    state = new
    for t in range(FREEZE):
        _, state, reward, *_ = step_once(game, state, (FORWARD, INTERACT), key=10 + t)
        assert np.all(np.asarray(reward) == 0)
        if t < FREEZE - 1:
            np.testing.assert_array_equal(np.asarray(state.agent_positions), [[3, 3], [3, 5]])
            assert int(state.freeze) == FREEZE - 1 - t
    assert int(state.freeze) == -1 and np.all(np.asarray(state.inventories) == 0)
    grid = np.asarray(state.grid)
    assert (grid == RED_COIN).sum() + (
        grid == BLUE_COIN
    ).sum() + 0 >= 10  # coins refilled (an agent may cover one)
    assert (grid == RED_AGENT).sum() == 1 and (grid == BLUE_AGENT).sum() == 1


def test_no_reward_without_coins_or_a_hit(game):
    # Blue holds nothing: the hit pays nothing and freezes nobody.
    state = make_state((3, 3), (3, 4), dirs=(0, 0), inventories=((1, 0), (0, 0)))
    _, new, reward, *_, info = step_once(game, state, (INTERACT, STAY))
    assert np.all(np.asarray(reward) == 0) and not bool(info["interaction"].any()) and int(new.freeze) == -1
    # Blue beside red, not in the beam's cells: no hit.
    state = make_state((3, 3), (4, 3), dirs=(0, 0), inventories=((1, 0), (1, 0)))
    _, _, reward, *_ = step_once(game, state, (INTERACT, STAY))
    assert np.all(np.asarray(reward) == 0)
    # At a wall the side cells past it fall back to the cell ahead.
    state = make_state((7, 3), (7, 4), dirs=(0, 0), inventories=((1, 0), (1, 0)))
    _, new, reward, *_ = step_once(game, state, (INTERACT, STAY))
    np.testing.assert_allclose(np.asarray(reward), (3.0, 3.5))
    assert int(new.grid[6, 4]) == BEAM  # the inner side; the outer one falls back to (7, 4), the target


def test_egocentric_view():
    env = InTheMatrix()
    # Red at (3, 3) facing +x (heading 1): view cell (i, j) = j steps along +x, i - 2 steps along -y.
    state = make_state((3, 3), (5, 2), dirs=(1, 2), coins=[(4, 3, RED_COIN), (3, 1, BLUE_COIN)])
    obs = np.asarray(env.observation_of(state)["observation"])
    red_view = obs[0]
    assert red_view[2, 0, 0] == 1  # itself
    assert red_view[2, 1, 2] == 1  # red coin one step ahead
    assert red_view[3, 2, 1] == 1  # blue at 2 ahead, 1 to the -y side
    assert red_view[3, 2, 6 + (2 - 1) % 4] == 1  # blue's heading relative to red's
    assert red_view[..., 4].sum() == 0  # x = 7 is the last cell in view: no wall
    assert red_view[4, 0, 3] == 1  # the blue coin at (3, 1) is 2 to the -y side
    # Red at x = 5 facing +x: the cells at x = 8 and 9 are wall, across the whole view.
    near_wall = np.asarray(
        env.observation_of(state.replace(agent_positions=jnp.array([[5, 3], [0, 0]])))["observation"]
    )
    assert near_wall[0, :, :, 4].tolist() == [[0, 0, 0, 1, 1]] * 5
    # Blue sees itself in channel 0 and red in channel 1 (here 2 ahead of blue, heading -y).
    facing = np.asarray(env.observation_of(make_state((3, 3), (3, 5), dirs=(1, 2)))["observation"])
    assert facing[1, 2, 0, 0] == 1 and facing[1, 2, 2, 1] == 1 and facing[1, 2, 2, 6 + (1 - 2) % 4] == 1
    assert facing[1][..., 0].sum() == 1 and facing[1][..., 1].sum() == 1


def test_inner_outer_episodes_and_pax_quirks(game, quirky_game):
    headings, red_even = set(), set()
    for current, quirks in ((game, False), (quirky_game, True)):
        env, params, _ = current
        params = params.replace(
            payoff=jnp.asarray(PAYOFFS["prisoners_dilemma"]), num_inner_steps=3, num_outer_steps=2
        )
        # A paying interaction on the step that ends the inner episode: Pax pays nothing there.
        state = make_state((3, 3), (3, 4), dirs=(0, 0), inventories=((1, 0), (1, 0)), time=2)
        _, new, reward, _, truncated, info = step_once(current, state, (INTERACT, STAY), params=params)
        assert bool(info["inner_episode_done"].all()) and not bool(truncated.any())
        assert int(new.time) == 0 and int(new.outer_time) == 1  # the env started the next inner episode
        np.testing.assert_allclose(np.asarray(reward), (0.0, 0.0) if quirks else (3.0, 3.0))
        _, last, _, _, truncated, info = step_once(
            current, new.replace(time=jnp.asarray(2)), (STAY, STAY), params=params
        )
        assert bool(truncated.all()) and bool(info["inner_episode_done"].all()) and int(last.time) == 3
        states = jax.jit(jax.vmap(lambda k: env.reset(k, params)[1]))(
            jax.random.split(jax.random.key(2), 400)
        )
        headings.add((quirks, frozenset(np.unique(np.asarray(states.agent_directions)).tolist())))
        evens = np.all(np.asarray(states.coin_cells[:, 0]) == COIN_SPAWNS[0::2], (-1, -2))
        red_even.add((quirks, frozenset(evens.tolist())))
    assert headings == {(False, frozenset({0, 1, 2, 3})), (True, frozenset({0, 1, 2}))}
    assert red_even == {(False, frozenset({True, False})), (True, frozenset({False}))}


def test_presets_bad_payoffs_global_state_and_render():
    ipd, params = le.make("IPDInTheMatrix-v0", autoreset=False, num_inner_steps=20)
    np.testing.assert_array_equal(np.asarray(params.payoff), PAYOFFS["prisoners_dilemma"])
    assert ipd.unwrapped.fixed_coins and params.freeze_penalty == 5
    imp, imp_params = le.make("IMPInTheMatrix-v0", autoreset=False, num_inner_steps=9, num_outer_steps=2)
    np.testing.assert_array_equal(np.asarray(imp_params.payoff), [[[1, -1], [-1, 1]], [[-1, 1], [1, -1]]])
    assert not imp.unwrapped.fixed_coins
    with pytest.raises(ValueError, match=r"shape \(2, 2, 2\).*got shape \(4, 2\).*iterated matrix games"):
        le.make("IPDInTheMatrix-v0", payoff=np.ones((4, 2)))
    with pytest.raises(ValueError, match="freeze_penalty must be an integer >= 1"):
        InTheMatrix(freeze_penalty=0)
    # "false" was truthy: fixed coin layouts and Pax's quirks, silently.
    for name in ("fixed_coins", "pax_quirks"):
        with pytest.raises(ValueError, match=f"InTheMatrix: {name} must be True or False, got 'false'"):
            le.make("IMPInTheMatrix-v0", **{name: "false"})
    with pytest.raises(ValueError, match=r"params.payoff"):
        jax.eval_shape(ipd.reset, jax.random.key(0), params.replace(payoff=jnp.ones((2, 2))))
    # check_env runs on both ids in test_matrix_games.py (every multi_agent id, auto-reset on).
    frame = jax.jit(imp.render)(imp.reset(jax.random.key(4), imp_params)[1], imp_params)
    assert frame.shape == (272, 256, 3) and frame.dtype == jnp.uint8
    state = imp.reset(jax.random.key(4), imp_params)[1]
    gs = imp.global_state(state, imp_params)
    assert gs.shape == imp.global_state_space(imp_params).shape == (399,)
    assert bool(imp.global_state_space(imp_params).contains(gs))
    assert float(gs[: 8 * 8 * 6].sum()) == 14  # 12 coins and 2 agents (an agent may cover a coin: then 13)


# Parity with JaxMARL's port of Pax's InTheMatrix ------------------------------------------


def to_reference(state: InTheMatrixState) -> ReferenceState:
    def pos(i):
        return jnp.concatenate([state.agent_positions[i], state.agent_directions[i : i + 1]]).astype(jnp.int8)

    return ReferenceState(
        red_pos=pos(0),
        blue_pos=pos(1),
        step=state.time,
        outer_t=state.outer_time,
        done=jnp.zeros((), bool),
        grid=state.grid.astype(jnp.int8),
        red_inventory=state.inventories[0].astype(jnp.float32),
        blue_inventory=state.inventories[1].astype(jnp.float32),
        red_coins=state.coin_cells[0].astype(jnp.int8),
        blue_coins=state.coin_cells[1].astype(jnp.int8),
        freeze=state.freeze.astype(jnp.int16),
    )


def from_reference(ref: ReferenceState) -> InTheMatrixState:
    return InTheMatrixState(
        agent_positions=jnp.stack([ref.red_pos[..., :2], ref.blue_pos[..., :2]], -2).astype(jnp.int32),
        agent_directions=jnp.stack([ref.red_pos[..., 2], ref.blue_pos[..., 2]], -1).astype(jnp.int32),
        grid=ref.grid.astype(jnp.int8),
        inventories=jnp.stack([ref.red_inventory, ref.blue_inventory], -2).astype(jnp.int32),
        coin_cells=jnp.stack([ref.red_coins, ref.blue_coins], -3).astype(jnp.int32),
        freeze=ref.freeze.astype(jnp.int32),
        time=jnp.asarray(ref.step, jnp.int32),
        outer_time=jnp.asarray(ref.outer_t, jnp.int32),
    )


_STEP_XY = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]])


def chase(state: InTheMatrixState, rng: np.random.Generator) -> np.ndarray:
    """Wander (forward-biased) early in each inner episode, then chase the other and fire the beam."""
    pos, dirs = np.asarray(state.agent_positions), np.asarray(state.agent_directions)
    wander = rng.choice(5, pos.shape[:2], p=[0.2, 0.2, 0.5, 0.05, 0.05])
    actions = np.empty(pos.shape[:2], np.int64)
    for a in range(2):
        me, other, heading = pos[:, a], pos[:, 1 - a], dirs[:, a]
        ahead, side = _STEP_XY[heading], _STEP_XY[(heading + 1) % 4]
        one = np.clip(me + ahead, 0, 7)
        targets = [one, np.clip(me + 2 * ahead, 0, 7)]
        for off in (side, -side):
            cell = me + ahead + off
            targets.append(np.where(np.all((cell >= 0) & (cell <= 7), -1)[:, None], cell, one))
        in_beam = np.any([np.all(t == other, -1) for t in targets], 0)
        delta = other - me
        along_x = np.abs(delta[:, 0]) >= np.abs(delta[:, 1])
        wanted = np.where(along_x, np.where(delta[:, 0] > 0, 1, 3), np.where(delta[:, 1] > 0, 0, 2))
        move = np.where(wanted == heading, FORWARD, np.where((wanted - heading) % 4 == 1, LEFT, RIGHT))
        actions[:, a] = np.where(in_beam & (rng.random(len(me)) < 0.7), INTERACT, move)
    early = np.asarray(state.time)[:, None] < 5
    noise = rng.random(actions.shape) < 0.15
    return np.where(early | noise, wander, actions).astype(np.int32)


def test_parity_with_jaxmarl():
    """State injection, 128 envs x 40 steps of a chasing policy with random actions mixed in.

    Each step copies lamella's state into JaxMARL's ``InTheGrid_2p`` (a port of Pax's
    ``InTheMatrix``), steps both with the same actions (lamella with ``pax_quirks=True``)
    and compares rewards, the inner-episode flag, the episode end, and, where the step drew
    no random numbers (no two-mover collision, respawn or inner restart), the whole next
    state: positions, headings, grid (coins and beam marks), inventories and freeze.
    lamella's observation of JaxMARL's next state must equal JaxMARL's observation on every
    step. Then both continue from JaxMARL's state. (The coin layout option only changes the
    reset, which state injection bypasses; ``test_inner_outer_episodes_and_pax_quirks`` checks it.)
    """
    num_envs, num_steps = 128, 40
    reference = ReferenceStorm(
        num_inner_steps=INNER,
        num_outer_steps=OUTER,
        fixed_coin_location=True,
        payoff_matrix=jnp.asarray(PAYOFF),
        freeze_penalty=FREEZE,
    )
    env = InTheMatrix(PAYOFF, True, FREEZE, INNER, OUTER, pax_quirks=True)
    params = env.default_params
    reset = jax.vmap(lambda k: env.reset(k, params)[1])

    def both(key, state, action):
        obs, ref_new, (r0, r1), done, _ = reference.step_env(key, to_reference(state), (action[0], action[1]))
        ref_obs = {
            "observation": jnp.stack([obs[0]["observation"], obs[1]["observation"]]),
            "inventory": jnp.stack([obs[0]["inventory"], obs[1]["inventory"]]),
        }
        ours = env.step(key, state, action, params)
        return ours, (ref_obs, ref_new, jnp.stack([r0, r1]).astype(jnp.float32), done["__all__"])

    @jax.jit
    def advance(keys, state, actions):
        ours, ref = jax.vmap(both)(keys, state, actions)
        ref_state, ref_done = from_reference(ref[1]), ref[3]
        obs_of_ref = jax.vmap(env.observation_of)(ref_state)

        def select(fresh, cont):
            return jnp.where(jnp.reshape(ref_done, (-1,) + (1,) * (cont.ndim - 1)), fresh, cont)

        return ours, ref, obs_of_ref, ref_state, jax.tree.map(select, reset(keys), ref_state)

    state = jax.device_get(jax.jit(reset)(jax.random.split(jax.random.key(11), num_envs)))
    rng = np.random.default_rng(1)
    counts = dict.fromkeys(
        (
            "both_moved_collisions",
            "blocked",
            "pickups_red",
            "pickups_blue",
            "interactions",
            "respawns",
            "beams",
        ),
        0,
    )
    log = {"reward": [], "done": [], "inner": []}
    for t in range(num_steps):
        actions = chase(state, rng)
        keys = jax.random.split(jax.random.key(1000 + t), num_envs)
        ours, ref, obs_of_ref, ref_next, next_state = jax.device_get(
            advance(keys, state, jnp.asarray(actions))
        )
        obs, new, reward, terminated, truncated, info = ours
        ref_obs, _, ref_reward, ref_done = ref
        np.testing.assert_allclose(reward, ref_reward, rtol=1e-6, atol=1e-6, err_msg=f"step {t}")
        np.testing.assert_array_equal(truncated[:, 0], ref_done)
        inner = info["inner_episode_done"][:, 0]
        np.testing.assert_array_equal(inner, np.asarray(ref_next.time) == 0)
        assert not terminated.any()
        for name in ("observation", "inventory"):
            np.testing.assert_array_equal(
                obs_of_ref[name], np.asarray(ref_obs[name]), err_msg=f"{name} step {t}"
            )

        # Which steps drew random numbers (JaxMARL's and lamella's differ there).
        before = state
        frozen = np.asarray(before.freeze) > 0
        acted = np.where(frozen[:, None], STAY, actions)
        step_xy = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]])
        target = np.clip(
            before.agent_positions + (acted == FORWARD)[..., None] * step_xy[before.agent_directions], 0, 7
        )
        moved = np.any(target != before.agent_positions, -1)
        same_cell = np.all(target[:, 0] == target[:, 1], -1)
        random_collision = same_cell & moved[:, 0] & moved[:, 1]
        respawn = (np.asarray(ref_next.freeze) == -1) & (np.asarray(before.freeze) >= 0)
        exact = ~random_collision & ~respawn & ~inner
        for field in ("agent_positions", "agent_directions", "grid", "inventories", "freeze"):
            np.testing.assert_array_equal(
                np.asarray(getattr(new, field))[exact],
                np.asarray(getattr(ref_next, field))[exact],
                err_msg=f"{field} step {t}",
            )
        counts["both_moved_collisions"] += int(random_collision.sum())
        counts["blocked"] += int((same_cell & (moved[:, 0] ^ moved[:, 1])).sum())
        counts["pickups_red"] += int(info["coins"][..., 0].sum())
        counts["pickups_blue"] += int(info["coins"][..., 1].sum())
        counts["interactions"] += int(info["interaction"][:, 0].sum())
        counts["respawns"] += int(respawn.sum())
        counts["beams"] += int((np.asarray(ref_next.grid) == BEAM).any((-1, -2)).sum())
        log["reward"].append(ref_reward)
        log["done"].append(ref_done)
        log["inner"].append(inner)
        state = next_state

    done = np.stack(log["done"])
    assert_parity_coverage(
        "InTheMatrix",
        terminated=np.zeros_like(done),
        truncated=done,
        reward=np.stack(log["reward"]),
        auto_reset=np.zeros_like(done),
        never_terminates="InTheMatrix has no terminal state",
        no_auto_reset="JaxMARL's step_env is compared, which leaves the reset to its wrapper",
    )
    # Two-mover collisions are a coin flip (compared in test_collisions, not here).
    minimum = {"blocked": 10, "pickups_red": 100, "pickups_blue": 100, "interactions": 15, "respawns": 10}
    minimum |= {"beams": 150}
    assert all(counts[k] >= v for k, v in minimum.items()), str(counts)
    assert (np.stack(log["inner"]) & ~done).sum() >= 96
