"""``lamella sweep``: grid parsing, the split into programs, one run-log folder, errors before
compiling, and the programs as tasks on a real local Ray head."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from lamella.agents import sweep
from lamella.agents.config import ConfigError, register_algorithm, unregister_algorithm
from lamella.agents.driver import run_experiment
from lamella.agents.testing import BanditConfig, make_bandit_runner
from lamella.envs.cli import main

built: list[object] = []


def counted(config):
    built.append(config)
    return make_bandit_runner(config)


@pytest.fixture(scope="module", autouse=True)
def bandit():
    register_algorithm("bandit", BanditConfig, counted, {"Bandit-v0": BanditConfig()}, overwrite=True)
    yield
    unregister_algorithm("bandit")


def test_parse_grid():
    assert sweep.parse_grid(["lr=1e-4,3e-4", "hidden_sizes=(64,64),(32,32)", "clip=0.1"]) == {
        "lr": ["1e-4", "3e-4"],
        "hidden_sizes": ["(64,64)", "(32,32)"],
        "clip": ["0.1"],
    }
    for bad, needle in [(["lr"], "key=value1,value2"), (["lr=1,"], "empty value"), (["a=1", "a=2"], "twice")]:
        with pytest.raises(ConfigError, match=needle):
            sweep.parse_grid(bad)


def test_plan_splits_traced_from_static_fields():
    grid = {
        "learning_rate": ["0.1", "0.5"],
        "num_envs": ["2", "4"],
        "eval_episodes": ["4", "8"],
        "target": ["2.0"],
    }
    plan = sweep.plan_sweep("bandit", BanditConfig(), grid, seeds=2)
    assert plan.traced == ["learning_rate"]
    assert "iterations" in plan.static["num_envs"] and "Python value" in plan.static["eval_episodes"]
    assert plan.config.target == 2.0  # a single value is an override
    assert [p.fixed for p in plan.programs] == [
        {"num_envs": n, "eval_episodes": e} for n in (2, 4) for e in (4, 8)
    ]
    assert plan.programs[0].variants == [{"learning_rate": 0.1}, {"learning_rate": 0.5}]
    assert plan.programs[0].labels == [
        "bandit[learning_rate=0.1,num_envs=2,eval_episodes=4]",
        "bandit[learning_rate=0.5,num_envs=2,eval_episodes=4]",
    ]
    # Strings and booleans always split programs.
    plan = sweep.plan_sweep("bandit", BanditConfig(), {"greedy_eval": ["true", "false"]})
    assert plan.traced == [] and len(plan.programs) == 2 and plan.programs[0].variants is None


def test_local_sweep_one_folder_equal_runs_and_resume(tmp_path, capsys):
    """One test (one set of compiles, whichever xdist worker runs it): the folder, a config
    against its own run, and resume."""
    out = tmp_path / "s"
    argv = ["sweep", "bandit", "--grid", "learning_rate=0.1,0.5", "num_envs=2,4", "--seeds", "2"]
    argv += ["noise_scale=0.02", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    record = json.loads((out / "sweep.json").read_text())
    assert record["traced"] == ["learning_rate"] and list(record["static"]) == ["num_envs"]
    names = [p["name"] for p in record["programs"]]
    assert names == ["p0-num_envs=2", "p1-num_envs=4"]
    labels = set()
    for name in names:
        config = json.loads((out / name / "config.json").read_text())
        # Both learning rates trained side by side in this one program.
        assert config["variants"] == [{"learning_rate": 0.1}, {"learning_rate": 0.5}]
        assert config["config"]["noise_scale"] == 0.02
        log = json.loads((out / name / "metrics.json").read_text())
        runs = log["custom"]["Bandit-v0"]
        assert all(sorted(r) == ["seed_0", "seed_1"] for r in runs.values())
        labels |= set(runs)
    assert labels == {f"bandit[learning_rate={lr},num_envs={n}]" for lr in (0.1, 0.5) for n in (2, 4)}
    scores = record["programs_run"][1]["scores"]
    assert sorted(scores) == ["bandit[learning_rate=0.1,num_envs=4]", "bandit[learning_rate=0.5,num_envs=4]"]

    # A config of the sweep trains as it would alone (the same seeds' keys).
    alone = run_experiment(
        BanditConfig(learning_rate=0.5, num_envs=4, noise_scale=0.02),
        algorithm="bandit",
        seeds=2,
        out_dir=tmp_path / "alone",
        progress=False,
        plot=False,
    )
    np.testing.assert_allclose(scores["bandit[learning_rate=0.5,num_envs=4]"], alone.final_return, rtol=1e-4)

    # Resume: p0 finished (kept as it is, nothing trains), p1 lost (trained again, identically).
    kept = (out / names[0] / "metrics.json").read_bytes()
    shutil.rmtree(out / names[1])
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    assert (out / names[0] / "metrics.json").read_bytes() == kept
    printed = capsys.readouterr().out
    assert f"{names[0]}: finished earlier, kept" in printed and f"{names[1]}: 2 config(s) in" in printed
    again = json.loads((out / "sweep.json").read_text())["programs_run"]
    assert again[1]["scores"] == scores and again[0]["scores"] == record["programs_run"][0]["scores"]
    # A resume with another grid is refused (naming both), and a fresh run into the folder too.
    assert main([*argv[:3], "learning_rate=0.1,0.3", *argv[4:], "--resume"]) == 2
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert "its grid (learning_rate=0.1,0.5 num_envs=2,4 there, learning_rate=0.1,0.3" in err[0]
    assert "continue it with --resume" in err[1]


def test_off_policy_discounts_and_target_rates_share_one_program(tmp_path):
    """SAC's, TD3's and DQN's ``gamma`` and ``tau`` (n-step DQN's gamma too) are traced by a sweep:
    one program for every value, each config the run of its config alone (DQN's ``tau`` of 1, hard
    target copies, and below 1, Polyak averaging, in one program: each member its own rule)."""
    from lamella.agents.config import resolve_config

    two = ["0.9", "0.99"]
    for algorithm, env_id, grid, traced in (
        ("sac", "Pendulum-v1", {"gamma": two, "tau": ["0.005", "0.01"]}, ["gamma", "tau"]),
        ("td3", "Pendulum-v1", {"gamma": two, "tau": ["0.005", "0.01"]}, ["gamma", "tau"]),
        ("dqn", "CartPole-v1", {"gamma": two, "tau": ["0.5", "1.0"]}, ["gamma", "tau"]),
    ):
        plan = sweep.plan_sweep(algorithm, resolve_config(algorithm, env_id), grid, seeds=1)
        assert plan.traced == traced, (algorithm, plan.static)
    tiny = dict(
        num_envs=2,
        rollout_steps=16,
        total_timesteps=96,
        learning_starts=32,
        batch_size=8,
        buffer_size=96,
        hidden_sizes=(8,),
        eval_episodes=1,
        eval_max_steps=20,
    )
    config = resolve_config("sac", "Pendulum-v1", overrides=tiny)
    variants = [{"gamma": 0.9, "tau": 0.005}, {"gamma": 0.99, "tau": 0.05}]
    kwargs = dict(algorithm="sac", seeds=1, progress=False, plot=False)
    swept = run_experiment(config, variants=variants, out_dir=tmp_path / "sweep", **kwargs)
    alone = run_experiment(
        sweep.dataclasses.replace(config, **variants[1]), out_dir=tmp_path / "alone", **kwargs
    )
    import jax

    learned = lambda state: jax.tree.leaves(state.train_state)  # noqa: E731
    for a, b in zip(learned(alone.state), learned(swept.state), strict=True):
        np.testing.assert_allclose(np.asarray(b)[1:], np.asarray(a), rtol=1e-5, atol=1e-6)
    first, second = (np.concatenate([np.ravel(x[i]) for x in learned(swept.state)]) for i in (0, 1))
    assert np.abs(first - second).max() > 1e-4, "the two configs trained alike"
    # DQN's tau: hard target copies (1) and Polyak averaging (0.5) in one program.
    config = resolve_config(
        "dqn", "CartPole-v1", overrides={**tiny, "target_update_period": 2, "eval_max_steps": 20}
    )
    kwargs = dict(algorithm="dqn", seeds=1, progress=False, plot=False)
    swept = run_experiment(config, variants=[{"tau": 0.5}, {"tau": 1.0}], out_dir=tmp_path / "dqn", **kwargs)
    alone = run_experiment(sweep.dataclasses.replace(config, tau=1.0), out_dir=tmp_path / "dqn1", **kwargs)
    for a, b in zip(learned(alone.state), learned(swept.state), strict=True):
        np.testing.assert_allclose(np.asarray(b)[1:], np.asarray(a), rtol=1e-5, atol=1e-6)
    targets = jax.tree.leaves(swept.state.train_state.target_params)
    assert max(np.abs(np.asarray(t)[0] - np.asarray(t)[1]).max() for t in targets) > 1e-4


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--grid", "learnin_rate=0.1,0.2"], "did you mean 'learning_rate'"),
        (["--grid", "learning_rate=0.1"], "nothing to sweep"),
        (["--grid", "num_envs=2,x"], "num_envs='x': expected int"),
        (["--grid", "num_envs=2,400"], "bandit[num_envs=400] has 0 training iterations"),
        (["--grid", "learning_rate=0.1,0.2", "--devices", "2"], "num_devices=2, but only 1 cpu device(s)"),
        (["--grid", "learning_rate=0.1,0.2", "--devices", "0"], "--devices must be >= 1, got 0"),
    ],
)
def test_bad_grid_is_one_line_before_compiling(extra, needle, capsys, tmp_path, monkeypatch):
    built.clear()
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("ran"))
    assert main(["sweep", "bandit", *extra, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lamella sweep: error:") and needle in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_grid_items_of_repeated_grid_flags_add_up(capsys, tmp_path):
    """``--grid a=.. --grid b=..`` sweeps both fields; before, the second flag replaced the first."""
    argv = ["sweep", "bandit", "--grid", "learning_rate=0.1,0.5", "--grid", "num_envs=2,4", "--dry-run"]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["grid"] == {"learning_rate": [0.1, 0.5], "num_envs": [2, 4]}


def test_plan_takes_a_list_or_array_of_values_per_field():
    """A string (``"24"``: num_envs 2 and 4) or a single number is not a list of values; an array is."""
    for values, given in (("24", "'24'"), (0.1, "0.1")):
        with pytest.raises(ConfigError, match=rf"Grid field 'num_envs' takes a list of values.*got {given}"):
            sweep.plan_sweep("bandit", BanditConfig(), {"num_envs": values})
    plan = sweep.plan_sweep(
        "bandit", BanditConfig(), {"learning_rate": np.array([0.1, 0.5]), "num_envs": np.array([2, 4])}
    )
    assert plan.grid == {"learning_rate": [0.1, 0.5], "num_envs": [2, 4]}
    assert type(plan.grid["num_envs"][0]) is int


def test_resume_names_what_differs(tmp_path):
    """A folder of another sweep: each difference with its value there and here, before anything trains."""
    plan = sweep.plan_sweep("bandit", BanditConfig(), {"learning_rate": ["0.1", "0.5"]}, seeds=2)
    stored = sweep._plan_record(plan)
    stored.update(seeds=[0, 1, 2], config={**stored["config"], "num_envs": 8})
    (tmp_path / sweep.SWEEP_FILE).write_text(json.dumps(stored))
    with pytest.raises(ConfigError, match="in its config \\(num_envs=8 there, 4 here\\), seeds") as error:
        sweep.run_sweep(plan, tmp_path, resume=True, progress=False)
    assert "seeds ([0, 1, 2] there, [0, 1] here); resume with the command" in str(error.value)
    (tmp_path / sweep.SWEEP_FILE).write_text(json.dumps({**stored, "algorithm": "ppo"}))
    with pytest.raises(ConfigError, match="in its algorithm \\('ppo' there, 'bandit' here\\); resume"):
        sweep.run_sweep(plan, tmp_path, resume=True, progress=False)
    assert not (tmp_path / "p0").exists()


class _FakeRay:
    """A Ray stand-in whose one task fails on its worker as Ray reports it: ``ray.get`` raises an
    error whose ``cause`` is the worker's exception (its text a multi-line remote traceback)."""

    def __init__(self, cause: Exception) -> None:
        self.cause = cause

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def remote(self, **resources):
        return lambda fn: type("Task", (), {"remote": staticmethod(lambda payload: payload["name"])})

    def wait(self, pending, num_returns=1):
        return pending[:1], pending[1:]

    def get(self, ref):
        error = RuntimeError(f"ray::_remote_program() (pid=1)\n  File ...\n{self.cause}")
        error.cause = self.cause
        raise error


