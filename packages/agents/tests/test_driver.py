"""The training driver: chunks, evaluation, run log, checkpoints, resume, progress.

Uses the bandit runner of :mod:`lamella.agents.testing` (compiles in well under a second).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import checkpoint as ckpt
from lamella.agents import driver
from lamella.agents.config import ConfigError
from lamella.agents.driver import RunSpec, default_chunk_iterations, run_experiment
from lamella.agents.progress import Progress, format_duration
from lamella.agents.runner import Runner
from lamella.agents.testing import BanditConfig, make_bandit_runner

CONFIG = BanditConfig(total_timesteps=32 * 10)  # 10 iterations of 32 steps
CHUNK = 3  # chunks of 3, 3, 3 and 1 iterations
SEEDS = [0, 5]


def run(out_dir, config=CONFIG, **kwargs):
    kwargs.setdefault("seeds", SEEDS)
    kwargs.setdefault("chunk_iterations", CHUNK)
    kwargs.setdefault("progress", False)
    kwargs.setdefault("make_runner", make_bandit_runner)
    return run_experiment(config, algorithm="bandit", out_dir=out_dir, **kwargs)


def leaves(state):
    out = []
    for leaf in jax.tree_util.tree_leaves(state):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out.append(np.asarray(leaf))
    return out


def assert_bit_identical(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def read(path):
    with open(path, "rb") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """An uninterrupted run."""
    return run(str(tmp_path_factory.mktemp("full") / "run"), keep_checkpoints=2)


def test_uninterrupted_run_writes_everything(full):
    assert full.finished and full.iteration == full.num_iterations == 10
    assert full.step_count == 320
    assert sorted(os.listdir(full.out_dir)) == [
        "checkpoints",
        "config.json",
        "learning_curve.png",
        "metrics.csv",
        "metrics.json",
    ]
    runs = json.loads(read(full.metrics_path))["custom"]["Bandit-v0"]["bandit"]
    assert sorted(runs) == ["seed_0", "seed_5"]
    steps = [k for k in runs["seed_0"] if k.startswith("step_")]
    assert steps == [f"step_{i}" for i in range(5)]  # before training, then after each of 4 chunks
    assert [runs["seed_0"][s]["step_count"] for s in steps] == [0, 96, 192, 288, 320]
    assert len(runs["seed_0"]["step_1"]["mean_episode_return"]) == CONFIG.eval_episodes
    assert runs["seed_0"]["step_1"]["episode_length"] == [10] * CONFIG.eval_episodes
    assert set(runs["seed_0"]["step_1"]) >= {"train_episode_return", "train_loss"}
    assert "train_loss" not in runs["seed_0"]["step_0"]
    assert (
        runs["seed_0"]["absolute_metrics"]["mean_episode_return"]
        == runs["seed_0"]["step_4"]["mean_episode_return"]
    )
    # The seeds are independent runs, and the bandit improves.
    assert runs["seed_0"]["step_4"] != runs["seed_5"]["step_4"]
    first = np.mean(runs["seed_0"]["step_0"]["mean_episode_return"])
    assert full.final_return[0] > first
    info = json.loads(read(full.config_path))
    assert (
        info["config"]["param_shape"] == [3] and info["seeds"] == SEEDS and info["chunk_iterations"] == CHUNK
    )
    assert info["environment"] == "custom"
    names = [os.path.basename(p) for p in ckpt.list_checkpoints(os.path.join(full.out_dir, "checkpoints"))]
    assert names == ["checkpoint_000000009.msgpack", "checkpoint_000000010.msgpack"]  # keep_checkpoints=2
    assert full.checkpoint_path.endswith("checkpoint_000000010.msgpack")
    assert read(full.plot_path)[:4] == b"\x89PNG"


def test_final_state_equals_make_train(full):
    """The chunked, vmapped driver computes what one scan over all iterations computes."""
    from lamella.agents.runner import make_train

    runner = make_bandit_runner(CONFIG)
    keys = jax.vmap(jax.random.key)(np.asarray(SEEDS, np.uint32))
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(keys)
    np.testing.assert_allclose(leaves(state)[0], leaves(full.state)[0], rtol=1e-6)
    for mine, theirs in zip(leaves(state)[1:], leaves(full.state)[1:], strict=True):
        np.testing.assert_array_equal(mine, theirs)  # counter and keys exactly
    assert metrics["episode_return"].shape == (2, 10)


def test_checkpoint_holds_the_final_state(full):
    target = jax.eval_shape(jax.vmap(make_bandit_runner(CONFIG).init), jax.vmap(jax.random.key)(np.arange(2)))
    state, meta = ckpt.load_checkpoint(full.checkpoint_path, target)
    assert_bit_identical(state, full.state)
    assert meta["iteration"] == 10 and meta["seeds"] == SEEDS and meta["algorithm"] == "bandit"
    assert meta["num_evaluations"] == 5 and meta["config"]["learning_rate"] == CONFIG.learning_rate
    assert "jax" in meta["versions"]


def test_load_run(full):
    from lamella.agents.config import register_algorithm, unregister_algorithm

    register_algorithm("bandit", BanditConfig, make_bandit_runner, overwrite=True)
    try:
        loaded = driver.load_run(full.out_dir)
    finally:
        unregister_algorithm("bandit")
    assert loaded.algorithm == "bandit" and loaded.config == CONFIG
    assert loaded.metadata["iteration"] == 10
    assert_bit_identical(loaded.state, full.state)
    with pytest.raises(FileNotFoundError):
        driver.load_run(os.path.dirname(full.out_dir))


def test_resume_equals_uninterrupted(full, tmp_path):
    out_dir = str(tmp_path / "run")
    part = run(out_dir, max_chunks=2, keep_checkpoints=2)
    assert not part.finished and part.iteration == 6 and part.plot_path is None
    rest = run(out_dir, resume=True, keep_checkpoints=2)
    assert rest.finished and rest.iteration == 10
    assert_bit_identical(rest.state, full.state)
    assert read(rest.metrics_path) == read(full.metrics_path)
    assert read(rest.csv_path) == read(full.csv_path)
    assert read(rest.checkpoint_path) == read(full.checkpoint_path)
    assert os.path.exists(rest.plot_path)


def test_resume_after_a_crash_between_log_and_checkpoint(full, tmp_path, monkeypatch):
    """A run killed after logging chunk 3 but before checkpointing it resumes to the same result."""
    out_dir = str(tmp_path / "run")
    run(out_dir, max_chunks=2)
    real_save = ckpt.save_checkpoint

    def die(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "save_checkpoint", die)
    with pytest.raises(KeyboardInterrupt):
        run(out_dir, resume=True)
    monkeypatch.setattr(ckpt, "save_checkpoint", real_save)
    logged = json.loads(read(os.path.join(out_dir, "metrics.json")))["custom"]["Bandit-v0"]["bandit"][
        "seed_0"
    ]
    assert "step_3" in logged  # the log got ahead of the newest checkpoint (iteration 6)
    # Resuming from an explicit checkpoint file works like resuming a directory.
    latest = ckpt.latest_checkpoint(os.path.join(out_dir, "checkpoints"))
    assert latest.endswith("checkpoint_000000006.msgpack")
    rest = run(None, resume=latest)
    assert os.path.samefile(rest.out_dir, out_dir)
    assert_bit_identical(rest.state, full.state)
    assert read(rest.metrics_path) == read(full.metrics_path)


def test_resume_of_a_finished_run_changes_nothing(full, tmp_path):
    out_dir = str(tmp_path / "run")
    done = run(out_dir)
    again = run(out_dir, resume=True)
    assert again.finished and again.iteration == 10
    assert_bit_identical(again.state, done.state)
    assert read(again.metrics_path) == read(full.metrics_path)


def test_resume_refuses_a_different_config(full, tmp_path):
    out_dir = str(tmp_path / "run")
    run(out_dir, max_chunks=1)
    changed = dataclasses.replace(CONFIG, learning_rate=0.3, num_envs=2)
    with pytest.raises(ConfigError) as info:
        run(out_dir, config=changed, resume=True)
    message = str(info.value)
    assert "learning_rate, num_envs" in message and "checkpoint 0.2, now 0.3" in message
    with pytest.raises(ConfigError, match="seeds"):
        run(out_dir, resume=True, seeds=3)
    with pytest.raises(ConfigError, match="chunk_iterations"):
        run(out_dir, resume=True, chunk_iterations=2)
    with pytest.raises(ConfigError, match="compile_mode='optimized'"):
        run(out_dir, resume=True, compile_mode="optimized")
    with pytest.raises(ConfigError, match="from 'bandit'"):
        run_experiment(
            CONFIG, algorithm="other", make_runner=make_bandit_runner, out_dir=out_dir, resume=True
        )


def test_fresh_run_refuses_an_existing_run_and_resume_needs_one(full, tmp_path):
    with pytest.raises(FileExistsError, match="--resume"):
        run(full.out_dir)
    with pytest.raises(FileNotFoundError, match="Nothing to resume"):
        run(str(tmp_path / "empty"), resume=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seeds": 0}, "seeds"),
        ({"seeds": [1, 1]}, "distinct"),
        # A str was read as a list of one seed: "2" trained one seed, 2, silently.
        ({"seeds": "2"}, r"seeds must be a count \(an int such as 2\) or a list of seeds .* got str '2'"),
        ({"seeds": 2.0}, r"got float 2\.0"),
        ({"seeds": [0.5, 1]}, r"distinct non-negative integers, got \[0\.5, 1\]"),
        ({"chunk_iterations": 0}, "chunk_iterations"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"compile_mode": "quick"}, "compile_mode"),
    ],
)
def test_bad_arguments_fail_before_compiling(tmp_path, monkeypatch, kwargs, match):
    calls = []
    monkeypatch.setattr(driver, "_compiled", lambda *a: calls.append(a))
    with pytest.raises(ValueError, match=match):
        run(str(tmp_path / "run"), **kwargs)
    assert not calls and not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            "ppo",
            r"^config must be an algorithm's config, got the str 'ppo'\. Build it: lamella\.agents\.config\.resolve_config\('ppo', env_id\)",
        ),
        (
            {"learning_rate": 0.1},
            r"^config must be an algorithm's config, got a dict\. Build it from the dict",
        ),
    ],
)
def test_a_name_or_a_dict_for_the_config_names_the_fix(tmp_path, config, match):
    with pytest.raises(ConfigError, match=match):
        run_experiment(config, out_dir=str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


def test_runner_construction_errors_are_config_errors(tmp_path):
    def picky(config):
        raise KeyError(f"Unknown environment id {config.env_id!r}.")

    with pytest.raises(ConfigError, match="BanditConfig: Unknown environment id 'Bandit-v0'"):
        run_experiment(CONFIG, algorithm="picky", make_runner=picky, out_dir=str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


def test_too_small_budget_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="raise total_timesteps"):
        run(str(tmp_path / "run"), config=BanditConfig(total_timesteps=16))


def test_one_compiled_program_for_every_chunk_length(tmp_path):
    traces = []

    def counting_runner(config):
        runner = make_bandit_runner(config)

        def step(state):
            traces.append(1)
            return runner.step(state)

        return runner._replace(step=step)

    config = dataclasses.replace(CONFIG, label="trace-count")
    kwargs = {
        "algorithm": "bandit",
        "make_runner": counting_runner,
        "seeds": 2,
        "progress": False,
        "plot": False,
    }
    # One trace: finding the shapes of the step metrics and the compiled chunk loop share it.
    run_experiment(config, out_dir=str(tmp_path / "a"), chunk_iterations=4, **kwargs)  # chunks 4, 4, 2
    assert len(traces) == 1
    # The same config again, with other chunk lengths: nothing is traced or compiled again.
    run_experiment(config, out_dir=str(tmp_path / "b"), chunk_iterations=3, **kwargs)  # chunks 3, 3, 3, 1
    assert len(traces) == 1


def test_compiled_ahead_and_reused_after_a_resume(tmp_path):
    """The driver compiles init, chunk and evaluation ahead of their first call; the calls, and
    a resumed run's chunks, reuse those programs, even with a weakly typed leaf in the state
    (a Python scalar in ``init``, strong once restored from a checkpoint)."""
    traces = {"init": 0, "step": 0, "evaluate": 0}

    def weak_runner(config):
        runner = make_bandit_runner(config)

        def init(key):
            traces["init"] += 1
            return runner.init(key), 0.5 + 0.0 * runner.init(key).params["mean"].sum()

        def step(state):
            traces["step"] += 1
            inner, scale = state
            inner, metrics = runner.step(inner)
            return (inner, scale * 1.0), metrics

        def evaluate(state, key):
            traces["evaluate"] += 1
            return runner.evaluate(state[0], key)

        return runner._replace(init=init, step=step, evaluate=evaluate)

    out_dir = str(tmp_path / "run")
    config = dataclasses.replace(CONFIG, label="weak-state")
    kwargs = {"algorithm": "bandit", "make_runner": weak_runner, "seeds": 2, "progress": False, "plot": False}
    run_experiment(config, out_dir=out_dir, chunk_iterations=3, max_chunks=2, **kwargs)
    assert traces == {"init": 1, "step": 1, "evaluate": 1}
    run_experiment(config, out_dir=out_dir, resume=True, **kwargs)
    assert traces == {"init": 1, "step": 1, "evaluate": 1}


def test_checkpoint_every(tmp_path):
    result = run(str(tmp_path / "run"), checkpoint_every=2, keep_checkpoints=None, plot=False)
    names = [os.path.basename(p) for p in ckpt.list_checkpoints(os.path.join(result.out_dir, "checkpoints"))]
    assert names == ["checkpoint_000000006.msgpack", "checkpoint_000000010.msgpack"]


def test_max_chunks_checkpoints_where_it_stops(tmp_path, full):
    # checkpoint_every=2 would save after chunk 2 only: a stop after chunk 1 saves all the same,
    # so the resume continues from there (it used to start over, every time).
    out_dir = str(tmp_path / "run")
    part = run(out_dir, checkpoint_every=2, max_chunks=1, plot=False)
    assert part.iteration == CHUNK
    names = [os.path.basename(p) for p in ckpt.list_checkpoints(os.path.join(out_dir, "checkpoints"))]
    assert names == ["checkpoint_000000003.msgpack"]
    rest = run(out_dir, checkpoint_every=2, resume=True, plot=False)
    assert rest.finished
    assert_bit_identical(rest.state, full.state)
    assert read(rest.metrics_path) == read(full.metrics_path)


@pytest.mark.parametrize(("iterations", "chunk"), [(100, 5), (10, 1), (97, 5), (1000, 50), (7, 1)])
def test_default_chunk_iterations(iterations, chunk):
    assert default_chunk_iterations(iterations) == chunk


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_redraws_one_line():
    stream = FakeTerminal()
    bar = Progress(1000, "ppo CartPole-v1", stream=stream, seeds=2)
    bar.update(500, 123.4)
    bar.update(1000, 200.0)
    text = stream.getvalue()
    assert text.startswith("\rppo CartPole-v1 [##########----------]  50% 500/1,000 steps")
    assert "return 123.4" in text and "ETA ?" in text  # no speed without compilation in it yet
    assert text.count("\r") == 2 and text.endswith("\n") and "done" in text


def test_progress_in_a_log_prints_lines():
    stream = io.StringIO()
    bar = Progress(1000, stream=stream, min_interval=3600)
    bar.update(100, float("nan"))
    bar.update(200, 1.0)  # within min_interval: not printed
    bar.update(1000, 2.0)  # the last one always is
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    assert "return" not in lines[0] and "return 2" in lines[1]
    silent = io.StringIO()
    Progress(10, stream=silent, enabled=False).update(10, 1.0)
    assert silent.getvalue() == ""


def test_driver_progress_output(tmp_path):
    stream = io.StringIO()
    run(str(tmp_path / "run"), progress=True, progress_stream=stream, plot=False)
    last = stream.getvalue().splitlines()[-1]
    assert "bandit Bandit-v0 x2 seeds" in last and "320/320 steps" in last and "done" in last


@pytest.mark.parametrize(
    ("seconds", "text"), [(5, "0:05"), (75, "1:15"), (3725, "1:02:05"), (float("inf"), "?")]
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_compile_options_per_program_and_mode():
    # On the CPU each option is kept where the installed XLA has it (jax 0.11 and later have no
    # xla_cpu_use_fusion_emitters: the optimisation levels alone).
    on_cpu = jax.default_backend() == "cpu"
    fast_chunk = driver.compile_options("chunk", num_seeds=1)
    assert (fast_chunk is not None) == on_cpu
    assert driver.compile_options("chunk", num_seeds=4) is None  # several seeds: XLA's defaults
    assert driver.compile_options("chunk", num_seeds=4, mode="fast") == fast_chunk
    # The evaluation loop runs once per chunk: compiled fast but optimised, for any seed count.
    assert driver.compile_options("evaluate", num_seeds=4) == fast_chunk
    if on_cpu:  # init runs once: unoptimised; the others at optimisation level 1
        assert driver.compile_options("init", num_seeds=1)["xla_backend_optimization_level"] == 0
        assert fast_chunk["xla_backend_optimization_level"] == 1
    for program in ("init", "evaluate", "chunk"):
        assert driver.compile_options(program, num_seeds=1, mode="optimized") is None
        # Level 0 is for init alone: no training program compiles there in any mode (XLA's
        # CPU code at level 0 computed NaN gradients for SAC; benchmarks/xla_cpu_level0_sac.py).
        for seeds in (1, 4):
            for mode in driver.COMPILE_MODES:
                options = driver.compile_options(program, num_seeds=seeds, mode=mode) or {}
                level = options.get("xla_backend_optimization_level")
                assert (level == 0) == (program == "init" and mode != "optimized" and on_cpu)
    with pytest.raises(ValueError, match="program"):
        driver.compile_options("update")
    with pytest.raises(ValueError, match="compile mode"):
        driver.compile_options("chunk", mode="quick")


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="only the CPU back end gets options")
def test_compile_options_drop_only_what_this_xla_lacks(monkeypatch):
    """An option the installed XLA rejects (as jax 0.11 rejects xla_cpu_use_fusion_emitters) is
    left out and the others are kept, instead of falling back to XLA's defaults for all."""
    monkeypatch.setattr(
        driver, "_COMPILE_FAST_CPU", {"xla_backend_optimization_level": 1, "xla_cpu_no_such_option": True}
    )
    assert driver.compile_options("chunk", num_seeds=1) == {"xla_backend_optimization_level": 1}
    monkeypatch.setattr(driver, "_COMPILE_FAST_CPU", {"xla_cpu_no_such_option": True})
    assert driver.compile_options("chunk", num_seeds=1) is None  # nothing left: XLA's defaults


