"""Soft Actor-Critic (Haarnoja et al. 2018) with automatic entropy tuning, continuous and discrete.

``make_sac(config, observation_space, action_space)`` returns an
:class:`~lamella.agents.protocol.Agent` whose ``update`` does one gradient step of the twin
critics, the actor and the temperature on a :class:`~lamella.agents.offpolicy.common.Batch`,
then Polyak-averages the target critics. A Discrete action space gives discrete SAC
(Christodoulou 2019): exact expectations over actions instead of sampled ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from lamella.agents.config import is_swept, unused_settings_of
from lamella.agents.devices import DeviceAxis
from lamella.agents.distributions import Categorical
from lamella.agents.offpolicy import targets
from lamella.agents.offpolicy.common import (
    ActionScaler,
    Batch,
    ContinuousCritic,
    DiscreteActor,
    DiscreteCritic,
    SquashedGaussianActor,
    apply_fn,
    device_block,
    flatten_observation,
    obs_example_input,
    polyak,
    squashed_gaussian_sample,
)
from lamella.agents.protocol import Agent
from lamella.agents.runner import hashed_keys
from lamella.envs import spaces
from lamella.envs.wrappers import RunningMeanStd

__all__ = [
    "NormalizedSACTrainState",
    "SACConfig",
    "SACTrainState",
    "make_sac",
    "make_squashed_gaussian_agent",
    "normalize_and_scale",
]


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC's learning settings (the loop's settings live with the runner).

    Attributes:
        gamma: discount (the runner builds each batch's ``discount`` from it).
        actor_learning_rate, critic_learning_rate, alpha_learning_rate: Adam step sizes.
        tau: Polyak rate of the target critics.
        hidden_sizes: widths of the actor's and each critic's MLP.
        activation: activation name.
        num_critics: critics in the ensemble (2: clipped double Q).
        init_alpha: initial entropy temperature.
        autotune_alpha: learn the temperature towards the target entropy (off: the temperature
            stays at ``init_alpha``, and ``alpha_learning_rate`` and ``target_entropy_scale`` set
            on the command line are refused).
        target_entropy_scale: continuous: target entropy ``-scale * action_dim``; discrete:
            ``scale * log(num_actions)``.
        policy_frequency: actor and temperature update every this many critic updates.
        reward_bounds: ``(lowest, highest)`` reward of one step, or None. When given, every
            critic target is clipped to the returns such rewards allow
            (:func:`~lamella.agents.offpolicy.targets.return_bounds`; ``(-1, 0)`` with gamma
            0.98 clips to ``[-50, 0]``, HER's fix for sparse goal rewards).
        critic_hidden_sizes: widths of each critic's MLP (None: ``hidden_sizes``, as the actor).
        critic_norm: ``"layer"`` puts LayerNorm before every hidden activation of the critics;
            None: plain MLPs.
        normalize_observations: the networks see observations normalised by their running mean
            and standard deviation (clipped to [-10, 10]), as brax.training's SAC does with
            ``normalize_observations=True``: the replay buffer keeps raw observations, every
            batch is normalised with the current statistics, and the statistics take in every
            observation the training policy acts on (greedy evaluation uses them, unchanged).
            The train state is then :class:`NormalizedSACTrainState`.
        log_std_bounds: ``(lowest, highest)`` log standard deviation of the actor's Gaussian
            (continuous SAC); the network's output is squashed smoothly into them, so a
            fresh actor's standard deviation is about ``exp(mean of the bounds)``: 0.22 with the
            default ``(-5, 2)``; ``(-5, 4.26)`` starts at 0.69 as brax.training's SAC does.
        reward_scaling: every sampled reward is multiplied by this before the critic target
            (brax.training's ``reward_scaling``); the reported returns stay in the env's units,
            ``q_target`` is in the scaled ones.
        update_order: which critic the actor learns from in a gradient step.
            ``"sequential"``: the critic after this step's critic update (SB3's and CleanRL's
            order); ``"simultaneous"``: the critic from before it, so that the critic, the actor
            and the temperature all learn from the same state (brax.training's SAC order).
            The temperature's step is the same in both.
    """

    gamma: float = 0.99
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    alpha_learning_rate: float = 3e-4
    tau: float = 0.005
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    num_critics: int = 2
    init_alpha: float = 1.0
    autotune_alpha: bool = True
    target_entropy_scale: float = 1.0
    policy_frequency: int = 1
    reward_bounds: tuple[float, float] | None = None
    critic_hidden_sizes: tuple[int, ...] | None = None
    critic_norm: str | None = None
    normalize_observations: bool = False
    reward_scaling: float = 1.0
    log_std_bounds: tuple[float, float] = (-5.0, 2.0)
    update_order: str = "sequential"

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: the temperature's tuning settings when
        ``autotune_alpha`` is off (:func:`temperature_settings_unused`)."""
        return temperature_settings_unused(self)


def temperature_settings_unused(config: Any) -> dict[str, str]:
    """``alpha_learning_rate`` and ``target_entropy_scale`` of a SAC or TQC config with
    ``autotune_alpha=False`` (the temperature stays at ``init_alpha``), as ``{field: message}``
    for :func:`~lamella.agents.config.check_unused_settings`."""
    if config.autotune_alpha:
        return {}
    mode = f"autotune_alpha=False keeps the temperature at init_alpha={config.init_alpha}"
    return unused_settings_of(
        config,
        {
            "alpha_learning_rate": "is the step size of the temperature's tuning",
            "target_entropy_scale": "sets the entropy the temperature's tuning aims at",
        },
        mode,
        "set autotune_alpha=True",
    )


#: ``update_order`` values: the actor learns from the critic after / before this step's update.
UPDATE_ORDERS = ("sequential", "simultaneous")


class SACTrainState(struct.PyTreeNode):
    """What SAC's learning changes (all arrays)."""

    actor_params: Any
    critic_params: Any
    target_critic_params: Any
    log_alpha: jax.Array  # float32 ()
    actor_opt_state: Any
    critic_opt_state: Any
    alpha_opt_state: Any
    updates: jax.Array  # int32 (): gradient steps taken


