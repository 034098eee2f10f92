"""The child processes of ``test_hosts.py``: one many-host PPO run.

``python hosts_child.py OUT_DIR`` runs with ``LAMELLA_COORDINATOR_ADDRESS`` /
``LAMELLA_NUM_PROCESSES`` / ``LAMELLA_PROCESS_ID`` set (``lamella.agents.testing.host_children``):
one of 2 processes with 2 simulated CPU devices each. It trains with ``lamella train`` and its
many-host flags (recording its experience), stops and resumes a run through the library, tries bad device requests, and
records every path it writes under OUT_DIR. Its one-process reference, 4 devices on the same
global batch and config, is the 4-device PPO run of ``devices_child.py`` (shared with
``test_devices.py``: one child fewer).

It computes and prints JSON; the parent asserts.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import tempfile
from typing import Any

from lamella.agents import hosts

OVERRIDES = [
    # The tiny PPO of devices_child.py (devices_child.CONFIG on the CartPole preset: its 4-device
    # run is this run's reference): 8 envs (2 per device), minibatches of 32 steps, both
    # normalisations on, so every statistic pooled over envs is reduced over the processes too.
    "num_envs=8",
    "num_steps=16",
    "num_minibatches=4",
    "num_epochs=2",
    f"total_timesteps={8 * 16 * 4}",
    "eval_episodes=4",
    "hidden_sizes=16,16",
    "normalize_observations=true",
    "normalize_rewards=true",
    "clip_eps=0.2",
    "ent_coef=0.01",
]


def record_writes(root: str) -> list[str]:
    """Record every path under ``root`` this process creates, replaces, removes or opens for
    writing (``os`` and ``open``, which every writer of the driver and of matplotlib goes through)."""
    root = os.path.abspath(root)
    written: list[str] = []

    def note(path: Any) -> None:
        if isinstance(path, str | os.PathLike) and os.path.abspath(os.fspath(path)).startswith(root):
            written.append(os.path.relpath(os.path.abspath(os.fspath(path)), root))

    def wrap(module: Any, name: str, *positions: int) -> None:
        real = getattr(module, name)

        def recording(*args: Any, **kwargs: Any) -> Any:
            for position in positions:
                if position < len(args):
                    note(args[position])
            if "dir" in kwargs:
                note(kwargs["dir"])
            return real(*args, **kwargs)

        setattr(module, name, recording)

    for name, positions in (("replace", (0, 1)), ("rename", (0, 1)), ("makedirs", (0,)), ("mkdir", (0,))):
        wrap(os, name, *positions)
    for name in ("unlink", "remove"):
        wrap(os, name, 0)
    wrap(tempfile, "mkstemp")
    real_open = builtins.open

    def recording_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(flag in mode for flag in "wax+"):
            note(file)
        return real_open(file, mode, *args, **kwargs)

    builtins.open = recording_open  # type: ignore[assignment]
    return written


def params_of(state: Any) -> list[float]:
    import jax
    import numpy as np

    return [
        float(x) for leaf in jax.tree.leaves(state.train_state.params) for x in np.ravel(np.asarray(leaf))
    ]


def _gif_frames(path: str) -> int:
    import imageio.v3 as iio

    return int(iio.imread(path, index=None).shape[0])


def many_hosts(out_dir: str) -> dict[str, Any]:
    """One process of two: ``lamella train`` with its many-host flags, stopped after one chunk and
    resumed, then bad device requests through the library."""
    cluster = hosts.make_cluster()  # from the environment the test kit set
    assert cluster is not None
    written = record_writes(out_dir)
    from lamella.agents.cli import build_parser

    run_dir = os.path.join(out_dir, "run")
    flags = [
        "--chunk-iterations",
        "2",
        "--no-progress",
        "--coordinator-address",
        cluster.coordinator_address,
        "--num-processes",
        str(cluster.num_processes),
        "--process-id",
        str(cluster.process_id),
    ]
    statuses = []
    for argv in (
        # Recording on: process 0 writes the vault, gathered from both processes' devices; the
        # resumed run goes on recording there.
        ["ppo", *OVERRIDES, "--out-dir", run_dir, "--max-chunks", "1", "--record-vault"],
        ["ppo", "--resume", run_dir],
    ):
        args = build_parser().parse_args([*argv, *flags])
        statuses.append(args.func(args))

    import jax

    from lamella.agents import driver
    from lamella.agents.config import resolve_config
    from lamella.agents.testing import count_compile_ahead, error_text, flat_run_log

    result: dict[str, Any] = {
        "statuses": statuses,
        "run_dir": run_dir,
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "metrics": flat_run_log(os.path.join(run_dir, "metrics.json")),
    }
    loaded = driver.load_run(run_dir)  # the checkpoint process 0 wrote: the global state
    result["params"] = params_of(loaded.state)
    result["checkpoint_processes"] = loaded.metadata.get("num_processes")
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as handle:
        result["layout"] = json.load(handle)["devices"]

    config = resolve_config("ppo", overrides=OVERRIDES)
    hosts.initialize()  # the library's call, from the environment: already joined, nothing to do
    compiled = count_compile_ahead()

    def ppo(name: str, **kwargs: Any) -> Any:
        return driver.run_experiment(
            config,
            out_dir=os.path.join(out_dir, name),
            chunk_iterations=2,
            progress=False,
            plot=False,
            **kwargs,
        )

    result["errors"] = {
        "three_devices": error_text(lambda: ppo("three", num_devices=3)),
        "one_device": error_text(lambda: ppo("one", num_devices=1)),
        "no_out_dir": error_text(lambda: driver.run_experiment(config, progress=False)),
    }
    result["compiled_before_errors"] = len(compiled)
    # The GIF of a many-process run: the state gathered from both processes, drawn and written by
    # process 0 (the others return the path).
    drawn = ppo("gif", gif=True)
    result["gif"] = {
        "path": os.path.relpath(drawn.gif_path, out_dir),
        "frames": _gif_frames(drawn.gif_path) if jax.process_index() == 0 else None,
    }
    result["written"] = sorted(set(written))
    return result


def main(out_dir: str) -> None:
    if hosts.make_cluster() is None:
        raise SystemExit(
            "hosts_child.py runs as one of the processes lamella.agents.testing.host_children starts "
            "(LAMELLA_COORDINATOR_ADDRESS etc. set); the 4-device reference is devices_child.py's run."
        )
    print(json.dumps(many_hosts(out_dir)))


if __name__ == "__main__":
    main(sys.argv[1])
