"""The off-policy loop (DQN, SAC, TD3, DDPG, TQC on any lamella env) as a compiled Runner.

One ``runner.step`` is one ``lax.scan`` over ``rollout_steps`` vector env steps; each scan step

1. acts (uniform random actions for the first ``learning_starts`` env steps),
2. steps the bare envs, lets the goal setter (a hook, :mod:`~lamella.agents.offpolicy.plugins`)
   rewrite goals and rewards,
3. stores the transition with the *true* next observation (at a time limit that is the final
   observation, so targets bootstrap from it: truncation is not termination),
4. resets the envs that are done (``env.reset_done``; no auto-reset),
5. runs ``updates_per_step`` gradient steps on batches from the batch sampler (uniform or
   n-step here; HER-relabelled with ``her=True``, from lamella-gcrl's plug-in).

Multi-agent envs (``env.num_agents > 1``, rewards and done flags with an agent axis) run in
the same loop: transitions keep the agent axis (reward, terminated and truncated ``(n,)``), an
env resets when all its agents are done, the step and evaluation metrics add each agent's own
return ``"return"`` (declared in ``Runner.metric_axes``) beside the team's ``"episode_return"``
(their sum). lamella-marl's independent learners (IDQN, ISAC) pass their env and agent in
(``env=``, ``make_agent=``) and reuse this loop as it is.

Everything (env, buffer, agent, setter) is in the runner state, a pytree of arrays, so
``jax.vmap(make_train(runner))`` trains many seeds in one compiled program and the shared
driver (``lamella.agents.driver.run_experiment``) chunks, evaluates, logs, checkpoints and
resumes it unchanged.

Many devices (``Runner.sharding``, the driver's ``num_devices``): the envs split over the
devices, everything else is replicated. Each device steps its block of envs; their new
observations, rewards, flags and infos are gathered, so every device holds every env's
observation, acts for all envs with the same key (the policy is a small forward pass; its
exploration draws and counters are then those of one device), runs the goal setter on the
whole batch and adds the same transitions to its replicated buffer. Every device samples the
same batch with the same key; the agent's update learns from this device's equal block of it
and averages gradients and metrics over the devices (the agents' ``devices`` argument), so
parameters stay equal and the run equals the one-device run up to the order of float sums.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

import lamella.envs
from lamella.agents.config import ConfigError, check_config_type, check_single_agent, is_swept
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.offpolicy.common import Batch
from lamella.agents.offpolicy.configs import AGENTS, OFFPOLICY_BUILD, LoopConfig, agent_config
from lamella.agents.offpolicy.plugins import (
    BatchSamplerFactory,
    GoalFunctions,
    GoalSetter,
    load_batch_sampler,
    load_goal_setter,
    passthrough,
)
from lamella.agents.rollout import recorded_experience
from lamella.agents.runner import Runner, episode_frames, eval_max_steps, evaluate_agent
from lamella.buffers import (
    EpisodeBuffer,
    EpisodeBufferState,
    NStepTransition,
    Transition,
    make_episode_buffer,
    make_n_step_sampler,
    transition_like,
)
from lamella.envs import spaces
from lamella.envs.environment import episode_done

__all__ = [
    "OffPolicyRunnerState",
    "goal_functions",
    "is_goal_space",
    "make_batch_sampler",
    "make_offpolicy_runner",
    "resolve_batch_sampler",
    "resolve_goal_setter",
]


class OffPolicyRunnerState(struct.PyTreeNode):
    """Everything one off-policy run carries between iterations (arrays only).

    Attributes:
        train_state: the agent's train state.
        buffer_state: :class:`lamella.buffers.EpisodeBufferState`.
        env_state: the training envs' states, leading axis ``num_envs``.
        obs: the observations the agent acts on next.
        setter_state: the goal setter's state.
        key: PRNG key.
        iteration: int32 ().
        env_steps: int32 (): env steps taken over all envs.
        episode_return: float32 (num_envs,): return of each running episode so far
            (``(num_envs, num_agents)`` on a multi-agent env: each agent's).
        last_return: float32 (): mean return of the episodes that ended in the last iteration
            that had any (``(num_agents,)`` on a multi-agent env: each agent's; the team's
            return is their sum).
        last_success: float32 (): their success rate (goal-conditioned envs; else 0).
    """

    train_state: Any
    buffer_state: EpisodeBufferState
    env_state: Any
    obs: Any
    setter_state: Any
    key: jax.Array
    iteration: jax.Array
    env_steps: jax.Array
    episode_return: jax.Array
    last_return: jax.Array
    last_success: jax.Array


def is_goal_space(space: spaces.Space) -> bool:
    """Whether ``space`` is a goal-conditioned observation space (a Dict with the three keys)."""
    return isinstance(space, spaces.Dict) and {"observation", "achieved_goal", "desired_goal"} <= set(
        space.spaces
    )


def goal_functions(env: Any, env_params: Any) -> GoalFunctions:
    """The :class:`GoalFunctions` of a goal-conditioned lamella env: the pure ``compute_reward``
    and ``is_success`` of its outermost layer that has them (a goal env, or a
    ``lamella.envs.goal.GoalConditioned`` wrapper, under any other wrappers) and its
    ``terminate_on_success`` (a params field of the goal envs, an attribute of the wrapper)."""
    if not hasattr(env, "compute_reward"):  # wrappers hand attributes down to the env they wrap
        name = type(getattr(env, "unwrapped", env)).__name__
        raise ValueError(f"{name} has no compute_reward: it is not a goal-conditioned env.")
    is_success = getattr(env, "is_success", None)
    terminates = getattr(env_params, "terminate_on_success", getattr(env, "terminate_on_success", False))
    return GoalFunctions(
        compute_reward=functools.partial(env.compute_reward, params=env_params),
        is_success=None if is_success is None else functools.partial(is_success, params=env_params),
        terminate_on_success=bool(terminates),
        episode_length=_episode_length(env_params),
    )


def _episode_length(env_params: Any) -> int | None:
    """The env's ``max_steps_in_episode`` param as a number (None: it has none, or it is traced)."""
    limit = getattr(env_params, "max_steps_in_episode", None)
    return None if limit is None or is_swept(limit) else int(limit)


def make_batch_sampler(
    config: Any, buffer: EpisodeBuffer, goals: GoalFunctions | None = None
) -> Callable[[EpisodeBufferState, jax.Array], Batch]:
    """The default batch sampler factory: ``sample(buffer_state, key) -> Batch``.

    Uniform transitions (``n_step=1``) or n-step transitions, with ``discount = gamma ** k``
    (0 where the episode terminated). ``goals`` is ignored (the factory signature of
    :data:`~lamella.agents.offpolicy.plugins.BatchSamplerFactory`).
    """
    del goals
    gamma = config.gamma if is_swept(config.gamma) else float(config.gamma)  # a sweep traces it
    if config.n_step > 1:
        n_step_sample = make_n_step_sampler(buffer, config.n_step, gamma, config.batch_size)

        def sample_n_step(buffer_state: EpisodeBufferState, key: jax.Array) -> Batch:
            key_sample, key_update = jax.random.split(key)
            t: NStepTransition = n_step_sample(buffer_state, key_sample)
            return Batch(t.obs, t.action, t.reward, t.discount, t.next_obs, key_update)

        return sample_n_step

    def sample(buffer_state: EpisodeBufferState, key: jax.Array) -> Batch:
        key_sample, key_update = jax.random.split(key)
        t: Transition = buffer.sample(buffer_state, key_sample)
        discount = gamma * (1.0 - t.terminated.astype(jnp.float32))
        return Batch(t.obs, t.action, t.reward, discount, t.next_obs, key_update)

    return sample


def resolve_batch_sampler(config: Any, batch_sampler: BatchSamplerFactory | None) -> BatchSamplerFactory:
    """The batch sampler factory a run uses: ``batch_sampler`` if given, else the installed
    ``her`` plug-in when ``config.her`` (a :class:`~lamella.agents.config.ConfigError` naming
    ``pip install lamella-gcrl`` when none is installed), else :func:`make_batch_sampler`."""
    if batch_sampler is not None:
        if not callable(batch_sampler):
            fix = " (for hindsight relabelling set her=True in the config)" if batch_sampler == "her" else ""
            raise ConfigError(
                f"make_offpolicy_runner(batch_sampler=...) must be a factory make(config, buffer, goals) -> "
                f"sample, got {type(batch_sampler).__name__} {batch_sampler!r:.60}{fix}."
            )
        return batch_sampler
    if config.her:
        return load_batch_sampler("her", "her=True (hindsight experience replay)")
    return make_batch_sampler


def resolve_goal_setter(
    config: LoopConfig, goal_setter: GoalSetter | None, env: Any, env_params: Any
) -> GoalSetter:
    """The goal setter of the training envs: the one given in code, else the config's
    ``goal_setter`` built by its installed factory (``make(config, env, env_params)``), else
    :func:`passthrough`.

    Raises:
        ConfigError: both a setter in code and ``goal_setter`` in the config, or a named setter
            on an env that is not goal-conditioned, or a name no installed package provides.
    """
    if goal_setter is not None and not all(
        callable(getattr(goal_setter, part, None)) for part in ("init", "reset", "step")
    ):
        built = callable(goal_setter) and not isinstance(goal_setter, type)
        raise ConfigError(
            f"make_offpolicy_runner(goal_setter=...) must be a GoalSetter (its init, reset and step), "
            f"got {type(goal_setter).__name__} {getattr(goal_setter, '__name__', repr(goal_setter))[:60]}"
            + (": call it to build the setter, e.g. goal_setter=passthrough()." if built else ".")
        )
    name = getattr(config, "goal_setter", "none")
    if name == "none":
        return passthrough() if goal_setter is None else goal_setter
    if goal_setter is not None:
        raise ConfigError(
            f"A goal setter is given twice: in code (make_offpolicy_runner(goal_setter=...)) and in the "
            f"config (goal_setter={name!r}); keep one (goal_setter='none' in the config)."
        )
    if not is_goal_space(env.observation_space(env_params)):
        raise ConfigError(
            f"goal_setter={name!r} needs a goal-conditioned env (dict observations with achieved_goal/"
            f"desired_goal); {config.env_id} is not one. Set goal_setter='none'."
        )
    return load_goal_setter(name)(config, env, env_params)


# lamella-marl's learners for a multi-agent env, by the single-agent learner a user asked for.
_MULTI_AGENT = {"dqn": "idqn or rec_iql", "sac": "isac", "td3": "isac", "ddpg": "isac", "tqc": "isac"}


def make_offpolicy_runner(
    config: LoopConfig,
    goal_setter: GoalSetter | None = None,
    batch_sampler: BatchSamplerFactory | None = None,
    *,
    env: Any = None,
    env_params: Any = None,
    make_agent: Callable[..., Any] | None = None,
    agent_takes_devices: bool = False,
    recorded: Callable[[Transition], dict[str, Any]] = recorded_experience,
) -> Runner:
    """The compiled off-policy :class:`~lamella.agents.runner.Runner` of a train config.

    Args:
        config: a ``<Algo>TrainConfig`` (:mod:`lamella.agents.offpolicy.configs`).
        goal_setter: goal setter of the training envs (default: the one the config's
            ``goal_setter`` names, see :func:`resolve_goal_setter`, else
            :func:`~lamella.agents.offpolicy.plugins.passthrough`; lamella-gcrl has others);
            evaluation always uses the env's own goals.
        batch_sampler: ``make(config, buffer, goals) -> sample`` (default: see
            :func:`resolve_batch_sampler`).
        env: a bare env object to train and evaluate on (no auto-reset); default
            ``lamella.envs.make(config.env_id, autoreset=False)``.
        env_params: its params (default ``env.default_params``).
        make_agent: ``make(agent_config, observation_space, action_space) -> Agent`` (default:
            the config's algorithm in :data:`~lamella.agents.offpolicy.configs.AGENTS`);
            lamella-marl's independent learners give one that wraps DQN or SAC per agent.
        agent_takes_devices: ``make_agent`` takes a fourth argument, the
            :class:`~lamella.agents.devices.DeviceAxis`, as the built-in agents do: its agent's
            ``update`` learns from this device's equal block of the sampled batch and averages
            gradients and metrics over the devices. The runner then splits its envs over
            devices as with a built-in agent.

    Returns:
        A Runner: ``init``, ``step`` (``rollout_steps`` vector env steps with their updates),
        ``evaluate`` (greedy, on a separate env instance), ``steps_per_iteration``,
        ``num_iterations``. Step metrics: ``episode_return``, ``success_rate`` (goal envs),
        ``episodes``, ``updates`` (the iteration's gradient steps: 0 before
        ``learning_starts``) and the agent's update metrics (``loss``, ...), averaged over the
        iteration's steps that updated (0 in an iteration of warm-up steps only; the runner's
        ``metric_weights`` weight them by ``updates``, so the driver logs the mean over a
        chunk's updates, and nothing for a chunk of warm-up only);
        on a multi-agent env also ``return`` (each agent's, axis ``agent``).

        The runner splits its envs over devices (``Runner.sharding``; see the module's
        docstring) unless ``make_agent`` is given without ``agent_takes_devices`` (an agent
        that does not take ``devices``).
        ``batch_size`` must then be a multiple of the device count, as ``num_envs`` must.
    """
    check_config_type(config, LoopConfig, "make_offpolicy_runner", OFFPOLICY_BUILD)
    return _offpolicy_runner(
        config,
        goal_setter,
        batch_sampler,
        env,
        env_params,
        make_agent,
        agent_takes_devices,
        DeviceAxis(),
        recorded,
    )


def _offpolicy_state_axes(state: OffPolicyRunnerState) -> Any:
    """The envs axis of each leaf of an off-policy state (``None``: replicated on every device;
    the observations too: every device acts for every env): a prefix tree of the state."""
    axes: dict[str, Any] = {field.name: None for field in dataclasses.fields(OffPolicyRunnerState)}
    return OffPolicyRunnerState(**{**axes, "env_state": 0})


def _offpolicy_runner(
    config: LoopConfig,
    goal_setter: GoalSetter | None,
    batch_sampler: BatchSamplerFactory | None,
    given_env: Any,
    given_params: Any,
    make_agent: Callable[..., Any] | None,
    agent_takes_devices: bool,
    devices: DeviceAxis,
    recorded: Callable[[Transition], dict[str, Any]],
) -> Runner:
    config.validate()
    name, agent_cfg = agent_config(config)
    if config.batch_size % devices.size:
        # Checked when the driver builds the per-device runner, before anything compiles.
        raise ConfigError(
            f"{type(config).__name__}: batch_size={config.batch_size} is not divisible by num_devices="
            f"{devices.size}: each device learns from an equal block of every sampled batch. Set batch_size "
            f"to a multiple of {devices.size} (for example {-(-config.batch_size // devices.size) * devices.size}), "
            "or another num_devices."
        )
    env, env_params = given_env, given_params
    if env is None:
        env, made_params = lamella.envs.make(config.env_id, autoreset=False)
        eval_env, _ = lamella.envs.make(config.env_id, autoreset=False)
        env_params = made_params if env_params is None else env_params
    else:
        lamella.envs.check_env_object(
            env, env_params, "make_offpolicy_runner", "lamella.agents.offpolicy.host.train_host(config, env)"
        )
        eval_env = env
        env_params = env.default_params if env_params is None else env_params
    if make_agent is None:  # lamella-agents' own learners; lamella-marl's pass make_agent
        check_single_agent(
            env, name, config.env_id if given_env is None else None, _MULTI_AGENT.get(name, "idqn")
        )
    num_agents = int(getattr(env, "num_agents", 1))
    multi_agent = num_agents > 1
    # Rewards and returns carry the agent axis on a multi-agent env.
    agent_shape: tuple[int, ...] = (num_agents,) if multi_agent else ()
    if multi_agent and config.n_step > 1:
        raise ValueError(
            f"n_step > 1 is not supported on a multi-agent env ({config.env_id}: {num_agents} agents); "
            "set n_step=1."
        )
    observation_space, action_space = env.observation_space(env_params), env.action_space(env_params)
    goal = is_goal_space(observation_space)
    if config.her and not goal:
        raise ValueError(
            f"her=True needs a goal-conditioned env (dict observations with observation/achieved_goal/"
            f"desired_goal); {config.env_id} is not one. Use a goal env such as GMazeGoalDubins-v0."
        )
    make_sampler = resolve_batch_sampler(config, batch_sampler)
    if make_agent is None:
        agent = AGENTS[name][1](agent_cfg, observation_space, action_space, devices)
    elif agent_takes_devices:
        agent = make_agent(agent_cfg, observation_space, action_space, devices)
    else:
        agent = make_agent(agent_cfg, observation_space, action_space)
    setter = resolve_goal_setter(config, goal_setter, env, env_params)
    num_envs, rollout_steps = config.num_envs, config.rollout_steps
    buffer = make_episode_buffer(num_envs, config.buffer_size // num_envs, config.batch_size)
    # HER relabels with the functions the transitions were scored with: a setter's own, else the env's.
    goals = (getattr(setter, "goals", None) or goal_functions(env, env_params)) if goal else None
    if goals is not None and goals.episode_length is None:
        goals = goals._replace(episode_length=_episode_length(env_params))
    sample_batch = make_sampler(config, buffer, goals)
    max_eval_steps = eval_max_steps(config, env_params)
    env_reset = jax.vmap(env.reset, in_axes=(0, None))
    env_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    env_reset_done = jax.vmap(env.reset_done, in_axes=(0, 0, 0, 0, None))
    sample_actions = jax.vmap(action_space.sample)
    take, gather = devices.take, devices.gather

    def env_keys(key: jax.Array) -> jax.Array:
        """The keys of this device's envs: its block of the keys of all envs."""
        return take(jax.random.split(key, num_envs))

    def init(key: jax.Array) -> OffPolicyRunnerState:
        key, key_agent, key_env, key_setter, key_example = jax.random.split(key, 5)
        obs, env_state = env_reset(env_keys(key_env), env_params)
        obs = gather(obs)
        setter_state = setter.init(key_setter, obs)
        obs, setter_state = setter.reset(key_setter, setter_state, obs, jnp.ones((num_envs,), bool))
        train_state, _ = agent.init(key_agent, obs)
        one_obs = jax.tree.map(lambda x: x[0], obs)
        example = transition_like(one_obs, action_space.sample(key_example))
        if multi_agent:
            example = dataclasses.replace(
                example,
                reward=jnp.zeros(agent_shape, jnp.float32),
                terminated=jnp.zeros(agent_shape, jnp.bool_),
                truncated=jnp.zeros(agent_shape, jnp.bool_),
            )
        zero = jnp.zeros((), jnp.float32)
        return OffPolicyRunnerState(
            train_state=train_state,
            buffer_state=buffer.init(example),
            env_state=env_state,
            obs=obs,
            setter_state=setter_state,
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
            episode_return=jnp.zeros((num_envs, *agent_shape), jnp.float32),
            last_return=jnp.zeros(agent_shape, jnp.float32),
            last_success=zero,
        )

    def learn(
        train_state: Any, buffer_state: EpisodeBufferState, key: jax.Array
    ) -> tuple[Any, dict[str, jax.Array]]:
        def one(ts: Any, k: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
            ts, _, metrics = agent.update(sample_batch(buffer_state, k), ts, ())
            return ts, metrics

        if config.updates_per_step == 1:
            return one(train_state, key)
        train_state, metrics = jax.lax.scan(one, train_state, jax.random.split(key, config.updates_per_step))
        return train_state, jax.tree.map(jnp.mean, metrics)

    def env_step_and_learn(carry: tuple[Any, ...], _: None) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        state, sums = carry
        key, k_act, k_random, k_step, k_reset, k_setter, k_update = jax.random.split(state.key, 7)
        action, train_state, _ = agent.policy(k_act, state.train_state, state.obs, (), eval=False)
        warming_up = state.env_steps < config.learning_starts
        random_action = sample_actions(jax.random.split(k_random, num_envs))
        action = jnp.where(warming_up, random_action.astype(action.dtype), action)
        next_obs, env_state, reward, terminated, truncated, info = env_step(
            env_keys(k_step), state.env_state, take(action), env_params
        )
        # Every env's step on every device (the env states stay split).
        next_obs, reward, terminated, truncated, info = gather(
            (next_obs, reward, terminated, truncated, info)
        )
        k_setter_step, k_setter_reset = jax.random.split(k_setter)
        next_obs, reward, terminated, truncated, info, setter_state = setter.step(
            k_setter_step, state.setter_state, next_obs, reward, terminated, truncated, info
        )
        reward = reward.astype(jnp.float32)
        transition = Transition(state.obs, action, reward, terminated, truncated, next_obs)
        buffer_state = buffer.add(state.buffer_state, jax.tree.map(lambda x: x[:, None], transition))
        done = jax.vmap(episode_done)(terminated, truncated)
        episode_return = state.episode_return + reward
        done_agents = done.reshape((num_envs, *(1,) * len(agent_shape)))
        success = info.get("is_success", jnp.zeros_like(done)).astype(jnp.float32)
        sums = {
            "returns": sums["returns"] + jnp.sum(jnp.where(done_agents, episode_return, 0.0), axis=0),
            "successes": sums["successes"] + jnp.sum(jnp.where(done, success, 0.0)),
            "episodes": sums["episodes"] + jnp.sum(done.astype(jnp.float32)),
        }
        obs, env_state = env_reset_done(env_keys(k_reset), take(done), env_state, take(next_obs), env_params)
        obs = gather(obs)
        obs, setter_state = setter.reset(k_setter_reset, setter_state, obs, done)
        env_steps = state.env_steps + num_envs
        metrics_shape = update_metrics_shape
        if metrics_shape is None:  # one device's runner: found here, where the mesh axis is bound
            metrics_shape = jax.eval_shape(learn, train_state, buffer_state, k_update)[1]
        # Under vmap over seeds this cond runs both branches (a select); alone it skips the updates.
        train_state, metrics = jax.lax.cond(
            env_steps >= config.learning_starts,
            lambda ts: learn(ts, buffer_state, k_update),
            lambda ts: (ts, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metrics_shape)),
            train_state,
        )
        new_state = state.replace(
            train_state=train_state,
            buffer_state=buffer_state,
            env_state=env_state,
            obs=obs,
            setter_state=setter_state,
            key=key,
            env_steps=env_steps,
            episode_return=jnp.where(done_agents, 0.0, episode_return),
        )
        # What a recording run keeps of the step: this device's block of the envs.
        learned = (env_steps >= config.learning_starts).astype(jnp.float32)
        return (new_state, sums), (metrics, learned, take(recorded(transition)))

    def record_step(state: OffPolicyRunnerState) -> tuple[OffPolicyRunnerState, dict[str, jax.Array], Any]:
        zero = jnp.zeros((), jnp.float32)
        sums0 = {"returns": jnp.zeros(agent_shape, jnp.float32), "successes": zero, "episodes": zero}
        (state, sums), (metrics, learned, experience) = jax.lax.scan(
            env_step_and_learn, (state, sums0), None, length=rollout_steps
        )
        updated_steps = jnp.sum(learned)
        updates = jnp.maximum(updated_steps, 1.0)

        def mean_over_updates(values: jax.Array) -> jax.Array:
            # The warm-up steps before learning_starts did not update: their zeros are no value
            # of the agent's (a temperature or epsilon of 0), so they are left out of the mean.
            weights = learned.reshape(learned.shape + (1,) * (values.ndim - 1))
            return jnp.mean(jnp.sum(values * weights, axis=0) / updates)

        ended = sums["episodes"] > 0
        count = jnp.maximum(sums["episodes"], 1.0)
        last_return = jnp.where(ended, sums["returns"] / count, state.last_return)
        last_success = jnp.where(ended, sums["successes"] / count, state.last_success)
        out = {k: mean_over_updates(v).astype(jnp.float32) for k, v in metrics.items()}
        out.update(
            episode_return=jnp.sum(last_return),
            episodes=sums["episodes"],
            updates=updated_steps * config.updates_per_step,
        )
        if multi_agent:
            out["return"] = last_return
        if goal:
            out["success_rate"] = last_success
        state = state.replace(
            iteration=state.iteration + 1, last_return=last_return, last_success=last_success
        )
        return state, out, experience

    def step(state: OffPolicyRunnerState) -> tuple[OffPolicyRunnerState, dict[str, jax.Array]]:
        new_state, out, _ = record_step(state)  # the unused experience costs nothing compiled
        return new_state, out

    # A config may ask for the exploring policy (lamella-marl's IDQN on LBF: two greedy agents
    # can block each other for the rest of an episode); greedy by default.
    eval_greedy = bool(getattr(config, "eval_greedy", True))

    def evaluate(state: OffPolicyRunnerState, key: jax.Array) -> dict[str, jax.Array]:
        metrics = evaluate_agent(
            agent,
            state.train_state,
            eval_env,
            env_params,
            key,
            config.eval_episodes,
            max_eval_steps,
            memory=(),
            greedy=eval_greedy,
            success=goal,
            per_agent=multi_agent,
        )
        if multi_agent:
            metrics["return"] = metrics.pop("agent_return")
        if goal:
            metrics["success_rate"] = jnp.mean(metrics["success"])
        return metrics

    # The structure of the agent's update metrics (zeros before learning starts), found
    # abstractly, without compiling anything (and so a config the env cannot take fails when the
    # runner is built). A per-device runner's update reduces over the mesh axis, which is bound
    # only inside its step: it finds them there.
    def _update_metrics(key: jax.Array) -> dict[str, jax.Array]:
        state = init(key)
        return learn(state.train_state, state.buffer_state, key)[1]

    update_metrics_shape = None if devices.sharded else jax.eval_shape(_update_metrics, jax.random.key(0))
    # The driver's chunk mean of each update metric weights the iterations by their updates. A
    # per-device runner (which cannot find its metrics here) takes the whole-batch runner's.
    weights = None if update_metrics_shape is None else dict.fromkeys(update_metrics_shape, "updates")

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
        metric_axes={"return": ("agent",)} if multi_agent else None,
        record_step=record_step,
        metric_weights=weights,
        # One episode of the evaluation's policy drawn with the env's render (lamella train --gif,
        # lamella eval report).
        render_episode=lambda state, key: episode_frames(
            agent, state.train_state, eval_env, env_params, key, max_eval_steps, (), greedy=eval_greedy
        ),
        sharding=None
        if make_agent is not None and not agent_takes_devices
        else runner_sharding(
            devices,
            "num_envs",
            num_envs,
            lambda axis: _offpolicy_runner(
                config, goal_setter, batch_sampler, given_env, given_params, make_agent, True, axis, recorded
            )._replace(metric_weights=weights),
            _offpolicy_state_axes,
        ),
    )
