"""The child process of ``test_devices.py``: DR, ACCEL, Parallel ACCEL and population PAIRED on
4 simulated CPU devices and on 1, printed as JSON.

ACCEL's step holds PLR's (its new and replayed branches, with the mutation branch beside them),
Parallel ACCEL's holds Parallel PLR's (plus the batch of edits), and population PAIRED runs
PAIRED's runner (as the minimax adversary does) with a third student; so these four cases cover
DR, PLR, Parallel PLR and PAIRED too. DR keeps its own case: it alone restarts an ended episode
on a new random level (``AutoReset``) and has no buffer. DR, ACCEL and Parallel ACCEL also write
screenshots (``screenshot_every``), whose PNGs are reported for the parent to compare.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). One process, one jax
start, every runner of the package: it computes, the parent asserts. Usage:
``python devices_child.py OUT_DIR`` (the parent sets ``XLA_FLAGS``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

import jax
import numpy as np

from lamella.agents.testing import (
    count_compile_ahead,
    device_trainer,
    error_text,
    flat_run_log,
    max_abs,
    max_abs_diff,
)
from lamella.ued.paired import PAIREDConfig, PopulationPAIREDConfig
from lamella.ued.runners import ACCELConfig, DRConfig, ParallelACCELConfig, ParallelPLRConfig

# 8 levels, 2 per device; one minibatch of 8 x 24 steps (48 per device); 6 iterations.
TINY: dict[str, Any] = {
    "height": 5,
    "width": 5,
    "n_walls": 3,
    "max_episode_steps": 12,
    "num_envs": 8,
    "num_steps": 24,
    "num_epochs": 2,
    "num_minibatches": 1,
    "recurrent": False,
    "torso_size": 16,
    "total_timesteps": 8 * 24 * 6,
    "eval_levels": ("random",),
    "eval_episodes": 4,
    "learning_rate": 1e-3,
}
# Parallel ACCEL: 4 new, 4 replayed and 4 edited levels in one rollout of 12 envs (3 per device),
# the gradient step on the replayed 4 (1 per device). The buffer is warm after the first
# iteration: replays, insertions and edits in every later one.
PARALLEL: dict[str, Any] = {**TINY, "num_envs": 4, "total_timesteps": 3 * 4 * 24 * 6}
# PAIRED: a feed-forward teacher builds 8 levels (2 per device) of 3 x 3 cells in 5 steps each
# (two minibatches of 20 teacher steps, 5 per device); small enough that the students solve
# some, so the regret the teacher is paid is not all 0.
PAIRED: dict[str, Any] = {
    **TINY,
    "height": 3,
    "width": 3,
    "teacher_noise_dim": 4,
    "teacher_recurrent": False,
    "teacher_conv_filters": 4,
    "teacher_torso_size": 16,
    "teacher_num_epochs": 2,
    "teacher_num_minibatches": 2,
    "teacher_learning_rate": 1e-3,
}
CONFIGS: dict[str, Any] = {
    "dr": DRConfig(**TINY),
    # ACCEL (sequential): a new batch first, then replays once the buffer is warm, each replay
    # followed by a batch of edits of the replayed levels; all three happen in 6 iterations.
    "accel": ACCELConfig(
        **TINY, buffer_size=16, min_fill_ratio=0.5, replay_prob=0.5, score="max_mc", num_edits=4
    ),
    "parallel_accel": ParallelACCELConfig(
        **PARALLEL, buffer_size=16, min_fill_ratio=0.5, score="max_mc", num_edits=4
    ),
    # Population PAIRED: PAIRED's runner and step with 3 students (population_regret).
    "population_paired": PopulationPAIREDConfig(**PAIRED),
}
# Screenshots every 2 iterations (3 intervals of the 6 iterations) where the runner writes them
# (DR, PLR, ACCEL and their parallel forms; PAIRED has none): the host callback runs inside the
# sharded step, so each device hands the (replicated) levels over and the pictures must be those
# of one device.
SCREENSHOT_EVERY = 2
SCREENSHOTS = ("dr", "accel", "parallel_accel")


def screenshots(directory: str) -> dict[str, Any]:
    """Every PNG under ``directory``: relative path -> the decoded image's shape and a digest of
    its pixels (the parent compares the 4-device pictures with the 1-device ones through these)."""
    import hashlib

    from matplotlib import image as mpimg

    found: dict[str, Any] = {}
    for root, _, files in os.walk(directory):
        for name in sorted(files):
            path = os.path.join(root, name)
            pixels = np.ascontiguousarray(mpimg.imread(path))
            found[os.path.relpath(path, directory)] = {
                "shape": list(pixels.shape),
                "digest": hashlib.sha256(pixels.tobytes()).hexdigest(),
            }
    return found


def trained_params(state: Any) -> Any:
    """Every agent's parameters: the student's (DR, ACCEL), or the students' and the teacher's."""
    if hasattr(state, "teacher_params"):
        return (state.student_params, state.teacher_params)
    return state.params


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    compiled = count_compile_ahead()  # the bad inputs below must fail before any compile

    train = device_trainer(out_dir, chunk_iterations=3)

    result["errors"] = {
        "not_divisible": error_text(lambda: train(DRConfig(**{**TINY, "num_envs": 6}), 4, "not_divisible")),
        "parallel_not_divisible": error_text(
            lambda: train(ParallelPLRConfig(**{**PARALLEL, "num_envs": 6}, buffer_size=16), 4, "parallel")
        ),
        # A recurrent teacher's minibatches split envs: 8 / 4 = 2 per minibatch, not 4 devices' worth.
        "teacher_minibatch": error_text(
            lambda: train(
                PAIREDConfig(**{**PAIRED, "teacher_recurrent": True, "teacher_num_minibatches": 4}),
                4,
                "teacher_minibatch",
            )
        ),
    }
    result["compiled_before_errors"] = len(compiled)
    result["dirs_written"] = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []

    result["runs"] = {}
    for name, config in CONFIGS.items():
        shots = {n: os.path.join(out_dir, f"{name}_{n}_screenshots") for n in (1, 4)}
        with_shots = {
            n: dataclasses.replace(config, screenshot_every=SCREENSHOT_EVERY, screenshot_dir=shots[n])
            if name in SCREENSHOTS
            else config
            for n in (1, 4)
        }
        one, four = train(with_shots[1], 1, f"{name}_1"), train(with_shots[4], 4, f"{name}_4")
        with open(four.config_path, encoding="utf-8") as handle:
            layout = json.load(handle)["devices"]
        buffers = [getattr(result.state, "buffer", ()) for result in (one, four)]
        result["runs"][name] = {
            "metrics": {"1": flat_run_log(one.metrics_path), "4": flat_run_log(four.metrics_path)},
            "params_max_abs_diff": max_abs_diff(trained_params(one.state), trained_params(four.state)),
            "params_max_abs": max_abs(trained_params(one.state)),
            # The level buffer (levels, scores, staleness, ...): the same on every device and on one.
            "buffer_max_abs_diff": max_abs_diff(*buffers),
            "buffer_levels_equal": all(
                np.array_equal(np.asarray(x), np.asarray(y))
                for x, y in zip(*map(jax.tree.leaves, buffers), strict=True)
                if not np.issubdtype(np.asarray(x).dtype, np.floating)
            ),
            "layout": layout,
            "screenshots": {str(n): screenshots(shots[n]) for n in (1, 4)} if name in SCREENSHOTS else None,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