def test_one_seed_is_not_vmapped_so_a_cond_stays_a_branch():
    """``over_seeds`` for one seed calls the function on the only entry: a ``lax.cond`` on a
    state value then runs one branch (under ``vmap`` it would become a select of both)."""

    def step(x):
        return jax.lax.cond(x > 0, lambda v: v + 1.0, lambda v: jax.debug.callback(_fail) or v, x)

    def _fail():
        raise AssertionError("the branch not taken ran")

    one = jax.jit(driver.over_seeds(step, 1))
    np.testing.assert_allclose(one(np.ones((1,), np.float32)), [2.0])
    several = jax.jit(driver.over_seeds(lambda x: x * 2.0, 3))
    np.testing.assert_allclose(several(np.arange(3.0, dtype=np.float32)), [0.0, 2.0, 4.0])


def test_over_seeds_for_one_seed_refuses_a_longer_seed_axis():
    with pytest.raises(ValueError, match="num_seeds"):
        jax.jit(driver.over_seeds(lambda x: x, 1))(np.zeros((3,), np.float32))


# ------------------------------------------------------------------------------------------
# Runs killed with SIGKILL at a file event (issue 21), then resumed.

# The child trains the bandit and stops dead at the n-th rename onto a given file name
# (before or after it), where the parent kills it: a real SIGKILL, no clean-up code runs.
_CHILD = r"""
import os, sys, time
from lamella.agents.driver import run_experiment
from lamella.agents.testing import BanditConfig, make_bandit_runner

out_dir, name, count, when, marker, label, every = sys.argv[1:8]
real_replace, seen = os.replace, []

def replace(src, dst):
    hit = os.path.basename(dst) == name and (seen.append(1) or len(seen) == int(count))
    if hit and when == "before":
        open(marker, "w").close(); time.sleep(600)
    real_replace(src, dst)
    if hit and when == "after":
        open(marker, "w").close(); time.sleep(600)

os.replace = replace
run_experiment(
    BanditConfig(total_timesteps=32 * 10, label=label), algorithm="bandit", make_runner=make_bandit_runner,
    out_dir=out_dir, seeds=[0, 5], chunk_iterations=3, checkpoint_every=int(every), progress=False,
)
"""


