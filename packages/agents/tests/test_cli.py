"""``lamella train`` end to end: parsing, errors before compiling, a tiny run, resume, PPO."""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import entry_points

import jax
import pytest

from lamella.agents import cli, driver, train
from lamella.agents.config import register_algorithm, unregister_algorithm
from lamella.agents.testing import BanditConfig, make_bandit_runner

make_runner_calls: list[object] = []


def counted_make_runner(config):
    make_runner_calls.append(config)
    return make_bandit_runner(config)


@pytest.fixture(autouse=True)
def bandit():
    presets = {
        "Bandit-v0": BanditConfig(),
        "Bandit-long": BanditConfig(total_timesteps=3200, learning_rate=0.05),
    }
    register_algorithm("bandit", BanditConfig, counted_make_runner, presets, overwrite=True)
    make_runner_calls.clear()
    yield
    unregister_algorithm("bandit")


def lamella(argv):
    """What ``lamella`` does with its entry points, for this package's command only."""
    parser = argparse.ArgumentParser(prog="lamella")
    subparsers = parser.add_subparsers(dest="command", required=True)
    cli.register(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)


def test_entry_point_is_declared():
    (entry,) = [e for e in entry_points(group="lamella.commands") if e.name == "train"]
    assert entry.value == "lamella.agents.cli:register"
    assert entry.load() is cli.register


