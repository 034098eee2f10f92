"""``lamella eval checkpoints``: a tiny PPO run evaluated on test envs, end to end."""

import argparse
import csv
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import lamella.eval as le
from lamella.eval import cli
from lamella.eval._src import checkpoints as lib

SEEDS = 2
EPISODES = 6
ENVS = ["CartPole-v1", "CartPole-v1:length=1.0,gravity=9"]


@pytest.fixture(scope="module")
def run_dir(ppo_run_dir):
    """The tiny PPO run of conftest.py (3 iterations, ``SEEDS`` seeds), shared with test_report."""
    return ppo_run_dir


@pytest.fixture(scope="module")
def cli_output(run_dir, tmp_path_factory):
    """``lamella eval checkpoints`` through its argparse parser, as the lamella command runs it."""
    out = tmp_path_factory.mktemp("eval_out")
    parser = argparse.ArgumentParser(prog="lamella")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        [
            "eval",
            "checkpoints",
            run_dir,
            "--envs",
            *ENVS,
            "--episodes",
            str(EPISODES),
            "--seed",
            "3",
            "--out",
            str(out / "results.csv"),
            "--run-log",
            str(out / "runlog"),
        ]
    )
    assert args.func(args) == 0
    with open(out / "results.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    return out, rows


def test_parse_env_spec():
    spec = le.parse_env_spec("CartPole-v1:length=1.0, gravity=9,flag=true,mode=easy")
    assert spec.env_id == "CartPole-v1"
    assert spec.overrides == (("length", 1.0), ("gravity", 9), ("flag", True), ("mode", "easy"))
    assert spec.name == "CartPole-v1:length=1.0,gravity=9,flag=true,mode=easy"
    assert spec.overrides_text == "length=1.0;gravity=9;flag=true;mode=easy"
    assert le.parse_env_spec("Acrobot-v1") == le.EnvSpec("Acrobot-v1")
    for bad, message in [
        (":length=1", "no env id"),
        ("CartPole-v1:length", "not key=value"),
        ("CartPole-v1:length=", "not key=value"),
        ("CartPole-v1:length=1,length=2", "given twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            le.parse_env_spec(bad)


def test_csv_rows_columns_and_means(cli_output, run_dir):
    out, rows = cli_output
    # The episode returns behind each row, from the run log written beside the CSV.
    episodes_of = {(r.task, r.run): r.absolute_metrics for r in le.read_run_logs([out / "runlog"])}
    assert list(rows[0]) == list(lib.CSV_COLUMNS)  # PPO reports no success
    assert len(rows) == len(ENVS) * (SEEDS + 1)
    for env_index, (test_env, overrides) in enumerate(
        [("CartPole-v1", ""), ("CartPole-v1", "length=1.0;gravity=9.0")]
    ):
        block = rows[env_index * (SEEDS + 1) : (env_index + 1) * (SEEDS + 1)]
        assert [r["seed"] for r in block] == [*map(str, range(SEEDS)), "mean"]
        for r in block:
            assert r["checkpoint"].startswith(run_dir) and r["checkpoint"].endswith(".msgpack")
            assert (r["algorithm"], r["train_env"], r["test_env"]) == ("ppo", "CartPole-v1", test_env)
            assert r["overrides"] == overrides  # gravity=9 is read as the float params field
        per_seed = np.array([float(r["mean_return"]) for r in block[:SEEDS]])
        assert [int(r["episodes"]) for r in block] == [EPISODES] * SEEDS + [EPISODES * SEEDS]
        assert float(block[-1]["mean_return"]) == pytest.approx(per_seed.mean(), rel=1e-12)
        assert float(block[-1]["std_return"]) == pytest.approx(per_seed.std(), rel=1e-12, abs=1e-12)
        # A CartPole episode earns 1 per step: returns are whole numbers of at least 1.
        assert np.all(per_seed >= 1)
        # Each seed's row is the mean and standard deviation of that seed's own episodes.
        task = test_env + (":" + overrides.replace(";", ",") if overrides else "")
        for seed, row in enumerate(block[:SEEDS]):
            metrics = episodes_of[(task, f"seed_{seed}")]
            returns, lengths = metrics["mean_episode_return"], metrics["episode_length"]
            assert returns.shape == (EPISODES,)
            np.testing.assert_array_equal(returns, lengths)  # 1 per step on CartPole
            assert float(row["mean_return"]) == pytest.approx(returns.mean(), rel=1e-12)
            assert float(row["std_return"]) == pytest.approx(returns.std(), rel=1e-12, abs=1e-12)
        # The seeds were evaluated apart: their episodes differ.
        first, second = (episodes_of[(task, f"seed_{s}")]["mean_episode_return"] for s in range(2))
        assert not np.array_equal(first, second)


def test_override_reaches_the_env(cli_output):
    import lamella.envs

    _, params = lamella.envs.make("CartPole-v1:length=1.0,gravity=9.0")
    assert (params.length, params.gravity, params.masspole) == (1.0, 9.0, 0.1)


def test_run_log_holds_the_per_episode_values(cli_output):
    out, rows = cli_output
    runs = le.read_run_logs([out / "runlog"])
    assert sorted((r.environment, r.task, r.algorithm, r.run) for r in runs) == sorted(
        ("classic_control", task, "ppo", f"seed_{s}")
        for task in ["CartPole-v1", "CartPole-v1:length=1.0,gravity=9.0"]
        for s in range(SEEDS)
    )
    scores = le.final_scores(runs, "mean_episode_return")
    assert scores.source == "absolute_metrics"
    csv_means = {
        (r["overrides"], int(r["seed"])): float(r["mean_return"]) for r in rows if r["seed"] != "mean"
    }
    for t, task in enumerate(scores.tasks):
        # Task names are environment/task.
        overrides = "" if task == "classic_control/CartPole-v1" else "length=1.0;gravity=9.0"
        for s in range(SEEDS):
            assert scores.values["ppo"][s, t] == pytest.approx(csv_means[(overrides, s)], rel=1e-12)
    for run in runs:
        assert run.absolute_metrics["mean_episode_return"].shape == (EPISODES,)
        assert run.absolute_metrics["episode_length"].shape == (EPISODES,)
    # The CSV view reads back to the same runs.
    assert {r.name for r in le.read_csv(out / "runlog" / "metrics.csv")} == {r.name for r in runs}


def test_deterministic_for_a_seed(cli_output, run_dir):
    _, rows = cli_output
    again = le.evaluate_checkpoints([run_dir], ENVS, episodes=EPISODES, seed=3)
    assert [repr(r.mean_return) for r in again] == [r["mean_return"] for r in rows]
    assert [repr(r.std_return) for r in again] == [r["std_return"] for r in rows]
    other = le.evaluate_checkpoints([run_dir], ENVS, episodes=EPISODES, seed=4)
    returns = np.stack([r.returns for r in again if r.seed == "mean"])
    other_returns = np.stack([r.returns for r in other if r.seed == "mean"])
    assert returns.shape == other_returns.shape == (len(ENVS), SEEDS, EPISODES)
    assert not np.array_equal(returns, other_returns)


def test_mismatched_spaces_are_rejected(run_dir):
    with pytest.raises(ValueError) as info:
        le.evaluate_checkpoints([run_dir], ["CartPole-v1", "Acrobot-v1"], episodes=2)
    message = str(info.value)
    assert "'Acrobot-v1' does not fit the checkpoint" in message
    assert "shape=(4,)" in message and "Discrete(2)" in message  # the checkpoint's spaces
    assert "shape=(6,)" in message and "Discrete(3)" in message  # the test env's


@pytest.mark.parametrize(
    "spec, message",
    [
        ("CartPole-v1:size=3", "unknown override"),
        ("CartPole-v1:max_steps_in_episode=2.5", "does not fit the params field max_steps_in_episode"),
        ("CartPol-v1", "Unknown environment id"),
    ],
)
def test_bad_test_envs_are_rejected(run_dir, spec, message):
    with pytest.raises(ValueError, match=message):
        le.evaluate_checkpoints([run_dir], [spec], episodes=2)


def test_bad_paths_and_episodes(tmp_path, run_dir):
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        le.evaluate_checkpoints([tmp_path], ["CartPole-v1"])
    # One path and one env as text, not lists: the whole path (not its first character) is read.
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}.*no checkpoints"):
        le.evaluate_checkpoints(str(tmp_path), "CartPole-v1")
    with pytest.raises(ValueError, match="episodes"):
        le.evaluate_checkpoints([run_dir], ["CartPole-v1"], episodes=0)


def test_a_folder_of_runs_evaluates_each_runs_newest_checkpoint(tmp_path, run_dir):
    """A folder holding run directories (a ``lamella sweep`` folder's ``p0/``, ``p1/``, as
    ``aggregate`` and ``report`` read it). Before: "holds no checkpoints/checkpoint_*.msgpack"."""
    import shutil

    for name in ("a", "b"):
        shutil.copytree(run_dir, tmp_path / "runs" / name)
    rows = le.evaluate_checkpoints([tmp_path / "runs"], ["CartPole-v1"], episodes=2, seed=3)
    alone = le.evaluate_checkpoints([run_dir], ["CartPole-v1"], episodes=2, seed=3)
    newest = os.path.basename(alone[0].checkpoint)
    assert [r.checkpoint for r in rows] == [
        str(tmp_path / "runs" / name / "checkpoints" / newest) for name in ("a", "b") for _ in alone
    ]
    for r, same in zip(rows, alone + alone, strict=True):
        np.testing.assert_array_equal(r.returns, same.returns)


def test_other_env_with_the_same_spaces_gets_the_trained_policy(run_dir):
    """GaussianBandit-misc has CartPole's spaces but another env state: the policy is moved over."""
    from lamella.agents.driver import load_run

    (spec,) = [le.parse_env_spec("GaussianBandit-misc")]
    rows = le.evaluate_checkpoints([run_dir], [spec], episodes=3)
    assert [r.seed for r in rows] == ["0", "1", "mean"]
    assert all(np.isfinite(r.mean_return) for r in rows)

    loaded = load_run(run_dir)
    config = lib.dataclasses.replace(loaded.config, env_id="GaussianBandit-misc", eval_episodes=3)
    from lamella.agents.config import algorithm_table

    _, init, _ = lib._compiled(algorithm_table()["ppo"][1], config, SEEDS)
    keys = jax.vmap(jax.random.key)(np.arange(SEEDS, dtype=np.uint32))
    state = lib._state_for("x", loaded.state, init, keys)
    assert jax.tree.structure(state.env_state) != jax.tree.structure(loaded.state.env_state)
    for moved, trained in zip(jax.tree.leaves(state.train_state), jax.tree.leaves(loaded.state.train_state)):
        np.testing.assert_array_equal(moved, trained)


def test_a_sweep_checkpoint_evaluates_every_config_as_its_own(tmp_path):
    """A ``lamella sweep`` program's checkpoint holds every config's seeds (the variants one after
    the other): each config's rows are named as the run log names the config and equal the same
    evaluation of that config's members alone; the report draws an episode of each config."""
    from lamella.agents.algorithms import make_runner
    from lamella.agents.config import resolve_config
    from lamella.agents.driver import load_run, run_experiment
    from lamella.eval.__main__ import main

    config = resolve_config(
        "ppo",
        env_id="CartPole-v1",
        overrides=["num_envs=4", "num_steps=16", "total_timesteps=192", "num_epochs=1", "hidden_sizes=16"],
    )
    variants = [{"learning_rate": 0.0}, {"learning_rate": 0.05}]
    out = tmp_path / "sweep"
    run_experiment(config, seeds=SEEDS, variants=variants, out_dir=out, progress=False, plot=False)
    rows = le.evaluate_checkpoints([out], episodes=3, seed=3)
    labels = ["ppo[learning_rate=0.0]", "ppo[learning_rate=0.05]"]
    assert [(r.algorithm, r.seed) for r in rows] == [
        (label, seed) for label in labels for seed in ("0", "1", "mean")
    ]
    loaded = load_run(out)
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(3), s))(np.arange(SEEDS, dtype=np.uint32))
    alone = []
    for index, variant in enumerate(variants):
        runner = make_runner(lib.dataclasses.replace(loaded.config, eval_episodes=3, **variant))
        block = jax.tree.map(lambda x, i=index: x[i * SEEDS : (i + 1) * SEEDS], loaded.state)
        alone.append(np.asarray(jax.jit(jax.vmap(runner.evaluate))(block, keys)["episode_return"]))
        ours = np.stack([r.returns for r in rows if r.algorithm == labels[index] and r.seed != "mean"])
        np.testing.assert_array_equal(ours, alone[-1].reshape(SEEDS, -1))
    # The configs learned differently (a learning rate of 0 kept the initial policy), so the rows
    # could not match by mixing them up.
    assert not np.array_equal(alone[0], alone[1])
    report = str(tmp_path / "report.html")
    assert main(["report", str(out), "-o", report, "--reps", "20"]) == 0
    text = open(report, encoding="utf-8").read()
    assert text.count('src="data:image/gif;base64,') == len(labels)
    # Each config's episode is its own first seed's, drawn by that config's runner (the report's
    # --seed 0 draws with key(0)): the two policies' episodes differ in length.
    drawn = []
    for index, (label, variant) in enumerate(zip(labels, variants, strict=True)):
        runner = make_runner(lib.dataclasses.replace(loaded.config, **variant))
        member = jax.tree.map(lambda x, i=index: x[i * SEEDS], loaded.state)
        _, length = jax.jit(runner.render_episode)(member, jax.random.key(0))
        drawn.append(int(length) - 1)
        caption = f"{label} on CartPole-v1, seed 0, checkpoint_000000003.msgpack (iteration 3)"
        assert f"{caption}: one episode as its runner draws it, {drawn[-1]} steps" in text
    assert drawn[0] != drawn[1], drawn