def step_actor_and_temperature(
    state: SACTrainState,
    actor_grads: Any,
    alpha_grad: jax.Array | None,
    actor_opt: optax.GradientTransformation,
    alpha_opt: optax.GradientTransformation,
) -> SACTrainState:
    """One optimiser step of the actor and (when ``alpha_grad`` is given) of ``log_alpha``.

    Shared by continuous SAC, discrete SAC and TQC: they differ in their losses, not here.
    """
    actor_updates, actor_opt_state = actor_opt.update(actor_grads, state.actor_opt_state)
    log_alpha, alpha_opt_state = state.log_alpha, state.alpha_opt_state
    if alpha_grad is not None:
        alpha_updates, alpha_opt_state = alpha_opt.update(alpha_grad, state.alpha_opt_state)
        log_alpha = optax.apply_updates(state.log_alpha, alpha_updates)
    return state.replace(
        actor_params=optax.apply_updates(state.actor_params, actor_updates),
        actor_opt_state=actor_opt_state,
        log_alpha=log_alpha,
        alpha_opt_state=alpha_opt_state,
    )


def _check(config: Any) -> None:
    if config.num_critics < 1:
        raise ValueError(f"num_critics must be >= 1, got {config.num_critics}.")
    if not is_swept(config.tau) and not 0.0 < config.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {config.tau}.")
    if not is_swept(config.gamma) and not 0.0 <= config.gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {config.gamma}.")
    if config.init_alpha <= 0:
        raise ValueError(f"init_alpha must be > 0, got {config.init_alpha}.")
    if not getattr(config, "reward_scaling", 1.0) > 0:
        raise ValueError(f"reward_scaling must be > 0, got {config.reward_scaling}.")
    low, high = getattr(config, "log_std_bounds", (-5.0, 2.0))
    if not low < high:
        raise ValueError(
            f"log_std_bounds must be (lowest, highest) with lowest < highest, got {(low, high)}."
        )
    if getattr(config, "policy_frequency", 1) < 1:
        raise ValueError(f"policy_frequency must be >= 1, got {config.policy_frequency}.")
    actor_learns_from_updated_critic(config)
    critic_settings(config)


