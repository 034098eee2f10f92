"""Every ``lamella`` command answers bad input the same way: exit status 2, one message, no traceback.

Each case runs the ``lamella`` command on input that is wrong in one way, and checks the exit
status, that exactly one line of its output carries the error (argparse-style commands print
their usage line before it), that the message names the problem (and, where the table says so,
the fix), and that no "Traceback" is printed. ``--debug`` turns the same errors into tracebacks.
Every input fails before anything compiles.

The cases run in one child interpreter per test worker that imports the CLI once
(``tests/lamella_server.py``: each command gets its own argv, working directory, output and exit
status, as from its own process), since a fresh process per case spent most of its 5 CPU-s
importing; ``test_a_fresh_process_answers_as_the_server_does`` runs cases as a user would, one
``python -m lamella.envs.cli`` process each, with stdout and stderr apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lamella_server import LamellaServer

ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def fresh_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lamella ARGS`` in its own process: stdout and stderr apart."""
    command = [sys.executable, "-m", "lamella.envs.cli", *args]
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def server():
    with LamellaServer(ENV) as running:
        yield running


@pytest.fixture
def lamella(server: LamellaServer):
    """``lamella ARGS`` in ``cwd``, run by this worker's server: stdout and stderr on one stream."""

    def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return server.run(args, cwd, timeout=300)

    return run