def test_aggregation_imports_without_agents():
    code = (
        "import sys; sys.modules['lamella.agents'] = None\n"
        "import lamella.eval as le\n"
        "print(le.iqm(__import__('numpy').ones((4, 2))), le.parse_env_spec('CartPole-v1:length=2').name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1.0", "CartPole-v1:length=2"]


def test_checkpoints_without_the_extra_name_the_extra():
    """Without lamella-agents: one line saying which extra to install, from Python and the command."""
    code = (
        "import sys; sys.modules['lamella.agents'] = None\n"
        "import lamella.eval as le\n"
        "try:\n"
        "    le.evaluate_checkpoints(['runs/x'])\n"
        "except le.MissingExtraError as error:\n"
        "    print(repr(str(error)))\n"
        "from lamella.eval.__main__ import main\n"
        "sys.exit(main(['checkpoints', 'runs/x']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    message = "needs lamella-agents; install them with: pip install 'lamella-eval[checkpoints]'"
    assert message in done.stdout and "\\n" not in done.stdout
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"python -m lamella.eval checkpoints: error: Evaluating checkpoints {message}"
    ]


def result_row(**fields):
    """One seed's CartPole-v1 result (a hand-made ``CheckpointResult``) with ``fields`` set."""
    base = dict(
        train_env="CartPole-v1",
        test_env="CartPole-v1",
        overrides="",
        seed="0",
        std_return=0.0,
        success_rate=None,
    )
    return le.CheckpointResult(**{**base, **fields})