def kill_at(tmp_path, out_dir, name, *, when, count=1, label="bandit", checkpoint_every=1):
    """Run the bandit in a subprocess and SIGKILL it at the ``count``-th rename onto ``name``."""
    import signal
    import subprocess
    import sys
    import time

    marker = str(tmp_path / f"stopped-{name}-{count}-{when}")
    argv = [
        sys.executable,
        "-c",
        _CHILD,
        out_dir,
        name,
        str(count),
        when,
        marker,
        label,
        str(checkpoint_every),
    ]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    try:
        while not os.path.exists(marker):
            if child.poll() is not None:
                raise AssertionError(f"the child ended before the file event: {child.stderr.read().decode()}")
            if time.monotonic() > deadline:
                raise AssertionError("the child never reached the file event")
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert child.returncode == -signal.SIGKILL


def checkpoint_names(out_dir):
    return [os.path.basename(p) for p in ckpt.list_checkpoints(os.path.join(out_dir, "checkpoints"))]


def temp_files(out_dir):
    found = []
    for directory, _, files in os.walk(out_dir):
        found += [os.path.join(directory, f) for f in files if f.endswith(".tmp")]
    return sorted(found)


_compiles: list[str] = []
_counting_compiles = [False]


def _on_event(name, *args, **kwargs):
    if _counting_compiles[0] and name == "/jax/core/compile/backend_compile_duration":
        _compiles.append(name)


