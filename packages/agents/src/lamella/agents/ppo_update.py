"""The PPO update on a batch: epochs of shuffled minibatches of :func:`~lamella.agents.losses.ppo_loss`.

Built once from an :class:`~lamella.agents.actor_critic.ActorCritic` and an optax optimiser, it
is a pure function usable by any runner (single-agent PPO, IPPO/MAPPO with agents folded into
the batch axis, a population under ``jax.vmap``)::

    update = make_ppo_update(actor_critic, optimizer, num_epochs=4, num_minibatches=4,
                             clip_eps=0.2, vf_coef=0.5, ent_coef=0.01)
    batch = ppo_batch(transitions, advantage, target)          # time-major (T, B, ...)
    params, opt_state, metrics = update(params, opt_state, batch, key)

A feed-forward network's minibatches are shuffled steps (one leading axis: feed-forward
networks take any leading axes); a recurrent one's are, by default (``recurrent_update=
"bptt"``), whole env sequences (shuffled envs, time kept, starting from the memory the rollout
started from, gradients back-propagated through time), so the update recomputes exactly the
distributions the rollout acted with before its first step. With ``recurrent_update=
"stored_memory"`` a recurrent network's minibatches are shuffled steps too, each step
recomputed from the memory the rollout stored before it (one step of the core, no gradient
through time; Pax's ``PPO_memory`` update): cheaper, and also exact before the first step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from lamella.agents import losses
from lamella.agents.actor_critic import ActorCritic
from lamella.agents.config import ConfigError, check_numbers
from lamella.agents.devices import DeviceAxis
from lamella.agents.rollout import Transition
from lamella.agents.runner import hashed_keys, hashed_permutation

__all__ = [
    "RECURRENT_UPDATES",
    "PPOBatch",
    "PPOSettings",
    "check_ppo_sizes",
    "make_ppo_optimizer",
    "make_ppo_update",
    "make_ppo_update_from_config",
    "ppo_batch",
]

#: How a recurrent network's PPO update recomputes the rollout (:func:`make_ppo_update`):
#: ``"bptt"``, whole env sequences from the rollout's first memory with gradients through time;
#: ``"stored_memory"``, each step on its own from the memory stored before it when acting.
RECURRENT_UPDATES = ("bptt", "stored_memory")


class PPOBatch(struct.PyTreeNode):
    """What the PPO update trains on. Time-major: leading axes ``(T, B)`` except ``memory``.

    Attributes:
        obs: network inputs (already normalised if the learner normalises).
        raw_action: the raw samples taken (``Transition.raw_action``).
        log_prob: float32 log-probabilities when taken.
        value: float32 values when taken.
        reset: bool: the step starts an episode.
        advantage: float32 GAE advantages.
        target: float32 value targets.
        memory: the network's memory before step 0, leading axis ``B`` (``()`` if feed-forward);
            for the ``"stored_memory"`` update the memory before every step, leading axes
            ``(T, B)`` (:func:`ppo_batch` with ``stored_memory=True``).
    """

    obs: Any
    raw_action: Any
    log_prob: jax.Array
    value: jax.Array
    reset: jax.Array
    advantage: jax.Array
    target: jax.Array
    memory: Any


def ppo_batch(
    transitions: Transition,
    advantage: jax.Array,
    target: jax.Array,
    obs: Any = None,
    stored_memory: bool = False,
) -> PPOBatch:
    """A :class:`PPOBatch` from a collector's transitions; ``obs`` replaces ``transitions.obs``
    (for example normalised observations). ``stored_memory``: keep the memory before every step
    (what the ``recurrent_update="stored_memory"`` update reads), not only before the first."""
    return PPOBatch(
        obs=transitions.obs if obs is None else obs,
        raw_action=transitions.raw_action,
        log_prob=transitions.log_prob,
        value=transitions.value,
        reset=transitions.reset,
        advantage=advantage,
        target=target,
        memory=transitions.memory if stored_memory else jax.tree.map(lambda x: x[0], transitions.memory),
    )


def make_ppo_update(
    actor_critic: ActorCritic,
    optimizer: optax.GradientTransformation,
    *,
    num_epochs: int,
    num_minibatches: int,
    clip_eps: float | jax.Array = 0.2,
    vf_coef: float | jax.Array = 0.5,
    ent_coef: float | jax.Array = 0.01,
    clip_value: bool = True,
    normalize_advantages: bool = True,
    devices: DeviceAxis | None = None,
    recurrent_update: str = "bptt",
) -> Callable[[Any, Any, PPOBatch, jax.Array], tuple[Any, Any, dict[str, jax.Array]]]:
    """``update(params, opt_state, batch, key) -> (params, opt_state, metrics)``.

    Args:
        actor_critic: the network's functions (its ``recurrent`` flag picks the minibatching).
        optimizer: an optax transformation (clipping and schedules included).
        num_epochs: passes over the batch.
        num_minibatches: minibatches per pass: must divide ``T * B`` (feed-forward) or ``B``
            (recurrent); checked when the update is traced.
        clip_eps, vf_coef, ent_coef: PPO's coefficients; may be traced (a vmapped sweep).
        clip_value: use the clipped value loss.
        normalize_advantages: standardise advantages per minibatch.
        devices: the mesh axis when the batch's envs are split over devices
            (:class:`~lamella.agents.devices.DeviceAxis`; ``batch`` is then this device's
            block of envs). Each device gathers the whole batch, draws the same shuffles as
            one device, and computes the gradient of an equal share of every minibatch; the
            shares' gradients (and the metrics) are averaged with ``jax.lax.pmean``, and the
            advantages standardised with the whole minibatch's statistics, so every optimiser
            step is the one-device step on the same minibatch. A minibatch's size (``T * B /
            num_minibatches`` steps, or ``B / num_minibatches`` envs when recurrent) must be a
            multiple of the device count; checked when the update is traced.
        recurrent_update: how a recurrent network recomputes the batch (ignored for a
            feed-forward one; :data:`RECURRENT_UPDATES`). ``"bptt"``: minibatches of whole env
            sequences run through the core from ``batch.memory`` (the memory before step 0),
            gradients through time. ``"stored_memory"``: minibatches of shuffled steps (like a
            feed-forward network's: ``num_minibatches`` must divide ``T * B``), each step one
            step of the network from its stored memory (``batch.memory`` with leading axes
            ``(T, B)``: :func:`ppo_batch` with ``stored_memory=True``), the memory a constant:
            no gradient flows back to earlier steps, so the core is trained only on what one
            step does with the memory it was given. Cheaper per minibatch (no sequential scan
            to differentiate: about 1.5x on Pax's CoinGame co-player, 16-round sequences); the memory the rollout acted with is stale once
            the parameters move (the later epochs' minibatches), which BPTT recomputes.

    Returns:
        The update. ``metrics``: scalar means over all minibatches of ``loss``,
        ``policy_loss``, ``value_loss``, ``entropy``, ``clip_fraction``, ``approx_kl``, and
        ``first_minibatch_kl`` (the first minibatch of the first epoch, computed with the
        parameters that collected the rollout: 0 up to float error when the batch is right).
    """
    if int(num_epochs) < 1 or int(num_minibatches) < 1:
        raise ValueError(
            f"make_ppo_update: num_epochs ({num_epochs}) and num_minibatches ({num_minibatches}) must be >= 1."
        )
    if recurrent_update not in RECURRENT_UPDATES:
        raise ValueError(
            f"make_ppo_update: recurrent_update must be one of {RECURRENT_UPDATES}, got {recurrent_update!r}."
        )
    devices = devices or DeviceAxis()
    # Sequence minibatches (BPTT) or step minibatches (feed-forward, or stored memory).
    sequence_minibatches = actor_critic.recurrent and recurrent_update == "bptt"
    stored = actor_critic.recurrent and recurrent_update == "stored_memory"

    def evaluate_steps(
        params: Any, memory: Any, obs: Any, reset: jax.Array, raw_action: Any
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Each step of a flat minibatch ``(N, ...)`` as a sequence of one from its stored memory:
        the network applied exactly as when it acted (the reset zeroes the memory there too)."""
        first = lambda x: x[None]  # noqa: E731
        log_prob, value, entropy = actor_critic.evaluate_actions(
            params, memory, jax.tree.map(first, obs), reset[None], jax.tree.map(first, raw_action)
        )
        return log_prob[0], value[0], entropy[0]

    evaluate_actions = evaluate_steps if stored else actor_critic.evaluate_actions

    def share(order: jax.Array, what: str) -> jax.Array:
        """``order`` ``(num_minibatches, size)``: this device's equal share of each minibatch."""
        size = order.shape[1]
        if not devices.sharded:
            return order
        if size % devices.size:
            raise ConfigError(
                f"A minibatch of {size} {what} cannot be split evenly over {devices.size} devices; pick "
                f"num_envs, num_steps and num_minibatches so that it is a multiple of {devices.size}."
            )
        part = size // devices.size
        return jax.lax.dynamic_slice_in_dim(order, devices.start(part), part, axis=1)

    def loss_fn(params: Any, batch: PPOBatch) -> tuple[jax.Array, dict[str, jax.Array]]:
        return losses.ppo_loss(
            evaluate_actions,
            params,
            batch.memory,
            batch.obs,
            batch.reset,
            batch.raw_action,
            batch.log_prob,
            batch.value,
            batch.advantage,
            batch.target,
            clip_eps=clip_eps,
            vf_coef=vf_coef,
            ent_coef=ent_coef,
            clip_value=clip_value,
            normalize_advantages=normalize_advantages,
            axis_name=devices.name if devices.sharded else None,
        )

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def split(batch: PPOBatch, key: jax.Array) -> PPOBatch:
        """``num_minibatches`` time-major minibatches stacked on a new leading axis (on several
        devices: this device's share of each)."""
        num_steps, num_envs = batch.log_prob.shape[:2]
        # One minibatch of the whole batch: its mean loss does not depend on the order (only
        # float sums would), so it is not shuffled (M-FOS's RL runner on Pax's 400,000 steps per
        # update: 15% less wall time per update).
        shuffled = num_minibatches > 1
        if sequence_minibatches:
            if num_envs % num_minibatches:
                raise ValueError(
                    f"Recurrent PPO splits minibatches over envs: num_envs ({num_envs}) must be a "
                    f"multiple of num_minibatches ({num_minibatches})."
                )
            if not shuffled and not devices.sharded:
                return jax.tree.map(lambda x: x[None], batch)
            order = hashed_permutation(key, num_envs) if shuffled else jnp.arange(num_envs)
            size = num_envs // num_minibatches
            if devices.sharded:
                picked = share(order.reshape(num_minibatches, size), "envs")

                def pick(x: jax.Array, env_axis: int) -> jax.Array:
                    return jnp.moveaxis(jnp.take(x, picked, axis=env_axis), env_axis, 0)

                memory = jax.tree.map(lambda x: pick(x, 0), batch.memory)
                sequences = jax.tree.map(lambda x: pick(x, 1), batch.replace(memory=()))
                return sequences.replace(memory=memory)

            def take(x: jax.Array, env_axis: int) -> jax.Array:
                x = jnp.take(x, order, axis=env_axis)
                shape = (*x.shape[:env_axis], num_minibatches, size, *x.shape[env_axis + 1 :])
                return jnp.moveaxis(x.reshape(shape), env_axis, 0)

            memory = jax.tree.map(lambda x: take(x, 0), batch.memory)
            sequences = jax.tree.map(lambda x: take(x, 1), batch.replace(memory=()))
            return sequences.replace(memory=memory)
        total = num_steps * num_envs
        if total % num_minibatches:
            raise ValueError(
                f"num_envs * num_steps ({total}) must be a multiple of num_minibatches ({num_minibatches})."
            )
        order = hashed_permutation(key, total) if shuffled else jnp.arange(total)
        size = total // num_minibatches
        # Stored memories are per step (leading (T, B)), shuffled with their steps.
        steps = batch if stored else batch.replace(memory=())
        if devices.sharded:
            picked = share(order.reshape(num_minibatches, size), "steps")
            return jax.tree.map(lambda x: x.reshape((total, *x.shape[2:]))[picked], steps)

        def shuffle(x: jax.Array) -> jax.Array:
            # Flat minibatches (num_minibatches, size, ...): a feed-forward network takes any
            # leading axes, and a 2-D matrix product is cheaper to differentiate than a 3-D one.
            x = x.reshape((total, *x.shape[2:]))
            x = x[order] if shuffled else x
            return x.reshape((num_minibatches, size, *x.shape[1:]))

        return jax.tree.map(shuffle, steps)

    def update(
        params: Any, opt_state: Any, batch: PPOBatch, key: jax.Array
    ) -> tuple[Any, Any, dict[str, jax.Array]]:
        def minibatch_step(carry: tuple[Any, Any], minibatch: PPOBatch) -> tuple[tuple[Any, Any], Any]:
            params, opt_state = carry
            (loss, aux), grads = grad_fn(params, minibatch)
            # Equal shares of the minibatch: the mean of their means is the minibatch's mean.
            loss, aux, grads = devices.mean((loss, aux, grads))
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), {"loss": loss, **aux}

        if stored:
            shape = batch.log_prob.shape[:2]
            for leaf in jax.tree.leaves(batch.memory):
                if tuple(leaf.shape[:2]) != tuple(shape):
                    raise ValueError(
                        f"recurrent_update='stored_memory' needs the memory before every step (leading "
                        f"axes (T, B) = {tuple(shape)}), got a memory leaf of shape {tuple(leaf.shape)}: "
                        "build the batch with ppo_batch(..., stored_memory=True)."
                    )
        # On several devices every device holds the whole batch (envs gathered in order), so
        # the shuffles are the one-device shuffles; each device then trains on its share.
        batch = devices.gather(batch.replace(memory=()), axis=1).replace(
            memory=devices.gather(batch.memory, axis=1 if stored else 0)
        )

        def epoch(carry: tuple[Any, Any], key: jax.Array) -> tuple[tuple[Any, Any], Any]:
            return jax.lax.scan(minibatch_step, carry, split(batch, key))

        (params, opt_state), stats = jax.lax.scan(epoch, (params, opt_state), hashed_keys(key, (num_epochs,)))
        metrics = {name: jnp.mean(value) for name, value in stats.items()}
        metrics["first_minibatch_kl"] = stats["approx_kl"][0, 0]
        return params, opt_state, metrics

    return update


@dataclasses.dataclass(frozen=True)
class PPOSettings:
    """The settings every runner built on the PPO update shares: the run's size and the update's
    hyper-parameters. PPO's, IPPO/MAPPO's, the shaping runner's and the UED runners' configs
    extend it (re-declaring a field only to change its default), so a setting has one name, one
    meaning and one check (:func:`check_ppo_sizes`) everywhere.

    Attributes:
        env_id: registered environment id.
        total_timesteps: env steps of training over all envs.
        eval_episodes: episodes of each evaluation.
        eval_max_steps: step cap of an evaluation (0: the env's own).
        num_envs: parallel envs.
        num_steps: steps per env per rollout.
        num_epochs: passes over each rollout.
        num_minibatches: minibatches per pass.
        learning_rate: Adam step size.
        anneal_lr: decay the step size linearly to 0 over training.
        gamma: discount.
        gae_lambda: GAE lambda.
        clip_eps: PPO ratio clipping (and value clipping) range.
        clip_value: use the clipped value loss.
        vf_coef: weight of the value loss.
        ent_coef: weight of the entropy bonus.
        max_grad_norm: global gradient-norm clip.
        normalize_advantages: standardise advantages per minibatch.
    """

    env_id: str = "CartPole-v1"
    total_timesteps: int = 200_000
    eval_episodes: int = 16
    eval_max_steps: int = 0
    num_envs: int = 16
    num_steps: int = 128
    num_epochs: int = 4
    num_minibatches: int = 4
    learning_rate: float = 2.5e-3
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.steps_per_iteration


def check_ppo_sizes(config: Any, *, recurrent: bool = False, num_devices: int = 1) -> None:
    """Raise :class:`~lamella.agents.config.ConfigError` naming the first size setting of a
    PPO-style config that cannot work, and the fix (and, first, any number out of its range:
    :func:`~lamella.agents.config.check_numbers`). Every runner built on :func:`make_ppo_update`
    (PPO, IPPO/MAPPO, the UED runners) checks its config with it.

    ``config`` has ``num_envs``, ``num_steps``, ``num_epochs``, ``num_minibatches``,
    ``eval_episodes`` and ``total_timesteps``; ``recurrent`` minibatches split envs, not steps.
    ``num_devices``: the envs and every minibatch are split over that many devices
    (:mod:`lamella.agents.devices`), so both must divide by it.
    """
    name = type(config).__name__
    check_numbers(config)
    for field in ("num_envs", "num_steps", "num_epochs", "num_minibatches", "eval_episodes"):
        if int(getattr(config, field)) < 1:
            raise ConfigError(f"{name}.{field} must be >= 1, got {getattr(config, field)}.")
    steps = config.num_envs * config.num_steps
    # A runner that plays several batches per iteration (Parallel PLR / ACCEL) says so in its
    # config's steps_per_iteration; the bound is that, not one batch.
    per_iteration = int(getattr(config, "steps_per_iteration", steps))
    if config.total_timesteps // per_iteration < 1:
        what = "num_envs * num_steps" if per_iteration == steps else "steps per iteration"
        raise ConfigError(
            f"{name}.total_timesteps ({config.total_timesteps}) is less than one iteration "
            f"({what} = {per_iteration}); raise it."
        )
    split, what = (config.num_envs, "num_envs") if recurrent else (steps, "num_envs * num_steps")
    if split % config.num_minibatches:
        raise ConfigError(
            f"{name}: {what} ({split}) must be a multiple of num_minibatches "
            f"({config.num_minibatches}){' (recurrent minibatches split envs)' if recurrent else ''}."
        )
    if num_devices > 1:
        if config.num_envs % num_devices:
            raise ConfigError(
                f"{name}: num_envs ({config.num_envs}) must be a multiple of num_devices ({num_devices}): "
                "each device steps an equal block of envs."
            )
        minibatch = split // config.num_minibatches
        if minibatch % num_devices:
            raise ConfigError(
                f"{name}: a minibatch ({what} / num_minibatches = {minibatch}) must be a multiple of "
                f"num_devices ({num_devices}): each device trains on an equal share of it. Change num_envs, "
                f"num_steps or num_minibatches, or num_devices."
            )


def make_ppo_optimizer(config: Any) -> optax.GradientTransformation:
    """PPO's optimiser from a PPO-style config: Adam (eps 1e-5) after global-norm clipping at
    ``max_grad_norm``, its step size decayed linearly to 0 over every minibatch step of training
    when ``anneal_lr`` (``num_iterations * num_epochs * num_minibatches`` of them).

    The parameters are one flat vector for the optimiser (``optax.flatten``): a dozen small leaves
    cost a dozen copies of every Adam operation, in run time and in compile time.
    """
    if config.anneal_lr:
        num_updates = config.num_iterations * config.num_epochs * config.num_minibatches
        learning_rate: Any = optax.linear_schedule(config.learning_rate, 0.0, num_updates)
    else:
        learning_rate = config.learning_rate
    return optax.flatten(
        optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    )


def make_ppo_update_from_config(
    actor_critic: ActorCritic, config: Any, devices: DeviceAxis | None = None
) -> tuple[
    optax.GradientTransformation,
    Callable[[Any, Any, PPOBatch, jax.Array], tuple[Any, Any, dict[str, jax.Array]]],
]:
    """``(optimizer, update)``: :func:`make_ppo_optimizer` and :func:`make_ppo_update` with the
    coefficients of a PPO-style config (``num_epochs``, ``num_minibatches``, ``clip_eps``,
    ``vf_coef``, ``ent_coef``, ``clip_value``, ``normalize_advantages``, and
    ``recurrent_update`` where the config has one: :class:`~lamella.agents.ppo.PPOConfig`; others
    update a recurrent network with BPTT); ``devices``: see :func:`make_ppo_update`."""
    optimizer = make_ppo_optimizer(config)
    update = make_ppo_update(
        actor_critic,
        optimizer,
        num_epochs=config.num_epochs,
        num_minibatches=config.num_minibatches,
        clip_eps=config.clip_eps,
        vf_coef=config.vf_coef,
        ent_coef=config.ent_coef,
        clip_value=config.clip_value,
        normalize_advantages=config.normalize_advantages,
        devices=devices,
        recurrent_update=getattr(config, "recurrent_update", "bptt"),
    )
    return optimizer, update