def test_metrics_with_named_axes_reach_the_run_log_one_key_per_index(tmp_path):
    """The marl runners' ``evaluate`` returns ``return`` per agent (``Runner.metric_axes``:
    ``("agent",)``), as the training run log holds it (``return_agent_<i>``). Before, the
    checkpoints' run log kept ``mean_episode_return`` and ``episode_length`` only."""
    from lamella.eval._src.checkpoints import _by_axis

    metrics = {"episode_return": np.zeros((2, 3)), "return": np.arange(12.0).reshape(2, 3, 2)}
    by_axis = _by_axis(metrics, {"return": ("agent",)}, size=2)  # (seeds, episodes, agents)
    assert sorted(by_axis) == ["return_agent_0", "return_agent_1"]
    np.testing.assert_array_equal(by_axis["return_agent_1"], [[1, 3, 5], [7, 9, 11]])
    row = result_row(
        checkpoint="run/checkpoints/checkpoint_000000001.msgpack",
        algorithm="ippo",
        episodes=3,
        mean_return=0.0,
        returns=np.zeros(3),
        by_axis={key: value[0] for key, value in by_axis.items()},
    )
    le.write_results_run_log([row], tmp_path)
    (run,) = le.read_run_log(tmp_path / "metrics.json")
    np.testing.assert_array_equal(run.absolute_metrics["return_agent_1"], [1, 3, 5])
    np.testing.assert_array_equal(run.absolute_metrics["return_agent_0"], [0, 2, 4])


