"""PAIRED, population PAIRED and the minimax adversary: a teacher agent that builds the levels.

``make_paired_runner(config)`` builds a :class:`lamella.agents.runner.Runner` for a
:class:`PAIREDConfig`, :class:`MinimaxConfig` or :class:`PopulationPAIREDConfig`; the
lamella-agents driver trains it like every runner (``lamella train paired --preset ci``;
progress, run log, checkpoints, resume, seeds vmapped in one program). Every iteration is:

1. **The teacher builds ``num_envs`` levels.** The teacher (adversary) is a PPO agent on the
   level family's teacher MDP (``LevelFamily.teacher``; AMaze's
   :class:`lamella.envs.maze.AMazeTeacher`: one cell per step, ``n_walls`` walls, then the goal,
   then the agent; Level-Based Foraging's
   :class:`lamella.envs.multi_agent.lbf.ForagingTeacher`: each agent, then each food, with its
   level), collected with lamella-agents' :func:`~lamella.agents.make_rollout` for one whole
   episode per env.
2. **The students play them.** ``n_students`` students (one set of parameters each, stacked
   on a leading axis and run under one ``vmap``) each collect ``num_steps`` steps on the same
   levels (an ended episode restarts the same level) and take a PPO update, as the DR/PLR
   students do (:func:`lamella.ued.runners.rollout_advantages`,
   :func:`lamella.agents.make_ppo_update`).
3. **The teacher's return is the students' score of each level** (``ued_score``, from the
   completed episodes of step 2; a student with none counts as one episode of return 0, as in
   minimax; on a multi-agent env an episode's return is the team's, summed over agents), paid
   as the reward of the teacher's last step (bootstrap 0), and the teacher takes a PPO update.

=================================  ========  ================================================
config                             students  teacher's return per level
=================================  ========  ================================================
:class:`PAIREDConfig`              2         ``relative_regret``: antagonist's best return
                                             minus protagonist's mean return, clipped at 0
:class:`MinimaxConfig`             1         ``neg_return``: minus the protagonist's mean
                                             return
:class:`PopulationPAIREDConfig`    3         ``population_regret``: best student's best
                                             return minus the students' mean mean return
=================================  ========  ================================================

Student 0 is the protagonist: evaluation (``runner.evaluate``) plays it on ``eval_levels``, as
the DR/PLR runners play their student. The students are the DR/PLR runners' network for the
family (minimax's gridworld net on AMaze; an MLP shared by the agents on Level-Based Foraging). Defaults are minimax's maze PAIRED config
(``config/configs/maze/paired.json`` at v0.2.0); its teacher network has 22.5M parameters,
most of them the LSTM's input weights over 13 x 13 x 128 convolution features.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from lamella.agents.actor_critic import ActorCritic, feedforward_actor_critic, recurrent_actor_critic
from lamella.agents.config import ConfigError, check_config_type, unused_settings_of
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.ppo_update import check_ppo_sizes, make_ppo_update_from_config, ppo_batch
from lamella.agents.rollout import actor_critic_policy, make_rollout
from lamella.agents.runner import Runner, hashed_keys
from lamella.envs import check_prng_key
from lamella.envs.environment import Environment, StepOutput, Wrapper
from lamella.ued import scores as scores_lib
from lamella.ued.levels import LevelFamily, LevelParams, OnLevel, tile_params
from lamella.ued.networks import GridworldNet, RecurrentGridworldNet
from lamella.ued.runners import (
    EVAL_METRIC_AXES,
    UED_PRESETS,
    DRConfig,
    check_family,
    default_family,
    make_actor_critic,
    make_level_episode_drawer,
    make_level_evaluator,
    network_settings_unread,
    rollout_advantages,
)

__all__ = [
    "TEACHER_SCORES",
    "MinimaxConfig",
    "PAIREDConfig",
    "PAIREDRunnerState",
    "PopulationPAIREDConfig",
    "default_teacher",
    "make_paired_runner",
    "make_teacher_actor_critic",
    "teacher_score",
]

#: The teacher's objectives (``ued_score``) and the student counts they take.
TEACHER_SCORES = {
    "relative_regret": "n_students=2 (protagonist, antagonist)",
    "mean_relative_regret": "n_students=2 (protagonist, antagonist)",
    "population_regret": "n_students>=2",
    "neg_return": "n_students=1 (the minimax adversary has no antagonist)",
}

# What lamella-agents' PPO update reports (make_ppo_update's docs); logged per student with a
# "student" axis and for the teacher with a ``teacher_`` prefix.
_PPO_METRICS = (
    "loss",
    "policy_loss",
    "value_loss",
    "entropy",
    "clip_fraction",
    "approx_kl",
    "first_minibatch_kl",
)


@dataclasses.dataclass(frozen=True)
class PAIREDConfig(DRConfig):
    """PAIRED: a teacher builds levels that maximise the regret of a protagonist against an
    antagonist. Defaults are minimax's maze PAIRED config (``paired.json``).

    The student fields are :class:`~lamella.ued.runners.DRConfig`'s (each student is trained
    with them); ``num_envs`` is also the number of levels the teacher builds per iteration, and
    ``n_walls`` the teacher's wall budget. An iteration counts ``num_envs * num_steps`` env
    steps (one student's; minimax's update count), whatever ``n_students``.

    Attributes (beyond :class:`~lamella.ued.runners.DRConfig`'s):
        n_students: students trained on the teacher's levels (student 0 is the protagonist).
        ued_score: the teacher's return per level (:data:`TEACHER_SCORES`).
        teacher_noise_dim: size of the teacher's random input.
        teacher_learning_rate, teacher_gamma, teacher_gae_lambda, teacher_clip_eps,
            teacher_vf_coef, teacher_ent_coef, teacher_num_epochs, teacher_num_minibatches:
            the teacher's PPO settings (clip-value, gradient clip, annealing and advantage
            normalisation as the students').
        teacher_recurrent: an LSTM teacher (minimax's); else feed-forward.
        teacher_cell, teacher_rnn_hidden_size, teacher_conv_filters, teacher_time_features,
            teacher_torso_size, teacher_hidden_size: the teacher network
            (:class:`~lamella.ued.networks.GridworldNet` on the teacher's observation, the
            step embedded ``teacher_time_features`` wide).
    """

    n_students: int = 2
    ued_score: str = "relative_regret"
    teacher_noise_dim: int = 50
    teacher_learning_rate: float = 1e-4
    teacher_gamma: float = 0.995
    teacher_gae_lambda: float = 0.98
    teacher_clip_eps: float = 0.2
    teacher_vf_coef: float = 0.5
    teacher_ent_coef: float = 0.05
    teacher_num_epochs: int = 5
    teacher_num_minibatches: int = 1
    teacher_recurrent: bool = True
    teacher_cell: str = "lstm"
    teacher_rnn_hidden_size: int = 256
    teacher_conv_filters: int = 128
    teacher_time_features: int = 10
    teacher_torso_size: int = 64
    teacher_hidden_size: int = 32

    def validate(self) -> None:
        super().validate()
        name = type(self).__name__
        if self.ued_score not in TEACHER_SCORES:
            raise ValueError(
                f"{name}.ued_score must be one of {', '.join(TEACHER_SCORES)}, got {self.ued_score!r}."
            )
        wants = TEACHER_SCORES[self.ued_score]
        ok = {
            "relative_regret": self.n_students == 2,
            "mean_relative_regret": self.n_students == 2,
            "population_regret": self.n_students >= 2,
            "neg_return": self.n_students == 1,
        }[self.ued_score]
        if not ok:
            raise ValueError(
                f"{name}: ued_score={self.ued_score!r} takes {wants}, got n_students={self.n_students}; "
                "set n_students, or pick the score for it (1: neg_return, 2: relative_regret, "
                "more: population_regret)."
            )
        if self.num_steps < self.max_episode_steps:
            raise ValueError(
                f"{name}.num_steps ({self.num_steps}) is shorter than an episode (max_episode_steps="
                f"{self.max_episode_steps}): a level the students never solve would complete no "
                "episode and score nothing; raise num_steps to at least max_episode_steps."
            )
        if self.teacher_cell not in ("lstm", "gru"):
            raise ValueError(f"{name}.teacher_cell must be 'lstm' or 'gru', got {self.teacher_cell!r}.")
        for field in (
            "teacher_num_epochs",
            "teacher_num_minibatches",
            "teacher_conv_filters",
            "teacher_time_features",
        ):
            if int(getattr(self, field)) < 1:
                raise ConfigError(f"{name}.{field} must be >= 1, got {getattr(self, field)}.")
        if self.teacher_noise_dim < 0:
            raise ValueError(f"{name}.teacher_noise_dim must be >= 0, got {self.teacher_noise_dim}.")
        if self.screenshot_every > 0:
            # The field comes with DRConfig; only the DR / PLR / ACCEL runners draw levels.
            raise ConfigError(
                f"{name}.screenshot_every={self.screenshot_every}: PAIRED and its variants write no "
                "screenshots (the run log's level_* metrics describe the teacher's levels, and --gif "
                "draws the protagonist's episode); set screenshot_every=0."
            )

    def unused_settings(self) -> dict[str, str]:
        """:meth:`DRConfig.unused_settings` and the teacher's: ``teacher_cell`` /
        ``teacher_rnn_hidden_size`` of a feed-forward teacher, ``teacher_torso_size`` of a recurrent
        one, and ``screenshot_dir`` (PAIRED draws no screenshots)."""
        return (
            super().unused_settings()
            | network_settings_unread(self, "teacher_", "teacher")
            | unused_settings_of(
                self,
                {"screenshot_dir": "is where the screenshots go"},
                "PAIRED and its variants write none",
                "train dr, plr or accel for screenshots",
            )
        )


@dataclasses.dataclass(frozen=True)
class MinimaxConfig(PAIREDConfig):
    """The minimax adversary: PAIRED's teacher paid minus the protagonist's mean return, with no
    antagonist (minimax's ``ued_score=neg_return``; the other defaults are its PAIRED config)."""

    n_students: int = 1
    ued_score: str = "neg_return"


@dataclasses.dataclass(frozen=True)
class PopulationPAIREDConfig(PAIREDConfig):
    """Population PAIRED: ``n_students`` students; the teacher is paid the best student's best
    return minus the students' mean mean return (minimax's ``population_regret``, not clipped).
    minimax ships no maze config for it: 3 students here, the other defaults its PAIRED config."""

    n_students: int = 3
    ued_score: str = "population_regret"


class PAIREDRunnerState(struct.PyTreeNode):
    """What a PAIRED run carries between iterations (arrays only).

    Attributes:
        student_params: the students' network parameters, leading axis ``n_students``
            (index 0 the protagonist, 1 the antagonist).
        student_opt_state: their optimiser states (same leading axis).
        teacher_params: the teacher's network parameters.
        teacher_opt_state: its optimiser state.
        key: the run's key.
        iteration: int32 ``()``.
    """

    student_params: Any
    student_opt_state: Any
    teacher_params: Any
    teacher_opt_state: Any
    key: jax.Array
    iteration: jax.Array


class _LevelInInfo(Wrapper):
    """Reports the level a teacher has built so far as ``info["level"]`` (the collector resets
    a finished teacher episode, so the last step's info is where the built level is read)."""

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepOutput:
        teacher: Any = self.env  # checked by make_paired_runner: it has level_of
        obs, state, reward, terminated, truncated, info = teacher.step_env(key, state, action, params)
        return obs, state, reward, terminated, truncated, {**info, "level": teacher.level_of(state)}


def default_teacher(config: PAIREDConfig, family: LevelFamily) -> tuple[Environment[Any, Any], Any]:
    """``(teacher env, params)`` for ``family``: its ``LevelFamily.teacher`` with
    ``teacher_noise_dim`` (AMaze: :class:`~lamella.envs.maze.AMazeTeacher` on the student env's
    params, whose ``n_walls`` is the teacher's wall budget; Level-Based Foraging:
    :class:`~lamella.envs.multi_agent.lbf.ForagingTeacher` of the student env).

    Raises:
        TypeError: the family has no teacher (give the LevelFamily one, or pass ``teacher=`` to
            :func:`make_paired_runner`).
    """
    if family.teacher is None:
        raise TypeError(
            f"make_paired_runner has no teacher for {family.env.name}: its LevelFamily has none. Give "
            "it teacher=lambda noise_dim: (env, params), or pass teacher=(env, params) to "
            "make_paired_runner: an env with level_of(state) and num_steps(params) whose episodes "
            "build one level of the family."
        )
    return family.teacher(config.teacher_noise_dim)


def make_teacher_actor_critic(config: PAIREDConfig, action_space: Any, num_times: int) -> ActorCritic:
    """The teacher network (minimax's ``default_teacher_cnn``): conv 3x3 over the level so far,
    an embedding of the step (``num_times`` values), the noise, an LSTM (or a torso), heads."""
    shared: dict[str, Any] = dict(
        conv_filters=config.teacher_conv_filters,
        hidden_size=config.teacher_hidden_size,
        scalar_key="time",
        num_scalars=num_times,
        scalar_features=config.teacher_time_features,
    )
    if config.teacher_recurrent:
        net = RecurrentGridworldNet(
            action_space, cell=config.teacher_cell, rnn_hidden_size=config.teacher_rnn_hidden_size, **shared
        )
        return recurrent_actor_critic(net, net.initial_memory)
    return feedforward_actor_critic(
        GridworldNet(action_space, torso_size=config.teacher_torso_size, **shared)
    )


def _teacher_ppo(config: PAIREDConfig) -> Any:
    """The teacher's PPO settings in the shape :func:`make_ppo_update_from_config` reads."""
    return types.SimpleNamespace(
        learning_rate=config.teacher_learning_rate,
        anneal_lr=config.anneal_lr,
        num_iterations=config.num_iterations,
        num_epochs=config.teacher_num_epochs,
        num_minibatches=config.teacher_num_minibatches,
        clip_eps=config.teacher_clip_eps,
        vf_coef=config.teacher_vf_coef,
        ent_coef=config.teacher_ent_coef,
        clip_value=config.clip_value,
        normalize_advantages=config.normalize_advantages,
        max_grad_norm=config.max_grad_norm,
    )


def teacher_score(name: str, mean_return: jax.Array, max_return: jax.Array) -> jax.Array:
    """The teacher's return per level from the students' episode returns on it.

    Args:
        name: a key of :data:`TEACHER_SCORES`.
        mean_return: float ``(n_students, num_levels)``: each student's mean return over its
            completed episodes on each level (0 where none completed).
        max_return: float ``(n_students, num_levels)``: the best such return (0 where none).

    Returns:
        float32 ``(num_levels,)``.
    """
    if name == "relative_regret":
        return scores_lib.relative_regret(max_return[1], mean_return[0])
    if name == "mean_relative_regret":
        return scores_lib.mean_relative_regret(mean_return[1], mean_return[0])
    if name == "population_regret":
        return scores_lib.population_regret(mean_return, max_return)
    if name == "neg_return":
        return -mean_return[0]
    raise ValueError(f"Unknown teacher score {name!r}; choose one of {', '.join(TEACHER_SCORES)}.")


def _solved_at_end(reward: jax.Array, done: jax.Array, solved_above: float) -> jax.Array:
    """float32 ``(T, B)``: 1 at the last step of an episode whose return is above
    ``solved_above`` (the family's "solved"), else 0; summed over an episode, its solve flag."""

    def step(partial: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        r, d = inputs
        total = partial + r
        return jnp.where(d, 0.0, total), d & (total > solved_above)

    _, solved = jax.lax.scan(step, jnp.zeros(reward.shape[1:], jnp.float32), (reward, done))
    return solved.astype(jnp.float32)


def _check_teacher(
    config: PAIREDConfig, family: LevelFamily, teacher: Any, params: Any, num_devices: int = 1
) -> int:
    """The teacher's episode length, after checking it builds levels the students can play
    and that its minibatches split over ``num_devices``."""
    name = type(config).__name__
    for method in ("level_of", "num_steps"):
        if not hasattr(teacher, method):
            raise TypeError(
                f"make_paired_runner: the teacher {teacher.name} has no {method}(); a teacher env needs "
                "level_of(state) (the level an episode built) and num_steps(params) (its episode length)."
            )
    steps = int(teacher.num_steps(params))
    _, state = jax.eval_shape(teacher.reset, jax.random.key(0), params)
    built = jax.eval_shape(teacher.level_of, state)
    wanted = jax.eval_shape(family.sample_level, jax.random.key(0), family.env_params)
    shapes = lambda tree: [(x.shape, x.dtype) for x in jax.tree.leaves(tree)]  # noqa: E731
    same_tree = str(jax.tree.structure(built)) == str(jax.tree.structure(wanted))
    if not same_tree or shapes(built) != shapes(wanted):
        raise ValueError(
            f"make_paired_runner: the teacher ({teacher.name}) builds levels {shapes(built)} but the "
            f"students' env ({family.env.name}) plays levels {shapes(wanted)}; build the teacher with "
            "the students' env (AMaze: its params, same height and width; LBF: the env itself), "
            "e.g. teacher=family.teacher(noise_dim), as make_paired_runner does by default."
        )
    split = config.num_envs if config.teacher_recurrent else config.num_envs * steps
    what = "num_envs" if config.teacher_recurrent else "num_envs * teacher steps"
    if split % config.teacher_num_minibatches:
        raise ConfigError(
            f"{name}: {what} ({split}) must be a multiple of teacher_num_minibatches "
            f"({config.teacher_num_minibatches})."
        )
    minibatch = split // config.teacher_num_minibatches
    if minibatch % num_devices:
        raise ConfigError(
            f"{name}: a teacher minibatch ({what} / teacher_num_minibatches = {minibatch}) must be a "
            f"multiple of num_devices ({num_devices}): each device trains on an equal share of it. "
            "Change num_envs or teacher_num_minibatches, or num_devices."
        )
    return steps


def make_paired_runner(
    config: PAIREDConfig,
    family: LevelFamily | None = None,
    teacher: tuple[Environment[Any, Any], Any] | None = None,
) -> Runner:
    """A :class:`~lamella.agents.runner.Runner` for a PAIRED-family config (see the module docs).

    Args:
        config: a :class:`PAIREDConfig`, :class:`MinimaxConfig` or :class:`PopulationPAIREDConfig`.
        family: the students' levels (default: :func:`lamella.ued.runners.default_family`).
        teacher: ``(env, params)`` of the teacher MDP (default: :func:`default_teacher`); the
            env needs ``level_of(state)`` and ``num_steps(params)`` and must build levels of
            the family's shape.

    Raises:
        ValueError: an inconsistent config, a teacher whose levels do not fit the students' env,
            or evaluation levels that do not fit it.

    The runner splits its envs over devices (``Runner.sharding``, the driver's
    ``num_devices``): the teacher builds its block of ``num_envs / num_devices`` levels (its
    block of the teacher rollout), every student plays that block, and each of the agents
    trains with its gradients averaged over devices; the students' returns per level are
    gathered, so the teacher's return (the regret of every level) and the metrics are those of
    one device.
    """
    check_config_type(
        config, PAIREDConfig, "make_paired_runner", f"Build one: PAIREDConfig(...), or {UED_PRESETS}"
    )
    return _paired_runner(config, family, teacher, DeviceAxis())


def _paired_runner(
    config: PAIREDConfig,
    family: LevelFamily | None,
    teacher: tuple[Environment[Any, Any], Any] | None,
    devices: DeviceAxis,
) -> Runner:
    """The PAIRED runner for one device's block of ``config.num_envs`` (all of them on one device)."""
    config.validate()
    n_students, num_envs, num_steps = config.n_students, config.num_envs, config.num_steps
    with jax.ensure_compile_time_eval():
        if family is None:
            family = default_family(config)
        teacher_env, teacher_params = teacher if teacher is not None else default_teacher(config, family)
        teacher_steps = _check_teacher(config, family, teacher_env, teacher_params, devices.size)
        bare, env_params = family.env, family.env_params
    check_family(config, family)
    check_ppo_sizes(config, recurrent=config.recurrent, num_devices=devices.size)
    local_envs = devices.local(num_envs, "num_envs")
    actor_critic = make_actor_critic(config, bare.action_space(env_params), family.network)
    teacher_ac = make_teacher_actor_critic(
        config, teacher_env.action_space(teacher_params), teacher_steps + 1
    )
    evaluate_params = make_level_evaluator(config, family, actor_critic)
    draw_episode = make_level_episode_drawer(config, family, actor_critic)

    rollout = make_rollout(
        OnLevel(family.replay_wrapper(bare)), num_steps, num_envs, params_axis=0, devices=devices
    )
    teacher_rollout = make_rollout(
        _LevelInInfo(teacher_env), teacher_steps, num_envs, info_keys=("level",), devices=devices
    )
    batch_params = tile_params(env_params, local_envs)
    optimizer, ppo_update = make_ppo_update_from_config(actor_critic, config, devices)
    teacher_optimizer, teacher_update = make_ppo_update_from_config(teacher_ac, _teacher_ppo(config), devices)

    def init(key: jax.Array) -> PAIREDRunnerState:
        check_prng_key(key, "init", "jax.vmap(runner.init)")
        key, key_students, key_teacher, key_level = jax.random.split(key, 4)
        example = family.sample_level(key_level, env_params)
        obs, _ = OnLevel(bare).reset(key_level, LevelParams(example, env_params))
        obs = jax.tree.map(lambda x: x[None], obs)
        student_params = jax.vmap(actor_critic.init, in_axes=(0, None))(
            jax.random.split(key_students, n_students), obs
        )
        teacher_obs, _ = teacher_env.reset(key_teacher, teacher_params)
        teacher_params_ = teacher_ac.init(key_teacher, jax.tree.map(lambda x: x[None], teacher_obs))
        return PAIREDRunnerState(
            student_params=student_params,
            student_opt_state=jax.vmap(optimizer.init)(student_params),
            teacher_params=teacher_params_,
            teacher_opt_state=teacher_optimizer.init(teacher_params_),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
        )

    def student_iteration(
        params: Any, opt_state: Any, key: jax.Array, level_params: LevelParams
    ) -> tuple[Any, Any, dict[str, jax.Array], dict[str, jax.Array]]:
        """One student's rollout on the levels (this device's block) and PPO update; its
        returns per level (every level: gathered over devices)."""
        keys = hashed_keys(key, (3,))
        start = rollout.init(keys[0], level_params, actor_critic.initial_memory(local_envs))
        policy = actor_critic_policy(actor_critic, params, devices=devices)
        end, tr = rollout.collect(start, policy, keys[1], level_params)
        advantage, target = rollout_advantages(
            actor_critic, params, tr, end.memory, config.gamma, config.gae_lambda
        )
        params, opt_state, metrics = ppo_update(params, opt_state, ppo_batch(tr, advantage, target), keys[2])
        reward, done = tr.reward, tr.done
        if reward.ndim > 2:  # a multi-agent env: the team's return, an episode over for all at once
            reward, done = reward.sum(-1), jnp.all(done, axis=-1)
        returns = scores_lib.episode_stats(reward, done)
        # A student with no completed episode on a level counts as one episode of return 0 (minimax).
        completed = returns.num_episodes > 0
        solved = scores_lib.episode_stats(_solved_at_end(reward, done, family.solved_above), done).mean
        per_level = {
            "mean": returns.mean,
            "max": jnp.where(completed, returns.max, 0.0),
            "solved": solved,
            "completed": completed.astype(jnp.float32),
        }
        return params, opt_state, metrics, devices.gather(per_level)

    def step(state: PAIREDRunnerState) -> tuple[PAIREDRunnerState, dict[str, jax.Array]]:
        keys = hashed_keys(state.key, (6,))
        # 1. The teacher builds one level per env: one whole teacher episode each (on several
        # devices, this device's block of them).
        teacher_start = teacher_rollout.init(keys[1], teacher_params, teacher_ac.initial_memory(local_envs))
        teacher_policy = actor_critic_policy(teacher_ac, state.teacher_params, devices=devices)
        teacher_end, teacher_tr = teacher_rollout.collect(
            teacher_start, teacher_policy, keys[2], teacher_params
        )
        levels = jax.tree.map(lambda x: x[-1], teacher_tr.info["level"])
        level_params = LevelParams(levels, batch_params)

        # 2. Every student plays them and learns (one vmap over the stacked students).
        student_params, student_opt_state, student_metrics, per_level = jax.vmap(
            student_iteration, in_axes=(0, 0, 0, None)
        )(state.student_params, state.student_opt_state, hashed_keys(keys[3], (n_students,)), level_params)

        # 3. The teacher's return: the students' score of each level (of every device's levels),
        # paid at the last step of this device's teacher episodes.
        score = teacher_score(config.ued_score, per_level["mean"], per_level["max"]).astype(jnp.float32)
        reward = teacher_tr.reward.at[-1].set(devices.take(score))
        advantage, target = rollout_advantages(
            teacher_ac,
            state.teacher_params,
            teacher_tr,
            teacher_end.memory,
            config.teacher_gamma,
            config.teacher_gae_lambda,
            reward=reward,
        )
        teacher_params_, teacher_opt_state, teacher_metrics = teacher_update(
            state.teacher_params, state.teacher_opt_state, ppo_batch(teacher_tr, advantage, target), keys[4]
        )

        unknown = set(student_metrics) - set(_PPO_METRICS)
        if unknown:  # trace time: a metric the run log declares no axis for
            raise RuntimeError(
                f"make_paired_runner: unexpected PPO metrics {sorted(unknown)}; add them to _PPO_METRICS."
            )
        level_stats = jax.vmap(family.level_stats)(devices.gather(levels))
        metrics: dict[str, jax.Array] = {
            "teacher_return": score.mean(),
            # The protagonist's training episodes (what DR/PLR report as train_return / solve_rate).
            "train_return": per_level["mean"][0].mean(),
            "solve_rate": per_level["solved"][0].mean(),
            "student_return": per_level["mean"].mean(axis=1),
            "student_max_return": per_level["max"].mean(axis=1),
            "student_solve_rate": per_level["solved"].mean(axis=1),
            "levels_completed": per_level["completed"][0].mean(),
            **{f"student_{k}": v.astype(jnp.float32) for k, v in student_metrics.items()},
            **{f"teacher_{k}": v.astype(jnp.float32) for k, v in teacher_metrics.items()},
            **{f"level_{k}": v.mean() for k, v in level_stats.items()},
        }
        new_state = PAIREDRunnerState(
            student_params=student_params,
            student_opt_state=student_opt_state,
            teacher_params=teacher_params_,
            teacher_opt_state=teacher_opt_state,
            key=keys[0],
            iteration=state.iteration + 1,
        )
        return new_state, metrics

    def protagonist(state: PAIREDRunnerState) -> Any:
        return jax.tree.map(lambda x: x[0], state.student_params)

    def evaluate(state: PAIREDRunnerState, key: jax.Array) -> dict[str, jax.Array]:
        return evaluate_params(protagonist(state), key)

    student_axes = {
        name: ("student",)
        for name in (
            "student_return",
            "student_max_return",
            "student_solve_rate",
            *(f"student_{k}" for k in _PPO_METRICS),
        )
    }
    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
        metric_axes={**EVAL_METRIC_AXES, **student_axes},
        # The protagonist's episode, as its evaluation plays it.
        render_episode=lambda state, key: draw_episode(protagonist(state), key),
        # The state holds no envs (each iteration's teacher episodes build new levels): the
        # envs axis is split inside the step, and every state leaf is replicated.
        sharding=runner_sharding(
            devices,
            "num_envs",
            num_envs,
            lambda axis: _paired_runner(config, family, (teacher_env, teacher_params), axis),
            lambda state: None,
        ),
    )
