"""DR, PLR / Robust PLR and ACCEL runners, built on lamella-agents' PPO pieces.

``make_ued_runner(config)`` builds a :class:`lamella.agents.runner.Runner` for a
:class:`DRConfig`, :class:`PLRConfig` or :class:`ACCELConfig`; the driver trains it like any
other runner (``lamella train plr --env AMaze-13x13-v0``, or
``lamella.agents.driver.run(runner, RunSpec(...))``). Every iteration is:

1. choose the levels of the ``num_envs`` students' envs: new random levels (DR), or levels
   replayed from the buffer (PLR, with probability ``replay_prob`` once the buffer is
   ``min_fill_ratio`` full), or (ACCEL) edits of the levels the previous iteration replayed;
2. reset every env to its level and collect ``num_steps`` steps with lamella-agents'
   :func:`~lamella.agents.make_rollout` (levels passed as env params, ``params_axis=0``); an
   ended episode restarts the same level (DR: a new random level, as in minimax);
3. GAE advantages (:func:`~lamella.agents.losses.gae_advantages`, truncation-correct) and the
   PPO update (:func:`~lamella.agents.make_ppo_update`); Robust PLR (``robust=True``) skips
   the gradient step unless the levels were replayed;
4. score every level (:mod:`lamella.ued.scores`, ``score``) and update the buffer
   (:mod:`lamella.ued.buffer`): replayed levels get their new scores, new and mutated levels are
   inserted.

ACCEL runs as JaxUED does: an iteration after a replay iteration evaluates mutations of the
replayed levels (``num_edits`` edits each) with no gradient step and inserts them, so every
iteration is one rollout (minimax runs the mutation rollout inside the replay iteration: for
the same number of rollouts, lamella counts about 1.5 times as many ACCEL iterations).

Parallel PLR and Parallel ACCEL (``parallel=True``: :class:`ParallelPLRConfig`,
:class:`ParallelACCELConfig`) run minimax's ``use_parallel_eval`` instead of step 1's choice:
every iteration plays ``num_envs`` new levels, ``num_envs`` replayed levels and (ACCEL)
``num_envs`` edits of those replayed levels in one rollout of ``2`` or ``3 * num_envs`` envs;
every batch is scored and updates the buffer (:func:`parallel_buffer_update`), and the PPO step
uses the replayed batch only (none until the buffer is warm, with ``robust=True``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import lamella.envs
from lamella.agents import losses
from lamella.agents.actor_critic import (
    ActorCritic,
    FeedForwardActorCriticNet,
    RecurrentActorCriticNet,
    feedforward_actor_critic,
    recurrent_actor_critic,
)
from lamella.agents.config import ConfigError, check_config_type, is_swept, unused_settings_of
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.ppo_update import PPOSettings, check_ppo_sizes, make_ppo_update_from_config, ppo_batch
from lamella.agents.protocol import Agent
from lamella.agents.rollout import actor_critic_policy, make_rollout, next_memory
from lamella.agents.runner import Runner, episode_frames, hashed_keys
from lamella.envs import spaces, wrappers
from lamella.envs.environment import Environment, episode_done
from lamella.ued import scores as scores_lib
from lamella.ued.buffer import LevelBuffer, LevelBufferState, make_level_buffer
from lamella.ued.levels import LevelFamily, LevelParams, OnLevel, level_family, tile_params
from lamella.ued.networks import GridworldNet, RecurrentGridworldNet

__all__ = [
    "EVAL_METRIC_AXES",
    "ACCELConfig",
    "DRConfig",
    "PLRConfig",
    "ParallelACCELConfig",
    "ParallelPLRConfig",
    "UEDRunnerState",
    "check_family",
    "default_family",
    "evaluate_on_levels",
    "make_actor_critic",
    "make_level_episode_drawer",
    "make_level_evaluator",
    "make_team",
    "make_ued_runner",
    "parallel_buffer_update",
    "per_agent_memory",
    "rollout_advantages",
]

NEW, REPLAY, MUTATE = 0, 1, 2
#: The evaluation "level" that stands for fresh random levels of the training distribution.
RANDOM = "random"


@dataclasses.dataclass(frozen=True)
class DRConfig(PPOSettings):
    """Domain randomisation: PPO on fresh random levels every iteration.

    Defaults are minimax's maze DR config (``config/configs/maze/dr.json``).

    Attributes:
        env_id: a level-based env id (``AMaze-13x13-v0``).
        total_timesteps: env steps of training over all envs (minimax: 30,000 updates of 32 x 256).
        eval_episodes: episodes per evaluation level at each evaluation.
        eval_levels: test levels: names of ``lamella.envs.maze.NAMED_MAZES`` of the env's size,
            or ``"random"`` (``eval_episodes`` fresh random levels of the training distribution
            at each evaluation). The run log's ``_level_<i>`` keys follow this order.
        eval_max_steps: step cap of an evaluation episode (0: each named level's own horizon).
        eval_greedy: evaluate with the most likely action (else sampled, as minimax does).
        num_envs: parallel envs (one level each).
        num_steps: steps per env per iteration.
        num_epochs: PPO passes over each rollout.
        num_minibatches: PPO minibatches per pass.
        learning_rate: Adam step size.
        anneal_lr: decay the step size linearly to 0.
        gamma, gae_lambda: discount and GAE lambda.
        clip_eps: PPO ratio (and value) clip.
        clip_value: clipped value loss.
        vf_coef, ent_coef: loss weights.
        max_grad_norm: global gradient-norm clip.
        normalize_advantages: standardise advantages per minibatch.
        height, width: the maze's interior size (0: the env id's own).
        n_walls: wall budget of random levels.
        replace_wall_pos: random walls drawn with replacement (minimax's 60-block mazes).
        max_episode_steps: training episode horizon.
        recurrent: a recurrent student (AMaze: minimax's LSTM student; a family with the
            ``"mlp"`` network, such as Level-Based Foraging: ``RecurrentActorCriticNet`` with
            ``cell``, one memory per agent); else feed-forward.
        cell: ``"lstm"`` or ``"gru"``.
        rnn_hidden_size: width of the recurrent carry.
        conv_filters: filters of the 3x3 convolution.
        torso_size: width of the feed-forward torso.
        hidden_size: width of the actor and critic heads.
        screenshot_every: write PNG grids of the levels played every this many iterations
            (0: none; :mod:`lamella.ued.screenshots`).
        screenshot_dir: where the screenshots go (``<dir>/seed_<s>/update_<i>_<kind>.png``);
            ``""``: ``screenshots/`` in the run's directory (the working directory when no
            lamella-agents driver runs the runner).
    """

    env_id: str = "AMaze-13x13-v0"
    total_timesteps: int = 245_760_000
    eval_episodes: int = 10
    eval_levels: tuple[str, ...] = ("SixteenRooms", "Labyrinth", "StandardMaze")
    eval_greedy: bool = False
    num_envs: int = 32
    num_steps: int = 256
    num_epochs: int = 5
    num_minibatches: int = 1
    learning_rate: float = 1e-4
    anneal_lr: bool = False
    gamma: float = 0.995
    gae_lambda: float = 0.98
    ent_coef: float = 1e-3
    height: int = 0
    width: int = 0
    n_walls: int = 60
    replace_wall_pos: bool = True
    max_episode_steps: int = 250
    recurrent: bool = True
    cell: str = "lstm"
    rnn_hidden_size: int = 256
    conv_filters: int = 16
    torso_size: int = 64
    hidden_size: int = 32
    screenshot_every: int = 0
    screenshot_dir: str = ""

    def run_log_task(self) -> str:
        """The run log's task: ``env_id``, followed by the level settings this config changes from
        the id's own, in the env spec form ``lamella eval checkpoints --env`` reads
        (``AMaze-13x13-v0:height=7,width=7,n_walls=8,max_episode_steps=64``; ``AMaze-13x13-v0``
        with the id's own settings). Runs on different mazes are different tasks to
        ``lamella eval aggregate``, not one."""
        try:
            _, params = lamella.envs.make(self.env_id, autoreset=False)
        except KeyError:  # an unknown id: building the runner names it (a ConfigError, exit 2)
            return self.env_id
        settings = {
            "height": self.height or getattr(params, "height", 0),
            "width": self.width or getattr(params, "width", 0),
            "n_walls": self.n_walls,
            "replace_wall_pos": self.replace_wall_pos,
            "max_episode_steps": self.max_episode_steps,
        }
        # Only the settings the env has: a Foraging level takes the horizon alone (default_family).
        changed = [
            f"{field}={value}"
            for field, value in settings.items()
            if hasattr(params, field) and value != getattr(params, field)
        ]
        return f"{self.env_id}:{','.join(changed)}" if changed else self.env_id

    def validate(self) -> None:
        """Raise ``ValueError`` (:class:`~lamella.agents.config.ConfigError` for the sizes) naming the
        first setting that cannot work, and the fix."""
        check_ppo_sizes(self, recurrent=self.recurrent)
        name = type(self).__name__
        for field in ("height", "width"):  # 0 takes the env id's own size
            if int(getattr(self, field)) < 0:
                raise ConfigError(
                    f"{name}.{field} must be >= 1 (or 0: the env id's own size), got {getattr(self, field)}."
                )
        for field, low in (
            ("n_walls", 0),
            ("max_episode_steps", 1),
            ("conv_filters", 1),
            ("eval_max_steps", 0),
        ):
            if int(getattr(self, field)) < low:
                raise ConfigError(f"{name}.{field} must be >= {low}, got {getattr(self, field)}.")
        if self.cell not in ("lstm", "gru"):
            raise ValueError(f"{name}.cell must be 'lstm' or 'gru', got {self.cell!r}.")
        if self.screenshot_every < 0:
            raise ValueError(
                f"{name}.screenshot_every must be >= 0 (0: no screenshots), got {self.screenshot_every}."
            )

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}`` (``lamella train`` refuses such a field set as an
        override; a preset's value is no error, :func:`lamella.agents.config.check_unused_settings`):
        the student's ``cell`` / ``rnn_hidden_size`` when it is feed-forward and ``torso_size`` when
        it is recurrent, ``screenshot_dir`` without ``screenshot_every``, and on an env that is not
        AMaze (Level-Based Foraging: no walls, an MLP student) ``n_walls``, ``replace_wall_pos`` and
        ``conv_filters``."""
        unused = network_settings_unread(self, "", "student")
        if self.screenshot_every == 0:
            unused |= unused_settings_of(
                self,
                {"screenshot_dir": "is where the screenshots go"},
                "screenshot_every=0 writes none",
                "set screenshot_every (draw the levels every this many iterations)",
            )
        if not _is_amaze(self.env_id):
            unused |= unused_settings_of(
                self,
                {
                    "n_walls": "is the wall budget of AMaze's random levels",
                    "replace_wall_pos": "draws AMaze's random walls with or without replacement",
                    "conv_filters": "is the width of the gridworld student's convolution",
                },
                f"{self.env_id} is not AMaze: its level family draws levels without walls for an MLP student",
                "train on an AMaze id",
            )
        return unused


def _is_amaze(env_id: str) -> bool:
    """Whether ``env_id`` makes lamella-envs' AMaze (an unknown id: True, so nothing is named
    unused; :func:`default_family` names the id)."""
    from lamella.envs import maze

    try:
        env, _ = lamella.envs.make(env_id, autoreset=False)
    except Exception:
        return True
    return isinstance(env.unwrapped, maze.AMaze)


def network_settings_unread(config: Any, prefix: str, who: str) -> dict[str, str]:
    """``{field: message}`` for a config's ``unused_settings()``: a network's ``<prefix>cell`` and
    ``<prefix>rnn_hidden_size`` when ``<prefix>recurrent`` is off, its ``<prefix>torso_size`` when
    it is on (the recurrent networks, minimax's and the MLP student, have no such torso)."""
    switch = f"{prefix}recurrent"
    if getattr(config, switch):
        return unused_settings_of(
            config,
            {f"{prefix}torso_size": f"is the width of the feed-forward {who}'s torso"},
            f"{switch}=True builds the recurrent {who}, which has none",
            f"set {switch}=False",
        )
    return unused_settings_of(
        config,
        {
            f"{prefix}cell": f"is the recurrent {who}'s cell",
            f"{prefix}rnn_hidden_size": f"is the width of the recurrent {who}'s memory",
        },
        f"{switch}=False builds a feed-forward {who}",
        f"set {switch}=True",
    )


@dataclasses.dataclass(frozen=True)
class PLRConfig(DRConfig):
    """Prioritised level replay; ``robust=True`` is Robust PLR (PLR-perp). Defaults are
    minimax's maze PLR config (``plr.json``).

    Attributes (beyond :class:`DRConfig`'s):
        score: the level score (:data:`lamella.ued.scores.SCORES`).
        buffer_size: level buffer capacity (>= ``num_envs``).
        prioritization: ``"rank"`` or ``"proportional"``.
        temperature: prioritisation temperature.
        staleness_coef: weight of staleness in the replay distribution.
        replay_prob: probability of replaying once the buffer is warm.
        min_fill_ratio: buffer fill before replay starts.
        robust: gradient steps on replayed levels only.
        dedupe: the buffer keeps one entry per distinct level.
        parallel: Parallel PLR (minimax's ``use_parallel_eval``): every iteration plays
            ``num_envs`` new levels and ``num_envs`` replayed levels (ACCEL: and ``num_envs``
            edits of the replayed ones) in one rollout, scores them all, and takes the
            gradient step on the replayed levels only (see :class:`ParallelPLRConfig`).
            Requires ``replay_prob=1``.
    """

    learning_rate: float = 3e-4
    gamma: float = 0.999
    ent_coef: float = 0.0
    score: str = "max_mc"
    buffer_size: int = 4000
    prioritization: str = "rank"
    temperature: float = 0.3
    staleness_coef: float = 0.3
    replay_prob: float = 0.5
    min_fill_ratio: float = 0.5
    robust: bool = True
    dedupe: bool = True
    parallel: bool = False

    @property
    def num_slices(self) -> int:
        """Level batches of ``num_envs`` played per iteration: 1; Parallel PLR 2 (new,
        replayed); Parallel ACCEL 3 (new, replayed, edits of the replayed)."""
        if not self.parallel:
            return 1
        return 3 if isinstance(self, ACCELConfig) else 2

    @property
    def steps_per_iteration(self) -> int:
        return self.num_slices * self.num_envs * self.num_steps

    def validate(self) -> None:
        super().validate()
        name = type(self).__name__
        if self.parallel and self.replay_prob != 1.0:
            raise ValueError(
                f"{name}: parallel=True replays a batch every iteration once the buffer is warm "
                f"(minimax forces replay_prob=1), but replay_prob is {self.replay_prob}; set "
                "replay_prob=1.0 (or use the parallel_plr / parallel_accel presets)."
            )
        if self.robust and not is_swept(self.replay_prob) and float(self.replay_prob) == 0.0:
            raise ConfigError(
                f"{name}: robust=True takes gradient steps on replayed levels only, and with "
                "replay_prob=0 no level is ever replayed, so the student never trains; raise "
                "replay_prob above 0 or set robust=False (PLR that learns on new levels too)."
            )
        if self.score not in scores_lib.SCORES:
            raise ValueError(
                f"{name}.score must be one of {', '.join(scores_lib.SCORES)}, got {self.score!r}."
            )
        if self.num_steps < self.max_episode_steps:
            raise ValueError(
                f"{name}.num_steps ({self.num_steps}) is shorter than an episode (max_episode_steps="
                f"{self.max_episode_steps}): a level the student never solves would complete no "
                "episode in a rollout, so it would get no score and never enter the level buffer; "
                "raise num_steps to at least max_episode_steps (or lower max_episode_steps)."
            )
        if self.buffer_size < self.num_envs:
            raise ValueError(
                f"{name}.buffer_size ({self.buffer_size}) is smaller than the batch of num_envs "
                f"({self.num_envs}) levels; raise buffer_size to at least {self.num_envs}."
            )
        if self.prioritization == "proportional" and self.score in ("max_mc", "neg_return"):
            raise ValueError(
                f"{name}: the {self.score} score can be negative, which proportional prioritisation "
                "cannot weigh; use prioritization='rank' or score='positive_value_loss'."
            )
        make_level_buffer(
            self.buffer_size,
            prioritization=self.prioritization,
            temperature=self.temperature,
            staleness_coef=self.staleness_coef,
            replay_prob=self.replay_prob,
            min_fill_ratio=self.min_fill_ratio,
        )


@dataclasses.dataclass(frozen=True)
class ACCELConfig(PLRConfig):
    """ACCEL: PLR whose new levels are also edits of replayed ones. Defaults are minimax's maze
    ACCEL config (``accel.json``: empty DR levels, 20 edits per mutation).

    Attributes (beyond :class:`PLRConfig`'s):
        num_edits: edits per mutation.
    """

    n_walls: int = 0
    replay_prob: float = 0.8
    staleness_coef: float = 0.5
    num_edits: int = 20

    def validate(self) -> None:
        super().validate()
        name, edits = type(self).__name__, self.num_edits
        # A bool, or a NumPy / JAX float, passes the field's type check (a plain 2.5 does not):
        # the mutator's loop would fail on it (AMaze) or cut it to an int silently (Foraging).
        if isinstance(edits, (bool, np.bool_)) or not jnp.issubdtype(jnp.result_type(edits), jnp.integer):
            raise ConfigError(
                f"{name}.num_edits must be an int (edits per mutation), got {edits} "
                f"({getattr(edits, 'dtype', type(edits).__name__)}); write a whole number >= 1."
            )
        # A traced count (a sweep's probe) fails here as a Python value: the sweep splits over it.
        if int(edits) < 1:
            raise ConfigError(
                f"{name}.num_edits must be >= 1 (edits per mutation), got {edits}; for no edits "
                "train PLR (PLRConfig, lamella train plr)."
            )


@dataclasses.dataclass(frozen=True)
class ParallelPLRConfig(PLRConfig):
    """Parallel PLR (minimax's PLR with ``use_parallel_eval``; ``pplr.json``): every iteration
    rolls out ``num_envs`` new random levels and ``num_envs`` levels replayed from the buffer
    side by side (``2 * num_envs`` envs, one rollout). Both batches are scored and update the
    buffer (new levels inserted, replayed levels re-scored); the PPO gradient step uses the
    replayed batch only. Until the buffer is ``min_fill_ratio`` full the replayed batch is a
    second batch of new levels and, with ``robust=True``, there is no gradient step.
    """

    # minimax's 30,000 updates, each a rollout of 2 batches of 32 levels x 256 steps.
    total_timesteps: int = 30_000 * 2 * 32 * 256
    staleness_coef: float = 0.5
    gae_lambda: float = 0.95
    replay_prob: float = 1.0
    parallel: bool = True


@dataclasses.dataclass(frozen=True)
class ParallelACCELConfig(ACCELConfig):
    """Parallel ACCEL (minimax's ACCEL with ``use_parallel_eval``; ``paccel.json``): as
    :class:`ParallelPLRConfig`, plus a third batch of ``num_envs`` levels, each an edit
    (``num_edits`` edits) of one of this iteration's replayed levels, rolled out in the same
    rollout (``3 * num_envs`` envs), scored and inserted; no gradient step on it. Until the
    buffer is warm that batch is a third batch of new levels.
    """

    total_timesteps: int = 30_000 * 3 * 32 * 256  # minimax's 30,000 updates of 3 batches
    learning_rate: float = 1e-4
    ent_coef: float = 1e-3
    replay_prob: float = 1.0
    parallel: bool = True


class UEDRunnerState(struct.PyTreeNode):
    """What a UED run carries between iterations (arrays only).

    Attributes:
        params: the student network's parameters.
        opt_state: the optimiser's state.
        buffer: the level buffer (``()`` for DR).
        parent_levels: ACCEL: the levels the last iteration replayed (``()`` otherwise).
        parent_edits: int32 ``(num_envs,)``: their edit counts (ACCEL).
        last_branch: int32 ``()``: what the last iteration played (0 new, 1 replay, 2 mutate).
        key: the run's key.
        iteration: int32 ``()``.
        last_return: float32 ``()``: the last reported mean training return.
        seed: uint32 ``()``: the last word of the key ``init`` got (the seed, for the
            driver's ``jax.random.key(seed)``): names the run's screenshots.
    """

    params: Any
    opt_state: Any
    buffer: Any
    parent_levels: Any
    parent_edits: Any
    last_branch: jax.Array
    key: jax.Array
    iteration: jax.Array
    last_return: jax.Array
    seed: jax.Array


def _method(config: DRConfig) -> str:
    if hasattr(config, "ued_score"):
        raise TypeError(
            f"make_ued_runner trains DR, PLR and ACCEL; a {type(config).__name__} trains with "
            "lamella.ued.paired.make_paired_runner (lamella train paired / minimax)."
        )
    if isinstance(config, ACCELConfig):
        return "accel"
    if isinstance(config, PLRConfig):
        return "plr"
    return "dr"


def make_actor_critic(config: DRConfig, action_space: Any, network: str = "gridworld") -> ActorCritic:
    """The student network as an :class:`~lamella.agents.ActorCritic`: minimax's (see
    :mod:`lamella.ued.networks`), or with ``network="mlp"`` lamella-agents'
    ``FeedForwardActorCriticNet`` (torso ``(torso_size, hidden_size)``) on a vector observation.

    A multi-agent env's ``MultiDiscrete([k] * n)`` action space gives each agent a ``Discrete(k)``
    head: the network maps the last axis of each agent's observation, with one set of
    parameters for every agent (parameter sharing).

    With ``network="mlp"`` and ``config.recurrent``, the student is lamella-agents'
    ``RecurrentActorCriticNet``: one dense layer of ``rnn_hidden_size``, the ``cell`` (LSTM or
    GRU), then ``hidden_size``-wide actor and critic layers (``torso_size`` is not used). On a
    multi-agent env each agent has its own memory, ``(envs, agents, ...)``
    (:func:`per_agent_memory`), and all share the parameters.
    """
    if network == "mlp":
        num_agents = 1
        if isinstance(action_space, spaces.MultiDiscrete):
            nvec = np.asarray(action_space.nvec).reshape(-1)
            if np.any(nvec != nvec[0]):
                raise ValueError(f"a shared-parameter student needs one action count per agent, got {nvec}.")
            action_space, num_agents = spaces.Discrete(int(nvec[0])), len(nvec)
        if config.recurrent:
            recurrent_net = RecurrentActorCriticNet(
                action_space,
                hidden_sizes=(config.hidden_size,),
                cell=config.cell,
                rnn_hidden_size=config.rnn_hidden_size,
            )
            single = recurrent_actor_critic(recurrent_net, recurrent_net.initial_memory)
            return per_agent_memory(single, num_agents) if num_agents > 1 else single
        return feedforward_actor_critic(
            FeedForwardActorCriticNet(action_space, hidden_sizes=(config.torso_size, config.hidden_size))
        )
    if config.recurrent:
        net = RecurrentGridworldNet(
            action_space,
            conv_filters=config.conv_filters,
            cell=config.cell,
            rnn_hidden_size=config.rnn_hidden_size,
            hidden_size=config.hidden_size,
        )
        return recurrent_actor_critic(net, net.initial_memory)
    return feedforward_actor_critic(
        GridworldNet(
            action_space,
            conv_filters=config.conv_filters,
            torso_size=config.torso_size,
            hidden_size=config.hidden_size,
        )
    )


def _mean_where(values: jax.Array, ok: jax.Array) -> jax.Array:
    return jnp.sum(jnp.where(ok, values, 0.0)) / jnp.maximum(jnp.sum(ok), 1)


#: Where UED's presets are (for :func:`~lamella.agents.config.check_config_type`'s message).
UED_PRESETS = "take a preset: lamella.ued.presets.PRESETS[algorithm][preset]."


def make_ued_runner(config: DRConfig, family: LevelFamily | None = None) -> Runner:
    """A :class:`~lamella.agents.runner.Runner` for a DR, PLR or ACCEL config (see the module docs).

    Args:
        config: a :class:`DRConfig`, :class:`PLRConfig` or :class:`ACCELConfig`.
        family: the env's levels (default: :func:`lamella.ued.levels.level_family` of
            ``lamella.envs.make(config.env_id)`` with ``n_walls``, ``replace_wall_pos`` and
            ``max_episode_steps`` from the config).

    Raises:
        ValueError: an inconsistent config, or evaluation levels that do not fit the env.

    Every one of these runners splits its envs over devices (``Runner.sharding``, the
    driver's ``num_devices``): every device chooses the iteration's levels as one device does
    (the level buffer is replicated; sampling and its updates are cheap), plays its block of
    ``num_envs / num_devices`` of them, and trains on them with the gradients averaged over
    devices; the rollout's per-level rewards, values and advantages are gathered, so the level
    scores, the buffer update and the metrics are those of one device. Parallel PLR / ACCEL
    split their one rollout of ``2`` or ``3 * num_envs`` envs (every batch) in equal blocks the
    same way; the whole rollout is gathered, and each device trains on its block of the
    replayed batch.
    """
    check_config_type(
        config,
        DRConfig,
        "make_ued_runner",
        f"Build one: DRConfig(...), PLRConfig(...) or ACCELConfig(...), or {UED_PRESETS}",
    )
    return _ued_runner(config, family, DeviceAxis())


def _ued_runner(config: DRConfig, family: LevelFamily | None, devices: DeviceAxis) -> Runner:
    """The UED runner for one device's block of ``config.num_envs`` (all of them on one device)."""
    config.validate()
    method = _method(config)
    with jax.ensure_compile_time_eval():
        if family is None:
            family = default_family(config)
        bare, env_params = family.env, family.env_params
        action_space = bare.action_space(env_params)
    num_envs, num_steps = config.num_envs, config.num_steps
    given_family = family
    check_family(config, family)
    check_ppo_sizes(config, recurrent=config.recurrent, num_devices=devices.size)
    local_envs = devices.local(num_envs, "num_envs")
    actor_critic = make_actor_critic(config, action_space, family.network)
    team = make_team(bare.num_agents)
    evaluate_params = make_level_evaluator(config, family, actor_critic)
    draw_episode = make_level_episode_drawer(config, family, actor_critic)

    # DR restarts an ended episode on a new random level (minimax's DR); PLR/ACCEL on the same one.
    inner = wrappers.AutoReset(bare) if method == "dr" else family.replay_wrapper(bare)
    train_env = wrappers.EpisodeStatistics(OnLevel(inner))
    parallel = isinstance(config, PLRConfig) and config.parallel
    # Parallel PLR / ACCEL play 2 or 3 batches of num_envs levels side by side in one rollout.
    num_slices = config.num_slices if isinstance(config, PLRConfig) else 1
    robust = isinstance(config, PLRConfig) and config.robust
    score_name = config.score if isinstance(config, PLRConfig) else ""
    rollout = make_rollout(
        train_env,
        num_steps,
        num_slices * num_envs,
        info_keys=("returned_episode", "returned_episode_returns"),
        params_axis=0,
        devices=devices,
    )
    batch_params = tile_params(env_params, num_slices * local_envs)

    optimizer, ppo_update = make_ppo_update_from_config(actor_critic, config, devices)
    buffer: LevelBuffer | None = None
    if isinstance(config, PLRConfig):
        buffer = make_level_buffer(
            config.buffer_size,
            levels_equal=family.levels_equal if config.dedupe else None,
            prioritization=config.prioritization,
            temperature=config.temperature,
            staleness_coef=config.staleness_coef,
            replay_prob=config.replay_prob,
            min_fill_ratio=config.min_fill_ratio,
        )
    sample_levels = jax.vmap(family.sample_level, in_axes=(0, None))
    record = None
    if config.screenshot_every > 0:
        from lamella.ued.screenshots import make_screenshot_recorder

        # A sweep builds the runner with its swept settings traced: each config's pictures go
        # to a folder of its own, named by those settings.
        swept = {
            field.name: value
            for field in dataclasses.fields(config)
            if isinstance(value := getattr(config, field.name), jax.Array)
            and np.ndim(value) == 0
            and is_swept(value)
        }
        record = make_screenshot_recorder(
            config.screenshot_dir, config.screenshot_every, image=family.level_image, variant=swept
        )
    num_edits = config.num_edits if isinstance(config, ACCELConfig) else 0

    def init(key: jax.Array) -> UEDRunnerState:
        lamella.envs.check_prng_key(key, "init", "jax.vmap(runner.init)")
        data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
        seed = jnp.asarray(data).reshape(-1)[-1].astype(jnp.uint32)
        key, key_net, key_level = jax.random.split(key, 3)
        example = family.sample_level(key_level, env_params)
        obs_example, _ = OnLevel(bare).reset(key_level, LevelParams(example, env_params))
        params = actor_critic.init(key_net, jax.tree.map(lambda x: x[None], obs_example))
        accel = method == "accel" and not parallel
        levels = jax.tree.map(lambda x: jnp.zeros((num_envs, *x.shape), x.dtype), example)
        return UEDRunnerState(
            params=params,
            opt_state=optimizer.init(params),
            buffer=buffer.init(example) if buffer is not None else (),
            parent_levels=levels if accel else (),
            parent_edits=jnp.zeros((num_envs,), jnp.int32) if accel else (),
            last_branch=jnp.zeros((), jnp.int32),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            last_return=jnp.zeros((), jnp.float32),
            seed=seed,
        )

    def choose_levels(
        state: UEDRunnerState, keys: jax.Array
    ) -> tuple[jax.Array, Any, Any, jax.Array, jax.Array]:
        """``(branch, buffer, levels, slots, edits)`` of this iteration."""
        new_levels = sample_levels(hashed_keys(keys[0], (num_envs,)), env_params)
        zeros = jnp.zeros((num_envs,), jnp.int32)
        if buffer is None:
            return jnp.int32(NEW), (), new_levels, zeros, zeros
        replay = buffer.should_replay(state.buffer, keys[1])
        branch = jnp.where(replay, REPLAY, NEW).astype(jnp.int32)
        if method == "accel":
            branch = jnp.where(state.last_branch == REPLAY, MUTATE, branch).astype(jnp.int32)

        def new(_: Any) -> tuple[Any, Any, jax.Array, jax.Array]:
            return state.buffer, new_levels, zeros - 1, zeros

        def replayed(_: Any) -> tuple[Any, Any, jax.Array, jax.Array]:
            buf, slots, levels = buffer.sample(state.buffer, keys[2], num_envs)
            return buf, levels, slots, buf.num_edits[slots]

        def mutated(_: Any) -> tuple[Any, Any, jax.Array, jax.Array]:
            levels = jax.vmap(family.mutate_level, in_axes=(0, 0, None, None))(
                hashed_keys(keys[3], (num_envs,)), state.parent_levels, env_params, num_edits
            )
            return state.buffer, levels, zeros - 1, state.parent_edits + num_edits

        branches = [new, replayed] + ([mutated] if method == "accel" else [])
        buf, levels, slots, edits = jax.lax.switch(branch, branches, None)
        return branch, buf, levels, slots, edits

    def step(state: UEDRunnerState) -> tuple[UEDRunnerState, dict[str, jax.Array]]:
        keys = hashed_keys(state.key, (8,))
        branch, buf, levels, slots, edits = choose_levels(state, keys[1:5])
        # This device plays its block of the levels (all of them on one device).
        level_params = LevelParams(devices.take(levels), batch_params)
        start = rollout.init(keys[5], level_params, actor_critic.initial_memory(local_envs))
        params = state.params
        policy = actor_critic_policy(actor_critic, params, devices=devices)
        end, tr = rollout.collect(start, policy, keys[6], level_params)

        advantage, target = rollout_advantages(
            actor_critic, params, tr, end.memory, config.gamma, config.gae_lambda
        )

        learn = jnp.asarray(True)
        if isinstance(config, PLRConfig) and config.robust:
            learn = branch == REPLAY

        def update(_: Any) -> tuple[Any, Any, dict[str, jax.Array]]:
            return ppo_update(params, state.opt_state, ppo_batch(tr, advantage, target), keys[7])

        def skip(_: Any) -> tuple[Any, Any, dict[str, jax.Array]]:
            shapes = jax.eval_shape(update, None)[2]
            return params, state.opt_state, {k: jnp.zeros(v.shape, v.dtype) for k, v in shapes.items()}

        new_params, opt_state, ppo_metrics = jax.lax.cond(learn, update, skip, None)

        # Every level's rewards, values and advantages (on several devices: gathered in order),
        # so the scores, the buffer update and the metrics below are those of one device.
        tr, advantage = devices.gather(
            (tr.replace(obs=(), action=(), raw_action=(), final_obs=(), memory=()), advantage), axis=1
        )
        # Level scores of this rollout (every score, for the logs; config.score drives the buffer);
        # a multi-agent env's levels are scored on the team's streams (summed over agents).
        reward, value_t, advantage, done, info = team(tr.reward, tr.value, advantage, tr.done, tr.info)
        stats = scores_lib.episode_stats(reward, done)
        completed = stats.num_episodes > 0
        prior_best = jnp.full((num_envs,), -jnp.inf, jnp.float32)
        if buffer is not None:
            prior_best = jnp.where(branch == REPLAY, buf.best_returns[jnp.maximum(slots, 0)], prior_best)
        metrics: dict[str, jax.Array] = {}
        for name in scores_lib.SCORES:
            value, best = scores_lib.level_score(name, reward, value_t, advantage, done, prior_best)
            metrics[f"score_{name}"] = _mean_where(value, jnp.isfinite(value))
            if isinstance(config, PLRConfig) and name == config.score:
                level_scores, best_returns = value, best

        if buffer is not None:

            def replayed_update(buf: LevelBufferState) -> LevelBufferState:
                return buffer.update(buf, slots, level_scores, best_returns)

            def inserted(buf: LevelBufferState) -> LevelBufferState:
                return buffer.insert(buf, levels, level_scores, best_returns, num_edits=edits)[0]

            buf = jax.lax.cond(branch == REPLAY, replayed_update, inserted, buf)
            filled = buf.filled
            metrics.update(
                {
                    "buffer_size": buf.size.astype(jnp.float32),
                    "buffer_mean_score": _mean_where(buf.scores, filled & jnp.isfinite(buf.scores)),
                    "buffer_mean_staleness": _mean_where(buf.staleness.astype(jnp.float32), filled),
                    "buffer_mean_edits": _mean_where(buf.num_edits.astype(jnp.float32), filled),
                    "buffer_max_score": jnp.max(jnp.where(filled, buf.scores, -jnp.inf)),
                    "replay": (branch == REPLAY).astype(jnp.float32),
                    "mutate": (branch == MUTATE).astype(jnp.float32),
                    "learned": learn.astype(jnp.float32),
                }
            )

        ended = info["returned_episode"]
        num_ended = ended.sum()
        ended_returns = info["returned_episode_returns"]
        mean_return = jnp.where(
            num_ended > 0, (ended_returns * ended).sum() / jnp.maximum(num_ended, 1), state.last_return
        ).astype(jnp.float32)
        level_stats = jax.vmap(family.level_stats)(levels)
        metrics.update({k: v.astype(jnp.float32) for k, v in ppo_metrics.items()})
        metrics.update(
            {
                "train_return": mean_return,
                "episodes": num_ended.astype(jnp.float32),
                "solve_rate": _mean_where(
                    ((ended_returns > family.solved_above) & ended).astype(jnp.float32), ended
                ),
                "levels_completed": completed.mean(dtype=jnp.float32),
                **{f"level_{k}": v.mean() for k, v in level_stats.items()},
            }
        )
        if record is not None:
            record(state.iteration, state.seed, branch, levels, buf if buffer is not None else None)
        accel = method == "accel"
        new_state = UEDRunnerState(
            params=new_params,
            opt_state=opt_state,
            buffer=buf,
            parent_levels=levels if accel else (),
            parent_edits=edits if accel else (),
            last_branch=branch,
            key=keys[0],
            iteration=state.iteration + 1,
            last_return=mean_return,
            seed=state.seed,
        )
        return new_state, metrics

    def parallel_step(state: UEDRunnerState) -> tuple[UEDRunnerState, dict[str, jax.Array]]:
        """Parallel PLR / ACCEL (minimax's ``use_parallel_eval``): one rollout of
        ``[new | replayed | edits of the replayed]`` levels; every batch updates the buffer, the
        gradient step uses the replayed batch only."""
        assert buffer is not None
        keys = hashed_keys(state.key, (8,))
        n = num_envs
        fresh = sample_levels(hashed_keys(keys[1], (num_slices * n,)), env_params)
        part = lambda tree, i: jax.tree.map(lambda x: x[i * n : (i + 1) * n], tree)  # noqa: E731
        # replay_prob is 1: the replayed batch is replayed as soon as the buffer is warm.
        warm = buffer.should_replay(state.buffer, keys[2])
        zeros = jnp.zeros((n,), jnp.int32)

        def replayed(_: Any) -> tuple[Any, Any, jax.Array, jax.Array]:
            buf, slots, levels = buffer.sample(state.buffer, keys[3], n)
            return buf, levels, slots, buf.num_edits[slots]

        def cold(_: Any) -> tuple[Any, Any, jax.Array, jax.Array]:
            return state.buffer, part(fresh, 1), zeros - 1, zeros

        buf, replay_levels, replay_slots, replay_edits = jax.lax.cond(warm, replayed, cold, None)
        parts, slots, edits = (
            [part(fresh, 0), replay_levels],
            [zeros - 1, replay_slots],
            [zeros, replay_edits],
        )
        if num_slices == 3:
            # Edits of this iteration's replayed levels (cold: a third batch of new levels).
            mutated = jax.vmap(family.mutate_level, in_axes=(0, 0, None, None))(
                hashed_keys(keys[4], (n,)), replay_levels, env_params, num_edits
            )
            mutated = jax.tree.map(lambda m, f: jnp.where(warm, m, f), mutated, part(fresh, 2))
            parts.append(mutated)
            slots.append(zeros - 1)
            edits.append(jnp.where(warm, replay_edits + num_edits, 0))
        levels = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
        slots_all, edits_all = jnp.concatenate(slots), jnp.concatenate(edits)

        # This device plays its block of the rollout's envs (all batches side by side).
        level_params = LevelParams(devices.take(levels), batch_params)
        start = rollout.init(keys[5], level_params, actor_critic.initial_memory(num_slices * local_envs))
        params = state.params
        policy = actor_critic_policy(actor_critic, params, devices=devices)
        end, tr = rollout.collect(start, policy, keys[6], level_params)
        advantage, target = rollout_advantages(
            actor_critic, params, tr, end.memory, config.gamma, config.gae_lambda
        )
        # Every env of every batch (on several devices: gathered in order), so the training
        # slice, the scores, the buffer update and the metrics are those of one device.
        tr, advantage, target = devices.gather((tr, advantage, target), axis=1)

        # The gradient step sees the replayed batch only (Robust: and only once it is replayed);
        # each device trains on its block of it.
        learn = jnp.logical_or(warm, not robust)
        replay_cut = lambda x: x[:, n : 2 * n]  # noqa: E731
        train_batch = ppo_batch(*devices.take(jax.tree.map(replay_cut, (tr, advantage, target)), axis=1))

        def update(_: Any) -> tuple[Any, Any, dict[str, jax.Array]]:
            return ppo_update(params, state.opt_state, train_batch, keys[7])

        def skip(_: Any) -> tuple[Any, Any, dict[str, jax.Array]]:
            shapes = jax.eval_shape(update, None)[2]
            return params, state.opt_state, {k: jnp.zeros(v.shape, v.dtype) for k, v in shapes.items()}

        new_params, opt_state, ppo_metrics = jax.lax.cond(learn, update, skip, None)

        reward, value_t, advantage, done, info = team(tr.reward, tr.value, advantage, tr.done, tr.info)
        stats = scores_lib.episode_stats(reward, done)
        is_replayed = jnp.logical_and(warm, slots_all >= 0)
        prior_best = jnp.where(is_replayed, buf.best_returns[jnp.maximum(slots_all, 0)], -jnp.inf).astype(
            jnp.float32
        )
        metrics: dict[str, jax.Array] = {}
        for name in scores_lib.SCORES:
            value, best = scores_lib.level_score(name, reward, value_t, advantage, done, prior_best)
            metrics[f"score_{name}"] = _mean_where(value, jnp.isfinite(value))
            if name == score_name:
                level_scores, best_returns = value, best

        buf = parallel_buffer_update(
            buffer, buf, warm, levels, slots_all, level_scores, best_returns, edits_all, num_slices
        )
        filled = buf.filled
        ended = info["returned_episode"]
        ended_returns = info["returned_episode_returns"]
        num_ended = ended.sum()
        mean_return = jnp.where(
            num_ended > 0, (ended_returns * ended).sum() / jnp.maximum(num_ended, 1), state.last_return
        ).astype(jnp.float32)
        solved = ((ended_returns > family.solved_above) & ended).astype(jnp.float32)
        metrics.update({k: v.astype(jnp.float32) for k, v in ppo_metrics.items()})
        metrics.update(
            {
                "buffer_size": buf.size.astype(jnp.float32),
                "buffer_mean_score": _mean_where(buf.scores, filled & jnp.isfinite(buf.scores)),
                "buffer_mean_staleness": _mean_where(buf.staleness.astype(jnp.float32), filled),
                "buffer_mean_edits": _mean_where(buf.num_edits.astype(jnp.float32), filled),
                "buffer_max_score": jnp.max(jnp.where(filled, buf.scores, -jnp.inf)),
                "replay": warm.astype(jnp.float32),
                "mutate": jnp.logical_and(warm, num_slices == 3).astype(jnp.float32),
                "learned": learn.astype(jnp.float32),
                "train_return": mean_return,
                "episodes": num_ended.astype(jnp.float32),
                # Over the episodes of every batch; replay_solve_rate: of the replayed batch.
                "solve_rate": _mean_where(solved, ended),
                "replay_solve_rate": _mean_where(replay_cut(solved), replay_cut(ended)),
                "levels_completed": (stats.num_episodes > 0).mean(dtype=jnp.float32),
            }
        )
        for i, prefix in enumerate(("level", "replay_level", "mutated_level")[:num_slices]):
            level_stats = jax.vmap(family.level_stats)(part(levels, i))
            metrics.update({f"{prefix}_{k}": v.mean().astype(jnp.float32) for k, v in level_stats.items()})
        if record is not None:
            # One grid per batch kind (cold: the extra batches are new levels, already written).
            record(state.iteration, state.seed, jnp.int32(NEW), part(levels, 0), buf)
            record(state.iteration, state.seed, jnp.where(warm, REPLAY, NEW), part(levels, 1), None)
            if num_slices == 3:
                record(state.iteration, state.seed, jnp.where(warm, MUTATE, NEW), part(levels, 2), None)
        new_state = UEDRunnerState(
            params=new_params,
            opt_state=opt_state,
            buffer=buf,
            parent_levels=(),
            parent_edits=(),
            last_branch=jnp.where(warm, REPLAY, NEW).astype(jnp.int32),
            key=keys[0],
            iteration=state.iteration + 1,
            last_return=mean_return,
            seed=state.seed,
        )
        return new_state, metrics

    def evaluate(state: UEDRunnerState, key: jax.Array) -> dict[str, jax.Array]:
        return evaluate_params(state.params, key)

    return Runner(
        init=init,
        step=parallel_step if parallel else step,
        evaluate=evaluate,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
        metric_axes=EVAL_METRIC_AXES,
        render_episode=lambda state, key: draw_episode(state.params, key),
        # The state holds no envs (each iteration starts its rollout from the levels it
        # chooses): the envs axis is split inside the step, and every state leaf is replicated.
        sharding=runner_sharding(
            devices,
            "num_envs",
            num_envs,
            lambda axis: _ued_runner(config, given_family, axis),
            lambda state: None,
        ),
    )


def parallel_buffer_update(
    buffer: LevelBuffer,
    state: LevelBufferState,
    replayed: jax.Array,
    levels: Any,
    slots: jax.Array,
    scores: jax.Array,
    best_returns: jax.Array,
    num_edits: jax.Array,
    num_slices: int,
) -> LevelBufferState:
    """The buffer after a Parallel PLR / ACCEL iteration, in minimax's order (one pass over
    ``[new | replayed | edited]``):

    1. the new levels (first ``num_envs``) are inserted;
    2. the replayed levels (next ``num_envs``, in ``slots``) get their new scores and best
       returns, except a slot step 1 just gave to a new level (minimax's ``insert_mask``);
       when the buffer was cold (``replayed`` False) they are new levels and are inserted;
    3. with ``num_slices == 3``, the edited levels (last ``num_envs``) are inserted with
       ``num_edits``.

    Levels without a score (``-inf``) change nothing (:meth:`LevelBuffer.insert`/``update``).
    """
    num = int(jnp.shape(scores)[0]) // num_slices
    part = lambda tree, i: jax.tree.map(lambda x: x[i * num : (i + 1) * num], tree)  # noqa: E731
    state, _ = buffer.insert(state, part(levels, 0), part(scores, 0), part(best_returns, 0))

    def rescore(state: LevelBufferState) -> LevelBufferState:
        replay_slots = part(slots, 1)
        stored = jax.tree.map(lambda x: x[replay_slots], state.levels)
        same = jax.tree.leaves(
            jax.tree.map(lambda a, b: jnp.all((a == b).reshape(num, -1), axis=1), stored, part(levels, 1))
        )
        still_there = jnp.all(jnp.stack(same), axis=0)
        return buffer.update(state, replay_slots, part(scores, 1), part(best_returns, 1), mask=still_there)

    def insert(state: LevelBufferState) -> LevelBufferState:
        return buffer.insert(state, part(levels, 1), part(scores, 1), part(best_returns, 1))[0]

    state = jax.lax.cond(replayed, rescore, insert, state)
    if num_slices == 3:
        state, _ = buffer.insert(
            state, part(levels, 2), part(scores, 2), part(best_returns, 2), num_edits=part(num_edits, 2)
        )
    return state


def default_family(config: DRConfig) -> LevelFamily:
    """The :class:`~lamella.ued.levels.LevelFamily` of ``lamella.envs.make(config.env_id)`` (no
    auto-reset) with the config's ``height``/``width`` (where > 0), ``n_walls``,
    ``replace_wall_pos`` and ``max_episode_steps``."""
    from lamella.envs import maze

    env, env_params = lamella.envs.make(config.env_id, autoreset=False)
    if not isinstance(env.unwrapped, maze.AMaze):
        # Another level-based env (Level-Based Foraging): only the episode horizon applies. An env
        # without levels (CartPole-v1) is refused by level_family, naming the envs that have them.
        if hasattr(env_params, "max_episode_steps"):
            env_params = env_params.replace(max_episode_steps=config.max_episode_steps)
        family = level_family(env, env_params)
        for field in ("height", "width"):  # 0: the id's own size, the only one such an env has
            if getattr(config, field) > 0:
                raise ConfigError(
                    f"{type(config).__name__}.{field}={getattr(config, field)} sizes AMaze levels, but "
                    f"{config.env_id} fixes its grid in its id; pick the id of the size you want "
                    "(lamella.envs.registered()) and leave height and width at 0."
                )
        return family
    size = {k: v for k, v in (("height", config.height), ("width", config.width)) if v > 0}
    env, env_params = lamella.envs.make(
        config.env_id,
        autoreset=False,
        n_walls=config.n_walls,
        replace_wall_pos=config.replace_wall_pos,
        max_episode_steps=config.max_episode_steps,
        **size,
    )
    return level_family(env, env_params)


def per_agent_memory(actor_critic: ActorCritic, num_agents: int) -> ActorCritic:
    """A recurrent single-agent ``actor_critic`` run by every agent of a multi-agent env with the
    same parameters and its own memory.

    Observations carry an agent axis after the batch axis (``(batch, n, ...)``, sequences
    ``(T, batch, n, ...)``) and memory is ``(batch, n, ...)``; ``reset`` stays per env
    (``(batch,)``, ``(T, batch)``: an episode starts for every agent at once). Each call folds
    the agents into the batch (``batch * n`` streams of the inner network, the reset flag
    repeated for each agent) and unfolds the outputs: distributions, values, log-probabilities
    and entropies ``(..., batch, n)``, as the feed-forward shared student gives them.
    """
    n = num_agents

    def fold(x: jax.Array, lead: int) -> jax.Array:  # (..lead.., B, n, ...) -> (..lead.., B * n, ...)
        return x.reshape((*x.shape[:lead], x.shape[lead] * n, *x.shape[lead + 2 :]))

    def unfold(x: jax.Array, lead: int) -> jax.Array:  # (..lead.., B * n, ...) -> (..lead.., B, n, ...)
        return x.reshape((*x.shape[:lead], x.shape[lead] // n, n, *x.shape[lead + 1 :]))

    def init(key: jax.Array, obs_example: Any) -> Any:
        return actor_critic.init(key, jax.tree.map(lambda x: fold(jnp.asarray(x), 0), obs_example))

    def initial_memory(batch_size: int) -> Any:
        return jax.tree.map(lambda x: unfold(x, 0), actor_critic.initial_memory(batch_size * n))

    def step(params: Any, memory: Any, obs: Any, reset: jax.Array) -> tuple[Any, Any, jax.Array]:
        memory, dist, value = actor_critic.step(
            params,
            jax.tree.map(lambda x: fold(x, 0), memory),
            jax.tree.map(lambda x: fold(x, 0), obs),
            jnp.repeat(reset, n, axis=0),
        )
        unfold0 = lambda x: unfold(x, 0)  # noqa: E731
        return jax.tree.map(unfold0, memory), jax.tree.map(unfold0, dist), unfold0(value)

    def evaluate_actions(
        params: Any, memory: Any, obs: Any, reset: jax.Array, raw_action: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        outputs = actor_critic.evaluate_actions(
            params,
            jax.tree.map(lambda x: fold(x, 0), memory),
            jax.tree.map(lambda x: fold(x, 1), obs),
            jnp.repeat(reset, n, axis=1),
            fold(raw_action, 1),
        )
        log_prob, value, entropy = (unfold(x, 1) for x in outputs)
        return log_prob, value, entropy

    def value(params: Any, memory: Any, obs: Any) -> jax.Array:
        return step(params, memory, obs, jnp.zeros(jnp.shape(jax.tree.leaves(obs)[0])[:1], bool))[2]

    return ActorCritic(init, initial_memory, step, evaluate_actions, value, recurrent=True)


def check_family(config: DRConfig, family: LevelFamily) -> None:
    """Raise :class:`~lamella.agents.config.ConfigError` naming the fix when ``config`` cannot
    train on ``family``'s env (before anything compiles): an unknown network, screenshots without
    a drawer, and (traced once with ``jax.eval_shape``) an ACCEL mutator whose levels differ from
    the generator's in structure, shape or dtype, or a comparator (PLR's de-duplication) that does
    not return one bool per pair of levels."""
    name = type(config).__name__
    if family.network not in ("gridworld", "mlp"):
        raise ConfigError(f"LevelFamily.network must be 'gridworld' or 'mlp', got {family.network!r}.")
    if config.screenshot_every > 0 and family.level_image is None:
        raise ConfigError(
            f"{name}: screenshots need a level drawer, and the level family of {family.env.name} "
            "has none; give the LevelFamily a level_image(level, tile) (a NumPy drawer, see "
            "lamella.ued.screenshots) or set screenshot_every=0."
        )
    # A user's generator, mutator or comparator that does not fit the levels fails inside the
    # step's lax.switch or the buffer's scan otherwise, far from the cause: trace them once here.
    compares = isinstance(config, PLRConfig) and config.dedupe
    check_takes(config, "sample_level", family.sample_level, ("key", "env_params"))
    check_takes(config, "level_stats", family.level_stats, ("level",))
    if isinstance(config, ACCELConfig):
        check_takes(config, "mutate_level", family.mutate_level, ("key", "level", "env_params", "num_edits"))
    if compares:
        check_takes(config, "levels_equal", family.levels_equal, ("a", "b"))
    key = jax.random.key(0)
    level = jax.eval_shape(family.sample_level, key, family.env_params)
    stats = jax.eval_shape(family.level_stats, level)
    if not isinstance(stats, Mapping):
        raise ConfigError(
            f"{name}: the LevelFamily's level_stats(level) must return a dict {{name: number}} (each "
            f"logged as level_<name>), got {describe_level(stats)}; wrap it: {{'my_stat': value}}."
        )
    if isinstance(config, ACCELConfig):
        edited = jax.eval_shape(family.mutate_level, key, level, family.env_params, config.num_edits)
        if level_signature(edited) != level_signature(level):
            raise ConfigError(
                f"{name}: the LevelFamily's mutate_level returns {describe_level(edited)} but its "
                f"sample_level returns {describe_level(level)}; a mutator must return a level of the "
                "same structure, shapes and dtypes as the one it edits (ACCEL plays and stores both)."
            )
    if compares:
        same = jax.eval_shape(family.levels_equal, level, level)
        if not (isinstance(same, jax.ShapeDtypeStruct) and same.shape == ()):
            raise ConfigError(
                f"{name}: the LevelFamily's levels_equal(a, b) must return one bool () per pair of "
                f"levels, got {describe_level(same)}; reduce it over the level (jnp.all(...)), or set "
                "dedupe=False."
            )


def check_takes(config: Any, piece: str, function: Any, args: tuple[str, ...]) -> None:
    """Raise :class:`~lamella.agents.config.ConfigError` when the LevelFamily's ``piece`` cannot be
    called with the runners' positional ``args`` (a Python ``TypeError`` from the first call
    otherwise, with no word of the signature the runners call it with)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read (a C function): the call will tell
        return
    try:
        signature.bind(*args)
    except TypeError as error:
        called = getattr(function, "__name__", type(function).__name__)
        raise ConfigError(
            f"{type(config).__name__}: the LevelFamily's {piece} must take ({', '.join(args)}), the "
            f"arguments the runners pass, positionally; got {called}{signature} ({error})."
        ) from None


def level_signature(level: Any) -> tuple[Any, list[tuple[tuple[int, ...], Any]]]:
    """What two levels must share to be played, stored and compared together: the pytree
    structure and every leaf's shape and dtype (of arrays or ``jax.ShapeDtypeStruct``)."""
    leaves, treedef = jax.tree.flatten(level)
    return treedef, [(tuple(jnp.shape(x)), jnp.result_type(x)) for x in leaves]


def describe_level(level: Any) -> str:
    """A level's type for messages: ``MazeLevel(wall_map: bool[7, 7], ...)``."""
    leaves = jax.tree_util.tree_flatten_with_path(level)[0]
    fields = ", ".join(
        f"{jax.tree_util.keystr(path).lstrip('.')}: {jnp.result_type(x)}{list(jnp.shape(x))}".lstrip(": ")
        for path, x in leaves
    )
    return f"{type(level).__name__}({fields})" if not isinstance(level, jax.ShapeDtypeStruct) else fields


def make_team(num_agents: int) -> Any:
    """``team(reward, value, advantage, done, info)``: a rollout's streams ``(T, B[, n])`` as the
    level's streams ``(T, B)``. A multi-agent env (``num_agents > 1``) scores a level on its team:
    rewards, values and advantages summed over agents (GAE is linear in rewards and values, so
    the summed advantages are the team's GAE), an episode over when all agents are done, the
    returned episode returns summed. The identity on a single-agent env."""
    if num_agents <= 1:
        return lambda reward, value, advantage, done, info: (reward, value, advantage, done, info)

    def team(reward: Any, value: Any, advantage: Any, done: Any, info: dict[str, Any]) -> tuple[Any, ...]:
        ended = info["returned_episode"]  # (T, B) already: EpisodeStatistics ends an episode per env
        info = {
            **info,
            "returned_episode": jnp.all(ended, axis=-1) if ended.ndim == reward.ndim else ended,
            "returned_episode_returns": jnp.sum(info["returned_episode_returns"], axis=-1),
        }
        return reward.sum(-1), value.sum(-1), advantage.sum(-1), jnp.all(done, axis=-1), info

    return team


def rollout_advantages(
    actor_critic: ActorCritic,
    params: Any,
    transitions: Any,
    last_memory: Any,
    gamma: float,
    gae_lambda: float,
    reward: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``(advantage, target)``, float32 ``(T, B)``: truncation-correct GAE of a collector's
    rollout, bootstrapping from the network's values of its final observations.

    Args:
        actor_critic: the network that collected the rollout.
        params: its parameters.
        transitions: the collector's :class:`~lamella.agents.rollout.Transition` ``(T, B, ...)``.
        last_memory: the collector's final memory (``RolloutState.memory``).
        gamma, gae_lambda: discount and GAE lambda.
        reward: float ``(T, B)`` rewards to use instead of ``transitions.reward`` (a teacher's
            return set by the runner).
    """
    num_steps, batch = transitions.value.shape[:2]
    flat = lambda x: x.reshape((num_steps * batch, *x.shape[2:]))  # noqa: E731
    after = jax.tree.map(flat, next_memory(transitions, last_memory))
    value_next = actor_critic.value(params, after, jax.tree.map(flat, transitions.final_obs)).reshape(
        transitions.value.shape
    )
    return losses.gae_advantages(
        transitions.reward if reward is None else reward,
        transitions.value,
        value_next,
        transitions.terminated,
        transitions.done,
        gamma,
        gae_lambda,
    )


#: The named axes of :func:`make_level_evaluator`'s per-level metrics (``Runner.metric_axes``).
EVAL_METRIC_AXES = {"level_return": ("level",), "solved": ("level",), "episode_length": ("level",)}


def make_level_evaluator(config: DRConfig, family: LevelFamily, actor_critic: ActorCritic) -> Any:
    """``evaluate(params, key) -> metrics``: ``config.eval_episodes`` episodes of the student
    ``params`` on each of ``config.eval_levels`` (named levels at their own horizon, or
    ``"random"``: fresh random levels of ``family``).

    Metrics: ``episode_return`` and ``solve_rate`` ``(episodes,)`` averaged over the levels;
    ``level_return``, ``solved`` and ``episode_length`` ``(episodes, levels)``
    (:data:`EVAL_METRIC_AXES`).

    Raises:
        ValueError: evaluation levels that do not fit the env (checked here, before compiling).
    """
    with jax.ensure_compile_time_eval():  # constants, even where a sweep traces the config
        eval_levels, eval_params = _eval_levels(config, family)
        longest = int(np.max(np.asarray(eval_params.max_episode_steps)))
    env_params = family.env_params
    sample_levels = jax.vmap(family.sample_level, in_axes=(0, None))
    eval_env = OnLevel(family.env)
    num_eval_levels = len(config.eval_levels)
    episodes = config.eval_episodes
    eval_batch = num_eval_levels * episodes
    repeat = lambda x: jnp.repeat(x, episodes, axis=0)  # noqa: E731
    fixed_levels = jax.tree.map(repeat, eval_levels)
    eval_level_params = jax.tree.map(repeat, eval_params)
    is_random = jnp.asarray(np.repeat([name == RANDOM for name in config.eval_levels], episodes))
    eval_horizon = config.eval_max_steps if config.eval_max_steps > 0 else longest

    def evaluate(params: Any, key: jax.Array) -> dict[str, jax.Array]:
        key_levels, key_run = hashed_keys(key, (2,))
        levels = fixed_levels
        if RANDOM in config.eval_levels:
            fresh = sample_levels(hashed_keys(key_levels, (eval_batch,)), env_params)
            levels = jax.tree.map(
                lambda new, old: jnp.where(is_random.reshape((-1,) + (1,) * (old.ndim - 1)), new, old),
                fresh,
                fixed_levels,
            )
        returns, lengths = evaluate_on_levels(
            actor_critic,
            params,
            eval_env,
            LevelParams(levels, eval_level_params),
            key_run,
            eval_batch,
            eval_horizon,
            greedy=config.eval_greedy,
        )
        shape = (num_eval_levels, episodes)
        returns, lengths = returns.reshape(shape).T, lengths.reshape(shape).T
        solved = (returns > family.solved_above).astype(jnp.float32)
        return {
            # Per episode, averaged over the evaluation levels: what the progress line and plot show.
            "episode_return": returns.mean(axis=1),
            "solve_rate": solved.mean(axis=1),
            # Per episode and level (run log keys ``<name>_level_<i>``, in eval_levels order).
            "level_return": returns,
            "solved": solved,
            "episode_length": lengths,
        }

    return evaluate


def make_level_episode_drawer(config: DRConfig, family: LevelFamily, actor_critic: ActorCritic) -> Any:
    """``draw(params, key) -> (frames, length)``: one evaluation episode of the student
    ``params`` on the first of ``config.eval_levels`` (a fresh random level for ``"random"``), at
    that level's horizon, acting as the evaluation acts (``config.eval_greedy``), every state
    drawn with the env's ``render`` (``lamella.agents.runner.episode_frames``). It is the
    runners' ``render_episode``: ``lamella train dr|plr|accel|paired ... --gif`` and the episodes
    of ``lamella eval report``.
    """
    # Concrete values even when the runner is built inside a trace (a sweep's variants).
    with jax.ensure_compile_time_eval():
        eval_levels, eval_params = _eval_levels(config, family)
        level, level_params = jax.tree.map(lambda x: x[0], (eval_levels, eval_params))
    horizon = (
        config.eval_max_steps
        if config.eval_max_steps > 0
        else int(np.asarray(level_params.max_episode_steps))
    )

    def policy(
        key: jax.Array, params: Any, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[Any, Any, Any]:
        reset = jnp.zeros(jax.tree.leaves(obs)[0].shape[:1], bool)
        memory, dist, _ = actor_critic.step(params, memory, obs, reset)
        return dist.to_action(dist.mode() if eval else dist.sample(key)), params, memory

    def unused(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the drawn episode only acts; the runner trains the student")

    student = Agent(init=unused, policy=policy, update=unused, reset_memory=unused)

    def draw(params: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        key_level, key_play = hashed_keys(key, (2,))
        played = (
            family.sample_level(key_level, family.env_params) if config.eval_levels[0] == RANDOM else level
        )
        return episode_frames(
            student,
            params,
            OnLevel(family.env),
            LevelParams(played, level_params),
            key_play,
            horizon,
            actor_critic.initial_memory(1),
            greedy=config.eval_greedy,
        )

    return draw


def _eval_levels(config: DRConfig, family: LevelFamily) -> tuple[Any, Any]:
    """The evaluation levels stacked (a placeholder for ``"random"``), with their params (each
    named level its own horizon)."""
    name = type(config).__name__
    if not config.eval_levels:
        raise ValueError(f"{name}.eval_levels is empty; name at least one test level (or 'random').")
    placeholder = family.sample_level(jax.random.key(0), family.env_params)
    shape = [jnp.shape(x) for x in jax.tree.leaves(placeholder)]
    levels, params = [], []
    for level_name in config.eval_levels:
        if level_name == RANDOM:
            levels.append(placeholder)
            params.append(family.env_params)
            continue
        if level_name not in family.named_levels:
            known = (
                f"use 'random' or one of {', '.join(family.named_levels)}"
                if family.named_levels
                else f"{family.env.name} has no named levels: use 'random'"
            )
            default = DRConfig.eval_levels
            if level_name in default and tuple(config.eval_levels) == default:
                # No preset for this env id (lamella train dr --env <id>): the defaults are minimax's.
                known += (
                    f". The default eval_levels ({', '.join(default)}) are AMaze's mazes: on "
                    f"{family.env.name} set eval_levels (command line: eval_levels=random)"
                )
            raise ValueError(f"{name}.eval_levels: unknown level {level_name!r}; {known}.")
        pair = family.named_level(level_name)
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ConfigError(
                f"{name}: the LevelFamily's named_level({level_name!r}) must return a pair (level, "
                f"env_params), got {type(pair).__name__}; return the level with the params to play "
                "it at (their horizon is the level's)."
            )
        level, level_params = pair
        if [jnp.shape(x) for x in jax.tree.leaves(level)] != shape:
            level_map: Any = getattr(level, "wall_map", jax.tree.leaves(level)[0])
            trained_map: Any = getattr(placeholder, "wall_map", jax.tree.leaves(placeholder)[0])
            size, trained = jnp.shape(level_map), jnp.shape(trained_map)
            raise ValueError(
                f"{name}.eval_levels: {level_name} is {size} (H, W) but the training "
                f"levels are {trained}; evaluate on levels of the training size (or 'random')."
            )
        levels.append(level)
        params.append(family.env_params.replace(max_episode_steps=level_params.max_episode_steps))
    stack = lambda *xs: jnp.stack([jnp.asarray(x) for x in xs])  # noqa: E731
    return jax.tree.map(stack, *levels), jax.tree.map(stack, *params)


def evaluate_on_levels(
    actor_critic: ActorCritic,
    params: Any,
    env: Environment[Any, Any],
    level_params: LevelParams,
    key: jax.Array,
    num_envs: int,
    max_steps: int,
    greedy: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """One episode on each of ``num_envs`` levels (``level_params`` with a leading axis), all at
    once: ``(returns float32, lengths int32)``, each ``(num_envs,)``. An episode still running
    after ``max_steps`` steps counts with what it has."""
    keys = hashed_keys(key, (2,))
    obs, env_state = jax.vmap(env.reset, in_axes=(0, 0))(hashed_keys(keys[0], (num_envs,)), level_params)
    memory = actor_critic.initial_memory(num_envs)
    reset = jnp.ones((num_envs,), bool)

    def cond(carry: tuple[Any, ...]) -> jax.Array:
        finished, t = carry[5], carry[6]
        return jnp.logical_and(~jnp.all(finished), t < max_steps)

    def body(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        obs, env_state, memory, returns, lengths, finished, t, key = carry
        step_keys = hashed_keys(key, (num_envs + 2,))
        memory, dist, _ = actor_critic.step(params, memory, obs, jnp.logical_and(reset, t == 0))
        raw = dist.mode() if greedy else dist.sample(step_keys[1])
        obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step)(
            step_keys[2:], env_state, dist.to_action(raw), level_params
        )
        done = jax.vmap(episode_done)(terminated, truncated)
        if reward.ndim > 1:  # a multi-agent env: the team's return
            reward = reward.sum(axis=tuple(range(1, reward.ndim)))
        returns = returns + jnp.where(finished, 0.0, reward)
        lengths = lengths + jnp.where(finished, 0, 1)
        return obs, env_state, memory, returns, lengths, finished | done, t + 1, step_keys[0]

    zeros = jnp.zeros((num_envs,), jnp.float32)
    carry = (
        obs,
        env_state,
        memory,
        zeros,
        jnp.zeros((num_envs,), jnp.int32),
        jnp.zeros((num_envs,), bool),
        jnp.zeros((), jnp.int32),
        keys[1],
    )
    out = jax.lax.while_loop(cond, body, carry)
    return out[3], out[4]
