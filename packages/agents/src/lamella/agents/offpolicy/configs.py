"""Configs of the off-policy runners: the loop's settings plus one agent's learning settings.

``SACTrainConfig`` is :class:`LoopConfig` and :class:`~lamella.agents.offpolicy.SACConfig` in
one flat frozen dataclass, so ``lamella train sac key=value`` reaches every field and the
driver checkpoints and compares it like any other config. (Until lamella-gcrl 0.1 these lived
in ``lamella.gcrl.config``; the field names are unchanged, so older run directories resume.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lamella.agents.config import ConfigError, check_numbers, is_swept, unused_settings_of
from lamella.agents.offpolicy.ddpg import DDPGConfig, make_ddpg
from lamella.agents.offpolicy.dqn import DQNConfig, make_dqn
from lamella.agents.offpolicy.plugins import goal_setter_names, load_goal_setter
from lamella.agents.offpolicy.sac import SACConfig, make_sac
from lamella.agents.offpolicy.td3 import TD3Config, make_td3
from lamella.agents.offpolicy.tqc import TQCConfig, make_tqc

__all__ = [
    "AGENTS",
    "OFFPOLICY_BUILD",
    "DDPGTrainConfig",
    "DQNTrainConfig",
    "LoopConfig",
    "SACTrainConfig",
    "TD3TrainConfig",
    "TQCTrainConfig",
    "agent_config",
]


#: name -> (agent config class, ``make(config, observation_space, action_space) -> Agent``)
AGENTS: dict[str, tuple[type, Any]] = {
    "dqn": (DQNConfig, make_dqn),
    "sac": (SACConfig, make_sac),
    "td3": (TD3Config, make_td3),
    "ddpg": (DDPGConfig, make_ddpg),
    "tqc": (TQCConfig, make_tqc),
}

#: How to build an off-policy train config (for :func:`~lamella.agents.config.check_config_type`).
OFFPOLICY_BUILD = (
    "Build one: a train config such as lamella.agents.offpolicy.configs.SACTrainConfig(...), "
    'or a preset: lamella.agents.config.resolve_config("sac", env_id).'
)


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """Settings of the off-policy loop (plain or goal-conditioned).

    Attributes:
        env_id: registered environment id (made with ``autoreset=False``; the loop calls
            ``reset_done`` after storing the true final observation).
        total_timesteps: env steps of training over all envs.
        eval_episodes: greedy evaluation episodes (on a separate env instance).
        eval_max_steps: step cap of an evaluation (0: the env's ``max_steps_in_episode``, else 1000).
        num_envs: parallel training envs.
        rollout_steps: vector env steps per iteration (one iteration is ``num_envs *
            rollout_steps`` env steps; the driver evaluates between chunks of iterations).
        updates_per_step: gradient steps after every vector env step (the replay ratio is
            ``updates_per_step / num_envs``).
        buffer_size: replay capacity in transitions (over all envs).
        batch_size: transitions per gradient step.
        learning_starts: env steps (over all envs) of uniform random actions before the first update.
        n_step: n-step targets (1: one-step TD); not with ``her``.
        her: hindsight experience replay (goal-conditioned envs only): batches come from the
            ``her`` batch sampler that lamella-gcrl provides (``pip install lamella-gcrl``;
            see :mod:`lamella.agents.offpolicy.plugins`). ``lamella train ... --her`` sets it.
        her_strategy: ``"future"``, ``"final"`` or ``"episode"``.
        her_relabel_probability: fraction of sampled transitions given a hindsight goal.
        goal_setter: who picks the training goals of a goal-conditioned env: ``"none"`` (the
            env's own) or the name of an installed goal setter (entry-point group
            ``lamella.goal_setters``; lamella-gcrl's ``"frontier"``). Evaluation always plays
            the env's own goals. ``make_offpolicy_runner(config, goal_setter=...)`` takes one
            from code instead (not both).
        frontier_probability: ``goal_setter="frontier"``: the probability that a training goal
            is drawn in a rarely visited cell (else uniform over the goal space).
        frontier_grid: ``goal_setter="frontier"``: cells per goal dimension of the visit counts.
    """

    env_id: str = "Pendulum-v1"
    total_timesteps: int = 20_000
    eval_episodes: int = 10
    eval_max_steps: int = 0
    num_envs: int = 1
    rollout_steps: int = 200
    updates_per_step: int = 1
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 1_000
    n_step: int = 1
    her: bool = False
    her_strategy: str = "future"
    her_relabel_probability: float = 0.8
    goal_setter: str = "none"
    frontier_probability: float = 0.8
    frontier_grid: int = 20

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.rollout_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.steps_per_iteration

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first inconsistent loop setting (then any number out of
        its range: :func:`~lamella.agents.config.check_numbers`)."""
        for name in (
            "num_envs",
            "rollout_steps",
            "updates_per_step",
            "batch_size",
            "n_step",
            "eval_episodes",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{type(self).__name__}.{name} must be >= 1, got {getattr(self, name)}.")
        if self.num_iterations < 1:
            raise ValueError(
                f"total_timesteps ({self.total_timesteps}) is less than one iteration (num_envs * "
                f"rollout_steps = {self.steps_per_iteration}); raise it or lower rollout_steps."
            )
        if self.buffer_size < self.num_envs * max(self.n_step, 2):
            raise ValueError(
                f"buffer_size ({self.buffer_size}) must hold at least max(n_step, 2) steps of each of the "
                f"{self.num_envs} envs."
            )
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}.")
        if self.her and self.n_step > 1:
            raise ValueError("her=True with n_step > 1 is not supported: set n_step=1 for HER.")
        if self.her_strategy not in ("future", "final", "episode"):
            raise ValueError(
                f"her_strategy must be 'future', 'final' or 'episode', got {self.her_strategy!r}."
            )
        # A swept probability is traced while a sweep builds its program (is_swept): the driver
        # checked each variant's plain number first.
        if not is_swept(self.her_relabel_probability) and not 0.0 <= self.her_relabel_probability <= 1.0:
            raise ValueError(
                f"her_relabel_probability must be in [0, 1], got {self.her_relabel_probability}."
            )
        if not is_swept(self.frontier_probability) and not 0.0 <= self.frontier_probability <= 1.0:
            raise ConfigError(
                f"frontier_probability must be in [0, 1] (the share of training goals drawn in rarely "
                f"visited cells), got {self.frontier_probability}; set frontier_probability=0.8, for example."
            )
        if self.frontier_grid < 1:
            raise ConfigError(
                f"frontier_grid must be >= 1 (cells per goal dimension), got {self.frontier_grid}."
            )
        if self.goal_setter != "none" and self.goal_setter not in goal_setter_names():
            load_goal_setter(self.goal_setter)  # raises the ConfigError that lists the installed ones
        check_numbers(self)

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: the algorithm's own (its config's ``unused_settings``,
        next in the class order: DQN's ``target_update_period`` with ``tau < 1``, ...), HER's
        settings with ``her=False`` (the uniform or n-step sampler reads none) and the frontier goal
        setter's with ``goal_setter="none"``. ``lamella train`` refuses such a field set as an
        override (:func:`~lamella.agents.config.check_unused_settings`)."""
        own = getattr(super(), "unused_settings", None)
        unused: dict[str, str] = dict(own()) if own is not None else {}
        if not self.her:
            unused |= unused_settings_of(
                self,
                {
                    "her_strategy": "picks the hindsight goals of HER",
                    "her_relabel_probability": "is the share of sampled transitions HER relabels",
                },
                "her=False samples without relabelling",
                "set her=True",
            )
        if self.goal_setter == "none":
            unused |= unused_settings_of(
                self,
                {
                    "frontier_probability": "is the frontier goal setter's share of rarely visited goals",
                    "frontier_grid": "sizes the frontier goal setter's visit counts",
                },
                "goal_setter='none' trains on the env's own goals",
                "set goal_setter=frontier",
            )
        return unused


@dataclasses.dataclass(frozen=True)
class SACTrainConfig(LoopConfig, SACConfig):
    """SAC with the off-policy loop (``lamella train sac``); Discrete actions give discrete SAC."""


@dataclasses.dataclass(frozen=True)
class TD3TrainConfig(LoopConfig, TD3Config):
    """TD3 with the off-policy loop (``lamella train td3``)."""


@dataclasses.dataclass(frozen=True)
class DDPGTrainConfig(LoopConfig, DDPGConfig):
    """DDPG with the off-policy loop (``lamella train ddpg``)."""


@dataclasses.dataclass(frozen=True)
class TQCTrainConfig(LoopConfig, TQCConfig):
    """TQC with the off-policy loop (``lamella train tqc``)."""


@dataclasses.dataclass(frozen=True)
class DQNTrainConfig(LoopConfig, DQNConfig):
    """DQN with the off-policy loop (``lamella train dqn``)."""

    env_id: str = "CartPole-v1"
    total_timesteps: int = 50_000
    rollout_steps: int = 500
    batch_size: int = 64
    buffer_size: int = 50_000


#: train config -> (algorithm name, agent config class)
_AGENT_CONFIGS: dict[type, tuple[str, type]] = {
    SACTrainConfig: ("sac", SACConfig),
    TD3TrainConfig: ("td3", TD3Config),
    DDPGTrainConfig: ("ddpg", DDPGConfig),
    TQCTrainConfig: ("tqc", TQCConfig),
    DQNTrainConfig: ("dqn", DQNConfig),
}


def agent_config(config: Any) -> tuple[str, Any]:
    """``(algorithm name, agent config)`` of a train config: its agent fields, copied."""
    for train_cls, (name, agent_cls) in _AGENT_CONFIGS.items():
        if isinstance(config, train_cls):
            values = {f.name: getattr(config, f.name) for f in dataclasses.fields(agent_cls)}
            return name, agent_cls(**values)
    raise TypeError(
        f"{type(config).__name__} is not an off-policy train config; use one of "
        f"{', '.join(c.__name__ for c in _AGENT_CONFIGS)}."
    )