jax.monitoring.register_event_duration_secs_listener(_on_event)


def test_kill_after_the_final_checkpoint_then_resume_prunes_and_compiles_nothing(full, tmp_path, capsys):
    """Killed between the final checkpoint's rename and its pruning: 4 checkpoints are left
    (keep 3). Resuming prunes them to 3, says the run is finished, and compiles nothing."""
    out_dir = str(tmp_path / "run")
    kill_at(tmp_path, out_dir, "checkpoint_000000010.msgpack", when="after", label="killed-at-end")
    assert checkpoint_names(out_dir) == [f"checkpoint_00000000{i}.msgpack" for i in (3, 6, 9)] + [
        "checkpoint_000000010.msgpack"
    ]
    assert not os.path.exists(os.path.join(out_dir, "learning_curve.png"))
    traces = []

    def counting(config):
        runner = make_bandit_runner(config)

        def step(state):
            traces.append("step")
            return runner.step(state)

        def evaluate(state, key):
            traces.append("evaluate")
            return runner.evaluate(state, key)

        return runner._replace(step=step, evaluate=evaluate)

    config = dataclasses.replace(CONFIG, label="killed-at-end")
    # Loading a checkpoint runs a few eager conversions (typed keys), each compiled once per
    # process and shape; load one first so that what is counted below is the run's programs.
    keys = jax.vmap(jax.random.key)(np.asarray(SEEDS, np.uint32))
    target = jax.eval_shape(jax.vmap(make_bandit_runner(config).init), keys)
    ckpt.load_checkpoint(ckpt.latest_checkpoint(os.path.join(out_dir, "checkpoints")), target)
    # The driver's device check compiles a one-op probe once per process and set of CPU options
    # (driver._cpu_option_supported), whether or not the run then compiles anything.
    for program in ("init", "chunk", "evaluate"):
        driver.compile_options(program, len(SEEDS), "auto")
    _compiles.clear()  # another test's counted compiles (pytest-randomly may run it first)
    _counting_compiles[0] = True
    try:
        again = run_experiment(
            config,
            algorithm="bandit",
            make_runner=counting,
            out_dir=out_dir,
            resume=True,
            seeds=SEEDS,
            progress=False,
        )
    finally:
        _counting_compiles[0] = False
    assert not _compiles and not traces  # nothing compiled, the step and evaluation never traced
    assert again.already_finished and again.finished and again.iteration == 10
    assert checkpoint_names(out_dir) == [f"checkpoint_00000000{i}.msgpack" for i in (6, 9)] + [
        "checkpoint_000000010.msgpack"
    ]
    assert again.checkpoint_path.endswith("checkpoint_000000010.msgpack")
    # The kill came before absolute_metrics and the plot; resuming wrote them, as a full run does.
    assert read(again.metrics_path) == read(full.metrics_path)
    assert read(again.plot_path)[:4] == b"\x89PNG"
    np.testing.assert_array_equal(again.final_return, full.final_return)
    assert_bit_identical(again.state, full.state)

    # The command line says so and exits 0.
    from lamella.agents import train
    from lamella.agents.config import register_algorithm, unregister_algorithm

    register_algorithm("bandit", BanditConfig, make_bandit_runner, overwrite=True)
    try:
        assert train.main(["bandit", "--resume", out_dir, "--no-progress"]) == 0
    finally:
        unregister_algorithm("bandit")
    out = capsys.readouterr().out
    assert "already finished" in out and "320 steps per seed" in out and "nothing was trained" in out
    assert "finished in" not in out