def test_metrics_with_named_axes_get_csv_columns(tmp_path):
    """``--out``'s CSV holds each named-axis key's mean as ``mean_<key>`` (the marl runners'
    ``mean_return_agent_<i>``): per seed the mean over its episodes, for ``mean`` the mean of the
    per-seed means; a row without the key (a single-agent checkpoint beside) has an empty cell."""
    from lamella.eval._src.checkpoints import _seed_rows

    returns = np.arange(12.0).reshape(2, 3, 2)  # (seeds, episodes, agents), as _by_axis splits it
    by_axis = {f"return_agent_{a}": returns[..., a] for a in range(2)}
    common = dict(checkpoint="c", algorithm="ippo", train_env="E", test_env="E", overrides="")
    rows = _seed_rows(common, [0, 1], np.ones((2, 3)), None, None, by_axis)
    single = _seed_rows({**common, "algorithm": "ppo"}, [0], np.ones((1, 3)), None, None)
    le.write_results_csv(rows + single, tmp_path / "r.csv")
    with open(tmp_path / "r.csv", newline="") as file:
        table = list(csv.DictReader(file))
    assert list(table[0]) == [*lib.CSV_COLUMNS, "mean_return_agent_0", "mean_return_agent_1"]
    assert [r["mean_return_agent_1"] for r in table] == ["3.0", "9.0", "6.0", "", ""]
    assert [r["mean_return_agent_0"] for r in table[:3]] == ["2.0", "8.0", "5.0"]


