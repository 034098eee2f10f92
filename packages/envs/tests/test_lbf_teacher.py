"""Level-Based Foraging's teacher MDP (PAIRED's adversary) and the level validator.

- ``is_valid_level`` accepts what reset and the mutator make and refuses each broken rule;
- the teacher passes ``check_env`` and builds the level it is told, moving a thing that may not
  go where it was asked;
- every level it builds keeps reset's rules, over many random action sequences (uniform ones and
  ones that keep asking for the same few cells, so that the fallbacks run) on two envs: a
  roomy one with two foods, and a crowded Jumanji-rules one with forced cooperation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs.multi_agent import lbf
from lamella.envs.testing import check_env

SEQUENCES = 512


@pytest.fixture(scope="module")
def small():
    return le.make("Foraging-5x5-2p-1f-v3", autoreset=False)


def test_is_valid_level_accepts_reset_and_refuses_each_broken_rule():
    env, params = le.make("Foraging-8x8-3p-2f-v3", autoreset=False)
    keys = jax.random.split(jax.random.key(0), 64)
    sampled = jax.vmap(env.sample_level, in_axes=(0, None))(keys, params)
    mutated = jax.vmap(lambda k, lv: env.mutate_level(k, lv, params, 4))(keys, sampled)
    valid = jax.jit(jax.vmap(lambda lv: lbf.is_valid_level(env, lv)))
    assert bool(valid(sampled).all()) and bool(valid(mutated).all())
    good = lbf.ForagingLevel.create([[0, 0], [2, 3], [7, 7]], [1, 2, 1], [[3, 5], [5, 2]], [2, 0])
    # An empty slot may lie anywhere (on the border, under an agent).
    anywhere = good.replace(food_positions=jnp.asarray([[3, 5], [0, 0]]))
    broken = {
        "agents share a cell": good.replace(agent_positions=jnp.asarray([[0, 0], [0, 0], [7, 7]])),
        "agent off the grid": good.replace(agent_positions=jnp.asarray([[0, 0], [2, 3], [8, 7]])),
        "agent level too high": good.replace(agent_levels=jnp.asarray([1, 3, 1])),
        "agent level 0": good.replace(agent_levels=jnp.asarray([1, 0, 1])),
        "food on the border": good.replace(food_positions=jnp.asarray([[0, 5], [5, 2]])),
        "food under an agent": good.replace(food_positions=jnp.asarray([[2, 3], [5, 2]])),
        "foods too close": good.replace(
            food_positions=jnp.asarray([[3, 5], [3, 3]]), food_levels=jnp.asarray([2, 1])
        ),
        "food above the cap": good.replace(food_levels=jnp.asarray([5, 0])),  # cap 1 + 2 + 1
        "negative food level": good.replace(food_levels=jnp.asarray([2, -1])),
    }
    stacked = jax.tree.map(lambda *x: jnp.stack(x), good, anywhere, *broken.values())
    verdicts = np.asarray(valid(stacked))
    assert verdicts[:2].all()
    for what, verdict in zip(broken, verdicts[2:]):
        assert not verdict, what


def test_teacher_builds_the_level_it_was_told(small):
    env, params = small
    teacher = lbf.ForagingTeacher(env, noise_dim=3)
    check_env(teacher, params, num_steps=8)
    # 2 agent levels, food levels 1..4 (the bound of 2 agents of level <= 2): 4 level choices.
    assert teacher.num_steps(params) == 3 and teacher.num_level_choices == 4
    assert teacher.action_space(params).n == 25 * 4
    action = lambda row, col, k: k * 25 + row * 5 + col  # noqa: E731
    step = jax.jit(lambda s, a, k: teacher.step(k, s, a, params))
    obs, state = teacher.reset(jax.random.key(0), params)
    assert np.asarray(obs["image"])[..., 2].all()  # the first agent may go anywhere
    # Agent 0 at (0, 0) level 2 (choice 1), agent 1 at (4, 4) level 1 (choice 0, and 2 wraps to
    # it), the food at (2, 2) with choice 2: level 1 + 2 mod 3 = 3 (reset's range [1, 3]).
    for t, a in enumerate([action(0, 0, 1), action(4, 4, 2), action(2, 2, 2)]):
        obs, state, reward, terminated, truncated, _ = step(state, a, jax.random.key(t))
        assert float(reward) == 0.0 and not bool(truncated) and bool(terminated) == (t == 2)
        assert obs["noise"].shape == (3,) and int(obs["time"]) == t + 1
    built = teacher.level_of(state)
    assert bool(env.levels_equal(built, lbf.ForagingLevel.create([[0, 0], [4, 4]], [2, 1], [[2, 2]], [3])))
    image = np.asarray(obs["image"])
    assert image.shape == (5, 5, 3) and tuple(image[0, 0]) == (2, 0, 0) and tuple(image[2, 2]) == (0, 3, 0)
    assert not image[..., 2].any()  # built: nothing more to place
    valid = jax.jit(lambda lv: lbf.is_valid_level(env, lv))  # also checks the students' shapes
    assert bool(valid(built))

    # Asked for a taken cell or a cell reset would not use, the thing goes elsewhere, validly.
    _, state = teacher.reset(jax.random.key(0), params)
    for t, a in enumerate([action(1, 1, 0), action(1, 1, 0), action(0, 2, 0)]):
        _, state, *_ = step(state, a, jax.random.key(10 + t))
    built = teacher.level_of(state)
    agents, foods = np.asarray(built.agent_positions), np.asarray(built.food_positions)
    assert tuple(agents[0]) == (1, 1) and tuple(agents[1]) != (1, 1)
    assert 1 <= foods[0, 0] <= 3 and 1 <= foods[0, 1] <= 3 and tuple(foods[0]) not in map(tuple, agents)
    assert bool(valid(built))
    with pytest.raises(TypeError, match="LevelBasedForaging"):
        lbf.ForagingTeacher(le.make("CartPole-v1", autoreset=False)[0])
    with pytest.raises(ValueError, match="noise_dim"):
        lbf.ForagingTeacher(env, noise_dim=-1)


def _build(teacher, params, keys, actions):
    """The levels of ``len(keys)`` teacher episodes, each acting out its row of ``actions``."""

    def one(key, sequence):
        _, state = teacher.reset(key, params)

        def body(state, inputs):
            k, a = inputs
            _, state, *_ = teacher.step(k, state, a, params)
            return state, None

        state, _ = jax.lax.scan(body, state, (jax.random.split(key, sequence.shape[0]), sequence))
        return teacher.level_of(state)

    return jax.jit(jax.vmap(one))(keys, actions)


@pytest.mark.parametrize(
    "make",
    [
        # Roomy, lbforaging's spacing rule between 2 foods.
        lambda: le.make("Foraging-8x8-3p-2f-v3", autoreset=False)[0],
        # Crowded: 3 foods rarely fit a 5x5 grid; the slot then stays empty.
        lambda: lbf.LevelBasedForaging(
            players=3, field_size=5, max_num_food=3, rules="jumanji", force_coop=True
        ),
    ],
    ids=["8x8-3p-2f", "5x5-3p-3f-coop-jumanji"],
)
def test_every_level_the_teacher_builds_keeps_resets_rules(make):
    env = make()
    params = env.default_params
    teacher = lbf.ForagingTeacher(env)
    steps, actions_n = teacher.num_steps(params), teacher.action_space(params).n
    key_u, key_c, key_run = jax.random.split(jax.random.key(7), 3)
    uniform = jax.random.randint(key_u, (SEQUENCES // 2, steps), 0, actions_n)
    # The same few cells again and again (corners and the centre, any level choice): collisions.
    cells = np.array([0, 1, env.cols + 1, (env.rows // 2) * env.cols + env.cols // 2])
    pick = jax.random.randint(key_c, (SEQUENCES // 2, steps, 2), 0, 4)
    crowded = jnp.asarray(cells)[pick[..., 0]] + pick[..., 1] * env.rows * env.cols
    actions = jnp.concatenate([uniform, crowded]).astype(jnp.int32)
    levels = _build(teacher, params, jax.random.split(key_run, SEQUENCES), actions)
    valid = np.asarray(jax.vmap(lambda lv: lbf.is_valid_level(env, lv))(levels))
    assert valid.all(), f"{(~valid).sum()} of {SEQUENCES} built levels break reset's rules"
    present = np.asarray(levels.food_levels) > 0
    assert present[:, 0].all(), "the first food always fits"
    # The fallbacks ran: agents asked onto a taken cell went elsewhere.
    asked = np.asarray(actions[SEQUENCES // 2 :, : env.num_agents]) % (env.rows * env.cols)
    placed = np.asarray(levels.agent_positions[SEQUENCES // 2 :])
    moved = placed[..., 0] * env.cols + placed[..., 1] != asked
    assert moved.any()
    # Every agent level the env allows occurs.
    assert set(np.unique(levels.agent_levels)) == set(range(env.min_player_level, env.max_player_level + 1))