def test_kill_before_the_first_checkpoint_then_resume_starts_over(full, tmp_path, capsys):
    """Killed while writing the first checkpoint (its temporary file written, not renamed): a
    fresh run into the directory is refused with the way forward, and resuming starts the run
    over from its config.json, removes the temporary file and ends as an uninterrupted run."""
    out_dir = str(tmp_path / "run")
    kill_at(tmp_path, out_dir, "checkpoint_000000003.msgpack", when="before")
    assert checkpoint_names(out_dir) == []
    (leftover,) = temp_files(out_dir)
    assert os.path.basename(leftover).startswith(".checkpoint_000000003.msgpack.")
    with pytest.raises(FileExistsError, match=f"stopped before its first checkpoint.*--resume {out_dir}"):
        run(out_dir)
    with pytest.raises(ConfigError, match="differs in learning_rate"):
        run(out_dir, config=dataclasses.replace(CONFIG, learning_rate=0.3), resume=True)
    assert temp_files(out_dir) == [leftover]  # a refused resume changes nothing
    # The command line resumes it too: with no checkpoint, the settings come from config.json,
    # here as an older version wrote it, without a field added since (at its default: no difference).
    config_path = os.path.join(out_dir, "config.json")
    with open(config_path, encoding="utf-8") as handle:
        stored = json.load(handle)
    assert stored["config"].pop("noise_scale") == CONFIG.noise_scale
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(stored, handle)
    from lamella.agents import train
    from lamella.agents.config import register_algorithm, unregister_algorithm

    register_algorithm("bandit", BanditConfig, make_bandit_runner, overwrite=True)
    try:
        argv = ["bandit", "--resume", out_dir, "--no-progress", "--no-plot", "--keep-checkpoints", "2"]
        assert train.main(argv) == 0
    finally:
        unregister_algorithm("bandit")
    assert "finished in" in capsys.readouterr().out
    assert temp_files(out_dir) == []
    assert read(os.path.join(out_dir, "metrics.json")) == read(full.metrics_path)
    assert read(os.path.join(out_dir, "metrics.csv")) == read(full.csv_path)
    assert checkpoint_names(out_dir) == ["checkpoint_000000009.msgpack", "checkpoint_000000010.msgpack"]
    assert read(ckpt.latest_checkpoint(os.path.join(out_dir, "checkpoints"))) == read(full.checkpoint_path)


def test_kill_while_writing_the_run_log_then_resume_removes_the_temporary_file(full, tmp_path):
    out_dir = str(tmp_path / "run")
    # metrics.json is written before training and after each chunk: the 4th write is chunk 3's,
    # after the checkpoints of iterations 3 and 6.
    kill_at(tmp_path, out_dir, "metrics.json", count=4, when="before")
    assert checkpoint_names(out_dir) == ["checkpoint_000000003.msgpack", "checkpoint_000000006.msgpack"]
    (leftover,) = temp_files(out_dir)
    assert os.path.basename(leftover).startswith(".metrics.json.")
    rest = run(out_dir, resume=True, keep_checkpoints=2)
    assert temp_files(out_dir) == []
    assert_bit_identical(rest.state, full.state)
    assert read(rest.metrics_path) == read(full.metrics_path)


# ------------------------------------------------------------------------------------------
# Any runner (run + RunSpec), metrics with named axes, sweeps over config variants (issue 13).


def make_two_agent_runner(config):
    """The bandit with a per-agent step metric and a per-level evaluation metric, declared."""
    runner = make_bandit_runner(config)

    def step(state):
        state, metrics = runner.step(state)
        mean = state.params["mean"]
        return state, {**metrics, "reward": mean[:2] * 1.0}  # (agent,): two agents

    def evaluate(state, key):
        metrics = runner.evaluate(state, key)
        levels = metrics["episode_return"][:, None] + jnp.arange(3.0)  # (episodes, level)
        return {**metrics, "solved": levels}

    return runner._replace(
        step=step, evaluate=evaluate, metric_axes={"reward": ("agent",), "solved": ("level",)}
    )


def test_metrics_with_named_axes_get_one_key_per_index(tmp_path):
    result = run(str(tmp_path / "run"), make_runner=make_two_agent_runner, plot=False)
    runs = json.loads(read(result.metrics_path))["custom"]["Bandit-v0"]["bandit"]
    last = runs["seed_5"]["step_4"]
    # Existing keys are unchanged; the declared ones add a key per agent / level.
    assert {"mean_episode_return", "episode_length", "train_episode_return", "train_loss"} <= set(last)
    assert {"train_reward_agent_0", "train_reward_agent_1", "solved_level_0", "solved_level_2"} <= set(last)
    assert not any(
        k.startswith(("train_reward_agent_2", "solved_level_3")) or k in ("reward", "solved") for k in last
    )
    assert len(last["train_reward_agent_1"]) == 1 and len(last["solved_level_2"]) == CONFIG.eval_episodes
    np.testing.assert_allclose(
        np.array(last["solved_level_2"]), np.array(last["mean_episode_return"]) + 2.0, rtol=1e-6
    )
    state_mean = np.asarray(result.state.params["mean"])  # (members, 3)
    # The step metric is a chunk mean; the last chunk is one iteration, so it is the final parameter.
    np.testing.assert_allclose(last["train_reward_agent_1"], [state_mean[1, 1]], rtol=1e-6)
    assert "solved_level_1" in runs["seed_0"]["absolute_metrics"]
    assert not any(k.startswith("train_") for k in runs["seed_0"]["absolute_metrics"])
    with open(result.csv_path) as handle:
        assert ",seed_0,4,320,train_reward_agent_0,0," in handle.read()


def test_undeclared_or_wrong_metric_axes_are_refused_before_the_run(tmp_path):
    def undeclared(config):
        return make_two_agent_runner(config)._replace(metric_axes={"solved": ("level",)})

    with pytest.raises(
        ConfigError, match=r"metric 'reward' of shape \(2,\).*metric_axes=\{'reward': \('agent',\)\}"
    ):
        run(str(tmp_path / "a"), make_runner=undeclared)
    assert not os.path.exists(tmp_path / "a")

    def typo(config):
        return make_two_agent_runner(config)._replace(metric_axes={"reward": ("agent",), "solve": ("level",)})

    with pytest.raises(ConfigError, match=r"names \['solve'\], which neither step nor evaluate returns"):
        run(str(tmp_path / "b"), make_runner=typo)

    def too_many(config):
        return make_two_agent_runner(config)._replace(metric_axes={"reward": ("agent", "level")})

    with pytest.raises(ConfigError, match="need 2 dimension"):
        run(str(tmp_path / "c"), make_runner=too_many)
    with pytest.raises(ConfigError, match="tuple of distinct axis names"):
        run(
            str(tmp_path / "d"),
            make_runner=lambda c: make_bandit_runner(c)._replace(metric_axes={"loss": "agent"}),
        )