def actor_learns_from_updated_critic(config: Any) -> bool:
    """Whether a SAC or TQC config's actor learns from the critic after this step's update
    (``update_order``; configs without the field: ``"sequential"``, True).

    Raises:
        ValueError: an unknown ``update_order``.
    """
    order = getattr(config, "update_order", "sequential")
    if order not in UPDATE_ORDERS:
        raise ValueError(
            f"update_order must be one of {UPDATE_ORDERS}, got {order!r}: 'sequential' (the actor "
            "learns from the critic after this step's update) or 'simultaneous' (from the critic "
            "before it, brax.training's order)."
        )
    return order == "sequential"


def critic_settings(config: Any) -> tuple[tuple[int, ...], bool, tuple[float, float] | None]:
    """``(critic widths, layer norm, target clip range or None)`` of a SAC or TQC config.

    Raises:
        ValueError: an unknown ``critic_norm``, or ``reward_bounds`` that give no finite range.
    """
    sizes = getattr(config, "critic_hidden_sizes", None)
    norm = getattr(config, "critic_norm", None)
    if norm not in (None, "layer"):
        raise ValueError(f"critic_norm must be None or 'layer', got {norm!r}.")
    bounds = getattr(config, "reward_bounds", None)
    clip = None if bounds is None else targets.return_bounds(float(config.gamma), tuple(bounds))
    return tuple(config.hidden_sizes if sizes is None else sizes), norm == "layer", clip


def make_sac(
    config: SACConfig,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    devices: DeviceAxis | None = None,
) -> Agent:
    """SAC as an Agent: continuous for a 1-D Box action space, discrete SAC for a Discrete one.

    ``policy(key, train_state, obs, memory, eval)`` samples (``eval=True``: the mean action, or
    the most likely discrete action); ``update(batch, train_state, memory)`` does one step.
    ``devices``: the mesh axis when the loop's envs are split over devices; ``update`` then
    takes the whole sampled batch (the same on every device), learns from this device's equal
    block (its rows of the whole batch's action noise) and averages gradients and metrics over
    the devices.
    """
    _check(config)
    devices = devices or DeviceAxis()
    if isinstance(action_space, spaces.Discrete):
        agent = _make_discrete_sac(config, observation_space, action_space, devices)
    else:
        agent = _make_continuous_sac(config, observation_space, action_space, devices)
    normalize = bool(getattr(config, "normalize_observations", False))
    scale = float(getattr(config, "reward_scaling", 1.0))
    if not normalize and scale == 1.0:
        return agent  # the plain agent, unchanged
    return normalize_and_scale(agent, observation_space, normalize, scale)


class NormalizedSACTrainState(struct.PyTreeNode):
    """The train state of an agent wrapped by :func:`normalize_and_scale` with observation
    normalisation: the wrapped agent's state and the running observation statistics."""

    agent_state: Any
    obs_stats: RunningMeanStd  # float32 (features,) mean and var, () count


