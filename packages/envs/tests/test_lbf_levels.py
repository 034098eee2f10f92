"""Level-Based Foraging as a level-based env (UED): reset_to_level, the generator (the reset
distribution), the mutator, the comparator, AutoReplay and render_level; bad levels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs.multi_agent import lbf
from lamella.envs.multi_agent.lbf import levels as lbf_levels
from lamella.envs.multi_agent.lbf.env import _near_food
from lamella.envs.testing import check_env

NONE, NORTH, SOUTH, WEST, EAST, LOAD = range(6)


@pytest.fixture(scope="module")
def small():
    return le.make("Foraging-5x5-2p-1f-v3", autoreset=False)


@pytest.fixture(scope="module")
def roomy():
    return le.make("Foraging-8x8-3p-2f-v3", autoreset=False)


def test_sample_level_is_the_reset_distribution_and_reset_to_level_restarts_it(roomy):
    env, params = roomy
    keys = jax.random.split(jax.random.key(0), 16)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    levels = jax.vmap(env.sample_level, in_axes=(0, None))(keys, params)
    obs2, state2 = jax.vmap(env.reset_to_level, in_axes=(0, 0, None))(keys, levels, params)
    np.testing.assert_array_equal(obs2, obs)
    jax.tree.map(np.testing.assert_array_equal, state2, state)
    # The reward normaliser is the level's food: clearing it all pays the team 1.
    np.testing.assert_array_equal(state2.food_spawned, np.asarray(levels.food_levels).sum(-1))


def test_levels_equal_compares_layouts_and_ignores_where_an_empty_slot_lies(roomy):
    env, _ = roomy
    a = lbf.ForagingLevel.create([[0, 0], [2, 3], [7, 7]], [1, 2, 1], [[3, 3], [5, 5]], [2, 0])
    assert bool(env.levels_equal(a, a))
    assert bool(env.levels_equal(a, a.replace(food_positions=jnp.asarray([[3, 3], [1, 6]], jnp.int32))))
    assert not bool(env.levels_equal(a, a.replace(food_positions=jnp.asarray([[3, 4], [5, 5]], jnp.int32))))
    assert not bool(env.levels_equal(a, a.replace(agent_levels=jnp.asarray([1, 2, 2], jnp.int32))))
    assert not bool(env.levels_equal(a, a.replace(agent_positions=jnp.asarray([[0, 1], [2, 3], [7, 7]]))))
    assert not bool(env.levels_equal(a, a.replace(food_levels=jnp.asarray([2, 1], jnp.int32))))


def differs(a, b):
    """bool ``(levels,)``: the field differs somewhere in each level."""
    a, b = np.asarray(a), np.asarray(b)
    return np.any(a != b, axis=tuple(range(1, a.ndim)))


@pytest.fixture(scope="module")
def mutated(roomy):
    """512 random levels of the 8x8 3-agent 2-food env, each after 8 edits (one compile)."""
    env, params = roomy
    keys = jax.random.split(jax.random.key(1), 512)
    levels = jax.vmap(env.sample_level, in_axes=(0, None))(keys, params)
    mutate = jax.jit(jax.vmap(lambda k, lv, n: env.mutate_level(k, lv, params, n), in_axes=(0, 0, None)))
    return levels, mutate(jax.random.split(jax.random.key(2), 512), levels, 8), mutate, keys


def test_mutated_levels_stay_playable_and_inside_the_reset_rules(roomy, mutated):
    env, _ = roomy
    _, edited, _, _ = mutated
    agents = np.asarray(edited.agent_positions)
    foods, food_levels = np.asarray(edited.food_positions), np.asarray(edited.food_levels)
    agent_levels = np.asarray(edited.agent_levels)
    assert ((agents >= 0) & (agents <= 7)).all()
    for i in range(len(agents)):
        cells = {tuple(p) for p in agents[i]}
        assert len(cells) == 3, f"agents share a cell: {agents[i]}"
        present = food_levels[i] > 0
        for f in np.nonzero(present)[0]:
            assert 1 <= foods[i, f, 0] <= 6 and 1 <= foods[i, f, 1] <= 6, "food on the border"
            assert tuple(foods[i, f]) not in cells, "food under an agent"
            for g in np.nonzero(present)[0]:
                if g != f:
                    assert not bool(_near_food(*foods[i, f], *foods[i, g])), "foods closer than reset allows"
        cap = np.sort(agent_levels[i])[:3].sum()  # reset's cap: the three lowest agent levels
        assert (food_levels[i][present] >= 1).all() and (food_levels[i][present] <= cap).all()
    assert ((agent_levels >= env.min_player_level) & (agent_levels <= env.max_player_level)).all()


def test_every_kind_of_edit_happens_and_zero_edits_change_nothing(roomy, mutated):
    levels, edited, mutate, _ = mutated
    keys = jax.random.split(jax.random.key(2), 512)
    same = mutate(keys, levels, 0)
    jax.tree.map(np.testing.assert_array_equal, same, levels)
    changed = {
        name: differs(getattr(edited, name), getattr(levels, name))
        for name in ("agent_positions", "agent_levels", "food_positions", "food_levels")
    }
    for name, flags in changed.items():
        assert 0.2 < flags.mean(), f"{name} changed in only {flags.mean():.2f} of the levels"
    # One edit changes one of the four things; an agent's level may also move the food cap.
    one = mutate(keys, levels, 1)
    flags = {n: differs(getattr(one, n), getattr(levels, n)) for n in changed}
    count = sum(flags.values())
    assert count.max() <= 2 and count.mean() > 0.5
    assert (flags["agent_levels"] | ~(count == 2)).all() and (flags["food_levels"] | ~(count == 2)).all()


def test_auto_replay_restarts_the_same_level(small):
    env, params = small
    replay = lbf.AutoReplay(env)
    check_env(replay, params)
    # Agent 0 (level 2) stands next to a level-2 food: LOAD eats it and ends the episode.
    start = lbf.ForagingLevel.create([[1, 1], [3, 3]], [2, 1], [[1, 2]], [2])
    obs, state = replay.reset_to_level(jax.random.key(0), start, params)
    step = jax.jit(replay.step)
    obs2, state2, reward, terminated, truncated, info = step(
        jax.random.key(1), state, jnp.asarray([LOAD, NONE]), params
    )
    assert bool(terminated.all()) and not bool(truncated.any())
    np.testing.assert_allclose(reward, [1.0, 0.0])
    np.testing.assert_array_equal(state2.env_state.food_levels, [2])  # restarted: the food is back
    np.testing.assert_array_equal(obs2, obs)
    assert np.asarray(info["final_observation"])[0, 2] == 0  # the terminal observation: no food seen
    # Truncation restarts it too: 50 steps of NONE.
    state3 = state
    for _ in range(params.max_episode_steps):
        _, state3, _, _, truncated, _ = step(jax.random.key(2), state3, jnp.asarray([NONE, NONE]), params)
    assert bool(truncated.all()) and int(state3.env_state.time) == 0
    assert bool(env.levels_equal(lbf_levels.level_of(state3.env_state), start))


def test_render_level_draws_the_start_state(small):
    env, params = small
    start = env.sample_level(jax.random.key(3), params)
    _, state = env.reset_to_level(jax.random.key(0), start, params)
    frame = env.render_level(start, params)
    assert frame.dtype == jnp.uint8 and frame.shape == (5 * 32, 5 * 32, 3)
    np.testing.assert_array_equal(frame, env.render(state, params))


def test_bad_levels_and_wrappers_are_refused_naming_the_fix(small, roomy):
    env, params = small
    wrong = roomy[0].sample_level(jax.random.key(0), roomy[1])
    with pytest.raises(le.EnvInputError, match=r"agent_positions has shape \(3, 2\).*must be \(2, 2\)"):
        env.reset_to_level(jax.random.key(0), wrong, params)
    with pytest.raises(le.EnvInputError, match="must be a ForagingLevel"):
        env.mutate_level(jax.random.key(0), {"agents": 1}, params, 1)
    level = env.sample_level(jax.random.key(0), params)
    for count in (2.5, True, np.float32(2.5), -1):  # 2.5 edits were 2, True one, silently
        with pytest.raises(le.EnvInputError, match=r"mutate_level: num_edits must be an integer >= 0"):
            env.mutate_level(jax.random.key(0), level, params, count)
    with pytest.raises(TypeError, match="wraps a bare LevelBasedForaging"):
        lbf.AutoReplay(le.make("CartPole-v1", autoreset=False)[0])
    # Another family's env: 'CartPole' object has no attribute 'rows', or (RWARE) a grid-size
    # mismatch as if a warehouse of the layout's size could take it.
    for other in ("CartPole-v1", "rware-tiny-2ag-v2"):
        other_env = le.make(other)[0]
        with pytest.raises(le.EnvInputError, match=r"LevelBasedForaging env.*got .*make\('Foraging-5x5"):
            lbf.named_level("Adjacent", other_env)
        with pytest.raises(le.EnvInputError, match="LevelBasedForaging env"):
            lbf.parse_level("A1 B1\n. F1", other_env)
        with pytest.raises(le.EnvInputError, match="LevelBasedForaging env"):
            lbf.named_levels_for(other_env)
    assert lbf.named_levels_for(le.make("Foraging-5x5-2p-1f-v3")[0])  # make's AutoReset: fine


def test_named_levels_are_parsed_and_fit_their_envs(small):
    env, _ = small
    parsed = lbf.named_level("OppositeCorners", env)
    np.testing.assert_array_equal(parsed.agent_positions, [[0, 0], [4, 4]])
    np.testing.assert_array_equal(parsed.agent_levels, [1, 2])
    np.testing.assert_array_equal(parsed.food_positions, [[1, 3]])
    np.testing.assert_array_equal(parsed.food_levels, [3])
    assert lbf.named_levels_for(env) == ("Adjacent", "FarCorner", "Corridor", "OppositeCorners", "StrongFar")
    eight, _ = le.make("Foraging-8x8-2p-2f-v3", autoreset=False)
    assert lbf.named_levels_for(eight) == ("SplitFoods", "CoopCorners")
    coop, _ = le.make("Foraging-5x5-2p-1f-coop-v3", autoreset=False)  # food exactly at the cap
    assert lbf.named_levels_for(coop) == ("Corridor", "OppositeCorners")
    # Fewer foods than slots: the others stay empty (level 0).
    wide, _ = le.make("Foraging-5x5-2p-2f-v3", autoreset=False)
    np.testing.assert_array_equal(lbf.named_level("Adjacent", wide).food_levels, [1, 0])


@pytest.mark.parametrize(
    "layout, message",
    [
        ("A1 . .\n. . .", "grid is 5x5"),
        (". . . . .\n" * 4 + ". .", "ragged"),
        ("A1 B1 . . .\n. F1 . . X\n" + ". . . . .\n" * 3, "unknown cell 'X'"),
        ("A1 B1 . . .\n. F0 . . .\n" + ". . . . .\n" * 3, "unknown cell 'F0'"),
        ("A1 A2 . . .\n. F1 . . .\n" + ". . . . .\n" * 3, "agent A is placed twice"),
        ("A1 C1 . . .\n. F1 . . .\n" + ". . . . .\n" * 3, "name AB, once each"),
        ("A1 B1 . . .\n" + ". . . . .\n" * 4, "has 0 foods"),
        ("A3 B1 . . .\n. F1 . . .\n" + ". . . . .\n" * 3, r"agent levels \[3, 1\] leave"),
        ("A1 B1 . . .\n. F3 . . .\n" + ". . . . .\n" * 3, r"outside reset's range \[1, 2\]"),
        ("A1 B1 F1 . .\n" + ". . . . .\n" * 4, "on the border"),
    ],
)
def test_bad_layouts_name_the_fix(small, layout, message):
    env, _ = small
    with pytest.raises(le.EnvInputError, match=message):
        lbf.parse_level(layout, env)
    with pytest.raises(le.EnvInputError, match="fits Adjacent, FarCorner"):
        lbf.named_level("Nowhere", env)
