"""Named-maze suites: resolution, and the evaluation against hand-made policies whose results are
known exactly (a student that only moves forward, one that only turns left); the same for the
named Level-Based Foraging levels (a team that only loads, one that only walks east)."""

import dataclasses
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.envs import maze
from lamella.ued import suites
from lamella.ued.presets import FORAGING_ID, PRESETS
from lamella.ued.runners import default_family, make_actor_critic

SEEDS = 2
EPISODES = 3
FORWARD, LEFT = 2, 0
CONFIG = dataclasses.replace(PRESETS["dr"]["ci"], eval_greedy=True)  # a 7x7-trained feed-forward student


@functools.cache
def scripted_params(action: int):
    """Student parameters (two seeds) whose policy picks ``action`` everywhere: the action
    head's kernel zeroed, its bias large for ``action``."""
    actor_critic = make_actor_critic(CONFIG, maze.AMaze().action_space())
    obs = {"image": jnp.zeros((1, 5, 5, 3), jnp.uint8), "agent_dir": jnp.zeros((1,), jnp.int32)}
    params = actor_critic.init(jax.random.key(0), obs)

    def script(path, x):
        name = jax.tree_util.keystr(path)
        if "ActionHead" not in name:
            return x
        if name.endswith("['bias']"):
            return jnp.zeros_like(x).at[action].set(50.0)
        return jnp.zeros_like(x)

    one = jax.tree_util.tree_map_with_path(script, params)
    return jax.tree.map(lambda x: jnp.stack([x] * SEEDS), one)


KEYS = jax.random.split(jax.random.key(7), SEEDS)
# Goal four cells straight ahead of the agent, 20-step horizon.
STRAIGHT = maze.parse_maze(
    """
    .....
    >...G
    .....
    """
)
STRAIGHT_CASE = ("straight", lambda key: STRAIGHT, maze.AMazeParams(height=3, width=5, max_episode_steps=20))


@pytest.mark.parametrize(
    "action, solved, length, episode_return",
    [(FORWARD, 1.0, 4, 1 - 0.9 * 4 / 20), (LEFT, 0.0, 20, 0.0)],
)
def test_known_answers_on_a_trivially_solvable_maze(action, solved, length, episode_return):
    out = suites.evaluate_suite(CONFIG, scripted_params(action), None, KEYS, EPISODES, cases=[STRAIGHT_CASE])
    assert list(out) == ["straight"]
    result = out["straight"]
    for name in ("episode_return", "episode_length", "solved"):
        assert result[name].shape == (SEEDS, EPISODES)
    np.testing.assert_array_equal(result["solved"], solved)
    np.testing.assert_array_equal(result["episode_length"], length)
    np.testing.assert_allclose(result["episode_return"], episode_return, rtol=1e-6)


def test_memory_plays_by_its_own_rules():
    """Memory with the agent two cells below the top goal cell, facing it: a forward-only student
    ends every episode in 2 steps, solved when the goal is the top cell and stopped by the
    distractor (return 0) when it is the bottom one."""
    sample, params = maze.named_maze_sampler("Memory")
    start = {"agent_pos": jnp.asarray([9, 7], jnp.int32), "agent_dir": jnp.asarray(3, jnp.int32)}
    case = ("memory-up", lambda key: sample(key).replace(**start), params)
    out = suites.evaluate_suite(CONFIG, scripted_params(FORWARD), None, KEYS, 8, cases=[case])["memory-up"]
    np.testing.assert_array_equal(out["episode_length"], 2)
    np.testing.assert_allclose(out["episode_return"], out["solved"] * (1 - 0.9 * 2 / 250), rtol=1e-6)
    assert 0 < out["solved"].mean() < 1, out["solved"]  # both goals were drawn


def test_fixed_mazes_run_to_their_own_horizon():
    """A forward-only student never reaches the goal of the eight fixed 13x13 mazes (each start
    faces a wall or a dead end): every episode runs the maze's 450 steps, unsolved. The student
    was built for 7x7 levels; its network reads only the 5x5 view, so it runs on 13x13."""
    out = suites.evaluate_suite(CONFIG, scripted_params(FORWARD), "minimax-fixed", KEYS, EPISODES)
    assert tuple(out) == suites.SUITES["minimax-fixed"]
    for name, result in out.items():
        _, params = maze.named_maze(name)
        assert params.max_episode_steps == 450
        np.testing.assert_array_equal(result["episode_length"], 450, err_msg=name)
        np.testing.assert_array_equal(result["solved"], 0.0, err_msg=name)
        np.testing.assert_array_equal(result["episode_return"], 0.0, err_msg=name)


