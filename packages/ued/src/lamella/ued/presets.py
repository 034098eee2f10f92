"""Presets of the UED runners and their ``lamella.algorithms`` entry points (``dr``, ``plr``,
``accel``, ``parallel_plr``, ``parallel_accel``, ``paired``, ``minimax``, ``population_paired``).

``PRESETS[algorithm]["AMaze-13x13-v0"]`` is minimax's maze config for that algorithm
(``config/configs/maze/{dr,plr,accel}.json`` at minimax v0.2.0: 13x13, 60 walls drawn with
replacement (ACCEL: empty DR levels), 32 envs x 256 steps, 5 epochs of 1 minibatch, its learning
rates, discounts, entropy and buffer settings, 30,000 updates, an LSTM student; evaluation on
SixteenRooms, Labyrinth and StandardMaze). ``PRESETS[algorithm]["ci"]`` is a small setting for
tests and a first run on a CPU: 7x7 mazes with 8 walls, 64-step episodes, a feed-forward
student, 100 iterations of 32 envs x 64 steps, evaluated on fresh random 7x7 levels.

``PRESETS["parallel_plr" | "parallel_accel"]["AMaze-13x13-v0"]`` is minimax's ``pplr.json`` /
``paccel.json`` (``num_envs`` = 32 levels per batch: 64 or 96 envs per rollout); their ``ci``
presets are the PLR / ACCEL ones with 16 levels per batch.

``PRESETS["paired" | "minimax" | "population_paired"]["AMaze-13x13-v0"]`` is minimax's maze PAIRED
config (``paired.json``: a teacher of 60 wall steps with 50 noise inputs, 128 conv filters and
an LSTM, entropy 0.05; students as DR's) with 2, 1 or 3 students. Their ``ci`` presets use the
same small students as DR's, on 7x7 levels the teacher builds with 8 wall steps, and a small
feed-forward teacher.

``PRESETS["dr" | "plr" | "accel"]["Foraging-5x5-2p-1f-v3"]`` trains on Level-Based Foraging
(multi-agent): 5x5 levels with 2 agents and 1 food, 25-step episodes, an MLP student shared by
the agents, 30 iterations of 32 envs x 50 steps, evaluated on fresh random levels. The
``paired``, ``minimax`` and ``population_paired`` presets of that name train the same students
on levels a teacher builds (:class:`lamella.envs.multi_agent.lbf.ForagingTeacher`: 2 agents then
1 food, 3 steps), with the ``ci`` presets' small feed-forward teacher.

``PRESETS[algorithm]["Foraging-8x8-2p-2f-v3"]`` (``dr``, ``plr``, ``accel``, ``paired``,
``minimax``, ``population_paired``) is the harder LBF layout: 8x8 levels with 2 agents and 2
foods (a food may need both agents), lbforaging's 50-step episodes, the same MLP student, 32
envs x 100 steps, 100 iterations (320,000 env steps per seed), evaluated on fresh random levels
and the named 8x8 levels ``SplitFoods`` and ``CoopCorners``; the teacher builds 2 agents then 2
foods (4 steps).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lamella.agents.algorithms import Algorithm
from lamella.ued.paired import MinimaxConfig, PAIREDConfig, PopulationPAIREDConfig, make_paired_runner
from lamella.ued.runners import (
    ACCELConfig,
    DRConfig,
    ParallelACCELConfig,
    ParallelPLRConfig,
    PLRConfig,
    make_ued_runner,
)

__all__ = [
    "ACCEL",
    "DR",
    "FORAGING_8X8_ID",
    "FORAGING_ID",
    "MINIMAX",
    "PAIRED",
    "PARALLEL_ACCEL",
    "PARALLEL_PLR",
    "PLR",
    "POPULATION_PAIRED",
    "PRESETS",
]

_CI: dict[str, Any] = {
    "env_id": "AMaze-13x13-v0",
    "height": 7,
    "width": 7,
    "n_walls": 8,
    "max_episode_steps": 64,
    "total_timesteps": 32 * 64 * 100,
    "num_envs": 32,
    "num_steps": 64,
    "num_epochs": 4,
    "num_minibatches": 4,
    "learning_rate": 1e-3,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ent_coef": 0.01,
    "recurrent": False,
    "eval_levels": ("random",),
    "eval_episodes": 64,
}
_CI_BUFFER: dict[str, Any] = {
    "score": "positive_value_loss",
    "buffer_size": 256,
    "min_fill_ratio": 0.25,
}

# Level-Based Foraging (multi-agent; lamella.ued.levels.foraging_family): 5x5 levels, 2 agents,
# 1 food, 25-step episodes, a 64-wide MLP shared by the agents, 32 envs x 50 steps.
FORAGING_ID = "Foraging-5x5-2p-1f-v3"
_FORAGING: dict[str, Any] = {
    "env_id": FORAGING_ID,
    "max_episode_steps": 25,
    "total_timesteps": 32 * 50 * 30,
    "num_envs": 32,
    "num_steps": 50,
    "num_epochs": 4,
    "num_minibatches": 2,
    "learning_rate": 3e-3,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ent_coef": 0.01,
    "recurrent": False,
    "torso_size": 64,
    "hidden_size": 64,
    "eval_levels": ("random",),
    "eval_episodes": 64,
}
_FORAGING_BUFFER: dict[str, Any] = {"buffer_size": 128, "min_fill_ratio": 0.25, "replay_prob": 0.5}

# The harder LBF layout: 8x8, 2 agents, 2 foods, lbforaging's 50-step horizon; two episodes per
# 100-step rollout, as the 5x5 presets play two per 50 steps. The named levels are those that
# fit the env (lamella.envs.multi_agent.lbf.named_levels_for).
FORAGING_8X8_ID = "Foraging-8x8-2p-2f-v3"
_FORAGING_8X8: dict[str, Any] = {
    **_FORAGING,
    "env_id": FORAGING_8X8_ID,
    "max_episode_steps": 50,
    "num_steps": 100,
    "total_timesteps": 32 * 100 * 100,
    "eval_levels": ("random", "SplitFoods", "CoopCorners"),
}

# A small feed-forward teacher for the ci presets (its learning rate raised for the short runs).
_CI_TEACHER: dict[str, Any] = {
    "teacher_noise_dim": 8,
    "teacher_recurrent": False,
    "teacher_conv_filters": 16,
    "teacher_torso_size": 64,
    "teacher_learning_rate": 1e-3,
    "teacher_num_epochs": 4,
    "teacher_num_minibatches": 1,
}

PRESETS: dict[str, dict[str, Any]] = {
    "dr": {
        "AMaze-13x13-v0": DRConfig(),
        "ci": DRConfig(**_CI),
        FORAGING_ID: DRConfig(**_FORAGING),
        FORAGING_8X8_ID: DRConfig(**_FORAGING_8X8),
    },
    "plr": {
        "AMaze-13x13-v0": PLRConfig(),
        "ci": PLRConfig(**_CI, **_CI_BUFFER),
        FORAGING_ID: PLRConfig(**_FORAGING, **_FORAGING_BUFFER),
        FORAGING_8X8_ID: PLRConfig(**_FORAGING_8X8, **_FORAGING_BUFFER),
    },
    "accel": {
        "AMaze-13x13-v0": ACCELConfig(),
        "ci": dataclasses.replace(ACCELConfig(**_CI, **_CI_BUFFER), n_walls=0, num_edits=4),
        FORAGING_ID: ACCELConfig(**_FORAGING, **_FORAGING_BUFFER, num_edits=2),
        FORAGING_8X8_ID: ACCELConfig(**_FORAGING_8X8, **_FORAGING_BUFFER, num_edits=2),
    },
    # minimax's pplr.json / paccel.json; num_envs counts the levels of each batch (2 or 3 batches).
    "parallel_plr": {
        "AMaze-13x13-v0": ParallelPLRConfig(),
        "ci": ParallelPLRConfig(**{**_CI, "num_envs": 16}, **_CI_BUFFER),
    },
    "parallel_accel": {
        "AMaze-13x13-v0": ParallelACCELConfig(),
        "ci": dataclasses.replace(
            ParallelACCELConfig(**{**_CI, "num_envs": 16}, **_CI_BUFFER), n_walls=0, num_edits=4
        ),
    },
    "paired": {
        "AMaze-13x13-v0": PAIREDConfig(),
        "ci": PAIREDConfig(**_CI, **_CI_TEACHER),
        FORAGING_ID: PAIREDConfig(**_FORAGING, **_CI_TEACHER),
        FORAGING_8X8_ID: PAIREDConfig(**_FORAGING_8X8, **_CI_TEACHER),
    },
    "minimax": {
        "AMaze-13x13-v0": MinimaxConfig(),
        "ci": MinimaxConfig(**_CI, **_CI_TEACHER),
        FORAGING_ID: MinimaxConfig(**_FORAGING, **_CI_TEACHER),
        FORAGING_8X8_ID: MinimaxConfig(**_FORAGING_8X8, **_CI_TEACHER),
    },
    "population_paired": {
        "AMaze-13x13-v0": PopulationPAIREDConfig(),
        "ci": PopulationPAIREDConfig(**_CI, **_CI_TEACHER),
        FORAGING_ID: PopulationPAIREDConfig(**_FORAGING, **_CI_TEACHER),
        FORAGING_8X8_ID: PopulationPAIREDConfig(**_FORAGING_8X8, **_CI_TEACHER),
    },
}

#: ``lamella train dr`` (entry point ``dr = "lamella.ued.presets:DR"``).
DR = Algorithm(DRConfig, make_ued_runner, PRESETS["dr"])
#: ``lamella train plr``: PLR, Robust PLR by default (``robust=false`` for plain PLR).
PLR = Algorithm(PLRConfig, make_ued_runner, PRESETS["plr"])
#: ``lamella train accel``.
ACCEL = Algorithm(ACCELConfig, make_ued_runner, PRESETS["accel"])
#: ``lamella train parallel_plr``: Parallel PLR (new and replayed levels every iteration).
PARALLEL_PLR = Algorithm(ParallelPLRConfig, make_ued_runner, PRESETS["parallel_plr"])
#: ``lamella train parallel_accel``: Parallel ACCEL (new, replayed and edited levels every iteration).
PARALLEL_ACCEL = Algorithm(ParallelACCELConfig, make_ued_runner, PRESETS["parallel_accel"])
#: ``lamella train paired``: PAIRED (protagonist, antagonist, a regret-seeking teacher).
PAIRED = Algorithm(PAIREDConfig, make_paired_runner, PRESETS["paired"])
#: ``lamella train minimax``: the minimax adversary (a teacher paid minus the protagonist's return).
MINIMAX = Algorithm(MinimaxConfig, make_paired_runner, PRESETS["minimax"])
#: ``lamella train population_paired``: population PAIRED (3 students by default).
POPULATION_PAIRED = Algorithm(PopulationPAIREDConfig, make_paired_runner, PRESETS["population_paired"])
