"""Level-Based Foraging: step-by-step parity with lbforaging 2.0.0, rules on hand-built states, conformance."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import lbforaging
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs.multi_agent import lbf
from lamella.envs.multi_agent.lbf import LevelBasedForaging, LevelBasedForagingState
from lamella.envs.testing import check_env

NONE, NORTH, SOUTH, WEST, EAST, LOAD = range(6)
_MOVES = {NORTH: (-1, 0), SOUTH: (1, 0), WEST: (0, -1), EAST: (0, 1)}


# Helpers -----------------------------------------------------------------------------------


def inject(reference, num_food: int) -> LevelBasedForagingState:
    """lamella's state for lbforaging's current state (food slots in row-major order)."""
    rows, cols = np.nonzero(reference.field)
    levels = reference.field[rows, cols]
    food_positions = np.zeros((num_food, 2), np.int32)
    food_levels = np.zeros((num_food,), np.int32)
    food_positions[: len(rows)] = np.stack([rows, cols], -1)
    food_levels[: len(rows)] = levels
    return LevelBasedForagingState(
        agent_positions=jnp.asarray([p.position for p in reference.players], jnp.int32),
        agent_levels=jnp.asarray([p.level for p in reference.players], jnp.int32),
        food_positions=jnp.asarray(food_positions),
        food_levels=jnp.asarray(food_levels),
        food_spawned=jnp.asarray(reference._food_spawned, jnp.float32),
        time=jnp.asarray(reference.current_step, jnp.int32),
    )


def field_of(state: LevelBasedForagingState, shape: tuple[int, int]) -> np.ndarray:
    field = np.zeros(shape, np.int64)
    for (row, col), level in zip(np.asarray(state.food_positions), np.asarray(state.food_levels)):
        if level > 0:
            field[row, col] = level
    return field


def reference_mask(reference) -> np.ndarray:
    return np.array(
        [
            [a in reference._valid_actions[p] for a in lbforaging.foraging.environment.Action]
            for p in reference.players
        ]
    )


def seek_food(reference, rng: np.random.Generator, explore: float) -> list[int]:
    """A food-seeking scripted policy with random exploration (any action, legal or not)."""
    foods = np.argwhere(reference.field > 0)
    actions = []
    for player in reference.players:
        if rng.random() < explore or len(foods) == 0:
            actions.append(int(rng.integers(0, 6)))
            continue
        row, col = player.position
        distance = np.abs(foods - [row, col]).sum(1)
        if distance.min() == 1:
            actions.append(LOAD)
            continue
        food_row, food_col = foods[np.argmin(distance)]
        if row != food_row and abs(row - food_row) > (col == food_col):
            actions.append(NORTH if food_row < row else SOUTH)
        else:
            actions.append(WEST if food_col < col else EAST)
    return actions


# Parity ------------------------------------------------------------------------------------

# (lbforaging id or constructor kwargs, episodes, exploration rate of the scripted policy)
PARITY_CASES = [
    ("Foraging-8x8-2p-2f-v3", 12, 0.3),
    ("Foraging-2s-8x8-3p-2f-coop-v3", 10, 0.2),
    ("Foraging-2s-10x10-4p-3f-v3", 8, 0.3),
    ("Foraging-5x5-9p-1f-v3", 8, 0.6),
    ("Foraging-2s-12x12-2p-4f-coop-v3", 6, 0.2),
    (
        dict(
            players=3,
            field_size=(7, 9),
            max_num_food=3,
            sight=3,
            force_coop=False,
            max_food_level=4,
            penalty=0.25,
            normalize_reward=False,
            observe_agent_levels=False,
            max_episode_steps=30,
        ),
        6,
        0.3,
    ),
]


def _reference_kwargs(kwargs: dict) -> dict:
    rows_cols = kwargs["field_size"]
    return dict(
        players=kwargs["players"],
        min_player_level=1,
        max_player_level=2,
        min_food_level=1,
        max_food_level=kwargs["max_food_level"],
        field_size=rows_cols,
        max_num_food=kwargs["max_num_food"],
        sight=kwargs["sight"],
        max_episode_steps=kwargs["max_episode_steps"],
        force_coop=kwargs["force_coop"],
        normalize_reward=kwargs["normalize_reward"],
        observe_agent_levels=kwargs["observe_agent_levels"],
        penalty=kwargs["penalty"],
    )


@pytest.fixture(scope="module")
def parity_counts():
    """Run every parity case once; the tests below read what was compared."""
    counts = {
        "steps": 0,
        "terminated": 0,
        "truncated": 0,
        "reward": 0,
        "penalty": 0,
        "illegal": 0,
        "stacked": 0,
        "swap_or_follow": 0,
        "blocked": 0,
    }
    for case_index, (case, episodes, explore) in enumerate(PARITY_CASES):
        if isinstance(case, str):
            reference = gymnasium.make(case).unwrapped
            env, params = le.make(case, autoreset=False)
        else:
            reference = lbforaging.foraging.ForagingEnv(**_reference_kwargs(case))
            env = LevelBasedForaging(**case)
            params = env.default_params
        step = jax.jit(env.step)
        get_obs = jax.jit(env.get_obs)
        key = jax.random.key(0)
        rng = np.random.default_rng(case_index)
        for episode in range(episodes):
            obs_ref, _ = reference.reset(seed=1000 * case_index + episode)
            state = inject(reference, env.max_num_food)
            np.testing.assert_array_equal(np.asarray(get_obs(state)), np.stack(obs_ref))
            done = False
            while not done:
                actions = seek_food(reference, rng, explore)
                mask = reference_mask(reference)
                counts["illegal"] += int(sum(not mask[i, a] for i, a in enumerate(actions)))
                before = [p.position for p in reference.players]
                obs_ref, reward_ref, done, truncated_ref, _ = reference.step(actions)
                obs, state, reward, terminated, truncated, info = step(
                    key, state, jnp.asarray(actions, jnp.int32), params
                )
                where = f"{case} episode {episode} step {reference.current_step}"
                np.testing.assert_array_equal(np.asarray(obs), np.stack(obs_ref), err_msg=where)
                np.testing.assert_allclose(
                    np.asarray(reward),
                    np.asarray(reward_ref, np.float64),
                    rtol=1e-6,
                    atol=1e-7,
                    err_msg=where,
                )
                terminated, truncated = np.asarray(terminated), np.asarray(truncated)
                assert not truncated_ref
                assert np.all(terminated | truncated) == done, where
                assert np.all(terminated == terminated[0]) and np.all(truncated == truncated[0])
                np.testing.assert_array_equal(
                    field_of(state, reference.field.shape), reference.field, err_msg=where
                )
                np.testing.assert_array_equal(
                    np.asarray(state.agent_positions), [p.position for p in reference.players], err_msg=where
                )
                np.testing.assert_array_equal(
                    np.asarray(state.agent_levels), [p.level for p in reference.players]
                )
                assert int(state.time) == reference.current_step
                np.testing.assert_array_equal(
                    np.asarray(info["action_mask"]), reference_mask(reference), err_msg=where
                )
                after = [p.position for p in reference.players]
                counts["steps"] += 1
                counts["terminated"] += int(terminated[0])
                counts["truncated"] += int(truncated[0] and not terminated[0])
                counts["reward"] += int(np.any(np.asarray(reward) > 0))
                counts["penalty"] += int(np.any(np.asarray(reward) < 0))
                counts["stacked"] += int(len(set(after)) < len(after))
                moved_into = [a for i, a in enumerate(after) if a != before[i] and a in before]
                counts["swap_or_follow"] += int(len(moved_into) > 0)
                intended = [
                    (before[i][0] + _MOVES[a][0], before[i][1] + _MOVES[a][1])
                    if a in _MOVES and mask[i, a]
                    else before[i]
                    for i, a in enumerate(actions)
                ]
                counts["blocked"] += int(any(intended[i] != after[i] for i in range(len(after))))
    return counts


def test_parity_with_lbforaging_step_by_step(parity_counts):
    # Coverage: the compared steps include every outcome the rules distinguish.
    counts = parity_counts
    assert counts["steps"] >= 1000, counts
    for outcome in (
        "terminated",
        "truncated",
        "reward",
        "penalty",
        "illegal",
        "stacked",
        "swap_or_follow",
        "blocked",
    ):
        assert counts[outcome] > 0, f"parity never compared a step with {outcome}: {counts}"


def test_reset_distribution_matches_lbforaging_random_play():
    """Random play on Foraging-8x8-2p-2f-v3: lamella's team return and length against lbforaging's own."""
    env, params = le.make("Foraging-8x8-2p-2f-v3", autoreset=False)
    num_episodes = 2048

    def episode(key):
        obs, state = env.reset(key, params)

        def body(carry, step_key):
            state, total, length, done = carry
            action = jax.random.randint(step_key, (2,), 0, 6)
            _, next_state, reward, terminated, truncated, _ = env.step(step_key, state, action, params)
            total = total + jnp.where(done, 0.0, reward.sum())
            length = length + jnp.where(done, 0, 1)
            return (next_state, total, length, done | jnp.all(terminated | truncated)), None

        init = (state, jnp.zeros(()), jnp.zeros((), jnp.int32), jnp.zeros((), bool))
        (_, total, length, _), _ = jax.lax.scan(body, init, jax.random.split(key, 50))
        return total, length

    totals, lengths = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.key(3), num_episodes))
    reference = gymnasium.make("Foraging-8x8-2p-2f-v3").unwrapped
    rng = np.random.default_rng(0)
    ref_totals, ref_lengths = [], []
    for seed in range(300):
        reference.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, done, _, _ = reference.step([int(a) for a in rng.integers(0, 6, 2)])
            total += sum(reward)
        ref_totals.append(total)
        ref_lengths.append(reference.current_step)
    totals, ref_totals = np.asarray(totals), np.asarray(ref_totals)
    # Four standard errors of the difference (MARL.md §8 measured 0.208 and 48.9 over 300 episodes).
    tolerance = 4 * np.sqrt(totals.var() / totals.size + ref_totals.var() / ref_totals.size)
    assert abs(totals.mean() - ref_totals.mean()) < tolerance, (totals.mean(), ref_totals.mean(), tolerance)
    length_tolerance = 4 * np.sqrt(np.var(lengths) / lengths.size + np.var(ref_lengths) / len(ref_lengths))
    assert abs(np.mean(lengths) - np.mean(ref_lengths)) < length_tolerance


def test_crowded_food_spawn_matches_lbforaging():
    """On 5x5 at most 2 foods fit, and agents in the interior sometimes leave room for only 1."""
    env, params = le.make("Foraging-5x5-2p-4f-v3", autoreset=False)
    _, states = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(5), 4096), params
    )
    ours = (np.asarray(states.food_levels) > 0).sum(1)
    reference = gymnasium.make("Foraging-5x5-2p-4f-v3").unwrapped
    theirs = np.array([(reference.reset(seed=seed), (reference.field > 0).sum())[1] for seed in range(1000)])
    assert ours.max() == theirs.max() == 2 and ours.min() >= 1 and theirs.min() >= 1
    p_ours, p_theirs = np.mean(ours == 1), np.mean(theirs == 1)
    tolerance = 4 * np.sqrt(p_ours * (1 - p_ours) / ours.size + p_theirs * (1 - p_theirs) / theirs.size)
    assert 0 < p_theirs and abs(p_ours - p_theirs) < tolerance, (p_ours, p_theirs, tolerance)


# Rules on hand-built states -------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    """A 6x6 grid with 3 agents and 2 food slots, full sight, and its jitted step."""
    env = LevelBasedForaging(players=3, field_size=6, max_num_food=2)
    return env, env.default_params, jax.jit(env.step)


def make_state(agents, levels, foods, food_levels, time=0):
    return LevelBasedForagingState(
        agent_positions=jnp.asarray(agents, jnp.int32),
        agent_levels=jnp.asarray(levels, jnp.int32),
        food_positions=jnp.asarray(foods, jnp.int32),
        food_levels=jnp.asarray(food_levels, jnp.int32),
        food_spawned=jnp.asarray(float(sum(food_levels)), jnp.float32),
        time=jnp.asarray(time, jnp.int32),
    )


def test_illegal_and_out_of_range_actions_are_none(small):
    env, params, step = small
    # Agent 0 in the top-left corner, food to its east; agent 1 far from food; agent 2 mid-grid.
    state = make_state([[0, 0], [5, 5], [3, 3]], [1, 1, 1], [[0, 1], [3, 5]], [1, 1])
    mask = np.asarray(env.action_mask(state))
    np.testing.assert_array_equal(
        mask[0], [True, False, True, False, False, True]
    )  # N, W off grid; E is food
    np.testing.assert_array_equal(mask[1], [True, True, False, True, False, False])
    none = step(jax.random.key(0), state, jnp.array([NONE, NONE, NONE]), params)
    for illegal in ([NORTH, SOUTH, NONE], [EAST, EAST, LOAD], [WEST, 7, -3], [NORTH, 100, 6]):
        out = step(jax.random.key(0), state, jnp.asarray(illegal, jnp.int32), params)
        legal_part = [a if 0 <= a < 6 and mask[i, a] else NONE for i, a in enumerate(illegal)]
        expected = step(jax.random.key(0), state, jnp.asarray(legal_part, jnp.int32), params)
        jax.tree.map(np.testing.assert_array_equal, out[:5], expected[:5])
    # Every illegal choice of agent 1 (S, E, LOAD, out of range) leaves everything as NONE does.
    for action in (SOUTH, EAST, LOAD, 6, -1):
        out = step(jax.random.key(0), state, jnp.asarray([NONE, action, NONE], jnp.int32), params)
        jax.tree.map(np.testing.assert_array_equal, out[:5], none[:5])


def test_movement_swaps_follows_collides_and_stacks(small):
    env, params, step = small
    food = ([[5, 0], [0, 5]], [0, 0])  # no food on the board (levels 0)
    # Swap: agents 0 and 1 exchange cells.
    out = step(
        jax.random.key(0),
        make_state([[2, 2], [2, 3], [4, 4]], [1, 1, 1], *food),
        jnp.array([EAST, WEST, NONE]),
        params,
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[2, 3], [2, 2], [4, 4]])
    # Following: agent 0 enters the cell agent 1 leaves.
    out = step(
        jax.random.key(0),
        make_state([[2, 2], [2, 3], [4, 4]], [1, 1, 1], *food),
        jnp.array([EAST, EAST, NONE]),
        params,
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[2, 3], [2, 4], [4, 4]])
    # Two agents aiming at one cell both stay; moving onto a standing agent fails.
    out = step(
        jax.random.key(0),
        make_state([[2, 2], [2, 4], [4, 4]], [1, 1, 1], *food),
        jnp.array([EAST, WEST, NORTH]),
        params,
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[2, 2], [2, 4], [3, 4]])
    out = step(
        jax.random.key(0),
        make_state([[2, 2], [2, 3], [4, 4]], [1, 1, 1], *food),
        jnp.array([EAST, NONE, NONE]),
        params,
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[2, 2], [2, 3], [4, 4]])
    # Stacking (MARL.md §1.4): B and C collide on (3, 2), so B stays and A moves onto B's cell.
    out = step(
        jax.random.key(0),
        make_state([[3, 0], [3, 1], [3, 3]], [1, 1, 1], *food),
        jnp.array([EAST, EAST, WEST]),
        params,
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[3, 1], [3, 1], [3, 3]])


def test_loading_rewards_by_hand(small):
    env, params, step = small
    # Food of level 3 at (2, 2) with agents of levels 1 and 2 beside it; food of level 1 at (4, 4) untouched.
    state = make_state([[1, 2], [2, 1], [5, 5]], [1, 2, 2], [[2, 2], [4, 4]], [3, 1])
    # One loader alone (level 2 < 3) fails: no reward, food stays.
    _, after, reward, terminated, _, _ = step(jax.random.key(0), state, jnp.array([NONE, LOAD, NONE]), params)
    np.testing.assert_array_equal(np.asarray(reward), [0, 0, 0])
    np.testing.assert_array_equal(np.asarray(after.food_levels), [3, 1])
    # Both load: 1*3 / (3 * 4) and 2*3 / (3 * 4) of a total spawned food of 4.
    _, after, reward, terminated, _, _ = step(jax.random.key(0), state, jnp.array([LOAD, LOAD, NONE]), params)
    np.testing.assert_allclose(np.asarray(reward), [3 / 12, 6 / 12, 0], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(after.food_levels), [0, 1])
    assert not np.any(np.asarray(terminated))
    # Unnormalised rewards and a penalty for the group that falls short.
    raw = params.replace(normalize_reward=False, penalty=0.5)
    _, _, reward, *_ = step(jax.random.key(0), state, jnp.array([LOAD, LOAD, NONE]), raw)
    np.testing.assert_allclose(np.asarray(reward), [3, 6, 0])
    _, _, reward, *_ = step(jax.random.key(0), state, jnp.array([LOAD, NONE, NONE]), raw)
    np.testing.assert_allclose(np.asarray(reward), [-0.5, 0, 0])
    # Eating the last food terminates every agent; the time limit truncates every agent.
    last = make_state([[4, 3], [0, 0], [5, 5]], [1, 1, 1], [[2, 2], [4, 4]], [0, 1], time=3)
    _, after, reward, terminated, truncated, info = step(
        jax.random.key(0), last, jnp.array([LOAD, NONE, NONE]), params
    )
    np.testing.assert_allclose(np.asarray(reward), [1.0, 0, 0])
    assert np.all(np.asarray(terminated)) and not np.any(np.asarray(truncated))
    np.testing.assert_array_equal(np.asarray(info["action_mask"])[:, LOAD], [False, False, False])
    timed = last.replace(time=jnp.asarray(49, jnp.int32))
    _, _, _, terminated, truncated, _ = step(jax.random.key(0), timed, jnp.array([NONE, NONE, NONE]), params)
    assert np.all(np.asarray(truncated)) and not np.any(np.asarray(terminated))


def test_global_state_and_spaces(small):
    env, params, _ = small
    state = make_state([[1, 2], [2, 1], [5, 5]], [1, 2, 2], [[2, 2], [4, 4]], [3, 0])
    np.testing.assert_array_equal(
        np.asarray(env.global_state(state, params)), [2, 2, 3, -1, -1, 0, 1, 2, 1, 2, 1, 2, 5, 5, 2]
    )
    assert bool(env.global_state_space(params).contains(env.global_state(state, params)))
    assert env.action_space(params).shape == (3,) and list(env.action_space(params).nvec) == [6, 6, 6]
    assert env.observation_space(params).shape == (3, 3 * 2 + 3 * 3)


def test_with_full_sight_the_first_agents_observation_is_the_global_state():
    """With full sight (no ``-2s-`` in the id) and one food, agent 0's observation is exactly the
    global state (absolute coordinates; its own slot, agent 0, first): a centralised critic sees
    nothing more there (lamella-ued's README says so)."""
    env, params = le.make("Foraging-5x5-2p-1f-v3", autoreset=False)
    obs, states = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(0), 64), params
    )
    global_state = jax.vmap(env.unwrapped.global_state, in_axes=(0, None))(states, params)
    assert (np.asarray(states.food_levels) > 0).all()
    np.testing.assert_array_equal(np.asarray(obs)[:, 0], np.asarray(global_state))
    assert not np.array_equal(np.asarray(obs)[:, 1], np.asarray(global_state))  # agent 1's slot first