def make_counting_runner():
    """Iteration ``i`` (seed ``n`` starts at ``n``) measures ``value`` 3.0 twice from ``i = 3`` on:
    a count-weighted step metric (``Runner.metric_weights``), not measured before."""

    def step(i):
        i = i + 1
        count = jnp.where(i >= 3, 2.0, 0.0)
        return i, {"value": jnp.where(count > 0, 3.0, 0.0), "count": count}

    return Runner(
        init=lambda key: jax.random.key_data(key)[-1].astype(jnp.int32),
        step=step,
        evaluate=lambda i, key: {"score": jnp.zeros((1,)) + i},
        steps_per_iteration=1,
        num_iterations=6,
        metric_weights={"value": "count"},
    )


def test_a_weighted_step_metric_is_the_mean_over_its_counts_and_absent_where_none(tmp_path, recwarn):
    """Before, the chunk averaged ``value`` over its iterations: 1.5 for a chunk whose first
    iteration measured nothing, and 0.0 logged for a chunk that measured nothing at all."""
    spec = RunSpec("counting", task="Counting", score="score")
    result = driver.run(
        make_counting_runner(),
        spec,
        seeds=2,
        out_dir=str(tmp_path / "run"),
        chunk_iterations=2,
        progress=False,
        plot=False,
    )
    runs = json.loads(read(result.metrics_path))["custom"]["Counting"]["counting"]
    # Chunks of 2 iterations: seed_0 counts from its 3rd iteration on, seed_1 from its 2nd.
    assert [runs["seed_0"][f"step_{i}"].get("train_value") for i in (1, 2, 3)] == [None, [3.0], [3.0]]
    assert [runs["seed_1"][f"step_{i}"].get("train_value") for i in (1, 2, 3)] == [[3.0], [3.0], [3.0]]
    assert [runs["seed_0"][f"step_{i}"]["train_count"] for i in (1, 2, 3)] == [[0.0], [2.0], [2.0]]
    assert [runs["seed_1"][f"step_{i}"]["train_count"] for i in (1, 2, 3)] == [[1.0], [2.0], [2.0]]
    assert not [w for w in recwarn if "non-finite" in str(w.message)]  # not measured is no NaN


@pytest.mark.parametrize(
    "weights, match",
    [
        ({"value": "counts"}, r"metric_weights\['value'\] names 'counts', which runner.step does not return"),
        (
            {"value": "count", "count": "value"},
            r"metric_weights\['value'\] weights by 'count', itself a weighted",
        ),
    ],
)
def test_metric_weights_that_do_not_name_step_metrics_are_refused_before_the_run(tmp_path, weights, match):
    runner = make_counting_runner()._replace(metric_weights=weights)
    with pytest.raises(ConfigError, match=match):
        driver.run(runner, RunSpec("counting", score="score"), out_dir=str(tmp_path / "run"), dry_run=True)


def test_a_score_the_run_log_cannot_hold_is_refused_before_the_run(tmp_path):
    # A score with named axes is logged as one key per index, so "solved" itself never appears:
    # final_return was NaN and learning_curve.png empty. A misspelt score was the same.
    runner = make_two_agent_runner(CONFIG)
    for score, message in [
        (
            "solved",
            r"score='solved'.*axes \('level',\).*'solved_level_0', 'solved_level_1', 'solved_level_2'",
        ),
        ("sovled", r"score='sovled' is not an evaluation metric.*'mean_episode_return'.*'solved_level_0'"),
    ]:
        with pytest.raises(ConfigError, match=message):
            spec = RunSpec("bandit", task="Bandit-v0", score=score)
            driver.run(runner, spec, out_dir=str(tmp_path / score), dry_run=True, progress=False)
        assert not os.path.exists(tmp_path / score)
    # One entry of the metric is a score.
    spec = RunSpec("bandit", task="Bandit-v0", score="solved_level_2")
    assert driver.run(runner, spec, out_dir=str(tmp_path / "ok"), dry_run=True, progress=False).dry_run


class ToyState(NamedTuple):
    weight: jax.Array
    key: jax.Array


def make_toy_runner(steps_per_iteration=5, num_iterations=7, traces=None):
    """A runner written by user code: no config class, no env id, no episode_return."""
    traces = [] if traces is None else traces

    def init(key):
        return ToyState(jnp.zeros((), jnp.float32), key)

    def step(state):
        traces.append(1)
        key, noise = jax.random.split(state.key)
        weight = state.weight + 0.5 * (2.0 - state.weight) + 0.01 * jax.random.normal(noise)
        return ToyState(weight, key), {"error": jnp.abs(2.0 - weight)}

    def evaluate(state, key):
        return {"score": -jnp.abs(2.0 - state.weight) + jnp.zeros((2,))}

    return Runner(init, step, evaluate, steps_per_iteration, num_iterations)


TOY_SPEC = RunSpec("toy", task="Target2", config={"target": 2.0}, score="score")


def test_run_takes_any_runner_and_a_small_spec(tmp_path):
    traces = []
    runner = make_toy_runner(traces=traces)._replace(metric_axes={})
    stream = io.StringIO()
    whole = driver.run(
        runner, TOY_SPEC, seeds=2, out_dir=str(tmp_path / "whole"), chunk_iterations=2, progress_stream=stream
    )
    assert (
        whole.finished and whole.step_count == 35 and whole.members == [("toy", "seed_0"), ("toy", "seed_1")]
    )
    data = json.loads(read(whole.metrics_path))
    runs = data["custom"]["Target2"]["toy"]
    assert [runs["seed_1"][f"step_{i}"]["step_count"] for i in range(5)] == [0, 10, 20, 30, 35]
    assert set(runs["seed_1"]["step_4"]) == {"step_count", "score", "train_error"}
    np.testing.assert_allclose(
        whole.final_return, [np.mean(runs[s]["step_4"]["score"]) for s in ("seed_0", "seed_1")]
    )
    assert whole.final_return.max() > -0.1  # the toy learns
    assert "toy Target2 x2 seeds" in stream.getvalue() and "return -" in stream.getvalue()
    assert read(whole.plot_path)[:4] == b"\x89PNG"
    assert json.loads(read(whole.config_path))["config"] == {"target": 2.0}
    # Stopped and resumed, it ends as the uninterrupted run; another spec config is refused.
    part = str(tmp_path / "part")
    driver.run(runner, TOY_SPEC, seeds=2, out_dir=part, chunk_iterations=2, max_chunks=2, progress=False)
    with pytest.raises(ConfigError, match="differs in target"):
        driver.run(
            runner, RunSpec("toy", task="Target2", config={"target": 3.0}), seeds=2, out_dir=part, resume=True
        )
    # A key the config gained after the run was stored (a field added by a later version) is
    # no difference where it holds the default the spec declares, and refused otherwise.
    grown = dataclasses.replace(
        TOY_SPEC, config={"target": 2.0, "noise": 0.0}, config_defaults={"noise": 0.0}
    )
    for refused in (
        dataclasses.replace(grown, config={"target": 2.0, "noise": 0.5}),
        dataclasses.replace(grown, config_defaults=None),
    ):
        with pytest.raises(
            ConfigError, match=r"differs in noise \(noise: checkpoint (0\.0|None), now (0\.5|0\.0)\)"
        ):
            driver.run(runner, refused, seeds=2, out_dir=part, resume=True, progress=False)
    rest = driver.run(runner, grown, seeds=2, out_dir=part, resume=True, progress=False)
    assert_bit_identical(rest.state, whole.state)
    assert read(rest.metrics_path) == read(whole.metrics_path)
    assert len(traces) == 1  # three runs of one runner (its metric_axes a dict): one compile
    with pytest.raises(TypeError, match="takes a Runner"):
        driver.run(make_toy_runner, TOY_SPEC, out_dir=str(tmp_path / "x"))
    with pytest.raises(ValueError, match=r"RunSpec\.algorithm"):
        RunSpec("")