def normalize_and_scale(
    agent: Agent, observation_space: spaces.Space, normalize_observations: bool, reward_scaling: float
) -> Agent:
    """``agent`` learning from scaled rewards and, with ``normalize_observations``, acting on and
    learning from normalised observations (see :class:`SACConfig`).

    The statistics are of the flat network input (:func:`flatten_observation`, so goal dicts
    too) and live in the train state (:class:`NormalizedSACTrainState`): ``policy`` with
    ``eval=False`` adds the observations it is given before acting on them (the off-policy loop
    calls it on every env step, warm-up included, with every env's observation on every device,
    so the statistics stay equal across devices); ``update`` normalises the batch's ``obs`` and
    ``next_obs`` with the current statistics and leaves them unchanged.
    """
    features = int(flatten_observation(obs_example_input(observation_space)).shape[-1])

    def rebuilt(batch: Batch, normalize: Callable[[Any], Any]) -> Batch:
        reward = batch.reward if reward_scaling == 1.0 else batch.reward * reward_scaling
        return Batch(
            normalize(batch.obs), batch.action, reward, batch.discount, normalize(batch.next_obs), batch.key
        )

    if not normalize_observations:

        def update_scaled(
            batch: Batch, train_state: Any, memory: Any
        ) -> tuple[Any, Any, dict[str, jax.Array]]:
            return agent.update(rebuilt(batch, lambda obs: obs), train_state, memory)

        return agent._replace(update=update_scaled)

    def init(key: jax.Array, obs_example: Any = None) -> tuple[NormalizedSACTrainState, Any]:
        state, memory = agent.init(key, obs_example)
        return NormalizedSACTrainState(state, RunningMeanStd.zeros((features,))), memory

    def policy(
        key: jax.Array, train_state: NormalizedSACTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, NormalizedSACTrainState, Any]:
        flat = flatten_observation(obs)
        stats = train_state.obs_stats if eval else train_state.obs_stats.update_batch(flat)
        action, state, memory = agent.policy(
            key, train_state.agent_state, stats.normalize(flat), memory, eval
        )
        return action, NormalizedSACTrainState(state, stats), memory

    def update(
        batch: Batch, train_state: NormalizedSACTrainState, memory: Any
    ) -> tuple[NormalizedSACTrainState, Any, dict[str, jax.Array]]:
        stats = train_state.obs_stats
        batch = rebuilt(batch, lambda obs: stats.normalize(flatten_observation(obs)))
        state, memory, metrics = agent.update(batch, train_state.agent_state, memory)
        return NormalizedSACTrainState(state, stats), memory, metrics

    return agent._replace(init=init, policy=policy, update=update)


def _optimizers(config: Any) -> tuple[Any, Any, Any]:
    return (
        # Flattened: one Adam over one vector instead of one per parameter leaf (fewer kernels to
        # compile and launch; the same arithmetic).
        optax.flatten(optax.adam(config.actor_learning_rate)),
        optax.flatten(optax.adam(config.critic_learning_rate)),
        optax.adam(config.alpha_learning_rate),
    )