@pytest.mark.parametrize(
    "env_id, by_rejection",
    [("Foraging-2s-6x6-4p-3f-coop-v3", False), ("Foraging-2s-15x15-4p-4f-coop-v3", True)],
)
def test_reset_invariants_over_many_states(env_id, by_rejection):
    env, params = le.make(env_id, autoreset=False)
    assert (env.unwrapped._food_candidates > 0) == by_rejection  # both spawn paths are covered
    side = env.rows
    obs, states = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(0), 512), params
    )
    agents, agent_levels = np.asarray(states.agent_positions), np.asarray(states.agent_levels)
    foods, food_levels = np.asarray(states.food_positions), np.asarray(states.food_levels)
    assert agent_levels.min() == 1 and agent_levels.max() == 2
    three_lowest = np.sort(agent_levels, 1)[:, :3].sum(1)
    for b in range(512):
        assert len({tuple(p) for p in agents[b]}) == 4
        placed = food_levels[b] > 0
        # 6x6: at least one food always fits; 15x15: all four fit and K candidates find them.
        assert placed.sum() >= (4 if by_rejection else 1)
        np.testing.assert_array_equal(food_levels[b][placed], three_lowest[b])  # force_coop
        cells = foods[b][placed]
        assert np.all((cells >= 1) & (cells <= side - 2)), cells  # interior only
        assert not any(tuple(c) in {tuple(p) for p in agents[b]} for c in cells)
        for i in range(len(cells)):
            for j in range(i):
                d_row, d_col = np.abs(cells[i] - cells[j])
                assert max(d_row, d_col) > 1 and not (min(d_row, d_col) == 0 and max(d_row, d_col) <= 2)
        assert float(states.food_spawned[b]) == food_levels[b].sum()
    assert bool(jax.vmap(env.observation_space(params).contains)(obs).all())