SWEEP = [{"learning_rate": 0.1}, {"learning_rate": 0.3}]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    traces = []

    def counting(config):
        runner = make_bandit_runner(config)

        def step(state):
            traces.append(1)
            return runner.step(state)

        return runner._replace(step=step)

    config = dataclasses.replace(CONFIG, label="sweep")
    result = run(
        str(tmp_path_factory.mktemp("sweep") / "run"), config=config, variants=SWEEP, make_runner=counting
    )
    return result, traces


def test_a_sweep_is_one_program_with_a_run_per_variant_and_seed(sweep, tmp_path):
    result, traces = sweep
    assert len(traces) == 1  # one trace of the step: every variant and seed in one program
    names = ["bandit[learning_rate=0.1]", "bandit[learning_rate=0.3]"]
    assert result.members == [(n, s) for n in names for s in ("seed_0", "seed_5")]
    algorithms = json.loads(read(result.metrics_path))["custom"]["Bandit-v0"]
    assert list(algorithms) == names
    assert all(sorted(algorithms[n]) == ["seed_0", "seed_5"] for n in names)
    assert np.asarray(result.state.params["mean"]).shape == (4, 3)
    # Each member is the run of its variant alone (same seed, same keys).
    alone = run(
        str(tmp_path / "alone"),
        config=dataclasses.replace(CONFIG, label="sweep", learning_rate=0.3),
        plot=False,
    )
    np.testing.assert_allclose(
        np.asarray(result.state.params["mean"])[2:],
        np.asarray(alone.state.params["mean"]),
        rtol=1e-5,
        atol=1e-6,
    )
    info = json.loads(read(result.config_path))
    assert info["variants"] == SWEEP and info["config"]["learning_rate"] == CONFIG.learning_rate
    assert ckpt.read_metadata(result.checkpoint_path)["variants"] == SWEEP
    # The higher learning rate gets closer to the target (the bandit's return is -distance^2).
    assert result.final_return[2:].mean() > result.final_return[:2].mean()


def test_a_sweep_resumes_exactly_and_refuses_other_variants(sweep, tmp_path):
    result, _ = sweep
    config = dataclasses.replace(CONFIG, label="sweep")
    out_dir = str(tmp_path / "run")
    run(out_dir, config=config, variants=SWEEP, max_chunks=2)
    with pytest.raises(ConfigError, match="variants"):
        run(out_dir, config=config, variants=SWEEP[:1], resume=True)
    with pytest.raises(ConfigError, match="variants"):
        run(out_dir, config=config, resume=True)
    rest = run(out_dir, config=config, variants=SWEEP, resume=True)
    assert_bit_identical(rest.state, result.state)
    assert read(rest.metrics_path) == read(result.metrics_path)
    assert read(rest.csv_path) == read(result.csv_path)
    from lamella.agents.config import register_algorithm, unregister_algorithm

    register_algorithm("bandit", BanditConfig, make_bandit_runner, overwrite=True)
    try:
        loaded = driver.load_run(out_dir)
    finally:
        unregister_algorithm("bandit")
    assert_bit_identical(loaded.state, result.state)


@pytest.mark.parametrize(
    ("variants", "error", "match"),
    [
        ([{"learnin_rate": 0.1}], ConfigError, r"\['learnin_rate'\], which BanditConfig does not have"),
        ([{"learning_rate": "fast"}], ValueError, "numbers only"),
        ([{"learning_rate": 0.1}, {"noise_scale": 0.1}], ValueError, "same fields"),
        ([{"learning_rate": 0.1}, {"learning_rate": 0.1}], ValueError, "distinct"),
        ({"learning_rate": 0.1}, ValueError, "non-empty list"),
        ([{"num_envs": 2}, {"num_envs": 4}], ConfigError, "same iterations"),
        ([{"eval_episodes": 2}, {"eval_episodes": 3}], ConfigError, "eval_episodes.*as a Python value"),
    ],
)
def test_bad_variants_are_refused_before_the_run(tmp_path, variants, error, match):
    with pytest.raises(error, match=match):
        run(str(tmp_path / "run"), variants=variants)
    assert not os.path.exists(tmp_path / "run")


def test_dry_run_traces_but_compiles_and_writes_nothing(tmp_path):
    """run_experiment(dry_run=True) checks and traces the three programs, compiles none of them
    (the same run afterwards compiles them all, so the counter sees compiles) and writes nothing."""
    config = BanditConfig(total_timesteps=32 * 7)  # programs of their own: nothing cached before
    out_dir = str(tmp_path / "run")
    for program in ("init", "chunk", "evaluate"):
        # The device check: a dry run too compiles a one-op probe, once per process, to see
        # whether this XLA takes the CPU options (driver._cpu_option_supported).
        driver.compile_options(program, len(SEEDS), "auto")
    _compiles.clear()
    _counting_compiles[0] = True
    try:
        dry = run(out_dir, config, dry_run=True)
        dry_compiles = list(_compiles)
        _compiles.clear()
        real = run(out_dir, config, plot=False)
    finally:
        _counting_compiles[0] = False
    assert dry_compiles == []
    assert len(_compiles) >= 3  # init, chunk(s) and evaluation compile in the real run
    assert dry.dry_run and not real.dry_run
    assert (dry.iteration, dry.num_iterations, dry.checkpoint_path) == (0, 7, None)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), dry.state) == jax.tree.map(
        lambda x: (x.shape, x.dtype), real.state
    )
    assert real.finished