def test_help_loads_no_training_stack():
    """``lamella --help`` (every plug-in registered) imports neither JAX nor flax: it answers at once."""
    import subprocess

    code = (
        "import sys\n"
        "from lamella.envs import cli\n"
        "cli.build_parser().format_help()\n"
        "import lamella.agents\n"
        "print(sorted(m for m in ('jax', 'flax', 'optax', 'evosax', 'flashbax') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_print_config_with_overrides_anywhere(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv = [
        "train",
        "bandit",
        "num_envs=2",
        "--env",
        "Bandit-long",
        "--seeds",
        "3",
        "learning_rate=0.5",
        "label=a=b",
    ]
    argv.append("--print-config")
    assert lamella(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["seeds"] == [0, 1, 2]
    config = printed["config"]
    assert (config["env_id"], config["total_timesteps"]) == (
        "Bandit-long",
        3200,
    )  # the preset named like --env
    assert (config["num_envs"], config["learning_rate"], config["label"]) == (2, 0.5, "a=b")
    assert len(make_runner_calls) == 1  # the runner is built to check the config; nothing traced


def test_preset_flag_and_eval_episodes(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert (
        lamella(["train", "bandit", "--preset", "Bandit-long", "--eval-episodes", "7", "--print-config"]) == 0
    )
    config = json.loads(capsys.readouterr().out)["config"]
    assert (config["learning_rate"], config["eval_episodes"], config["env_id"]) == (0.05, 7, "Bandit-v0")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["train", "bandit", "--env", "Bandit-v0", "lr=3e-4"],
            ["Unknown config key", "'lr'", "learning_rate: float"],
        ),
        (["train", "bandit", "total_timesteps=lots"], ["total_timesteps='lots'", "expected int"]),
        (["train", "bandit", "param_shape=2,x"], ["param_shape='2,x'", "tuple[int, ...]"]),
        (["train", "bandit", "greedy_eval=maybe"], ["greedy_eval='maybe'", "bool"]),
        (["train", "nope"], ["Unknown algorithm 'nope'", "bandit"]),
        (["train", "bandit", "--preset", "Nope-v0"], ["Unknown preset 'Nope-v0'", "Bandit-long"]),
        (["train", "bandit", "--eval-episodes", "3", "eval_episodes=4"], ["given twice"]),
        (["train", "bandit", "--seeds", "0"], ["--seeds must be >= 1"]),
        # Was "unrecognized arguments: 0.1" (the value, not the option, and no fix).
        (["train", "bandit", "--learning-rate", "0.1"], ["--learning-rate 0.1", "learning_rate=0.1"]),
        # These were a ValueError traceback naming the Python argument (checkpoint_every, ...).
        (["train", "bandit", "--checkpoint-every", "0"], ["--checkpoint-every must be >= 1, got 0"]),
        (["train", "bandit", "--keep-checkpoints", "0"], ["--keep-checkpoints must be >= 1, got 0"]),
        (["train", "bandit", "--chunk-iterations", "0"], ["--chunk-iterations must be >= 1, got 0"]),
        (["train", "bandit", "--max-chunks", "-1"], ["--max-chunks must be >= 0, got -1"]),
        # Was "num_devices must be a positive int, got 0." (the Python argument, not the flag).
        (["train", "bandit", "--devices", "0"], ["--devices must be >= 1, got 0"]),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_mistakes_are_reported_before_anything_compiles(
    argv, expected, dry_run, capsys, monkeypatch, tmp_path
):
    """The same message and exit status 2 with --dry-run as without."""
    if dry_run:
        argv = [*argv, "--dry-run"]
    jitted = []
    monkeypatch.setattr(jax, "jit", lambda *a, **k: jitted.append(a))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        lamella(argv)
    assert info.value.code == 2
    message = capsys.readouterr().err
    for text in expected:
        assert text in message
    assert "usage: lamella train" in message
    assert not jitted and not make_runner_calls
    assert not os.listdir(tmp_path)  # no run directory was made


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("gamma=1.5", "error: PPOConfig.gamma must be in [0, 1] (a discount), got 1.5."),
        (
            "num_envs=0",
            "error: Cannot build the runner for PPOConfig: PPOConfig.num_envs must be >= 1, got 0.",
        ),
    ],
)
@pytest.mark.parametrize("flag", ["--print-config", "--dry-run"])
def test_print_config_refuses_what_a_run_refuses(override, message, flag, capsys, monkeypatch, tmp_path):
    """--print-config printed a config the run refuses; now it fails as --dry-run does (exit
    status 2, the same line), having built the runner (the env, the sizes), before any tracing."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        lamella(["train", "ppo", override, flag])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err and not captured.out
    assert not os.listdir(tmp_path)


def test_train_resume_and_refusal(tmp_path, capsys):
    out_dir = str(tmp_path / "run")
    common = ["--no-progress", "--chunk-iterations", "4", "learning_rate=0.5"]
    assert (
        lamella(["train", "bandit", "--seeds", "2", "--out-dir", out_dir, "--max-chunks", "2", *common]) == 0
    )
    out = capsys.readouterr().out
    assert "stopped at iteration 8/20" in out and f"--resume {out_dir}" in out
    # A dry run of the resume checks the checkpoint against the runner and changes nothing.
    before = {name: read_tree(out_dir, name) for name in tree(out_dir)}
    assert lamella(["train", "bandit", "--resume", out_dir, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run: bandit on Bandit-v0, 2 seed(s), 640 steps each (20 iterations) resuming ")
    assert "at iteration 8:" in out and "nothing compiled, trained or written" in out
    assert {name: read_tree(out_dir, name) for name in tree(out_dir)} == before
    # Same config on resume: fine without repeating it (it comes from the checkpoint).
    assert lamella(["train", "bandit", "--resume", out_dir, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "finished in" in out and "640 steps per seed" in out and "2 seed(s)" in out
    for name in ["metrics.json", "metrics.csv", "config.json", "learning_curve.png"]:
        assert os.path.join(out_dir, name) in out
    assert "checkpoint_000000020.msgpack" in out
    runs = json.load(open(os.path.join(out_dir, "metrics.json")))["custom"]["Bandit-v0"]["bandit"]
    assert sorted(runs) == ["seed_0", "seed_1"] and len(runs["seed_0"]) == 1 + 5 + 1  # step_0..5 + absolute
    # A different value on resume is refused, naming the key.
    with pytest.raises(SystemExit):
        lamella(["train", "bandit", "--resume", out_dir, "learning_rate=0.1"])
    assert "differs in learning_rate" in capsys.readouterr().err
    # A fresh run into the same directory is refused, dry or not.
    for dry in ([], ["--dry-run"]):
        with pytest.raises(SystemExit) as info:
            lamella(["train", "bandit", "--out-dir", out_dir, *common, *dry])
        assert info.value.code == 2 and "already holds a run" in capsys.readouterr().err


def test_resume_overrides_apply_to_the_stored_config(tmp_path, capsys):
    """Overrides given with --resume are read against the run's config, not the preset's:
    repeating a stored value resumes, and a changed one is refused naming that key alone. Before,
    the preset was the base, so every field the run had overridden was named as a difference
    (here num_envs, which the command did not mention) and no override could resume."""
    out_dir = str(tmp_path / "run")
    argv = ["--out-dir", out_dir, "--max-chunks", "1", "--chunk-iterations", "4", "--no-progress"]
    assert lamella(["train", "bandit", *argv, "learning_rate=0.5", "num_envs=2"]) == 0
    capsys.readouterr()
    assert lamella(["train", "bandit", "--resume", out_dir, "learning_rate=0.5", "--dry-run"]) == 0
    assert "resuming" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        lamella(["train", "bandit", "--resume", out_dir, "learning_rate=0.1", "--dry-run"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "the config differs in learning_rate (learning_rate: checkpoint 0.5, now 0.1)" in err


def tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


def read_tree(root, name):
    with open(os.path.join(root, name), "rb") as handle:
        return handle.read()


def test_default_out_dir_and_module_entry(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert train.main(["bandit", "--no-progress", "--no-plot", "total_timesteps=64"]) == 0
    (run_dir,) = os.listdir(tmp_path / "runs")
    assert run_dir.startswith("bandit-Bandit-v0-")
    out = capsys.readouterr().out
    assert os.path.join("runs", run_dir, "metrics.json") in out and "plot" not in out


def test_interrupt_prints_how_to_resume(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "run_experiment", interrupted)
    assert lamella(["train", "bandit", "--out-dir", str(tmp_path / "r")]) == 130
    assert f"--resume {tmp_path / 'r'}" in capsys.readouterr().err


def test_tiny_ppo_run_and_resume(tmp_path, capsys):
    """PPO on CartPole-v1 through the command line, a few iterations; stopped and resumed, it
    ends bit-identical to the uninterrupted run (the three runs share one compiled program)."""
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    common = [
        "--env", "CartPole-v1", "--seeds", "2", "--no-progress", "--eval-episodes", "2", "--chunk-iterations", "1",
        "total_timesteps=512", "num_envs=4", "num_steps=32", "num_epochs=1", "num_minibatches=2",
        "hidden_sizes=8,8", "eval_max_steps=50",
    ]  # fmt: skip
    assert lamella(["train", "ppo", "--out-dir", full, *common]) == 0
    assert "finished" in capsys.readouterr().out
    runs = json.load(open(os.path.join(full, "metrics.json")))["classic_control"]["CartPole-v1"]["ppo"]
    assert sorted(runs) == ["seed_0", "seed_1"]
    assert [runs["seed_0"][f"step_{i}"]["step_count"] for i in range(5)] == [0, 128, 256, 384, 512]
    last = runs["seed_0"]["absolute_metrics"]["mean_episode_return"]
    # Two greedy CartPole episodes per seed: whole numbers of steps (reward 1 per step), each
    # episode ended by the pole or by the eval_max_steps=50 cap.
    assert len(last) == 2 and all(float(value).is_integer() and 1 <= value <= 50 for value in last), last
    assert os.path.exists(os.path.join(full, "learning_curve.png"))

    assert lamella(["train", "ppo", "--out-dir", part, "--max-chunks", "2", *common]) == 0
    # Without the algorithm: the run directory names it (before: "give an ALGORITHM").
    assert lamella(["train", "--resume", part, "--no-progress"]) == 0
    for name in ["metrics.json", "metrics.csv", "checkpoints/checkpoint_000000004.msgpack"]:
        with open(os.path.join(full, name), "rb") as a, open(os.path.join(part, name), "rb") as b:
            assert a.read() == b.read(), name


def test_resume_without_an_algorithm_needs_a_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        lamella(["train", "--resume", str(tmp_path)])
    assert info.value.code == 2
    assert "holds no run (no config.json, no checkpoints/checkpoint_*.msgpack)" in capsys.readouterr().err


def test_unknown_env_is_a_clean_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        lamella(["train", "ppo", "--env", "CartPol-v1", "--out-dir", str(tmp_path / "r")])
    assert info.value.code == 2
    assert "Unknown environment id 'CartPol-v1'. Did you mean 'CartPole-v1'" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "r")


def test_tensorboard_without_its_extra_is_one_line_before_anything_compiles(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import tensorboardX raises ImportError
    jitted = []
    monkeypatch.setattr(jax, "jit", lambda *a, **k: jitted.append(a))
    monkeypatch.chdir(tmp_path)
    from lamella.envs.cli import main  # the `lamella` command, which answers user errors

    assert main(["train", "bandit", "--tensorboard", "--no-progress"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert "needs tensorboardX: pip install 'lamella-agents[tensorboard]'" in errors[0]
    assert not jitted and not make_runner_calls and not os.listdir(tmp_path)


def test_the_summary_says_whether_the_evaluation_was_greedy():
    """Before: "greedy return" for every run, where IPPO, MAPPO, IDQN and the UED runners
    evaluate sampled actions by default (``eval_greedy=False``, as Mava and minimax do)."""
    from types import SimpleNamespace

    from lamella.agents.ppo import PPOConfig

    assert cli.evaluation_return(PPOConfig()) == "greedy return"  # no eval_greedy field: greedy
    assert cli.evaluation_return(SimpleNamespace(eval_greedy=True)) == "greedy return"
    assert cli.evaluation_return(SimpleNamespace(eval_greedy=False)) == "return (sampled actions)"