def test_a_config_error_on_a_ray_worker_is_one_line(tmp_path):
    """A ConfigError raised on a worker (its devices, ...) names the program; other errors keep Ray's report."""
    plan = sweep.plan_sweep("bandit", BanditConfig(), {"num_envs": ["2", "4"]})
    cause = ConfigError("num_devices=2, but only 1 cpu device(s) are present. Ask for at most 1.")
    with pytest.raises(
        ConfigError, match=r"^Program p0-num_envs=2 failed on the Ray cluster: num_devices=2, but only 1 cpu"
    ) as error:
        sweep.run_sweep(plan, tmp_path / "a", ray_module=_FakeRay(cause), progress=False)
    assert "\n" not in str(error.value)
    with pytest.raises(RuntimeError, match="ray::_remote_program"):
        sweep.run_sweep(plan, tmp_path / "b", ray_module=_FakeRay(ValueError("a bug")), progress=False)


def test_an_override_no_config_of_the_grid_reads_is_refused(capsys, tmp_path, monkeypatch):
    """tau=0.5 in every config: DQN's target_update_period is never read. With a grid over tau
    (hard copies at 1.0) it is read, and the sweep plans."""
    monkeypatch.setattr(sweep, "plan_sweep", lambda *a, **k: pytest.fail("planned"))
    argv = ["sweep", "dqn", "tau=0.5", "target_update_period=100", "--grid", "gamma=0.9,0.99"]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "target_update_period=100 is the period of the hard target copies" in err
    assert "(in every config of the grid)" in err and err.count("\n") == 1
    monkeypatch.setattr(sweep, "plan_sweep", lambda *a, **k: (_ for _ in ()).throw(ConfigError("planned")))
    argv = ["sweep", "dqn", "target_update_period=100", "--grid", "tau=0.5,1.0", "--out", str(tmp_path / "y")]
    assert main(argv) == 2
    assert "lamella sweep: error: planned" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_missing_or_unreachable_fails_before_compiling(capsys, tmp_path, monkeypatch):
    argv = ["sweep", "bandit", "--grid", "learning_rate=0.1,0.2", "--out", str(tmp_path / "x")]
    built.clear()
    port = free_port()  # nothing listens there
    assert main([*argv, "--ray", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"Cannot reach a Ray cluster at 127.0.0.1:{port}" in err and err.count("\n") == 1
    # A listener that is not Ray (an HTTP/1 server on the port): refused in seconds, where Ray
    # itself retried for minutes.
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # the server's own log lines would go to this stderr
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        assert main([*argv, "--ray", f"127.0.0.1:{server.server_port}"]) == 2
        assert time.monotonic() - started < 30
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert f"127.0.0.1:{server.server_port} answers, but not as a Ray cluster (no gRPC" in err, err
    assert err.count("\n") == 1
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert main([*argv, "--ray", "127.0.0.1:6379"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'lamella-agents[ray]'" in err and err.count("\n") == 1
    assert not built and not (tmp_path / "x").exists()


def _session_processes(session: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if (
                int(fields[3]) == session and fields[0] != "Z"
            ):  # session id (after state, ppid, pgrp); zombies are gone
                found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def ray_head():
    """A real Ray head on 127.0.0.1 (2 CPUs), in its own session; every process of that
    session is gone after the module."""
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="lr", dir="/tmp")  # Ray's socket paths must stay short
    env = dict(os.environ, JAX_PLATFORMS="cpu", RAY_USAGE_STATS_ENABLED="0")
    head = subprocess.Popen(
        [
            ray_bin,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        # A throw-away test cluster: no graceful drain (SIGTERM waits up to 30 s), every
        # process of the head's session killed by id.
        for pid in _session_processes(head.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while _session_processes(head.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        head.wait(10)
        left = _session_processes(head.pid)
        shutil.rmtree(temp, ignore_errors=True)  # the head's logs and sockets
        assert not left, f"Ray processes left behind: {left}"


def test_sweep_on_a_ray_cluster(ray_head, tmp_path, capsys):
    out = tmp_path / "ray-sweep"
    tiny = ["total_timesteps=32", "num_steps=8", "num_epochs=1", "num_minibatches=1"]
    tiny += ["eval_episodes=2", "eval_max_steps=10", "hidden_sizes=8"]
    argv = ["sweep", "ppo", "--grid", "learning_rate=1e-3,3e-3", "num_envs=2,4", *tiny]
    assert (
        main(
            [
                *argv,
                "--seeds",
                "2",
                "--compile",
                "fast",
                "--out",
                str(out),
                "--ray",
                ray_head,
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert f"on Ray {ray_head}" in printed
    record = json.loads((out / "sweep.json").read_text())
    assert record["ray"] == ray_head
    run = {s["name"]: s for s in record["programs_run"]}
    assert sorted(run) == ["p0-num_envs=2", "p1-num_envs=4"]
    # One task per program, in two worker processes; the run directories copied back.
    assert run["p0-num_envs=2"]["pid"] != run["p1-num_envs=4"]["pid"]
    for name in run:
        log = json.loads((out / name / "metrics.json").read_text())
        labels = sorted(log["classic_control"]["CartPole-v1"])
        assert labels == [f"ppo[learning_rate={lr},{name[3:]}]" for lr in (0.001, 0.003)]
        assert (out / name / "config.json").is_file() and os.listdir(out / name / "checkpoints")