def test_dry_run_writes_nothing_and_refuses_what_the_run_refuses(tmp_path):
    out_dir = tmp_path / "run"
    run(str(out_dir), dry_run=True)
    assert not out_dir.exists() and not os.listdir(tmp_path)
    with pytest.raises(ConfigError, match="raise total_timesteps"):
        run(str(out_dir), BanditConfig(total_timesteps=8), dry_run=True)
    with pytest.raises(ValueError, match="chunk_iterations must be >= 1"):
        run(str(out_dir), chunk_iterations=0, dry_run=True)
    with pytest.raises(FileNotFoundError, match="Nothing to resume"):
        run(str(out_dir), resume=True, dry_run=True)
    assert not os.listdir(tmp_path)


def test_a_gif_the_env_cannot_draw_is_refused_before_training(tmp_path):
    """``gif=True`` where the runner's env has no renderer (``Environment.render``'s
    NotImplementedError) is a ConfigError before anything trains, not a traceback after the run."""
    traces = []

    def render_episode(state, key):
        raise NotImplementedError("ToyEnv has no renderer")

    runner = make_toy_runner(traces=traces)._replace(metric_axes={}, render_episode=render_episode)
    with pytest.raises(
        ConfigError, match=r"toy's runner cannot draw its episodes \(ToyEnv has no renderer\)"
    ):
        driver.run(runner, TOY_SPEC, seeds=2, out_dir=str(tmp_path / "run"), gif=True, progress=False)
    assert traces == []  # the step was never traced: nothing trained
    without = make_toy_runner()._replace(metric_axes={})
    with pytest.raises(ConfigError, match="its Runner has no render_episode"):
        driver.run(without, TOY_SPEC, seeds=2, out_dir=str(tmp_path / "run2"), gif=True, progress=False)


# ------------------------------------------------------------------------------------------
# A run directory changed between the stop and the resume: refused before anything compiles.


def _no_compile(monkeypatch):
    calls = []
    monkeypatch.setattr(driver, "_compiled", lambda *a: calls.append(a))
    return calls


def test_a_checkpoint_outside_its_run_directory_is_refused_before_compiling(full, tmp_path, monkeypatch):
    """A checkpoint copied out of ``<run>/checkpoints/`` named the folder above its own as the
    run directory: it compiled, then failed on that folder's missing metrics.json (or continued
    the run log of whatever run that folder held)."""
    kept = tmp_path / "kept"
    kept.mkdir()
    loose = kept / "best.msgpack"
    loose.write_bytes(read(full.checkpoint_path))
    calls = _no_compile(monkeypatch)
    with pytest.raises(
        ConfigError,
        match=r"best\.msgpack is not in a run directory's checkpoints/ folder.*"
        r"put it back in <run>/checkpoints/",
    ):
        run(None, resume=str(loose))
    assert not calls and sorted(os.listdir(tmp_path)) == ["kept"] and os.listdir(kept) == ["best.msgpack"]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("missing", "is missing"),
        ("truncated", "cannot be read"),
        ("short", "holds 2 evaluations, the checkpoint expects 3"),
        ("other run", r"cannot be read \(.*has no entries for run 'seed_0'"),
    ],
)
def test_a_run_log_that_cannot_continue_is_refused_before_compiling(tmp_path, monkeypatch, damage, problem):
    """Resuming with metrics.json deleted, cut short or replaced was a FileNotFoundError, a
    JSONDecodeError or a ValueError traceback after compiling."""
    out_dir = str(tmp_path / "run")
    run(out_dir, max_chunks=2)  # 3 evaluations: step_0 and two chunks
    path = os.path.join(out_dir, "metrics.json")
    data = json.loads(read(path))
    if damage == "missing":
        os.unlink(path)
    elif damage == "truncated":
        with open(path, "wb") as handle:
            handle.write(read(path)[:100])
    else:
        runs = data["custom"]["Bandit-v0"]["bandit"]
        if damage == "short":
            for name in runs:
                runs[name].pop("step_2")
        else:
            runs["seed_7"] = runs.pop("seed_0")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
    before = read(path) if os.path.exists(path) else None
    calls = _no_compile(monkeypatch)
    for dry_run in (True, False):
        with pytest.raises(
            ConfigError,
            match=rf"Cannot resume .*checkpoint_000000006\.msgpack: its run log .*metrics\.json {problem}.*start a new run",
        ):
            run(out_dir, resume=True, dry_run=dry_run)
    assert not calls
    assert (read(path) if os.path.exists(path) else None) == before


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_an_out_dir_that_is_a_file_is_refused_before_compiling(tmp_path, monkeypatch, where):
    """It compiled, then failed in os.makedirs with `[Errno 17] File exists`."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine")
    out_dir = blocker if where == "file" else blocker / "run"
    calls = _no_compile(monkeypatch)
    for dry_run in (True, False):
        with pytest.raises(
            FileExistsError, match=r"notes\.txt is a file, not a folder.*pick another out_dir"
        ):
            run(str(out_dir), dry_run=dry_run)
    assert not calls and blocker.read_text() == "mine"


def test_run_log_task_is_the_env_id_or_what_the_config_names():
    @dataclasses.dataclass(frozen=True)
    class SizedBandit(BanditConfig):
        arms: int = 2

        def run_log_task(self):
            return f"{self.env_id}:arms={self.arms}"

    assert driver.run_log_task(CONFIG) == "Bandit-v0"
    assert driver.run_log_task(SizedBandit(arms=3)) == "Bandit-v0:arms=3"
    assert driver.run_log_task(object()) == "custom"


def test_run_directory_is_the_run_being_trained_while_its_iterations_run(tmp_path):
    """A runner's host callbacks (lamella-ued's screenshots) find the run's directory in
    driver.run_directory() while the driver trains it, and None outside a run."""
    seen = []

    def make_runner(config):
        runner = make_bandit_runner(config)

        def step(state):
            jax.debug.callback(lambda: seen.append(driver.run_directory()))
            return runner.step(state)

        return runner._replace(step=step)

    assert driver.run_directory() is None
    run(str(tmp_path / "run"), config=BanditConfig(total_timesteps=32 * 2), make_runner=make_runner)
    assert driver.run_directory() is None
    assert seen and set(seen) == {os.path.abspath(tmp_path / "run")}