def test_suites_name_known_mazes():
    assert suites.SUITES["minimax-test"] == maze.NAMED_MAZES
    assert len(suites.SUITES["minimax-test"]) == 16 and "Memory" in suites.MAZE_SUITES.cases
    for names in suites.SUITES.values():
        assert set(names) <= set(maze.NAMED_MAZES)
    assert suites.resolve_suite("perfect-mazes") == ("PerfectMaze", "PerfectMazeMedium", "PerfectMazeXL")
    assert suites.resolve_suite(" SixteenRooms, PerfectMazeXL ") == ("SixteenRooms", "PerfectMazeXL")
    assert suites.resolve_suite(["Crossing"]) == ("Crossing",)
    assert suites.MAZE_SUITES.resolve("minimax-fixed") == suites.SUITES["minimax-fixed"]
    assert suites.MAZE_SUITES.supports(CONFIG)
    assert not suites.MAZE_SUITES.supports(object())


@pytest.mark.parametrize(
    "suite, message",
    [
        ("minimax", "unknown suite or maze 'minimax'"),
        ("SixteenRooms,Labirynth", "Did you mean Labyrinth"),
        ("Memroy", "Did you mean Memory"),
        ("Crossing,Crossing", "more than once"),
        (" , ", "empty suite"),
    ],
)
def test_bad_suites_name_the_fix(suite, message):
    with pytest.raises(suites.SuiteError, match=message):
        suites.resolve_suite(suite)


def test_bad_episodes():
    with pytest.raises(suites.SuiteError, match="episodes"):
        suites.evaluate_suite(CONFIG, None, "minimax-fixed", KEYS, 0)


def test_params_without_a_seed_axis_or_one_key_name_the_fix():
    one_seed = jax.tree.map(lambda x: x[0], scripted_params(FORWARD))
    with pytest.raises(
        suites.SuiteError,
        match=r"params must lead with a seed axis of 2 \(one per key\), but params.* has shape \(.*\)\. For one seed's parameters, add the axis",
    ):
        suites.evaluate_suite(CONFIG, one_seed, "minimax-fixed", KEYS, 1)
    with pytest.raises(
        suites.SuiteError, match=r"keys must hold one PRNG key per seed, shape \(seeds,\), got shape \(\)"
    ):
        suites.evaluate_suite(CONFIG, scripted_params(FORWARD), "minimax-fixed", jax.random.key(0), 1)
    with_axis = jax.tree.map(lambda x: x[None], one_seed)
    out = suites.evaluate_suite(CONFIG, with_axis, None, KEYS[:1], 1, cases=[STRAIGHT_CASE])
    assert out["straight"]["solved"].tolist() == [[1.0]]


# Level-Based Foraging: named levels (fixed start layouts) as suites, through the same code.

FORAGING_CONFIG = dataclasses.replace(PRESETS["dr"][FORAGING_ID], eval_greedy=True)  # 25-step episodes
NONE, EAST, LOAD = 0, 4, 5


@functools.cache
def scripted_foraging_params(action: int):
    """Two seeds of a shared-parameter LBF student whose every agent picks ``action``."""
    family = default_family(FORAGING_CONFIG)
    actor_critic = make_actor_critic(FORAGING_CONFIG, family.env.action_space(family.env_params), "mlp")
    params = actor_critic.init(jax.random.key(0), jnp.zeros((1, 2, 9)))

    def script(path, x):
        name = jax.tree_util.keystr(path)
        if "'head'" not in name:
            return x
        return jnp.zeros_like(x).at[action].set(50.0) if name.endswith("['bias']") else jnp.zeros_like(x)

    one = jax.tree_util.tree_map_with_path(script, params)
    return jax.tree.map(lambda x: jnp.stack([x] * SEEDS), one)