def test_run_log_refuses_a_training_run_directory(tmp_path, capsys):
    """``--run-log runs/ppo`` (the run's own directory) replaced the training run log with the
    checkpoints' results; a directory holding config.json or checkpoints/ is refused."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    (run / "config.json").write_text("{}")
    row = result_row(checkpoint="c", algorithm="ppo", episodes=1, mean_return=1.0, returns=np.ones(1))
    with pytest.raises(
        le.EvalError, match=r"--run-log .*run.* is a training run directory .*config.json.*another directory"
    ):
        le.write_results_run_log([row], run)
    assert (run / "metrics.json").read_text() == "{}"
    le.write_results_run_log([row], tmp_path / "eval")  # a fresh directory, or the same again
    le.write_results_run_log([row], tmp_path / "eval")


def test_an_override_of_a_config_field_reaches_the_runner():
    """``--envs IteratedPrisonersDilemma-v0:num_inner_steps=50`` on a run whose config sets
    ``num_inner_steps`` (the marl shaping runners, which make the env with it): the test config
    carries the override; before, the runner re-applied the training value and the CSV said 50."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Shaping:
        env_id: str = "IteratedPrisonersDilemma-v0"
        num_inner_steps: int = 5
        discount: float = 0.9
        eval_episodes: int = 4

    config = lib._test_config(Shaping(), "variant-id", {"num_inner_steps": 50, "discount": 1, "other": 3}, 8)
    assert config == Shaping("variant-id", 50, 1.0, 8)
    assert type(config.discount) is float
    assert lib._test_config(Shaping(), "variant-id", {}, 8) == Shaping("variant-id", 5, 0.9, 8)