# Ids, conformance, bad input ------------------------------------------------------------------


def test_ids_are_lbforagings():
    ours = set(lbf.env_ids())
    theirs = {
        env_id for env_id in gymnasium.registry if env_id.startswith("Foraging") and "grid" not in env_id
    }
    assert ours == theirs and len(ours) == 1920
    assert ours <= set(le.registered())
    for env_id in ("Foraging-8x8-2p-2f-v3", "Foraging-2s-19x19-9p-4f-coop-v3", "Foraging-5x5-2p-1f-v3"):
        spec = gymnasium.spec(env_id).kwargs
        env, params = le.make(env_id, autoreset=False)
        assert (env.num_agents, env.rows, env.max_num_food, env.sight, env.force_coop) == (
            spec["players"],
            spec["field_size"][0],
            spec["max_num_food"],
            spec["sight"],
            spec["force_coop"],
        )
        assert (int(params.max_episode_steps), float(params.penalty)) == (
            spec["max_episode_steps"],
            spec["penalty"],
        )
        reference_space = gymnasium.make(env_id).unwrapped.observation_space[0]
        ours_space = env.observation_space(params)
        np.testing.assert_array_equal(ours_space.low[0], reference_space.low)
        np.testing.assert_array_equal(ours_space.high[0], reference_space.high)


