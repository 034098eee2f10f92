"""Runner mechanics: levels as env params, Robust PLR's gradient gating, ACCEL's mutation steps,
the driver (run log, checkpoints, resume) and the entry points, on tiny settings."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import train
from lamella.agents.algorithms import load_algorithm
from lamella.agents.config import ConfigError, resolve_config
from lamella.agents.driver import run_experiment, variant_name
from lamella.agents.rollout import PolicyStep, make_rollout
from lamella.envs import maze
from lamella.ued.levels import LevelParams, OnLevel, tile_params
from lamella.ued.presets import PRESETS
from lamella.ued.runners import ACCELConfig, DRConfig, PLRConfig, default_family, make_ued_runner

TINY = dict(
    height=5,
    width=5,
    n_walls=3,
    max_episode_steps=12,
    num_envs=8,
    num_steps=24,
    num_epochs=1,
    num_minibatches=1,
    recurrent=False,
    torso_size=16,
    total_timesteps=8 * 24 * 12,
    eval_levels=("random",),
    eval_episodes=4,
)
# The run log names the maze settings the config changes from the id (DRConfig.run_log_task).
TINY_TASK = "AMaze-13x13-v0:height=5,width=5,n_walls=3,max_episode_steps=12"


def test_levels_go_through_env_params_and_episodes_restart_the_same_level():
    env = maze.AMaze(height=5, width=5, n_walls=4, max_episode_steps=3)
    params = env.default_params
    levels = jax.vmap(maze.sample_dr_level, in_axes=(0, None))(jax.random.split(jax.random.key(0), 3), params)
    rollout = make_rollout(OnLevel(maze.AutoReplay(env)), 7, 3, params_axis=0)
    level_params = LevelParams(levels, tile_params(params, 3))

    def turn_left(key, obs, memory, reset):
        action = jnp.zeros((3,), jnp.int32)
        return memory, PolicyStep(action, action, jnp.zeros(3), jnp.zeros(3))

    start = rollout.init(jax.random.key(1), level_params)
    end, batch = jax.jit(rollout.collect, static_argnums=1)(start, turn_left, jax.random.key(2), level_params)
    # Each env started on its own level and is still on it after two restarts.
    assert bool(maze.levels_equal(start.env_state.level, levels).all())
    assert bool(maze.levels_equal(end.env_state.level, levels).all())
    np.testing.assert_array_equal(batch.truncated[:, 0], [0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(batch.reset[:, 0], [1, 0, 0, 1, 0, 0, 1])
    # A restart puts the agent back at the level's start pose (turning left 7 times from it: 3 turns).
    np.testing.assert_array_equal(end.env_state.agent_dir, (levels.agent_dir + 3) % 4)
    np.testing.assert_array_equal(end.env_state.agent_pos, levels.agent_pos)
    with pytest.raises(TypeError, match="LevelParams"):
        OnLevel(env).reset(jax.random.key(0), params)


@pytest.fixture(scope="module")
def accel_runs(tmp_path_factory):
    """One ACCEL config (recurrent student) trained through the driver (one compile): straight
    through, and stopped after 5 iterations then resumed."""
    # minimax's recurrent (LSTM) student, small.
    config = ACCELConfig(
        **{**TINY, "recurrent": True, "rnn_hidden_size": 16},
        buffer_size=16,
        min_fill_ratio=0.5,
        num_edits=2,
        score="max_mc",
    )
    root = tmp_path_factory.mktemp("accel")
    kwargs = dict(seeds=2, chunk_iterations=1, progress=False, plot=False)
    full = run_experiment(config, out_dir=root / "full", gif=True, **kwargs)
    stopped = run_experiment(config, out_dir=root / "resumed", max_chunks=5, **kwargs)
    resumed = run_experiment(config, out_dir=root / "resumed", resume=True, **kwargs)
    return config, full, stopped, resumed


def _train_series(result, name, run="seed_0"):
    log = json.loads(open(result.metrics_path).read())
    steps = log["maze"][TINY_TASK]["accel"][run]
    ordered = sorted((k for k in steps if k.startswith("step_")), key=lambda k: int(k.split("_")[1]))
    return np.array([steps[k][name] for k in ordered if name in steps[k]], dtype=float).reshape(-1)


def test_accel_mutates_after_each_replay_and_learns_only_on_replays(accel_runs):
    _, full, _, _ = accel_runs
    replay = _train_series(full, "train_replay")
    mutate = _train_series(full, "train_mutate")
    learned = _train_series(full, "train_learned")
    assert len(replay) == 12
    # An iteration after a replay iteration evaluates mutations of its levels; no gradient step
    # except on replays (Robust PLR).
    np.testing.assert_array_equal(mutate[1:], replay[:-1])
    np.testing.assert_array_equal(learned, replay)
    assert replay.sum() >= 1
    edits = _train_series(full, "train_buffer_mean_edits")
    assert edits[-1] > 0  # mutated levels entered the buffer with their edit counts
    size = _train_series(full, "train_buffer_size")
    assert (np.diff(size) >= 0).all() and size[-1] <= 16
    for key in ("train_score_max_mc", "train_score_positive_value_loss", "train_buffer_mean_staleness"):
        assert np.isfinite(_train_series(full, key)).all()


def test_driver_run_log_checkpoints_and_resume(accel_runs):
    _, full, stopped, resumed = accel_runs
    assert not stopped.finished and resumed.finished and full.finished
    log = json.loads(open(full.metrics_path).read())
    last = log["maze"][TINY_TASK]["accel"]["seed_1"]["step_12"]
    for key in ("solved_level_0", "level_return_level_0", "episode_length_level_0", "mean_episode_return"):
        assert len(last[key]) == 4, key
    assert np.isfinite(full.final_return).all()
    # Resuming gives the same result as never stopping.
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    assert open(full.metrics_path).read() == open(resumed.metrics_path).read()


def test_gif_of_the_student_on_a_random_level(accel_runs):
    _, full, _, _ = accel_runs
    import imageio.v3 as iio

    frames = iio.imread(full.gif_path, index=None)
    # One episode on a fresh random 5x5 level (its 12-step horizon at most), plus the reset's
    # frame; each frame is the maze with its border wall, 8 pixels a cell.
    assert full.gif_path.endswith("episode.gif")
    assert frames.ndim == 4 and 2 <= frames.shape[0] <= 13 and frames.shape[1:3] == (56, 56)


def test_a_sweep_of_buffer_and_loss_settings_is_one_program_of_the_runs_alone(accel_runs, tmp_path):
    """``lamella sweep`` over PLR's replay settings (the buffer's fill before replay included)
    and PPO's entropy coefficient trains every config in one program (the runner is built with
    traced values): its first config's members are the fixture's run of that config alone, and
    the second config trains otherwise."""
    from lamella.agents.sweep import plan_sweep

    config, full, _, _ = accel_runs
    same = {
        "temperature": 0.3,
        "staleness_coef": 0.5,
        "replay_prob": 0.8,
        "min_fill_ratio": 0.5,
        "ent_coef": config.ent_coef,
    }
    assert all(getattr(config, k) == v for k, v in same.items())
    other = {
        "temperature": 1.0,
        "staleness_coef": 0.0,
        "replay_prob": 1.0,
        "min_fill_ratio": 0.25,
        "ent_coef": 0.05,
    }
    plan = plan_sweep("accel", config, {k: [str(same[k]), str(other[k])] for k in same}, seeds=2)
    assert (plan.traced, plan.static, len(plan.programs)) == (list(same), {}, 1)
    sweep = run_experiment(
        config,
        variants=[same, other],
        out_dir=tmp_path / "sweep",
        seeds=2,
        chunk_iterations=1,
        progress=False,
        plot=False,
    )
    assert sweep.members[:2] == [(variant_name("accel", same), f"seed_{s}") for s in (0, 1)]
    # The student and the level buffer (levels, scores, staleness) of the first config's members.
    learned = lambda state: jax.tree.leaves((state.params, state.buffer))  # noqa: E731
    for a, b in zip(learned(full.state), learned(sweep.state), strict=True):
        np.testing.assert_allclose(np.asarray(b)[:2], np.asarray(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sweep.final_return[:2], full.final_return, rtol=1e-5, atol=1e-6)
    moved = [np.abs(np.asarray(b)[2:] - np.asarray(b)[:2]).max() for b in jax.tree.leaves(sweep.state.params)]
    assert max(moved) > 1e-3, "the second config trained as the first"


def test_entry_points_and_presets():
    for name, config_class in (("dr", DRConfig), ("plr", PLRConfig), ("accel", ACCELConfig)):
        algorithm = load_algorithm(name)
        assert algorithm.config_class is config_class
        assert set(algorithm.presets) == {
            "AMaze-13x13-v0",
            "ci",
            "Foraging-5x5-2p-1f-v3",
            "Foraging-8x8-2p-2f-v3",
        }
    minimax_plr = PRESETS["plr"]["AMaze-13x13-v0"]
    assert (
        minimax_plr.num_envs,
        minimax_plr.num_steps,
        minimax_plr.num_epochs,
        minimax_plr.num_minibatches,
    ) == (
        32,
        256,
        5,
        1,
    )
    assert (minimax_plr.learning_rate, minimax_plr.gamma, minimax_plr.score, minimax_plr.buffer_size) == (
        3e-4,
        0.999,
        "max_mc",
        4000,
    )
    assert PRESETS["accel"]["AMaze-13x13-v0"].n_walls == 0
    assert PRESETS["dr"]["AMaze-13x13-v0"].total_timesteps == 30_000 * 32 * 256


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (PLRConfig(**TINY, buffer_size=4), r"buffer_size \(4\) is smaller than the batch of num_envs \(8\)"),
        (PLRConfig(**TINY, prioritization="proportional"), "proportional prioritisation"),
        (PLRConfig(**TINY, score="pvl"), "score must be one of"),
        (
            DRConfig(**{**TINY, "eval_levels": ("SixteenRooms",)}),
            r"SixteenRooms is \(13, 13\).*training size",
        ),
        (DRConfig(**{**TINY, "eval_levels": ("Nowhere",)}), "unknown level 'Nowhere'"),
        (DRConfig(**{**TINY, "total_timesteps": 10}), "less than one iteration"),
        (
            PLRConfig(**{**TINY, "num_steps": 8}),
            r"PLRConfig\.num_steps \(8\) is shorter than an episode \(max_episode_steps=12\).*never enter the level buffer",
        ),
        (ACCELConfig(**{**TINY, "num_steps": 8}), r"ACCELConfig\.num_steps \(8\) is shorter than an episode"),
        (
            DRConfig(**{**TINY, "height": -7}),
            r"DRConfig\.height must be >= 1 \(or 0: the env id's own size\), got -7",
        ),
        (DRConfig(**{**TINY, "conv_filters": 0}), r"DRConfig\.conv_filters must be >= 1, got 0"),
        (DRConfig(**{**TINY, "n_walls": -1}), r"DRConfig\.n_walls must be >= 0, got -1"),
        (DRConfig(**{**TINY, "max_episode_steps": 0}), r"DRConfig\.max_episode_steps must be >= 1, got 0"),
        (ACCELConfig(**TINY, num_edits=0), r"ACCELConfig\.num_edits must be >= 1 .*got 0.*PLRConfig"),
        # A bool or a NumPy / JAX float passes the field's type check; the mutator's loop failed on
        # it (AMaze) or cut 2.5 to 2 edits silently (Foraging).
        (ACCELConfig(**TINY, num_edits=True), r"ACCELConfig\.num_edits must be an int.*got True \(bool\)"),
        (
            ACCELConfig(**TINY, num_edits=np.float32(2.5)),
            r"ACCELConfig\.num_edits must be an int.*got 2\.5 \(float32\)",
        ),
        # Robust PLR learns on replayed levels only: with nothing replayed it never trains.
        (
            PLRConfig(**TINY, replay_prob=0.0),
            r"PLRConfig: robust=True takes gradient steps on replayed levels only.*replay_prob=0.*never "
            r"trains.*robust=False",
        ),
        (ACCELConfig(**TINY, replay_prob=0.0), r"ACCELConfig: robust=True .*replay_prob=0"),
    ],
)
def test_bad_configs_are_refused_before_compiling(config, message):
    with pytest.raises(ValueError, match=message):
        make_ued_runner(config)


# A setting the run would never read, given as an override (`lamella train`): before, the run
# went ahead without it. A preset's value for the mode switched off is no error.
@pytest.mark.parametrize(
    ("algorithm", "env_id", "overrides", "message"),
    [
        ("dr", None, ["recurrent=false", "cell=gru"], r"DRConfig\.cell='gru' .*recurrent=False builds a feed-forward student.*set recurrent=True, or leave cell at 'lstm'"),
        ("plr", None, ["rnn_hidden_size=32"], None),
        ("plr", None, ["torso_size=32"], r"PLRConfig\.torso_size=32 .*recurrent=True builds the recurrent student.*leave torso_size at 64"),
        ("dr", None, ["screenshot_dir=shots"], r"DRConfig\.screenshot_dir='shots' .*screenshot_every=0 writes none.*set screenshot_every"),
        ("dr", None, ["screenshot_dir=shots", "screenshot_every=5"], None),
        ("dr", "Foraging-5x5-2p-1f-v3", ["n_walls=10"], r"DRConfig\.n_walls=10 .*Foraging-5x5-2p-1f-v3 is not AMaze.*leave n_walls at 60"),
        ("accel", "Foraging-5x5-2p-1f-v3", ["conv_filters=8"], r"ACCELConfig\.conv_filters=8 .*not AMaze"),
        ("paired", None, ["teacher_torso_size=8"], r"PAIREDConfig\.teacher_torso_size=8 .*teacher_recurrent=True builds the recurrent teacher"),
        ("paired", None, ["teacher_recurrent=false", "teacher_cell=gru"], r"PAIREDConfig\.teacher_cell='gru' .*set teacher_recurrent=True"),
        ("paired", None, ["teacher_recurrent=false", "teacher_torso_size=8"], None),
        ("paired", None, ["screenshot_dir=shots"], r"PAIREDConfig\.screenshot_dir='shots' .*PAIRED and its variants write none"),
    ],
)  # fmt: skip
def test_an_override_the_run_would_never_read_is_refused(algorithm, env_id, overrides, message):
    if message is None:
        resolve_config(algorithm, env_id, None, overrides)
        return
    with pytest.raises(ConfigError, match=message):
        resolve_config(algorithm, env_id, None, overrides)


# The run log's task (DRConfig.run_log_task) made the env before the runner's build could report
# a mistyped id: a KeyError traceback and exit status 1 instead of one line and exit status 2.
@pytest.mark.parametrize("algorithm", ["dr", "paired"])
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_unknown_env_id_is_one_line_and_exit_status_2(algorithm, dry_run, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        train.main([algorithm, "--env", "AMaze-7x7-v0", *(["--dry-run"] if dry_run else [])])
    assert info.value.code == 2
    assert "Unknown environment id 'AMaze-7x7-v0'. Did you mean 'AMaze-15x15-v0'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_dict_of_presets_or_a_name_for_the_config_names_the_fix():
    with pytest.raises(
        ConfigError, match=r"^make_ued_runner: config must be a DRConfig, got dict\. That is a dict"
    ):
        make_ued_runner(PRESETS["plr"])
    with pytest.raises(ConfigError, match=r"got the str 'plr'\. Build one: DRConfig\(\.\.\.\)"):
        make_ued_runner("plr")


def test_a_family_whose_mutator_or_comparator_does_not_fit_its_levels_names_the_fix():
    config = ACCELConfig(**TINY, buffer_size=16)
    family = default_family(config)

    def int_walls(key, level, params, num_edits):
        edited = family.mutate_level(key, level, params, num_edits)
        return edited.replace(wall_map=edited.wall_map.astype(jnp.int32))

    def wrapped(key, level, params, num_edits):
        return (family.mutate_level(key, level, params, num_edits),)

    def cellwise(a, b):
        return a.wall_map == b.wall_map

    with pytest.raises(
        ConfigError,
        match=r"ACCELConfig: the LevelFamily's mutate_level returns .*wall_map: int32\[5, 5\].* but its "
        r"sample_level returns .*wall_map: bool\[5, 5\].*same structure, shapes and dtypes",
    ):
        make_ued_runner(config, family=family._replace(mutate_level=int_walls))
    with pytest.raises(ConfigError, match=r"mutate_level returns tuple\(.*sample_level returns MazeLevel\("):
        make_ued_runner(config, family=family._replace(mutate_level=wrapped))
    with pytest.raises(
        ConfigError,
        match=r"levels_equal\(a, b\) must return one bool \(\) per pair of levels, got bool\[5, 5\]",
    ):
        make_ued_runner(config, family=family._replace(levels_equal=cellwise))
    # DR neither edits nor compares levels; PLR without de-duplication does not compare them.
    make_ued_runner(DRConfig(**TINY), family=family._replace(mutate_level=wrapped, levels_equal=cellwise))
    make_ued_runner(
        PLRConfig(**TINY, buffer_size=16, dedupe=False), family=family._replace(levels_equal=cellwise)
    )


def test_family_pieces_of_another_signature_or_return_type_name_the_fix():
    config = DRConfig(**TINY)
    family = default_family(config)
    params = family.env_params
    with pytest.raises(
        ConfigError, match=r"DRConfig: the LevelFamily's sample_level must take \(key, env_params\).*got"
    ):
        make_ued_runner(
            config, family=family._replace(sample_level=lambda key: family.sample_level(key, params))
        )
    with pytest.raises(
        ConfigError,
        match=r"ACCELConfig: the LevelFamily's mutate_level must take \(key, level, env_params, num_edits\)",
    ):
        make_ued_runner(
            ACCELConfig(**TINY, buffer_size=16), family=family._replace(mutate_level=lambda key, level: level)
        )
    with pytest.raises(
        ConfigError, match=r"level_stats\(level\) must return a dict \{name: number\} .*got int32\[\]"
    ):
        make_ued_runner(config, family=family._replace(level_stats=lambda level: jnp.sum(level.wall_map)))
    named = family._replace(
        named_level=lambda name: family.sample_level(jax.random.key(1), params), named_levels=("Mine",)
    )
    with pytest.raises(
        ConfigError, match=r"named_level\('Mine'\) must return a pair \(level, env_params\), got MazeLevel"
    ):
        make_ued_runner(dataclasses.replace(config, eval_levels=("Mine",)), family=named)


def test_init_refuses_an_int_seed_for_its_key():
    runner = make_ued_runner(DRConfig(**TINY))
    with pytest.raises(
        TypeError, match=r"^init: `key` must be a PRNG key.*got the Python int 0\. Pass jax\.random\.key"
    ):
        runner.init(0)


def test_named_eval_levels_use_their_own_horizon():
    config = DRConfig(
        **{**TINY, "height": 0, "width": 0, "n_walls": 60, "eval_levels": ("SixteenRooms", "random")}
    )
    runner = make_ued_runner(dataclasses.replace(config, eval_episodes=2))
    state = jax.jit(runner.init)(jax.random.key(0))
    out = jax.jit(runner.evaluate)(state, jax.random.key(1))
    assert out["solved"].shape == (2, 2) and out["episode_return"].shape == (2,)
    unsolved = np.asarray(out["solved"]) == 0
    lengths = np.asarray(out["episode_length"])
    # An episode that does not reach the goal runs to its level's horizon: SixteenRooms' own 450
    # steps, a random training level's 12.
    assert (lengths[:, 0][unsolved[:, 0]] == 450).all() and (lengths[:, 0] <= 450).all()
    assert (lengths[:, 1][unsolved[:, 1]] == 12).all() and (lengths[:, 1] <= 12).all()
    assert unsolved[:, 0].any()
    # The GIF's episode (render_episode) is on the first evaluation level, SixteenRooms, at its
    # own horizon: the first frame is that maze at its start pose.
    frames, length = jax.jit(runner.render_episode)(state, jax.random.key(2))
    level, level_params = maze.named_maze("SixteenRooms")
    start = maze.render_level(level, level_params, highlight_view=True)
    assert frames.shape == (451, *start.shape) and 2 <= int(length) <= 451
    np.testing.assert_array_equal(frames[0], start)