def _cartpole_with_num_steps(num_steps: int = 0):
    """CartPole-v1's bare env under a factory that also takes ``num_steps``, a field of the PPO
    config: as ``num_inner_steps`` is of lola's and of the env the marl shaping runners make."""
    import lamella.envs

    return lamella.envs.make("CartPole-v1", autoreset=False)[0]


@pytest.fixture(scope="module")
def steps_env():
    import lamella.envs

    lamella.envs.register("CartPoleNumSteps-test", _cartpole_with_num_steps, overwrite=True)
    return "CartPoleNumSteps-test"


def test_an_override_that_outgrows_the_budget_is_evaluated(run_dir, steps_env):
    """``--envs ID:num_steps=64`` on the tiny PPO run (3 iterations of 4 x 16 steps,
    ``total_timesteps=192``): the test config's iteration is 4 x 64 = 256 steps, more than the
    run's budget. Before, the runner was refused with the training check ("total_timesteps (192)
    is less than one iteration"); evaluation trains nothing, so the budget is set to the run's 3
    iterations of the test runner's steps, and the CSV names the override evaluated."""
    from lamella.agents.algorithms import make_runner
    from lamella.agents.driver import load_run

    rows = le.evaluate_checkpoints(run_dir, f"{steps_env}:num_steps=64", episodes=2, seed=3)
    assert [(r.test_env, r.overrides, r.seed) for r in rows] == [
        (steps_env, "num_steps=64", seed) for seed in ("0", "1", "mean")
    ]
    assert all(np.isfinite(r.mean_return) and r.mean_return >= 1 for r in rows)
    config = lib._test_config(load_run(run_dir).config, steps_env, {"num_steps": 64}, 2)
    budgeted = lib._evaluation_budget(make_runner, config, 3)
    assert budgeted == lib.dataclasses.replace(config, total_timesteps=3 * 4 * 64)
    assert make_runner(budgeted).num_iterations == 3


def test_an_override_the_config_refuses_for_another_reason_is_still_refused(run_dir, steps_env):
    """A value no budget makes valid (``num_steps=0``) is refused with the config's own message."""
    with pytest.raises(le.EvalError, match=r"sets num_steps=0, .* refused: PPOConfig.num_steps must be >= 1"):
        le.evaluate_checkpoints(run_dir, f"{steps_env}:num_steps=0", episodes=2)


def test_a_test_env_takes_the_runners_own_env_keywords():
    """The marl runners make their env with the config's ``env_kwargs`` (``sight=2``): the env
    registered for a test env with overrides takes them too, its own overrides winning. Before,
    every ``--envs ID:key=value`` of such a run was refused ("unknown override(s) ['sight']")."""
    import lamella.envs

    spec = le.parse_env_spec("Foraging-5x5-2p-1f-v3:max_episode_steps=10")
    name = lib._register_variant(spec, lib._typed_overrides(spec))
    env, params = lamella.envs.make(name, autoreset=False, sight=1, max_episode_steps=30)
    reference, _ = lamella.envs.make("Foraging-5x5-2p-1f-v3", autoreset=False, sight=1)
    assert params.max_episode_steps == 10
    assert env.observation_space(params).shape == reference.observation_space(params).shape
    assert env.unwrapped.sight == 1