def _run_log(step: dict) -> dict:
    return {"classic_control": {"CartPole-v1": {"ppo": {"seed_0": {"step_0": step}}}}}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder of bad inputs, one per case, made without compiling anything."""
    root = tmp_path_factory.mktemp("cli_errors")
    good = _run_log({"step_count": 100, "mean_episode_return": [1.0, 2.0]})
    # A metrics.json cut short, as a crash while copying leaves it.
    (root / "truncated").mkdir()
    (root / "truncated" / "metrics.json").write_text(json.dumps(good)[:40])
    (root / "no_step_count").mkdir()
    (root / "no_step_count" / "metrics.json").write_text(json.dumps(_run_log({"mean_episode_return": [1.0]})))
    (root / "good").mkdir()
    (root / "good" / "metrics.json").write_text(json.dumps(good))
    # What `lamella demo` and `lamella animate` leave under runs/: no run log.
    (root / "runs" / "demo").mkdir(parents=True)
    (root / "runs" / "demo" / "CartPole-v1.gif").write_bytes(b"GIF89a")
    (root / "runs" / "gifs").mkdir()
    # A run directory that holds a previous run.
    (root / "used_run").mkdir()
    (root / "used_run" / "metrics.json").write_text(json.dumps(good))
    # A damaged checkpoint.
    (root / "damaged" / "checkpoints").mkdir(parents=True)
    (root / "damaged" / "checkpoints" / "checkpoint_000000001.msgpack").write_bytes(b"\x00not msgpack")
    # A well-formed CartPole PPO checkpoint (its metadata is all the space check reads).
    from lamella.agents.checkpoint import save_checkpoint
    from lamella.agents.config import config_to_dict, resolve_config

    metadata = {
        "algorithm": "ppo",
        "config": config_to_dict(resolve_config("ppo", "CartPole-v1")),
        "seeds": [0],
        "iteration": 1,
    }
    save_checkpoint(root / "cartpole" / "checkpoints", {"w": np.zeros(2, np.float32)}, metadata, step=1)
    (root / "a_file").write_text("not a directory")
    return root


# (command line, texts the error line must hold); "{work}" is the folder of bad inputs.
CASES = {
    "train: unknown algorithm": (["train", "nope"], ["Unknown algorithm 'nope'", "ppo"]),
    "train: unknown config key": (["train", "ppo", "learning_rat=0.1"], ["learning_rat", "learning_rate"]),
    "train: value of the wrong type": (["train", "ppo", "num_envs=many"], ["num_envs='many'", "int"]),
    "train: unknown env": (["train", "ppo", "--env", "CartPol-v1"], ["CartPol-v1", "Did you mean"]),
    "train: run directory in use": (
        ["train", "ppo", "--out-dir", "{work}/used_run", "total_timesteps=64"],
        ["already holds a run", "--resume"],
    ),
    "train shaping: a fixed strategy on CoinGame": (
        ["train", "shaping", "--env", "CoinGame-v0", "agents=ppo,tit_for_tat"],
        ["one-hot over 5 states", "Use a learning agent"],
    ),
    "train: a number out of its range": (
        ["train", "ippo", "--env", "MPE-simple_spread-v3", "gamma=1.5"],
        ["IPPOConfig.gamma must be in [0, 1] (a discount), got 1.5"],
    ),
    "sweep: a grid value out of its range": (
        ["sweep", "ppo", "--grid", "learning_rate=3e-4,-1", "--out", "{work}/sweep_range"],
        ["PPOConfig.learning_rate", "must be >= 0 and finite", "got -1"],
    ),
    "train: a single-agent algorithm on a multi-agent env": (
        ["train", "ppo", "--env", "MPE-simple_spread-v3"],
        ["ppo trains single-agent envs", "3 agents", "lamella train ippo --env MPE-simple_spread-v3"],
    ),
    "train: an off-policy learner on a multi-agent env": (
        ["train", "dqn", "--env", "Foraging-8x8-2p-2f-coop-v3"],
        ["dqn trains single-agent envs", "idqn"],
    ),
    "train isac: discrete actions": (
        ["train", "isac", "--env", "Foraging-8x8-2p-2f-coop-v3"],
        ["isac needs continuous actions", "no continuous_actions switch", "idqn"],
    ),
    "train dr: an env without levels": (
        ["train", "dr", "--env", "CartPole-v1"],
        ["no level family for CartPole", "AMaze-13x13-v0", "Foraging-8x8-2p-2f-coop-v3"],
    ),
    "train --resume: nothing there": (["train", "ppo", "--resume", "{work}/missing"], ["Nothing to resume"]),
    "train --resume: damaged checkpoint": (
        ["train", "ppo", "--resume", "{work}/damaged"],
        ["checkpoint_000000001.msgpack", "not a readable lamella checkpoint"],
    ),
    "eval aggregate: truncated metrics.json": (
        ["eval", "aggregate", "{work}/truncated"],
        ["truncated/metrics.json: not valid JSON", "cut short"],
    ),
    "eval aggregate: step_count missing": (
        ["eval", "aggregate", "{work}/no_step_count"],
        ["field 'step_count' is missing"],
    ),
    "eval aggregate: unknown metric": (
        ["eval", "aggregate", "{work}/good", "--metric", "retrun"],
        ["Unknown metric 'retrun'", "mean_episode_return", "--metric"],
    ),
    "eval aggregate: no run log in demo/animate folders": (
        ["eval", "aggregate", "{work}/runs/demo", "{work}/runs/gifs"],
        ["No run log", "runs/demo", "lamella train"],
    ),
    "eval aggregate: missing path": (["eval", "aggregate", "{work}/nowhere"], ["nowhere", "no such file"]),
    "eval aggregate: bad --reps": (
        ["eval", "aggregate", "{work}/good", "--reps", "1"],
        ["reps (bootstrap replicates) must be an int >= 2"],
    ),
    "eval checkpoints: spaces do not fit": (
        ["eval", "checkpoints", "{work}/cartpole", "--envs", "Acrobot-v1"],
        ["'Acrobot-v1' does not fit the checkpoint", "Discrete(3)", "same kind, shape"],
    ),
    "eval checkpoints: no checkpoint": (
        ["eval", "checkpoints", "{work}/good"],
        ["holds no checkpoints", "lamella train"],
    ),
    "eval checkpoints: bad env spec": (
        ["eval", "checkpoints", "{work}/cartpole", "--envs", "CartPole-v1:length"],
        ["is not key=value", "CartPole-v1:length=1.0"],
    ),
    "eval checkpoints: unknown suite": (
        ["eval", "checkpoints", "{work}/cartpole", "--suite", "minimax"],
        ["unknown suite or maze 'minimax'", "minimax-test", "PerfectMazeXL"],
    ),
    "eval checkpoints: suite of another kind of student": (
        ["eval", "checkpoints", "{work}/cartpole", "--suite", "minimax-test"],
        ["cannot evaluate", "'ppo' checkpoint trained on CartPole-v1", "--envs"],
    ),
    "eval checkpoints: damaged checkpoint": (
        ["eval", "checkpoints", "{work}/damaged"],
        ["not a readable lamella checkpoint"],
    ),
    "eval report: missing path": (["eval", "report", "{work}/nowhere"], ["nowhere", "no such file"]),
    "eval report: no run log": (
        ["eval", "report", "{work}/runs/demo", "{work}/runs/gifs", "-o", "{work}/r.html"],
        ["No run log (metrics.json or metrics.csv)", "lamella train"],
    ),
    "demo: unknown env": (
        ["demo", "--envs", "CartPol-v1"],
        ["Unknown environment id 'CartPol-v1'", "CartPole-v1"],
    ),
    "demo: no envs": (["demo", "--num-envs", "0"], ["--num-envs must be >= 1"]),
    "animate: unknown env": (
        ["animate", "Pendulm-v1"],
        ["Unknown environment id 'Pendulm-v1'", "Pendulum-v1"],
    ),
    "animate: out-dir is a file": (
        ["animate", "CartPole-v1", "--out-dir", "{work}/a_file"],
        ["is a file", "--out-dir"],
    ),
}


def _argv(args: list[str], work: Path) -> list[str]:
    return [a.replace("{work}", str(work)) for a in args]


def check_user_error(
    case: str, result: subprocess.CompletedProcess[str], error_stream: str, work: Path
) -> None:
    """``result`` of ``case`` is one error line in ``error_stream``, status 2, no traceback."""
    args, expected = CASES[case]
    output = (result.stdout or "") + (result.stderr or "")
    assert result.returncode == 2, f"{case}: exit status {result.returncode}\n{output}"
    assert "Traceback" not in output, f"{case}: printed a traceback\n{output}"
    errors = [line for line in error_stream.splitlines() if "error:" in line]
    assert len(errors) == 1, f"{case}: expected one error line\n{error_stream}"
    assert errors[0].startswith(f"lamella {args[0]}"), errors[0]
    for text in expected:
        assert text in errors[0], f"{case}: {text!r} not in the message {errors[0]!r}"
    # Nothing ran: no output directory appeared next to the inputs.
    assert not (work / "eval").exists() and not (work / "runs" / "gifs" / "Pendulm-v1.gif").exists()


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_is_one_line_with_status_2(case: str, work: Path, lamella) -> None:
    result = lamella(_argv(CASES[case][0], work), work)
    check_user_error(case, result, result.stdout, work)


@pytest.mark.parametrize("case", ["train: unknown algorithm", "eval aggregate: truncated metrics.json"])
def test_a_fresh_process_answers_as_the_server_does(case: str, work: Path) -> None:
    """As a user runs it: its own process, the one error line on stderr and nothing on stdout."""
    result = fresh_process(_argv(CASES[case][0], work), work)
    check_user_error(case, result, result.stderr, work)
    assert result.stdout == "", result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--debug", "eval", "aggregate", "{work}/truncated"],
        ["eval", "checkpoints", "{work}/cartpole", "--envs", "Acrobot-v1", "--debug"],
        ["--debug", "train", "nope"],
        ["--debug", "demo", "--envs", "CartPol-v1"],
    ],
    ids=["eval aggregate", "eval checkpoints", "train", "demo"],
)
def test_debug_shows_the_traceback(args: list[str], work: Path, lamella) -> None:
    result = lamella(_argv(args, work), work)
    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stdout, result.stdout


def test_aggregate_skips_folders_without_run_logs_and_names_them(work: Path, tmp_path: Path, lamella) -> None:
    """``lamella eval aggregate runs/*`` over run directories and demo/animate output works."""
    out = tmp_path / "out"
    result = lamella(
        [
            *_argv(["eval", "aggregate", "{work}/good", "{work}/runs/demo", "{work}/runs/gifs"], work),
            *["--out-dir", str(out), "--reps", "20", "--normalize", "none"],
        ],
        work,
    )
    assert result.returncode == 0, result.stdout
    assert f"skipped {work}/runs/demo, {work}/runs/gifs (no metrics.json or metrics.csv)" in result.stdout
    assert (out / "aggregates.csv").is_file()


def test_a_command_loads_the_plugins_that_extend_it(work: Path) -> None:
    """``lamella train`` loads ``train`` and ``train_*`` entry points (lamella-gcrl's ``--her``),
    in a fresh process (where no earlier command loaded them)."""
    result = fresh_process(["train", "td3", "--env", "PointRobotGoal-v0", "--her", "--print-config"], work)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["her"] is True
