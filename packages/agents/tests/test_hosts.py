"""Many hosts (``lamella.agents.hosts``): 2 processes with 2 simulated CPU devices each train one
PPO run that equals the 1-process 4-device run of the same global batch; only process 0 writes;
the run resumes on 2 processes and is refused on 1; bad settings fail before anything starts.

The processes run as children (``hosts_child.py``, through ``lamella.agents.testing.host_children``
on 127.0.0.1 with a free port, killed at the end whatever happens), as does the 4-device
reference (``device_child``: ``devices_child.py``'s 4-device run of the same config, the child
``test_devices.py`` reads): the device count is fixed when jax starts, and this process has one.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import jax
import numpy as np
import pytest

from lamella.agents import driver, hosts, train
from lamella.agents.config import ConfigError, resolve_config
from lamella.agents.recording import read_recording
from lamella.agents.testing import device_child, host_children

CHILD = os.path.join(os.path.dirname(__file__), "hosts_child.py")
DEVICES_CHILD = os.path.join(os.path.dirname(__file__), "devices_child.py")
ADDRESS = ["--coordinator-address", "127.0.0.1:1234"]


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    return host_children(CHILD, tmp_path_factory.getbasetemp(), num_processes=2, devices_per_process=2)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    # The 4-device PPO run of devices_child.py (its config is hosts_child.OVERRIDES on the CartPole
    # preset, checked below): the child test_devices.py reads too, run once per session.
    child = device_child(DEVICES_CHILD, tmp_path_factory.getbasetemp(), num_devices=4)
    return {
        "device_count": child["device_count"],
        "metrics": child["metrics"]["4"],
        "params": child["params_4"],
        "recorded": child["recorded"]["folder_4"],
    }


def _module(path: str) -> Any:
    """A child script loaded as a module (its constants; ``main`` does not run)."""
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_trains_the_many_host_config():
    overrides = _module(CHILD).OVERRIDES
    assert resolve_config("ppo", overrides=overrides) == _module(DEVICES_CHILD).CONFIG


def test_two_processes_train_as_one_process_on_the_same_global_batch(processes, reference):
    assert reference["device_count"] == 4
    first, second = processes
    for index, process in enumerate(processes):
        assert (process["process_index"], process["process_count"]) == (index, 2)
        assert (process["device_count"], process["local_device_count"]) == (4, 2)
        assert process["statuses"] == [0, 0], "the stopped run and its resume both succeed"
    one, two = reference["metrics"], first["metrics"]
    assert sorted(one) == sorted(two)
    assert any(k.endswith("train_loss") for k in one) and any(k.endswith("mean_episode_return") for k in one)
    assert len(one) >= 3 * 8, "at least three evaluations with their metrics"
    for key in one:
        np.testing.assert_allclose(two[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    # The checkpoint holds the global state (gathered from both processes), that of one process.
    params = np.asarray(first["params"])
    np.testing.assert_allclose(params, np.asarray(reference["params"]), rtol=1e-4, atol=1e-5)
    # Every process reads the same run log and checkpoint back.
    assert second["metrics"] == first["metrics"] and second["params"] == first["params"]


def test_two_processes_record_what_four_devices_record(processes, reference):
    # The run stopped after its first chunk and resumed went on recording: process 0's vault holds
    # every step of the 4-device run's, each env in its place (both processes' envs gathered), the
    # floats up to the rounding of statistics pooled over processes, actions and flags exactly.
    two = read_recording(os.path.join(processes[0]["run_dir"], "vault"))
    four = read_recording(reference["recorded"])
    assert sorted(two) == sorted(four) == ["actions", "observations", "rewards", "terminals", "truncations"]
    assert two["observations"].shape == four["observations"].shape == (8, 64, 4)
    for key in ("actions", "terminals", "truncations"):
        np.testing.assert_array_equal(two[key], four[key], err_msg=key)
    for key in ("observations", "rewards"):
        np.testing.assert_allclose(two[key], four[key], atol=1e-4, err_msg=key)
    assert np.sum(two["terminals"] | two["truncations"]) > 0
    assert not any("vault" in path for path in processes[1]["written"])


def test_two_processes_draw_the_gif_once(processes):
    first, second = processes
    assert first["gif"]["path"] == second["gif"]["path"] == os.path.join("gif", "episode.gif")
    assert first["gif"]["frames"] > 1  # CartPole's greedy episode, drawn by process 0
    assert os.path.join("gif", "episode.gif") in first["written"]


def test_only_process_0_writes_and_the_layout_is_recorded(processes):
    first, second = processes
    assert second["written"] == []
    names = {os.path.basename(path) for path in first["written"]}
    for name in ("config.json", "metrics.json", "metrics.csv", "learning_curve.png"):
        assert name in names, name
    assert "checkpoint_000000002.msgpack" in names and "checkpoint_000000004.msgpack" in names
    assert first["layout"] == {
        "num_devices": 4,
        "platform": "cpu",
        "device_kind": first["layout"]["device_kind"],
        "mesh_axis": "devices",
        "num_processes": 2,
        "batch": "num_envs",
        "batch_size": 8,
        "per_device": 2,
    }
    assert first["checkpoint_processes"] == 2


def test_bad_device_requests_on_many_processes_fail_before_anything_compiles(processes):
    for process in processes:
        errors = process["errors"]
        for name in ("three_devices", "one_device"):
            count = 3 if name == "three_devices" else 1
            assert errors[name].startswith(
                f"ConfigError: num_devices={count} cannot be split over 2 processes with 2 device(s) each"
            ), errors[name]
            assert "Ask for a multiple of 2 up to 4" in errors[name]
        assert errors["no_out_dir"].startswith("ConfigError: A run on many processes needs out_dir")
        assert process["compiled_before_errors"] == 0


def _no_compiles(monkeypatch):
    compiled = []
    real = driver.compile_ahead
    monkeypatch.setattr(driver, "compile_ahead", lambda *a, **k: compiled.append(1) or real(*a, **k))
    return compiled


def test_a_run_of_two_processes_is_not_resumed_on_one(processes, monkeypatch, capsys):
    run_dir = processes[0]["run_dir"]
    before = sorted(os.listdir(run_dir))
    compiled = _no_compiles(monkeypatch)
    with pytest.raises(ConfigError, match=r"on 1 process\(es\): the run used 2 \(4 devices") as info:
        driver.run_experiment(
            resolve_config("ppo", overrides=_child_overrides()), out_dir=run_dir, resume=True
        )
    assert "Resume it on 2 processes (--num-processes 2, one --process-id each)" in str(info.value)
    with pytest.raises(SystemExit) as exit_info:
        train.main(["ppo", "--resume", run_dir, "--no-progress"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "the run used 2" in err and "Traceback" not in err
    assert compiled == [] and sorted(os.listdir(run_dir)) == before


def _child_overrides() -> list[str]:
    return list(_module(CHILD).OVERRIDES)


@pytest.mark.parametrize(
    "flags, environment, expected",
    [
        (
            ["--num-processes", "2", "--process-id", "0"],
            {},
            "got --num-processes (LAMELLA_NUM_PROCESSES), --process-id (LAMELLA_PROCESS_ID) but not "
            "--coordinator-address (LAMELLA_COORDINATOR_ADDRESS)",
        ),
        (["--process-id", "1"], {"LAMELLA_NUM_PROCESSES": "2"}, "but not --coordinator-address"),
        ([*ADDRESS, "--num-processes", "0", "--process-id", "0"], {}, "--num-processes must be >= 1, got 0"),
        ([*ADDRESS, "--num-processes", "2", "--process-id", "2"], {}, "--process-id must be in 0..1"),
        ([*ADDRESS, "--num-processes", "2", "--process-id", "-1"], {}, "--process-id must be in 0..1"),
        ([*ADDRESS, "--num-processes", "two", "--process-id", "0"], {}, "--num-processes must be an integer"),
        (
            ["--coordinator-address", "localhost", "--num-processes", "2", "--process-id", "0"],
            {},
            "--coordinator-address must be HOST:PORT",
        ),
        (
            ["--coordinator-address", "10.0.0.1:99999", "--num-processes", "2", "--process-id", "0"],
            {},
            "--coordinator-address must be HOST:PORT",
        ),
        ([*ADDRESS, "--num-processes", "2", "--process-id", "0"], {}, "needs --out-dir (or --resume)"),
    ],
)
def test_bad_many_host_settings_exit_2_before_anything_starts(
    flags, environment, expected, monkeypatch, capsys, tmp_path
):
    for name in hosts.ENV_VARS.values():
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit) as info:
        train.main(["ppo", "--no-progress", *flags])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert "Traceback" not in err
    assert started == [] and os.listdir(tmp_path) == []


def test_make_cluster_reads_arguments_then_the_environment():
    environ = {
        "LAMELLA_COORDINATOR_ADDRESS": "10.0.0.1:1234",
        "LAMELLA_NUM_PROCESSES": "4",
        "LAMELLA_PROCESS_ID": "3",
    }
    assert hosts.make_cluster(environ={}) is None
    assert hosts.make_cluster(environ=environ) == hosts.Cluster("10.0.0.1:1234", 4, 3)
    assert hosts.make_cluster(process_id=1, environ=environ) == hosts.Cluster("10.0.0.1:1234", 4, 1)
    assert hosts.make_cluster("[::1]:80", 1, 0, environ={}) == hosts.Cluster("[::1]:80", 1, 0)
    with pytest.raises(ConfigError, match="but not --num-processes"):
        hosts.make_cluster("node-1:1234", process_id=0, environ={})


def test_the_library_refuses_to_join_after_jax_started(monkeypatch, tmp_path):
    jax.devices()  # JAX has started in this process
    monkeypatch.setenv("LAMELLA_COORDINATOR_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("LAMELLA_NUM_PROCESSES", "2")
    monkeypatch.setenv("LAMELLA_PROCESS_ID", "1")
    compiled = _no_compiles(monkeypatch)
    with pytest.raises(
        ConfigError, match=r"call lamella.agents.hosts.initialize\(...\) at the start of the program"
    ):
        driver.run_experiment(resolve_config("ppo"), out_dir=str(tmp_path / "run"), progress=False)
    assert compiled == [] and os.listdir(tmp_path) == []
