"""PAIRED, population PAIRED and the minimax adversary: the teacher's return by hand and in a
run, the built levels, the driver (run log, checkpoints, exact resume), entry points and bad
input, on tiny settings; PAIRED on Level-Based Foraging (multi-agent levels the LBF teacher
builds). PAIRED's learning check is in ``test_learning.py``."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.algorithms import load_algorithm
from lamella.agents.config import ConfigError
from lamella.agents.driver import run_experiment
from lamella.envs import maze
from lamella.ued.levels import level_family, maze_solvable
from lamella.ued.paired import (
    MinimaxConfig,
    PAIREDConfig,
    PopulationPAIREDConfig,
    make_paired_runner,
    teacher_score,
)
from lamella.ued.presets import FORAGING_8X8_ID, FORAGING_ID, PRESETS
from lamella.ued.runners import PLRConfig, make_ued_runner

TINY = dict(
    height=5,
    width=5,
    n_walls=3,
    max_episode_steps=12,
    num_envs=8,
    num_steps=12,
    num_epochs=1,
    num_minibatches=1,
    recurrent=False,
    torso_size=16,
    total_timesteps=8 * 12 * 6,
    eval_levels=("random",),
    eval_episodes=4,
    teacher_noise_dim=4,
    teacher_recurrent=False,
    teacher_conv_filters=4,
    teacher_torso_size=16,
    teacher_num_epochs=1,
)
# The run log names the maze settings the config changes from the id (DRConfig.run_log_task).
TINY_TASK = "AMaze-13x13-v0:height=5,width=5,n_walls=3,max_episode_steps=12"


def test_teacher_scores_by_hand():
    # Two levels; rows: protagonist, antagonist (a third student for the population score).
    mean = jnp.array([[0.2, 0.5], [0.4, 0.1], [0.0, 0.3]])
    best = jnp.array([[0.3, 0.6], [0.9, 0.2], [0.0, 0.7]])
    np.testing.assert_allclose(teacher_score("relative_regret", mean[:2], best[:2]), [0.7, 0.0], atol=1e-6)
    np.testing.assert_allclose(
        teacher_score("mean_relative_regret", mean[:2], best[:2]), [0.2, 0.0], atol=1e-6
    )
    # Best max (0.9, 0.7) minus the mean of the means (0.2, 0.3): not clipped.
    np.testing.assert_allclose(teacher_score("population_regret", mean, best), [0.7, 0.4], atol=1e-6)
    np.testing.assert_allclose(teacher_score("neg_return", mean[:1], best[:1]), [-0.2, -0.5], atol=1e-6)
    with pytest.raises(ValueError, match="choose one of"):
        teacher_score("regret", mean, best)


def test_maze_solvable_flood_fill():
    open_level = maze.parse_maze(">..\n..G")
    walled_off = maze.parse_maze(">.#G\n..#.")
    around = maze.parse_maze(">#..\n...G")  # the path goes around the wall
    assert bool(maze_solvable(open_level)) and bool(maze_solvable(around))
    assert not bool(maze_solvable(walled_off))
    assert bool(
        jax.jit(jax.vmap(maze_solvable))(jax.tree.map(lambda *x: jnp.stack(x), around, walled_off)).tolist()
        == [True, False]
    )
    env = maze.AMaze(height=2, width=4, n_walls=1)
    family = level_family(env, env.default_params)
    stats = family.level_stats(walled_off)
    assert float(stats["solvable"]) == 0.0 and float(stats["goal_distance"]) == 3.0


@pytest.fixture(scope="module")
def minimax_runs(tmp_path_factory):
    """The minimax adversary through the driver, 2 seeds in one program: straight through, and
    stopped after 3 of 6 iterations then resumed. (Population PAIRED runs the same code with 3
    stacked students; test_devices.py trains it on 1 and 4 devices.)"""
    config = MinimaxConfig(**TINY)
    root = tmp_path_factory.mktemp("minimax")
    kwargs = dict(seeds=2, chunk_iterations=1, progress=False, plot=False, compile_mode="fast")
    full = run_experiment(config, out_dir=root / "full", gif=True, **kwargs)
    stopped = run_experiment(config, out_dir=root / "resumed", max_chunks=3, **kwargs)
    resumed = run_experiment(config, out_dir=root / "resumed", resume=True, **kwargs)
    return config, full, stopped, resumed


def _series(result, name, run="seed_0"):
    log = json.loads(open(result.metrics_path).read())
    steps = log["maze"][TINY_TASK]["minimax"][run]
    ordered = sorted((k for k in steps if k.startswith("step_")), key=lambda k: int(k.split("_")[1]))
    return np.array([steps[k][name] for k in ordered if name in steps[k]], dtype=float).reshape(-1)


def test_gif_of_the_protagonist(minimax_runs):
    _, full, _, _ = minimax_runs
    import imageio.v3 as iio

    # The protagonist's episode on a fresh random 5x5 level (12 steps at most, plus the reset).
    frames = iio.imread(full.gif_path, index=None)
    assert frames.ndim == 4 and 2 <= frames.shape[0] <= 13 and frames.shape[1:3] == (56, 56)


def test_minimax_teacher_is_paid_minus_the_protagonists_return(minimax_runs):
    _, full, _, _ = minimax_runs
    for run in ("seed_0", "seed_1"):
        teacher, protagonist = (
            _series(full, "train_teacher_return", run),
            _series(full, "train_train_return", run),
        )
        assert len(teacher) == 6
        np.testing.assert_allclose(teacher, -protagonist, atol=1e-6)
        np.testing.assert_allclose(
            protagonist, _series(full, "train_student_return_student_0", run), atol=1e-6
        )
    # One student, no antagonist: its axis has one entry.
    assert len(_series(full, "train_student_loss_student_0")) == 6
    assert len(_series(full, "train_student_loss_student_1")) == 0
    for name in (
        "student_loss_student_0",
        "student_entropy_student_0",
        "teacher_loss",
        "teacher_entropy",
        "teacher_value_loss",
        "level_solvable",
        "level_walls",
        "level_goal_distance",
    ):
        series = _series(full, f"train_{name}")
        assert len(series) == 6 and np.isfinite(series).all(), name
    # Levels the teacher built: at most n_walls walls (walls may repeat), start and goal apart.
    assert (_series(full, "train_level_walls") <= 3).all()
    assert (_series(full, "train_level_goal_distance") >= 1).all()
    # The teacher starts near uniform over the 25 cells (entropy log 25 = 3.22).
    assert abs(_series(full, "train_teacher_entropy")[0] - np.log(25)) < 0.05


def test_driver_resume_is_exact(minimax_runs):
    _, full, stopped, resumed = minimax_runs
    assert not stopped.finished and resumed.finished and full.finished
    assert jax.tree.leaves(full.state.student_params)[0].shape[:2] == (2, 1)  # seeds, students
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    assert open(full.metrics_path).read() == open(resumed.metrics_path).read()
    log = json.loads(open(full.metrics_path).read())
    last = log["maze"][TINY_TASK]["minimax"]["seed_1"]["step_6"]
    assert len(last["solved_level_0"]) == 4 and np.isfinite(full.final_return).all()


def test_entry_points_and_presets():
    for name, config_class in (
        ("paired", PAIREDConfig),
        ("minimax", MinimaxConfig),
        ("population_paired", PopulationPAIREDConfig),
    ):
        algorithm = load_algorithm(name)
        assert algorithm.config_class is config_class
        assert set(algorithm.presets) == {"AMaze-13x13-v0", "ci", FORAGING_ID, FORAGING_8X8_ID}
        for preset in algorithm.presets.values():
            preset.validate()
    # minimax's maze PAIRED config (config/configs/maze/paired.json).
    paired = PRESETS["paired"]["AMaze-13x13-v0"]
    assert (paired.n_students, paired.ued_score, paired.n_walls, paired.teacher_noise_dim) == (
        2,
        "relative_regret",
        60,
        50,
    )
    assert (paired.learning_rate, paired.gamma, paired.gae_lambda, paired.ent_coef) == (
        1e-4,
        0.995,
        0.98,
        1e-3,
    )
    assert (paired.teacher_ent_coef, paired.teacher_conv_filters, paired.teacher_rnn_hidden_size) == (
        0.05,
        128,
        256,
    )
    assert (paired.num_envs, paired.num_steps, paired.num_epochs, paired.num_minibatches) == (32, 256, 5, 1)
    assert PRESETS["minimax"]["AMaze-13x13-v0"].ued_score == "neg_return"
    assert PRESETS["minimax"]["AMaze-13x13-v0"].n_students == 1


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (PAIREDConfig(**TINY, n_students=3), r"takes n_students=2 .*got n_students=3"),
        (MinimaxConfig(**TINY, n_students=2), r"minimax adversary has no antagonist"),
        (PopulationPAIREDConfig(**TINY, n_students=1), r"takes n_students>=2"),
        (PAIREDConfig(**TINY, ued_score="regret"), "ued_score must be one of"),
        (PAIREDConfig(**{**TINY, "num_steps": 8}), r"num_steps \(8\) is shorter than an episode"),
        (PAIREDConfig(**TINY, teacher_num_minibatches=3), r"multiple of teacher_num_minibatches \(3\)"),
        (
            PAIREDConfig(**{**TINY, "teacher_conv_filters": 0}),
            r"PAIREDConfig\.teacher_conv_filters must be >= 1, got 0",
        ),
        (
            PAIREDConfig(**TINY, teacher_time_features=-2),
            r"PAIREDConfig\.teacher_time_features must be >= 1, got -2",
        ),
        (
            MinimaxConfig(**TINY, screenshot_every=2),
            r"MinimaxConfig\.screenshot_every=2: PAIRED and its variants write no screenshots.*screenshot_every=0",
        ),
    ],
)
def test_bad_configs_are_refused_before_compiling(config, message):
    with pytest.raises(ValueError, match=message):
        make_paired_runner(config)


def test_another_config_names_the_fix():
    with pytest.raises(
        ConfigError, match=r"^make_paired_runner: config must be a PAIREDConfig, got PLRConfig"
    ):
        make_paired_runner(PLRConfig())


def test_init_refuses_an_int_seed_for_its_key():
    with pytest.raises(TypeError, match=r"^init: `key` must be a PRNG key.*got the Python int 0"):
        make_paired_runner(PAIREDConfig(**TINY)).init(0)


def test_a_teacher_of_another_size_is_refused_naming_the_fix():
    config = PAIREDConfig(**TINY)
    teacher = maze.AMazeTeacher(height=7, width=7, n_walls=3)
    with pytest.raises(ValueError, match=r"\(7, 7\).*\(5, 5\).*same height and width"):
        make_paired_runner(config, teacher=(teacher, teacher.default_params))
    with pytest.raises(TypeError, match="make_paired_runner"):
        make_ued_runner(config)
    with pytest.raises(TypeError, match=r"no level_of\(\)"):
        make_paired_runner(config, teacher=maze.named_env("SixteenRooms"))


# Level-Based Foraging -------------------------------------------------------------------------

# The Foraging preset's students and teacher, shrunk: 1 level per iteration, so that the logged
# means over levels are that level's numbers and the teacher's return can be checked exactly;
# 100 steps of 25-step episodes, so that each student's mean return is over several episodes.
FORAGING_TINY = dict(
    num_envs=1,
    num_steps=100,
    num_minibatches=1,
    num_epochs=1,
    total_timesteps=100 * 3,
    eval_episodes=4,
    teacher_noise_dim=4,
    teacher_conv_filters=4,
    teacher_torso_size=16,
    teacher_num_epochs=1,
)


def test_paired_on_foraging_pays_the_teacher_the_regret(tmp_path):
    """PAIRED on LBF through the driver, 2 seeds x 3 iterations: the teacher's return is the
    antagonist's best return minus the protagonist's mean return (clipped at 0), every metric
    is finite, and the levels are LBF levels of the preset's env (1 food, reachable levels)."""
    config = dataclasses.replace(PRESETS["paired"][FORAGING_ID], **FORAGING_TINY)
    result = run_experiment(
        config, out_dir=tmp_path, seeds=2, chunk_iterations=1, progress=False, plot=False, compile_mode="fast"
    )
    log = json.loads(open(result.metrics_path).read())
    regrets = []
    for seed in ("seed_0", "seed_1"):
        steps = log["multi_agent"][config.run_log_task()]["paired"][seed]
        rows = [steps[f"step_{i}"] for i in (1, 2, 3)]  # one entry per iteration
        get = lambda name: np.array([row[name] for row in rows], float).reshape(-1)  # noqa: E731
        antagonist, protagonist = (
            get("train_student_max_return_student_1"),
            get("train_student_return_student_0"),
        )
        np.testing.assert_allclose(
            get("train_teacher_return"), np.maximum(antagonist - protagonist, 0), atol=1e-6
        )
        regrets.extend(get("train_teacher_return"))
        np.testing.assert_allclose(get("train_train_return"), protagonist, atol=1e-6)
        for name in (
            "train_teacher_loss",
            "train_teacher_entropy",
            "train_student_loss_student_1",
            "train_solve_rate",
            "mean_episode_return",
            "solve_rate",
        ):
            assert np.isfinite(get(name)).all(), name
        assert (get("train_level_food") == 1).all() and (get("train_level_solvable") == 1).all()
        assert ((get("train_level_agent_level") >= 2) & (get("train_level_agent_level") <= 4)).all()
    assert max(regrets) > 0, "no level had a regret: the check above compared zeros only"
    # The teacher starts near uniform over its 100 actions (25 cells x 4 level choices).
    first = log["multi_agent"][config.run_log_task()]["paired"]["seed_0"]["step_1"]["train_teacher_entropy"]
    assert abs(np.asarray(first).reshape(-1)[0] - np.log(100)) < 0.05


def test_the_minimax_adversary_traces_on_foraging():
    """The minimax adversary on LBF: one iteration traces (no compile; PAIRED's run above
    executes the same code with 2 students, population PAIRED's with 3) and reports the
    teacher's return."""
    config = dataclasses.replace(PRESETS["minimax"][FORAGING_ID], **FORAGING_TINY)
    runner = make_paired_runner(config)
    state = jax.eval_shape(runner.init, jax.random.key(0))
    _, metrics = jax.eval_shape(runner.step, state)
    assert metrics["teacher_return"].shape == ()
    assert metrics["student_return"].shape == (config.n_students,)