CHECK_IDS = ["Foraging-8x8-2p-2f-v3", "Foraging-2s-5x5-9p-4f-coop-v3", "Foraging-2s-19x19-3p-1f-v3"]


@pytest.mark.parametrize("env_id", CHECK_IDS)
def test_check_env(env_id):
    # 60 steps cross the 50-step limit, so check_env sees an auto-reset.
    env, params = le.make(env_id)
    check_env(env, params, num_steps=60, num_envs=2)


def test_bad_input_is_rejected_clearly(small):
    env, params, _ = small
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        env.step(jax.random.key(0), state, jnp.zeros((2,), jnp.int32), params)
    with pytest.raises(TypeError, match=r"an integer; got shape \(3,\), dtype float32"):
        env.step(jax.random.key(0), state, jnp.zeros((3,), jnp.float32), params)
    with pytest.raises(ValueError, match="cannot hold"):
        LevelBasedForaging(players=9, field_size=3, max_num_food=1)
    with pytest.raises(ValueError, match="players"):
        LevelBasedForaging(players=1)
    with pytest.raises(ValueError, match="field_size"):
        LevelBasedForaging(field_size=2)
    with pytest.raises(ValueError, match="max_food_level"):
        LevelBasedForaging(min_food_level=3, max_food_level=2)
    # Above every cap reset can draw: every food was the cap (4 here), below min_food_level, silently.
    with pytest.raises(ValueError, match=r"min_food_level \(5\) is above .* at most 4 .*max_food_level >= 5"):
        LevelBasedForaging(min_food_level=5)
    LevelBasedForaging(min_food_level=5, max_food_level=6)  # a cap of its own
    LevelBasedForaging(min_food_level=5, force_coop=True)  # every food is the cap: no minimum to miss
    # A string switch was truthy: observe_agent_levels="false" observed the levels, silently.
    with pytest.raises(ValueError, match="observe_agent_levels must be True or False, got 'false'"):
        le.make("Foraging-8x8-2p-2f-v3", observe_agent_levels="false")
    with pytest.raises(ValueError, match="force_coop must be True or False, got 'no'"):
        LevelBasedForaging(force_coop="no")
    with pytest.raises(ValueError, match="normalize_reward must be True or False, got 'false'"):
        LevelBasedForaging(normalize_reward="false")