def make_squashed_gaussian_agent(
    config: Any,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    critic: Any,
    soft_target: Callable[..., jax.Array],
    critic_loss: Callable[[jax.Array, jax.Array], jax.Array],
    actor_value: Callable[[jax.Array], jax.Array],
    devices: DeviceAxis | None = None,
) -> Agent:
    """The agent continuous SAC and TQC share: a tanh-squashed Gaussian actor, an ensemble
    critic, a learned temperature, Polyak-averaged target critics. They differ only in what the
    critic outputs and how it learns, given here:

    Args:
        config: ``SACConfig`` or ``TQCConfig`` (learning rates, ``tau``, sizes, temperature
            settings; ``policy_frequency`` if it has one, else 1).
        observation_space, action_space: a 1-D Box action space.
        critic: a :class:`~lamella.agents.offpolicy.common.ContinuousCritic`;
            ``critic.apply(params, obs, unit_action)`` is float32 ``(critics, B, outputs)``.
        soft_target: ``(reward (B,), discount (B,), next_out (critics, B, outputs),
            next_log_prob (B,), alpha) -> target`` with leading axis B, from the target
            critics at a sampled next action.
        critic_loss: ``(out (critics, B, outputs), target) -> scalar`` at the stored actions.
        actor_value: ``out (critics, B, outputs) -> (B,)``: the value the actor maximises.
        devices: the mesh axis when the envs are split over devices (see :func:`make_sac`).
    """
    devices = devices or DeviceAxis()
    scaler = ActionScaler(action_space)
    low, high = (float(b) for b in getattr(config, "log_std_bounds", (-5.0, 2.0)))
    actor = SquashedGaussianActor(
        scaler.dim, tuple(config.hidden_sizes), config.activation, log_std_min=low, log_std_max=high
    )
    actor_apply, critic_apply = apply_fn(actor), apply_fn(critic)
    actor_opt, critic_opt, alpha_opt = _optimizers(config)
    target_entropy = -float(config.target_entropy_scale) * scaler.dim
    policy_frequency = int(getattr(config, "policy_frequency", 1))
    updated_critic = actor_learns_from_updated_critic(config)
    clip = critic_settings(config)[2]
    example = obs_example_input(observation_space)

    def init(key: jax.Array, obs_example: Any = None) -> tuple[SACTrainState, tuple[()]]:
        key_actor, key_critic = jax.random.split(key)
        actor_params = actor.init(key_actor, example)
        critic_params = critic.init(key_critic, example, jnp.zeros((1, scaler.dim), jnp.float32))
        log_alpha = jnp.asarray(np.log(config.init_alpha), jnp.float32)
        state = SACTrainState(
            actor_params=actor_params,
            critic_params=critic_params,
            target_critic_params=critic_params,
            log_alpha=log_alpha,
            actor_opt_state=actor_opt.init(actor_params),
            critic_opt_state=critic_opt.init(critic_params),
            alpha_opt_state=alpha_opt.init(log_alpha),
            updates=jnp.zeros((), jnp.int32),
        )
        return state, ()

    def policy(
        key: jax.Array, train_state: SACTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, SACTrainState, Any]:
        mean, log_std = actor_apply(train_state.actor_params, flatten_observation(obs))
        unit = jnp.tanh(mean) if eval else squashed_gaussian_sample(key, mean, log_std)[0]
        return scaler.to_env(unit), train_state, memory

    def critic_objective(
        critic_params: Any, obs: jax.Array, action: jax.Array, target: jax.Array
    ) -> jax.Array:
        return critic_loss(critic_apply(critic_params, obs, action), target)

    def actor_loss(
        actor_params: Any,
        critic_params: Any,
        obs: jax.Array,
        alpha: jax.Array,
        key: jax.Array,
        first_row: Any = None,
    ) -> tuple[jax.Array, jax.Array]:
        mean, log_std = actor_apply(actor_params, obs)
        action, log_prob = squashed_gaussian_sample(key, mean, log_std, first_row)
        value = actor_value(critic_apply(critic_params, obs, action))
        return jnp.mean(alpha * log_prob - value), log_prob

    def update(
        batch: Batch, train_state: SACTrainState, memory: Any
    ) -> tuple[SACTrainState, Any, dict[str, jax.Array]]:
        batch = device_block(batch, devices)
        key_next, key_actor = hashed_keys(batch.key, (2,))
        alpha = jnp.exp(train_state.log_alpha)
        obs, next_obs = flatten_observation(batch.obs), flatten_observation(batch.next_obs)
        # This device's rows of the whole batch's noise (None on one device: the whole batch).
        first_row = devices.start(obs.shape[0]) if devices.sharded else None
        mean, log_std = actor_apply(train_state.actor_params, next_obs)
        next_action, next_log_prob = squashed_gaussian_sample(key_next, mean, log_std, first_row)
        next_out = critic_apply(train_state.target_critic_params, next_obs, next_action)
        target = soft_target(
            batch.reward.astype(jnp.float32),
            batch.discount.astype(jnp.float32),
            next_out,
            next_log_prob,
            alpha,
        )
        if clip is not None:
            target = jnp.clip(target, clip[0], clip[1])
        target = jax.lax.stop_gradient(target)
        c_loss, c_grads = devices.mean(
            jax.value_and_grad(critic_objective)(
                train_state.critic_params, obs, scaler.to_unit(batch.action), target
            )
        )
        c_updates, critic_opt_state = critic_opt.update(c_grads, train_state.critic_opt_state)
        critic_params = optax.apply_updates(train_state.critic_params, c_updates)
        actor_critic = critic_params if updated_critic else train_state.critic_params

        def actor_and_alpha(state: SACTrainState) -> tuple[SACTrainState, jax.Array, jax.Array]:
            (a_loss, log_prob), a_grads = jax.value_and_grad(actor_loss, has_aux=True)(
                state.actor_params, actor_critic, obs, alpha, key_actor, first_row
            )
            # d/d log_alpha of -log_alpha * mean(log_prob + target_entropy)
            alpha_grad = -jnp.mean(jax.lax.stop_gradient(log_prob + target_entropy))
            a_loss, a_grads, alpha_grad, entropy = devices.mean(
                (a_loss, a_grads, alpha_grad, -jnp.mean(log_prob))
            )
            new = step_actor_and_temperature(
                state, a_grads, alpha_grad if config.autotune_alpha else None, actor_opt, alpha_opt
            )
            return new, a_loss, entropy

        state = train_state.replace(critic_params=critic_params, critic_opt_state=critic_opt_state)
        if policy_frequency == 1:
            state, a_loss, entropy = actor_and_alpha(state)
        else:
            state, a_loss, entropy = jax.lax.cond(
                train_state.updates % policy_frequency == 0,
                actor_and_alpha,
                lambda s: (s, jnp.zeros(()), jnp.zeros(())),
                state,
            )
        state = state.replace(
            target_critic_params=polyak(state.target_critic_params, critic_params, config.tau),
            updates=train_state.updates + 1,
        )
        metrics = {
            "loss": c_loss + a_loss,
            "critic_loss": c_loss,
            "actor_loss": a_loss,
            "alpha": jnp.exp(state.log_alpha),
            "entropy": entropy,
            "q_target": devices.mean(jnp.mean(target)),
        }
        return state, memory, metrics

    return Agent(init=init, policy=policy, update=update, reset_memory=lambda memory, eval=False: ())