@pytest.mark.parametrize(
    "action, solved, length",
    # Adjacent: both level-1 agents beside a level-1 food, so LOAD eats it on the first step
    # (the team's normalised return is 1). Corridor: the level-2 food lies two cells from each
    # agent: LOAD does nothing and EAST walks the west agent into the food's side (the east
    # agent stands on the border), so neither eats it in the 25 steps.
    [
        (LOAD, {"Adjacent": 1.0, "Corridor": 0.0}, {"Adjacent": 1, "Corridor": 25}),
        (EAST, {"Adjacent": 0.0, "Corridor": 0.0}, {"Adjacent": 25, "Corridor": 25}),
    ],
)
def test_known_answers_on_named_foraging_levels(action, solved, length):
    out = suites.FORAGING_SUITES.evaluate(
        FORAGING_CONFIG,
        types.SimpleNamespace(params=scripted_foraging_params(action)),
        ["Adjacent", "Corridor"],
        KEYS,
        EPISODES,
    )
    assert list(out) == ["Adjacent", "Corridor"]
    for name, result in out.items():
        for metric in ("episode_return", "episode_length", "solved"):
            assert result[metric].shape == (SEEDS, EPISODES)
        np.testing.assert_array_equal(result["solved"], solved[name], err_msg=name)
        np.testing.assert_array_equal(result["episode_length"], length[name], err_msg=name)
        np.testing.assert_allclose(result["episode_return"], solved[name], atol=1e-6, err_msg=name)


def test_a_paired_checkpoint_is_evaluated_through_its_protagonist():
    """A PAIRED / minimax / population PAIRED checkpoint holds ``student_params`` (seeds, then
    students): the suites play student 0, the protagonist, as the runner's own evaluation does.
    Here the protagonist only loads (solves Adjacent) and the antagonist only walks east (never
    does)."""
    from lamella.ued.paired import PAIREDRunnerState

    students = jax.tree.map(
        lambda protagonist, antagonist: jnp.stack([protagonist, antagonist], axis=1),
        scripted_foraging_params(LOAD),
        scripted_foraging_params(EAST),
    )
    state = PAIREDRunnerState(
        student_params=students,
        student_opt_state=None,
        teacher_params=None,
        teacher_opt_state=None,
        key=KEYS,
        iteration=jnp.zeros(SEEDS, jnp.int32),
    )
    out = suites.FORAGING_SUITES.evaluate(FORAGING_CONFIG, state, ["Adjacent", "Corridor"], KEYS, EPISODES)
    np.testing.assert_array_equal(out["Adjacent"]["solved"], 1.0)
    np.testing.assert_array_equal(out["Adjacent"]["episode_length"], 1)


def test_foraging_suites_name_the_levels_that_fit_their_env():
    import lamella.envs
    from lamella.envs.multi_agent import lbf

    provider = suites.FORAGING_SUITES
    assert set(provider.cases) == set(lbf.NAMED_LEVELS)
    for suite, env_id in suites.FORAGING_SUITE_ENVS.items():
        env, _ = lamella.envs.make(env_id, autoreset=False)
        assert provider.resolve(suite) == lbf.named_levels_for(env), suite
    assert provider.resolve(" Corridor, FarCorner ") == ("Corridor", "FarCorner")
    assert provider.supports(FORAGING_CONFIG) and not provider.supports(CONFIG)
    assert not suites.MAZE_SUITES.supports(FORAGING_CONFIG)
    with pytest.raises(suites.SuiteError, match="Did you mean Corridor"):
        provider.resolve("Corridr")
    with pytest.raises(suites.SuiteError, match=r"does not fit .* Levels that fit it: Adjacent, FarCorner"):
        suites.evaluate_foraging_suite(FORAGING_CONFIG, None, "SplitFoods", KEYS, 1)
    with pytest.raises(suites.SuiteError, match="students of Level-Based Foraging"):
        suites.evaluate_foraging_suite(CONFIG, None, "Adjacent", KEYS, 1)


def test_foraging_params_without_a_seed_axis_or_one_key_name_the_fix():
    one_seed = jax.tree.map(lambda x: x[0], scripted_foraging_params(LOAD))
    with pytest.raises(
        suites.SuiteError, match=r"params must lead with a seed axis of 2 \(one per key\).*add the axis"
    ):
        suites.evaluate_foraging_suite(FORAGING_CONFIG, one_seed, "Adjacent", KEYS, 1)
    with pytest.raises(suites.SuiteError, match=r"keys must hold one PRNG key per seed, shape \(seeds,\)"):
        suites.evaluate_foraging_suite(
            FORAGING_CONFIG, scripted_foraging_params(LOAD), "Adjacent", KEYS[0], 1
        )