def test_render_shows_agents_and_food(small):
    env, params, _ = small
    state = make_state([[0, 0], [5, 5], [3, 3]], [1, 2, 1], [[2, 2], [4, 1]], [3, 0])
    frame = np.asarray(jax.jit(env.render)(state, params))
    assert frame.shape == (6 * 32, 6 * 32, 3) and frame.dtype == np.uint8
    cell = lambda row, col: frame[row * 32 + 4 : row * 32 + 8, col * 32 + 4 : col * 32 + 8]  # noqa: E731
    assert cell(2, 2)[..., 1].mean() > cell(2, 2)[..., 0].mean() + 40  # green food
    np.testing.assert_array_equal(cell(4, 1), cell(1, 4))  # an eaten food looks like an empty cell
    center = frame[16, 16]  # agent 0's disc (its one level dot sits left of the centre)
    assert center[0] > 150 and center[2] < 100, center


def test_wrappers_with_state_pass_the_inner_state_to_mask_and_global_state(small):
    """A wrapper's state holds the env's in ``env_state``; ``wrapped.action_mask(state)`` and
    ``wrapped.global_state(state)`` failed inside the env ('EpisodeStatisticsState' object has no
    attribute 'agent_positions'), as ``render`` did not."""
    env, params, _ = small
    wrapped = le.wrappers.EpisodeStatistics(le.wrappers.AutoReset(lbf.AutoReplay(env)))
    _, state = wrapped.reset(jax.random.key(0), params)
    inner = state.env_state.env_state
    np.testing.assert_array_equal(wrapped.action_mask(state, params), env.action_mask(inner, params))
    np.testing.assert_array_equal(wrapped.global_state(state, params), env.global_state(inner))


def test_reset_wrappers_give_the_returned_states_action_mask(small):
    env, params, _ = small
    params = params.replace(max_episode_steps=2)
    mask_of = jax.vmap(env.action_mask, in_axes=(0, None))
    keys = jax.random.split(jax.random.key(3), 8)

    auto = le.wrappers.AutoReset(env)
    _, state = jax.vmap(auto.reset, in_axes=(0, None))(keys, params)
    step = jax.jit(jax.vmap(auto.step, in_axes=(0, 0, 0, None)))
    none = jnp.zeros((8, 3), jnp.int32)
    for _ in range(2):  # the second step truncates every env and resets it
        _, state, _, _, truncated, info = step(keys, state, none, params)
        np.testing.assert_array_equal(info["action_mask"], mask_of(state, params))
    assert bool(truncated.all())

    optimistic = le.wrappers.OptimisticReset(env, num_envs=8, reset_ratio=2)
    _, state = optimistic.reset(jax.random.key(4), params)
    step = jax.jit(optimistic.step)
    for t in range(2):
        _, state, _, _, truncated, info = step(jax.random.key(t), state, none, params)
        np.testing.assert_array_equal(info["action_mask"], mask_of(state, params))
    assert bool(truncated.all())