def _make_continuous_sac(
    config: SACConfig, observation_space: spaces.Space, action_space: spaces.Space, devices: DeviceAxis
) -> Agent:
    sizes, layer_norm, _ = critic_settings(config)
    critic = ContinuousCritic(sizes, config.activation, config.num_critics, layer_norm=layer_norm)

    def soft_target(
        reward: jax.Array,
        discount: jax.Array,
        next_out: jax.Array,
        next_log_prob: jax.Array,
        alpha: jax.Array,
    ) -> jax.Array:
        return jax.vmap(targets.soft_q_target, in_axes=(0, 0, 1, 0, None))(
            reward, discount, next_out[..., 0], next_log_prob, alpha
        )

    def critic_loss(out: jax.Array, target: jax.Array) -> jax.Array:
        return 0.5 * jnp.sum(jnp.mean(jnp.square(out[..., 0] - target[None]), axis=1))

    def actor_value(out: jax.Array) -> jax.Array:
        return jnp.min(out[..., 0], axis=0)  # clipped double Q

    return make_squashed_gaussian_agent(
        config, observation_space, action_space, critic, soft_target, critic_loss, actor_value, devices
    )


def _make_discrete_sac(
    config: SACConfig, observation_space: spaces.Space, action_space: spaces.Discrete, devices: DeviceAxis
) -> Agent:
    num_actions = int(action_space.n)
    actor = DiscreteActor(num_actions, tuple(config.hidden_sizes), config.activation)
    sizes, layer_norm, clip = critic_settings(config)
    critic = DiscreteCritic(num_actions, sizes, config.activation, config.num_critics, layer_norm)
    actor_apply, critic_apply = apply_fn(actor), apply_fn(critic)
    actor_opt, critic_opt, alpha_opt = _optimizers(config)
    target_entropy = float(config.target_entropy_scale) * float(np.log(num_actions))
    updated_critic = actor_learns_from_updated_critic(config)
    example = obs_example_input(observation_space)

    def init(key: jax.Array, obs_example: Any = None) -> tuple[SACTrainState, tuple[()]]:
        key_actor, key_critic = jax.random.split(key)
        actor_params = actor.init(key_actor, example)
        critic_params = critic.init(key_critic, example)
        log_alpha = jnp.asarray(np.log(config.init_alpha), jnp.float32)
        state = SACTrainState(
            actor_params=actor_params,
            critic_params=critic_params,
            target_critic_params=critic_params,
            log_alpha=log_alpha,
            actor_opt_state=actor_opt.init(actor_params),
            critic_opt_state=critic_opt.init(critic_params),
            alpha_opt_state=alpha_opt.init(log_alpha),
            updates=jnp.zeros((), jnp.int32),
        )
        return state, ()

    def policy(
        key: jax.Array, train_state: SACTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, SACTrainState, Any]:
        logits = actor_apply(train_state.actor_params, flatten_observation(obs))
        action = jnp.argmax(logits, -1) if eval else Categorical(logits).sample(key)
        return action.astype(jnp.int32), train_state, memory

    def critic_loss(critic_params: Any, batch: Batch, target: jax.Array) -> jax.Array:
        q = critic_apply(critic_params, flatten_observation(batch.obs))  # (critics, B, A)
        action = batch.action.astype(jnp.int32).reshape(-1)
        q_taken = jnp.take_along_axis(q, action[None, :, None], axis=-1)[..., 0]
        return 0.5 * jnp.sum(jnp.mean(jnp.square(q_taken - target[None]), axis=1))

    def actor_loss(
        actor_params: Any, q: jax.Array, obs: jax.Array, alpha: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        log_probs = jax.nn.log_softmax(actor_apply(actor_params, obs))
        probs = jnp.exp(log_probs)
        loss = jnp.mean(jnp.sum(probs * (alpha * log_probs - jnp.min(q, axis=0)), axis=-1))
        return loss, -jnp.sum(probs * log_probs, axis=-1)

    def update(
        batch: Batch, train_state: SACTrainState, memory: Any
    ) -> tuple[SACTrainState, Any, dict[str, jax.Array]]:
        batch = device_block(batch, devices)
        alpha = jnp.exp(train_state.log_alpha)
        next_obs = flatten_observation(batch.next_obs)
        next_log_probs = jax.nn.log_softmax(actor_apply(train_state.actor_params, next_obs))
        q_next = critic_apply(train_state.target_critic_params, next_obs)
        target = jax.vmap(targets.discrete_soft_q_target, in_axes=(0, 0, 1, 0, None))(
            batch.reward.astype(jnp.float32),
            batch.discount.astype(jnp.float32),
            q_next,
            next_log_probs,
            alpha,
        )
        if clip is not None:
            target = jnp.clip(target, clip[0], clip[1])
        target = jax.lax.stop_gradient(target)
        c_loss, c_grads = devices.mean(
            jax.value_and_grad(critic_loss)(train_state.critic_params, batch, target)
        )
        c_updates, critic_opt_state = critic_opt.update(c_grads, train_state.critic_opt_state)
        critic_params = optax.apply_updates(train_state.critic_params, c_updates)
        obs = flatten_observation(batch.obs)
        actor_critic = critic_params if updated_critic else train_state.critic_params
        q = jax.lax.stop_gradient(critic_apply(actor_critic, obs))
        (a_loss, entropy), a_grads = jax.value_and_grad(actor_loss, has_aux=True)(
            train_state.actor_params, q, obs, alpha
        )
        alpha_grad = jnp.mean(jax.lax.stop_gradient(entropy) - target_entropy)
        a_loss, a_grads, alpha_grad, entropy = devices.mean((a_loss, a_grads, alpha_grad, jnp.mean(entropy)))
        state = step_actor_and_temperature(
            train_state, a_grads, alpha_grad if config.autotune_alpha else None, actor_opt, alpha_opt
        ).replace(
            critic_params=critic_params,
            target_critic_params=polyak(train_state.target_critic_params, critic_params, config.tau),
            critic_opt_state=critic_opt_state,
            updates=train_state.updates + 1,
        )
        log_alpha = state.log_alpha
        metrics = {
            "loss": c_loss + a_loss,
            "critic_loss": c_loss,
            "actor_loss": a_loss,
            "alpha": jnp.exp(log_alpha),
            "entropy": entropy,
            "q_target": devices.mean(jnp.mean(target)),
        }
        return state, memory, metrics

    return Agent(init=init, policy=policy, update=update, reset_memory=lambda memory, eval=False: ())