def test_a_value_the_env_constructor_refuses_is_one_eval_error(run_dir):
    """``IteratedPrisonersDilemma-v0:num_inner_steps=-1``: the matrix game's constructor raises a
    plain ValueError, which ``lamella eval checkpoints`` printed as a traceback; now an EvalError
    naming the test env (one line from the command)."""
    with pytest.raises(le.EvalError, match=r"'IteratedPrisonersDilemma-v0:num_inner_steps=-1'.*must be >= 1"):
        le.evaluate_checkpoints(run_dir, "IteratedPrisonersDilemma-v0:num_inner_steps=-1", episodes=2)


@pytest.fixture
def foraging_run(run_dir, monkeypatch):
    """The tiny PPO run's checkpoint, its metadata read as a marl run's: trained on Foraging with
    ``env_kwargs=("observe_agent_levels=false",)`` (observations (2, 7), not the default (2, 9)).
    Planning reads only the config's ``env_id`` and ``env_kwargs``, so nothing compiles."""
    from lamella.agents import checkpoint as ckpt

    metadata = {
        "algorithm": "ppo",
        "seeds": [0, 1],
        "config": {
            "env_id": "Foraging-5x5-2p-1f-v3",
            "eval_episodes": 2,
            "env_kwargs": ["observe_agent_levels=false"],
        },
    }
    monkeypatch.setattr(ckpt, "read_metadata", lambda path: metadata)
    return lib._resolve_checkpoints(run_dir)


def test_the_space_check_makes_the_env_with_the_runs_env_kwargs(foraging_run):
    """The space check builds the training env and each test env with the run's ``env_kwargs``,
    as the runner does. Before, both were made without them: the training env itself
    (``observe_agent_levels=false``) was refused as not fitting the checkpoint, and an env whose
    spaces do not fit (``observe_agent_levels=true``) passed the check."""
    lbf = "Foraging-5x5-2p-1f-v3"
    for specs in (None, [lbf], [f"{lbf}:observe_agent_levels=false,max_episode_steps=10"]):
        (plan,) = lib._plan(foraging_run, specs and [le.parse_env_spec(s) for s in specs])
        assert [spec.env_id for spec, _ in plan.specs] == [lbf]
    with pytest.raises(le.EvalError) as info:
        lib._plan(foraging_run, [le.parse_env_spec(f"{lbf}:observe_agent_levels=true")])
    message = str(info.value)
    assert f"'{lbf}:observe_agent_levels=true' does not fit the checkpoint" in message
    assert "env_kwargs observe_agent_levels=false" in message
    assert "shape=(2, 7)" in message and "shape=(2, 9)" in message


def test_a_test_env_that_refuses_the_runs_env_kwargs_names_them(foraging_run):
    """The runner makes every test env with the run's ``env_kwargs``: an env without such a
    keyword is refused before anything compiles, naming where the keyword comes from."""
    with pytest.raises(le.EvalError, match=r"'CartPole-v1'.*observe_agent_levels.*env_kwargs"):
        lib._plan(foraging_run, [le.parse_env_spec("CartPole-v1")])


def test_a_test_env_refused_without_the_runs_config_keywords_names_them(run_dir, monkeypatch):
    """A UED run on a 5x5 AMaze with ``n_walls=3`` (config fields its runner passes to the env)
    evaluated on ``AMaze-13x13-v0:height=7,width=7``: the check makes that env with the id's
    ``n_walls=60``, which a 7x7 maze refuses. The refusal now names the config's values of the
    env's keywords and the test env that carries them; before, only "got 60"."""
    from lamella.agents import checkpoint as ckpt

    config = {"env_id": "AMaze-13x13-v0", "eval_episodes": 2, "height": 5, "width": 5, "n_walls": 3}
    monkeypatch.setattr(ckpt, "read_metadata", lambda path: {"algorithm": "ppo", "config": config})
    with pytest.raises(
        le.EvalError, match=r"got 60\..*config sets n_walls=3 .*'AMaze-13x13-v0:height=7,width=7,n_walls=3'"
    ):
        lib._plan(lib._resolve_checkpoints(run_dir), [le.parse_env_spec("AMaze-13x13-v0:height=7,width=7")])
