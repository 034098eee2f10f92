"""Recurrent independent Q-learning (Mava's ``rec_iql``): IDQN with a GRU per agent.

Each agent acts epsilon-greedily on its own Q-values, computed by a GRU over its own
observation history (``pre-torso MLP -> GRU -> post-torso MLP -> Q head``, Mava's
``network/rnn``); the other agents are part of its environment. With ``share_parameters`` (the
default, as in Mava) one network serves every agent (the agents are folded into the GRU's batch
axis, each with its own hidden state); without it each agent has its own network, optimiser and
target network (``jax.vmap`` over a leading agent axis of the parameters).

Experience is stored as sequences: a flashbax trajectory buffer (``lamella.buffers.
make_trajectory_buffer``) keeps each env's time series, and an update samples
``sample_batch_size`` windows of ``burn_in + sample_sequence_length`` consecutive steps. Every
window starts from a zero hidden state (Mava's choice; R2D2's "zero start"); the first
``burn_in`` steps only warm the hidden state up and carry no loss (R2D2's burn-in; 0, Mava's
setting, by default). Inside a window the hidden state is zeroed where an episode starts (each
stored step carries a ``first`` flag), in acting, in the update and in evaluation.

The TD target of step ``t`` bootstraps from the observation that followed it in the same episode
(the stored ``next_obs``; at a time limit, the episode's final observation), processed by one
more GRU step from the hidden state after step ``t``. So every target, including a truncated
episode's last one, sees the whole history of its own episode within the window (Mava's
``rec_iql`` runs its target network over ``next_obs`` with the next step's reset flags, which
zeroes the memory at an episode's final observation). Double Q-learning (online argmax, target
value), mean squared TD error, soft target updates (``tau``; or hard ones every
``update_period`` updates), Adam with a global-norm clip, all of Mava's ``rec_iql`` defaults.

One runner iteration is Mava's update step: ``rollout_length`` vector env steps (each stored),
then ``epochs`` gradient updates (once the buffer holds ``min_buffer_size`` steps per env).
The runner is a :class:`~lamella.agents.runner.Runner`: ``lamella train rec_iql`` gets the
driver's progress display, run log (team and per-agent returns), checkpoints and exact resume,
and several seeds vmap into one program.

Many devices (``Runner.sharding``, the driver's ``num_devices``): the envs split over the
devices, as in lamella-agents' off-policy loop. Each device steps its block of envs; their new
observations, rewards and flags are gathered, so every device acts for every env with the same
key and adds the same steps to its replicated sequence buffer. Every device samples the same
windows with the same key and learns from its equal block of them (``sample_batch_size /
num_devices`` windows), averaging gradients and metrics over the devices, so the parameters stay
equal and the run equals the one-device run up to the order of float sums::

    runner = make_rec_iql_runner(RecIQLConfig(env_id="Foraging-5x5-2p-1f-coop-v3"))
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 3))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from lamella.agents.algorithms import Algorithm
from lamella.agents.config import (
    ConfigError,
    check_config_type,
    check_numbers,
    is_swept,
    unused_settings_of,
)
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.networks import MLP, RecurrentCore, activation_by_name, orthogonal
from lamella.agents.protocol import Agent
from lamella.agents.runner import Runner, episode_frames, eval_max_steps, evaluate_agent
from lamella.buffers import Transition, make_trajectory_buffer
from lamella.envs import spaces
from lamella.envs.environment import Environment, episode_done
from lamella.marl.observation import MultiAgentObservation, check_multi_agent_env, num_actions_of
from lamella.marl.ppo import bare_multi_agent_env, env_keyword_arguments
from lamella.marl.recording import recorded_experience

__all__ = [
    "PRESETS",
    "REC_IQL",
    "RecIQLConfig",
    "RecIQLRunnerState",
    "RecIQLTrainState",
    "RecurrentQNetwork",
    "make_rec_iql_runner",
]


@dataclasses.dataclass(frozen=True)
class RecIQLConfig:
    """Recurrent IQL's settings; the defaults are Mava's ``rec_iql`` (``configs/system/q_learning/
    rec_iql.yaml``, ``arch/anakin.yaml``, ``network/rnn.yaml``).

    Attributes:
        env_id: a registered multi-agent env id with discrete actions.
        env_kwargs: keyword overrides of ``lamella.envs.make(env_id, ...)`` as ``"name=value"``.
        total_timesteps: env steps of training over all envs (Mava: 156,250 updates x 2 steps x
            16 envs = 5,000,000).
        eval_episodes: episodes per evaluation (Mava: 32).
        eval_max_steps: step cap of an evaluation (0: the env's ``max_steps_in_episode``).
        eval_greedy: evaluate greedily (Mava's ``rec_iql`` evaluates with epsilon 0); else with
            ``eps_min``.
        num_envs: parallel envs (Mava: 16).
        rollout_length: vector env steps per iteration (Mava: 2).
        epochs: gradient updates per iteration (Mava: 2).
        buffer_size: steps kept per env (Mava: 5000; a circular buffer).
        min_buffer_size: steps per env before the first update (Mava: 32; at least one window).
        sample_batch_size: windows per update (Mava: 32).
        sample_sequence_length: steps per window that carry a loss (Mava: 20).
        burn_in: extra steps at the start of each window that only warm up the hidden state
            (R2D2's burn-in; Mava: 0, zero start).
        learning_rate: Adam step size (Mava ``q_lr``: 3e-4).
        max_grad_norm: global gradient-norm clip (Mava: 10).
        gamma: discount.
        hard_update: copy the online network to the target every ``update_period`` updates;
            else a soft update with ``tau`` after every update (Mava: soft).
        update_period: see ``hard_update`` (Mava: 200; set on the command line without
            ``hard_update``, it is refused, as ``tau`` with it).
        tau: soft update rate (Mava: 0.01).
        eps_min: final exploration rate (Mava: 0.05).
        eps_decay: env steps (over all envs) over which epsilon falls linearly from 1 to
            ``eps_min`` (Mava: 1e5).
        hidden_sizes: widths of the MLP before the GRU (Mava: [128]).
        rnn_hidden_size: width of each agent's GRU state (Mava: 128).
        post_torso_sizes: widths of the MLP after the GRU (Mava: [128]).
        activation: activation name (Mava: relu).
        agent_id: append a one-hot agent id to each agent's observation (Mava: true).
        share_parameters: one network for all agents (Mava) or one per agent.
        team_reward: train every agent on the sum of the agents' rewards (LBF's team).
    """

    env_id: str = "Foraging-8x8-2p-2f-coop-v3"
    env_kwargs: tuple[str, ...] = ()
    total_timesteps: int = 5_000_000
    eval_episodes: int = 32
    eval_max_steps: int = 0
    eval_greedy: bool = True
    num_envs: int = 16
    rollout_length: int = 2
    epochs: int = 2
    buffer_size: int = 5000
    min_buffer_size: int = 32
    sample_batch_size: int = 32
    sample_sequence_length: int = 20
    burn_in: int = 0
    learning_rate: float = 3e-4
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    hard_update: bool = False
    update_period: int = 200
    tau: float = 0.01
    eps_min: float = 0.05
    eps_decay: int = 100_000
    hidden_sizes: tuple[int, ...] = (128,)
    rnn_hidden_size: int = 128
    post_torso_sizes: tuple[int, ...] = (128,)
    activation: str = "relu"
    agent_id: bool = True
    share_parameters: bool = True
    team_reward: bool = True

    #: The algorithm's name in messages.
    algorithm = "rec_iql"

    @property
    def steps_per_iteration(self) -> int:
        return int(self.num_envs) * int(self.rollout_length)

    @property
    def num_iterations(self) -> int:
        return int(self.total_timesteps) // self.steps_per_iteration

    @property
    def window(self) -> int:
        """Steps per sampled window: ``burn_in + sample_sequence_length``."""
        return int(self.burn_in) + int(self.sample_sequence_length)

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` naming the first inconsistent setting
        (first any number out of its range or of the wrong type: lamella-agents'
        :func:`~lamella.agents.config.check_numbers`)."""
        name = type(self).__name__
        check_numbers(self)
        for field in (
            "num_envs",
            "rollout_length",
            "epochs",
            "buffer_size",
            "sample_batch_size",
            "sample_sequence_length",
            "rnn_hidden_size",
            "eval_episodes",
        ):
            if int(getattr(self, field)) < 1:
                raise ConfigError(f"{name}.{field} must be >= 1, got {getattr(self, field)}.")
        if int(self.burn_in) < 0 or int(self.min_buffer_size) < 0 or int(self.eps_decay) < 0:
            raise ConfigError(f"{name}: burn_in, min_buffer_size and eps_decay must be >= 0.")
        if self.hard_update and int(self.update_period) < 1:
            raise ConfigError(
                f"{name}.update_period must be >= 1 with hard_update, got {self.update_period}."
            )
        # A sweep's traced value was checked as a number first (lamella.agents.config.is_swept).
        if not is_swept(self.tau) and not 0.0 < float(self.tau) <= 1.0:
            raise ConfigError(f"{name}.tau must be in (0, 1], got {self.tau}.")
        if not is_swept(self.eps_min) and not 0.0 <= float(self.eps_min) <= 1.0:
            raise ConfigError(f"{name}.eps_min must be in [0, 1], got {self.eps_min}.")
        if self.window > int(self.buffer_size):
            raise ConfigError(
                f"{name}: a window of burn_in + sample_sequence_length = {self.window} steps does not fit "
                f"in buffer_size = {self.buffer_size} steps per env; raise buffer_size or shorten the window."
            )
        if self.num_iterations < 1:
            raise ConfigError(
                f"{name}.total_timesteps = {self.total_timesteps} is less than one iteration "
                f"(num_envs x rollout_length = {self.steps_per_iteration} env steps)."
            )
        try:
            activation_by_name(self.activation)
        except (KeyError, ValueError) as error:
            raise ConfigError(str(error)) from None
        env_keyword_arguments(self)  # type: ignore[arg-type]

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: the other target-update mode's setting, ``tau`` with
        ``hard_update`` and ``update_period`` without (``lamella train rec_iql update_period=50`` is
        refused; :func:`lamella.agents.config.check_unused_settings`)."""
        if self.hard_update:
            return unused_settings_of(
                self,
                {"tau": "is the rate of the soft target update"},
                f"hard_update=True copies the online network every update_period={self.update_period} updates",
                "set hard_update=False",
            )
        return unused_settings_of(
            self,
            {"update_period": "is the period of the hard target copies"},
            f"hard_update=False updates the target softly after every update (tau={self.tau})",
            "set hard_update=True",
        )


class RecurrentQNetwork(nn.Module):
    """One agent's recurrent Q-network: ``pre-torso MLP -> GRU -> post-torso MLP -> Q head``.

    ``__call__(carry, x, reset) -> (carry, q, hidden)`` with ``x`` float32 ``(T, batch,
    features)``, ``reset`` bool ``(T, batch)`` (the carry is zeroed before a step where it is
    True), ``q`` ``(T, batch, num_actions)`` and ``hidden`` ``(T, batch, rnn_hidden_size)``, the
    GRU state after each step (a GRU's output is its state).
    """

    num_actions: int
    pre_torso_sizes: Sequence[int] = (128,)
    rnn_hidden_size: int = 128
    post_torso_sizes: Sequence[int] = (128,)
    activation: str = "relu"

    @nn.compact
    def __call__(
        self, carry: jax.Array, x: jax.Array, reset: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        embedding = MLP(tuple(self.pre_torso_sizes), self.activation)(x)
        carry, hidden = RecurrentCore("gru", self.rnn_hidden_size)(carry, (embedding, reset))
        out = MLP(tuple(self.post_torso_sizes), self.activation)(hidden)
        q = nn.Dense(self.num_actions, kernel_init=orthogonal(0.01))(out)
        return carry, q, hidden


class RecIQLTrainState(struct.PyTreeNode):
    """What learning changes: online and target parameters, the optimiser state and the number
    of updates so far (with ``share_parameters=False`` each leaf but ``updates`` has a leading
    agent axis)."""

    params: Any
    target_params: Any
    opt_state: Any
    updates: jax.Array


class RecIQLRunnerState(struct.PyTreeNode):
    """Everything a run carries between iterations.

    Attributes:
        train_state: :class:`RecIQLTrainState`.
        buffer_state: the flashbax trajectory buffer's state (leaves ``(num_envs, buffer_size, ...)``).
        env_state: the envs' states (leading axis ``num_envs``).
        obs: the observations the agents act on next (dict, leading axis ``num_envs``).
        first: bool ``(num_envs,)``: ``obs`` is the first observation of an episode.
        memory: float32 ``(num_envs, num_agents, rnn_hidden_size)``: each agent's GRU state
            after the previous step (zero at an episode's start).
        key: PRNG key.
        iteration: int32 ().
        env_steps: int32 (): env steps over all envs.
        episode_return: float32 ``(num_envs, num_agents)``: each agent's return so far.
        last_return: float32 ``(num_agents,)``: mean return of the episodes that ended in the
            last iteration that had any.
    """

    train_state: RecIQLTrainState
    buffer_state: Any
    env_state: Any
    obs: Any
    first: jax.Array
    memory: jax.Array
    key: jax.Array
    iteration: jax.Array
    env_steps: jax.Array
    episode_return: jax.Array
    last_return: jax.Array


class _Step(struct.PyTreeNode):
    """One stored env step (leaves without the env axis)."""

    obs: Any
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    first: jax.Array
    next_obs: Any


def _masked(q: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.where(mask, q, -jnp.inf)


def _no_update(*args: Any) -> Any:
    raise NotImplementedError("rec_iql's runner updates from its sequence buffer; its Agent only acts.")


def make_rec_iql_runner(
    config: RecIQLConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """Recurrent IQL's :class:`~lamella.agents.runner.Runner` on a multi-agent env with discrete
    actions.

    Args:
        config: a :class:`RecIQLConfig`.
        env: a bare multi-agent env object (default: ``config.env_id`` with ``config.env_kwargs``).
        env_params: its params (default: the env's defaults).

    Raises:
        lamella.agents.config.ConfigError: a single-agent env, continuous actions, ``team_reward``
            on an env whose agents are not one team, or inconsistent settings.

    The runner splits its envs over devices (``Runner.sharding``; see the module's docstring);
    ``num_envs`` and ``sample_batch_size`` must then be multiples of the device count.
    """
    check_config_type(config, RecIQLConfig, "make_rec_iql_runner", algorithm="rec_iql")
    return _rec_iql_runner(config, env, env_params, DeviceAxis())


def _rec_iql_state_axes(state: RecIQLRunnerState) -> Any:
    """The envs axis of each leaf of the runner state (``None``: replicated on every device;
    the observations, memories and buffer too: every device acts for every env)."""
    axes: dict[str, Any] = {field.name: None for field in dataclasses.fields(RecIQLRunnerState)}
    return RecIQLRunnerState(**{**axes, "env_state": 0})


def _rec_iql_runner(
    config: RecIQLConfig, given_env: Environment[Any, Any] | None, given_params: Any, devices: DeviceAxis
) -> Runner:
    """Recurrent IQL's runner for one device's block of the envs (all of them on one device)."""
    config.validate()
    # Checked when the driver builds the per-device runner, before anything compiles.
    devices.local(int(config.sample_batch_size), "sample_batch_size")
    # Numbers, or a sweep's traced values (lamella sweep: one program for every value).
    tau = config.tau if is_swept(config.tau) else float(config.tau)
    eps_min = config.eps_min if is_swept(config.eps_min) else float(config.eps_min)
    env, env_params = given_env, given_params
    algorithm = config.algorithm
    with jax.ensure_compile_time_eval():
        env, env_params, env_id = bare_multi_agent_env(config, env, env_params)
        check_multi_agent_env(env, env_params, algorithm, env_id=env_id, team_reward=config.team_reward)
        if isinstance(env.action_space(env_params), spaces.Box):
            raise ConfigError(
                f"{algorithm} needs discrete actions; {env_id or env.name}'s are continuous (a Box). "
                "Use isac for continuous actions."
            )
    env = MultiAgentObservation(env)
    n = int(env.num_agents)
    num_actions = num_actions_of(env, env_params)
    obs_space = env.observation_space(env_params)
    obs_size = int(np.prod(obs_space["obs"].shape[1:]))
    hidden = int(config.rnn_hidden_size)
    num_envs, window = int(config.num_envs), config.window
    burn_in = int(config.burn_in)
    share = bool(config.share_parameters)
    net = RecurrentQNetwork(
        num_actions,
        tuple(config.hidden_sizes),
        hidden,
        tuple(config.post_torso_sizes),
        config.activation,
    )
    optimizer = optax.chain(  # numbers, or traced scalars where a sweep varies them
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(config.learning_rate, eps=1e-5),
    )
    buffer = make_trajectory_buffer(
        num_envs,
        int(config.buffer_size),
        int(config.sample_batch_size),
        window,
        period=1,
        min_length_time_axis=max(int(config.min_buffer_size), window),
    )
    ids = jnp.eye(n, dtype=jnp.float32)
    env_reset = jax.vmap(env.reset, in_axes=(0, None))
    env_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    env_reset_done = jax.vmap(env.reset_done, in_axes=(0, 0, 0, 0, None))
    max_eval_steps = eval_max_steps(config, env_params)
    take, gather = devices.take, devices.gather

    def env_keys(key: jax.Array) -> jax.Array:
        """The keys of this device's envs: its block of the keys of all envs."""
        return take(jax.random.split(key, num_envs))

    def features(obs: Any) -> jax.Array:
        """Each agent's network input, ``(..., n, F)`` from an observation dict with leaves ``(..., n, ...)``."""
        x = jnp.asarray(obs["obs"], jnp.float32)
        lead = x.shape[: x.ndim - len(obs_space["obs"].shape)]
        x = x.reshape((*lead, n, obs_size))
        if config.agent_id:
            x = jnp.concatenate([x, jnp.broadcast_to(ids, (*lead, n, n))], axis=-1)
        return x

    def q_apply(params: Any, carry: jax.Array, x: jax.Array, reset: jax.Array) -> tuple[jax.Array, ...]:
        """Every agent's network over a sequence: ``carry (B, n, H)``, ``x (T, B, n, F)``,
        ``reset (T, B)`` -> ``(carry (B, n, H), q (T, B, n, A), hidden (T, B, n, H))``."""
        steps, batch = x.shape[:2]
        if share:
            agent_reset = jnp.broadcast_to(reset[:, :, None], (steps, batch, n)).reshape((steps, batch * n))
            outputs: Any = net.apply(
                params, carry.reshape((batch * n, hidden)), x.reshape((steps, batch * n, -1)), agent_reset
            )
            carry, q, h = outputs
            return (
                carry.reshape((batch, n, hidden)),
                q.reshape((steps, batch, n, num_actions)),
                h.reshape((steps, batch, n, hidden)),
            )
        stacked: Any = jax.vmap(net.apply, in_axes=(0, 1, 2, None), out_axes=(1, 2, 2))(
            params, carry, x, reset
        )
        return tuple(stacked)

    def init_params(key: jax.Array) -> Any:
        example = (
            jnp.zeros((1, hidden)),
            jnp.zeros((1, 1, features({"obs": obs_space["obs"].sample(key)}).shape[-1])),
        )
        if share:
            return net.init(key, example[0], example[1], jnp.zeros((1, 1), bool))
        return jax.vmap(lambda k: net.init(k, example[0], example[1], jnp.zeros((1, 1), bool)))(
            jax.random.split(key, n)
        )

    def epsilon(env_steps: jax.Array) -> jax.Array:
        decay = max(int(config.eps_decay), 1)
        fraction = jnp.minimum(env_steps.astype(jnp.float32) / decay, 1.0)
        return jnp.maximum(eps_min, 1.0 - fraction * (1.0 - eps_min))

    def act(
        key: jax.Array, params: Any, obs: Any, memory: jax.Array, eps: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """Epsilon-greedy legal actions ``(B, n)`` and the next memory; ``memory`` is already zero
        where an episode starts."""
        x = features(obs)[None]
        memory, q, _ = q_apply(params, memory, x, jnp.zeros(x.shape[:2], bool))
        mask = obs["action_mask"]
        greedy = jnp.argmax(_masked(q[0], mask), axis=-1)
        key_explore, key_random = jax.random.split(key)
        random = jax.random.categorical(key_random, jnp.where(mask, 0.0, -jnp.inf))
        explore = jax.random.uniform(key_explore, greedy.shape) < eps
        return jnp.where(explore, random, greedy).astype(jnp.int32), memory

    def loss_and_target(
        params: Any, target_params: Any, batch: _Step
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Mean squared TD error over the windows' steps after the burn-in."""
        data = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)  # (T, B, ...)
        steps, size = data.first.shape
        x, next_x = features(data.obs), features(data.next_obs)
        zero = jnp.zeros((size, n, hidden), jnp.float32)
        _, q, h_online = q_apply(params, zero, x, data.first)
        _, _, h_target = q_apply(target_params, zero, x, data.first)

        def bootstrap(p: Any, h: jax.Array) -> jax.Array:
            """Q of each step's next observation: one more GRU step from the state after it."""
            flat = lambda a: a.reshape((1, steps * size, *a.shape[2:]))  # noqa: E731
            _, q_next, _ = q_apply(
                p, h.reshape((steps * size, n, hidden)), flat(next_x), jnp.zeros((1, steps * size), bool)
            )
            return q_next.reshape((steps, size, n, num_actions))

        q_next_online = bootstrap(params, jax.lax.stop_gradient(h_online))
        q_next_target = bootstrap(target_params, h_target)
        best = jnp.argmax(_masked(q_next_online, data.next_obs["action_mask"]), axis=-1)
        next_value = jnp.take_along_axis(q_next_target, best[..., None], axis=-1)[..., 0]
        reward = data.reward.astype(jnp.float32)
        if config.team_reward:
            reward = jnp.broadcast_to(reward.sum(-1, keepdims=True), reward.shape)
        not_terminal = 1.0 - data.terminated.astype(jnp.float32)
        target = jax.lax.stop_gradient(reward + config.gamma * not_terminal * next_value)
        taken = jnp.take_along_axis(q, data.action[..., None].astype(jnp.int32), axis=-1)[..., 0]
        error = (taken - target)[burn_in:]
        loss = jnp.mean(jnp.square(error))
        return loss, {
            "loss": loss,
            "q_mean": jnp.mean(taken[burn_in:]),
            "target_mean": jnp.mean(target[burn_in:]),
        }

    grad_fn = jax.grad(loss_and_target, has_aux=True)

    def update(
        train_state: RecIQLTrainState, buffer_state: Any, key: jax.Array
    ) -> tuple[RecIQLTrainState, dict[str, jax.Array]]:
        # Every device samples the same windows and learns from its block of them.
        batch: _Step = take(buffer.sample(buffer_state, key).experience)
        if share:
            grads, metrics = devices.mean(grad_fn(train_state.params, train_state.target_params, batch))
            updates, opt_state = optimizer.update(grads, train_state.opt_state, train_state.params)
            params = optax.apply_updates(train_state.params, updates)
        else:
            # One network per agent: each agent's gradient comes from its own slice of the loss
            # (the agents' losses do not share parameters, so the joint gradient is per agent).
            grads, metrics = devices.mean(grad_fn(train_state.params, train_state.target_params, batch))
            grads = jax.tree.map(lambda g: g * n, grads)  # the loss is a mean over agents
            updates, opt_state = jax.vmap(optimizer.update)(grads, train_state.opt_state, train_state.params)
            params = optax.apply_updates(train_state.params, updates)
        count = train_state.updates + 1
        if config.hard_update:
            target = optax.periodic_update(
                params, train_state.target_params, count, int(config.update_period)
            )
        else:
            target = optax.incremental_update(params, train_state.target_params, tau)
        return RecIQLTrainState(params, target, opt_state, count), metrics

    def example_step(key: jax.Array) -> _Step:
        obs, _ = env.reset(key, env_params)
        return _Step(
            obs=obs,
            action=jnp.zeros((n,), jnp.int32),
            reward=jnp.zeros((n,), jnp.float32),
            terminated=jnp.zeros((n,), bool),
            first=jnp.zeros((), bool),
            next_obs=obs,
        )

    def init(key: jax.Array) -> RecIQLRunnerState:
        key, key_params, key_env, key_example = jax.random.split(key, 4)
        params = init_params(key_params)
        opt_state = optimizer.init(params) if share else jax.vmap(optimizer.init)(params)
        train_state = RecIQLTrainState(params, params, opt_state, jnp.zeros((), jnp.int32))
        obs, env_state = env_reset(env_keys(key_env), env_params)
        return RecIQLRunnerState(
            train_state=train_state,
            buffer_state=buffer.init(example_step(key_example)),
            env_state=env_state,
            obs=gather(obs),
            first=jnp.ones((num_envs,), bool),
            memory=jnp.zeros((num_envs, n, hidden), jnp.float32),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
            episode_return=jnp.zeros((num_envs, n), jnp.float32),
            last_return=jnp.zeros((n,), jnp.float32),
        )

    def env_step_once(
        carry: tuple[RecIQLRunnerState, dict[str, jax.Array]], _: None
    ) -> tuple[tuple[RecIQLRunnerState, dict[str, jax.Array]], dict[str, Any]]:
        state, sums = carry
        key, key_act, key_step, key_reset = jax.random.split(state.key, 4)
        action, memory = act(
            key_act, state.train_state.params, state.obs, state.memory, epsilon(state.env_steps)
        )
        next_obs, env_state, reward, terminated, truncated, _info = env_step(
            env_keys(key_step), state.env_state, take(action), env_params
        )
        # Every env's step on every device (the env states stay split).
        next_obs, reward, terminated, truncated = gather((next_obs, reward, terminated, truncated))
        reward = jnp.asarray(reward, jnp.float32).reshape((num_envs, n))
        terminated = jnp.asarray(terminated, bool).reshape((num_envs, n))
        stored = _Step(state.obs, action, reward, terminated, state.first, next_obs)
        buffer_state = buffer.add(state.buffer_state, jax.tree.map(lambda x: x[:, None], stored))
        done = jax.vmap(episode_done)(terminated, truncated)
        episode_return = state.episode_return + reward
        sums = {
            "returns": sums["returns"] + jnp.sum(jnp.where(done[:, None], episode_return, 0.0), axis=0),
            "episodes": sums["episodes"] + jnp.sum(done.astype(jnp.float32)),
        }
        obs, env_state = env_reset_done(
            env_keys(key_reset), take(done), env_state, take(next_obs), env_params
        )
        state = state.replace(
            buffer_state=buffer_state,
            env_state=env_state,
            obs=gather(obs),
            first=done,
            memory=jnp.where(done[:, None, None], 0.0, memory),
            key=key,
            env_steps=state.env_steps + num_envs,
            episode_return=jnp.where(done[:, None], 0.0, episode_return),
        )
        # What a recording run keeps of the step (IPPO's layout): this device's block of the envs.
        truncations = jnp.broadcast_to(jnp.asarray(truncated, bool).reshape((num_envs, -1)), (num_envs, n))
        acted = Transition(stored.obs, action, reward, terminated, truncations, next_obs)
        return (state, sums), take(recorded_experience(acted))

    def learn(
        train_state: RecIQLTrainState, buffer_state: Any, key: jax.Array
    ) -> tuple[RecIQLTrainState, dict[str, jax.Array]]:
        def one(ts: RecIQLTrainState, k: jax.Array) -> tuple[RecIQLTrainState, dict[str, jax.Array]]:
            return update(ts, buffer_state, k)

        train_state, metrics = jax.lax.scan(one, train_state, jax.random.split(key, int(config.epochs)))
        return train_state, jax.tree.map(jnp.mean, metrics)

    def record_step(state: RecIQLRunnerState) -> tuple[RecIQLRunnerState, dict[str, jax.Array], Any]:
        sums0 = {"returns": jnp.zeros((n,), jnp.float32), "episodes": jnp.zeros((), jnp.float32)}
        (state, sums), experience = jax.lax.scan(
            env_step_once, (state, sums0), None, length=int(config.rollout_length)
        )
        key, key_update = jax.random.split(state.key)
        metrics_shape = update_metrics_shape
        if metrics_shape is None:  # one device's runner: found here, where the mesh axis is bound
            metrics_shape = jax.eval_shape(learn, state.train_state, state.buffer_state, key_update)[1]
        # Under vmap over seeds the cond runs both branches (a select); alone it skips the updates.
        train_state, metrics = jax.lax.cond(
            buffer.can_sample(state.buffer_state),
            lambda ts: learn(ts, state.buffer_state, key_update),
            lambda ts: (ts, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metrics_shape)),
            state.train_state,
        )
        ended = sums["episodes"] > 0
        last_return = jnp.where(
            ended, sums["returns"] / jnp.maximum(sums["episodes"], 1.0), state.last_return
        )
        out = dict(metrics)
        out.update(
            episode_return=jnp.sum(last_return),
            **{"return": last_return},
            episodes=sums["episodes"],
            epsilon=epsilon(state.env_steps),
        )
        state = state.replace(
            train_state=train_state, key=key, iteration=state.iteration + 1, last_return=last_return
        )
        return state, out, experience

    def step(state: RecIQLRunnerState) -> tuple[RecIQLRunnerState, dict[str, jax.Array]]:
        new_state, out, _ = record_step(state)  # the unused experience costs nothing compiled
        return new_state, out

    def policy(
        key: jax.Array, train_state: RecIQLTrainState, obs: Any, memory: jax.Array, eval: bool = False
    ) -> tuple[jax.Array, RecIQLTrainState, jax.Array]:
        eps = jnp.asarray(0.0 if eval else eps_min, jnp.float32)
        action, memory = act(key, train_state.params, obs, memory, eps)
        return action, train_state, memory

    agent = Agent(
        init=lambda key, obs=None: (init_params(key), jnp.zeros((num_envs, n, hidden))),
        policy=policy,
        update=_no_update,
        reset_memory=lambda memory, eval=False: jnp.zeros(
            (int(config.eval_episodes) if eval else num_envs, n, hidden), jnp.float32
        ),
    )

    def evaluate(state: RecIQLRunnerState, key: jax.Array) -> dict[str, jax.Array]:
        metrics = evaluate_agent(
            agent,
            state.train_state,
            env,
            env_params,
            key,
            int(config.eval_episodes),
            max_eval_steps,
            memory=agent.reset_memory(None, eval=True),
            greedy=bool(config.eval_greedy),
            per_agent=True,
        )
        metrics["return"] = metrics.pop("agent_return")
        return metrics

    def _update_metrics(key: jax.Array) -> dict[str, jax.Array]:
        state = init(key)
        return learn(state.train_state, state.buffer_state, key)[1]

    # The structure of the update metrics (zeros before learning starts), found abstractly. A
    # per-device runner's update reduces over the mesh axis, which is bound only inside its step:
    # it finds them there.
    update_metrics_shape = None if devices.sharded else jax.eval_shape(_update_metrics, jax.random.key(0))

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
        metric_axes={"return": ("agent",)},
        record_step=record_step,
        render_episode=lambda state, key: episode_frames(
            agent,
            state.train_state,
            env,
            env_params,
            key,
            max_eval_steps,
            agent.reset_memory(None, eval=True)[:1],  # fresh memory for a batch of one env
            bool(config.eval_greedy),
        ),
        sharding=runner_sharding(
            devices,
            "num_envs",
            num_envs,
            lambda axis: _rec_iql_runner(config, given_env, given_params, axis),
            _rec_iql_state_axes,
        ),
    )


#: Presets of ``lamella train rec_iql``; one named like an env id is that env's default.
PRESETS: dict[str, RecIQLConfig] = {
    "Foraging-8x8-2p-2f-coop-v3": RecIQLConfig(),
    "Foraging-2s-8x8-2p-2f-coop-v3": RecIQLConfig(env_id="Foraging-2s-8x8-2p-2f-coop-v3"),
}

#: ``lamella train rec_iql`` (entry point ``rec_iql = "lamella.marl.rec_iql:REC_IQL"``).
REC_IQL = Algorithm(RecIQLConfig, make_rec_iql_runner, PRESETS)
