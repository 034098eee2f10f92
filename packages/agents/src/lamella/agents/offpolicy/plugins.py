"""The two hooks of the off-policy loop: a goal setter and a batch sampler.

The loop (:func:`lamella.agents.offpolicy.loop.make_offpolicy_runner`, and
:func:`lamella.agents.offpolicy.host.train_host` on the host) stores transitions in a
:func:`lamella.buffers.make_episode_buffer` and learns from batches drawn from it. Two things can
be plugged in without a second loop:

* a **goal setter** (:class:`GoalSetter`): pure functions that may rewrite the goals, rewards
  and flags the agent sees (lamella-gcrl's ``goal_override`` and ``chain``); the default,
  :func:`passthrough`, changes nothing;
* a **batch sampler factory** (:data:`BatchSamplerFactory`):
  ``make(config, buffer, goals) -> sample(buffer_state, key) -> Batch``. The default draws
  uniform (or n-step) transitions. ``her=True`` in a config asks for the factory installed as
  the entry point ``her`` of the group ``lamella.batch_samplers``; lamella-gcrl declares it::

      [project.entry-points."lamella.batch_samplers"]
      her = "lamella.gcrl.her:make_her_batch_sampler"

  Without lamella-gcrl, ``her=True`` is refused before anything compiles, naming
  ``pip install lamella-gcrl``.

A goal setter can also be named in the config (``goal_setter="frontier"``, so ``lamella train
sac ... --her goal_setter=frontier`` reaches it): the loop builds it with the factory installed as
that entry point of the group ``lamella.goal_setters``,
``make(config, env, env_params) -> GoalSetter`` (:data:`GoalSetterFactory`); lamella-gcrl
declares ``frontier``.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from lamella.agents.config import ConfigError

__all__ = [
    "SAMPLER_GROUP",
    "SETTER_GROUP",
    "BatchSamplerFactory",
    "GoalFunctions",
    "GoalSetter",
    "GoalSetterFactory",
    "goal_setter_names",
    "load_batch_sampler",
    "load_goal_setter",
    "passthrough",
    "sampler_available",
]

PRNGKey = jax.Array

#: The entry-point group of batch sampler factories (``name = "module:function"``).
SAMPLER_GROUP = "lamella.batch_samplers"

#: The entry-point group of goal setter factories a config names (``goal_setter=NAME``).
SETTER_GROUP = "lamella.goal_setters"

#: Which distribution provides each sampler lamella's configs ask for by a flag (for the error).
_PROVIDERS = {"her": "lamella-gcrl"}

#: Which distribution provides each goal setter lamella documents (for the error).
_SETTER_PROVIDERS = {"frontier": "lamella-gcrl"}


class GoalFunctions(NamedTuple):
    """What goal relabelling needs to know about a goal-conditioned env (all pure, jittable).

    Attributes:
        compute_reward: ``compute_reward(achieved_goal, desired_goal) -> reward`` for one pair.
        is_success: ``is_success(achieved_goal, desired_goal) -> bool`` for one pair, or None.
        terminate_on_success: whether reaching the goal ends the episode (a relabelled
            transition's ``terminated`` is then recomputed for its new goal).
        episode_length: the env's longest episode in steps (its ``max_steps_in_episode``
            param), for checks such as HER's that its buffer holds a whole episode of each
            env; None: not known. The off-policy loop fills it in from the env params.
    """

    compute_reward: Callable[[jax.Array, jax.Array], jax.Array]
    is_success: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    terminate_on_success: bool = False
    episode_length: int | None = None


#: ``make(config, buffer, goals) -> sample(buffer_state, key) -> Batch``; ``goals`` is a
#: :class:`GoalFunctions` on a goal-conditioned env, else None.
BatchSamplerFactory = Callable[[Any, Any, GoalFunctions | None], Callable[[Any, PRNGKey], Any]]


def load_batch_sampler(name: str, reason: str = "") -> BatchSamplerFactory:
    """The batch sampler factory installed as entry point ``name`` of :data:`SAMPLER_GROUP`.

    Args:
        name: entry-point name (``"her"``).
        reason: what asked for it, for the error message (``"her=True"``).

    Raises:
        ConfigError: nothing is installed under ``name`` (naming the package to install), or
            two packages declare it.
    """
    found = _one_entry_point(SAMPLER_GROUP, name)
    if not found:
        provider = _PROVIDERS.get(name)
        install = f"pip install {provider}" if provider else f"install a package that provides {name!r}"
        raise ConfigError(
            f"{reason or name} needs the {name!r} batch sampler, which no installed package provides "
            f"(entry-point group {SAMPLER_GROUP!r}): {install}."
        )
    factory: BatchSamplerFactory = _load_unique(found, "Batch sampler", name)
    return factory


def _one_entry_point(group: str, name: str) -> dict[tuple[str, str], importlib.metadata.EntryPoint]:
    found: dict[tuple[str, str], importlib.metadata.EntryPoint] = {}
    for point in importlib.metadata.entry_points(group=group, name=name):
        dist = getattr(point, "dist", None)
        # An editable install can list one distribution twice: keep one per (target, package).
        found.setdefault((point.value, dist.metadata["Name"] if dist is not None else ""), point)
    return found


def _load_unique(found: dict[tuple[str, str], importlib.metadata.EntryPoint], kind: str, name: str) -> Any:
    """The object of the one entry point in ``found``; a ConfigError where several packages declare it."""
    if len(found) > 1:
        listed = ", ".join(f"{package} ({target})" for target, package in sorted(found))
        raise ConfigError(f"{kind} {name!r} is declared by several packages: {listed}; keep one.")
    return next(iter(found.values())).load()


def goal_setter_names() -> list[str]:
    """The goal setters a config can name: ``"none"`` and every entry point of
    :data:`SETTER_GROUP` (reads metadata, imports nothing)."""
    return ["none", *sorted({point.name for point in importlib.metadata.entry_points(group=SETTER_GROUP)})]


def load_goal_setter(name: str) -> GoalSetterFactory:
    """The goal setter factory installed as entry point ``name`` of :data:`SETTER_GROUP`.

    Raises:
        ConfigError: nothing is installed under ``name`` (listing the installed setters, and
            the package that provides a documented one), or two packages declare it.
    """
    found = _one_entry_point(SETTER_GROUP, name)
    if not found:
        provider = _SETTER_PROVIDERS.get(name)
        hint = f" It is lamella's {provider}: pip install {provider}." if provider else ""
        raise ConfigError(
            f"goal_setter={name!r} is not an installed goal setter (entry-point group {SETTER_GROUP!r}).{hint} "
            f"Set goal_setter to one of {goal_setter_names()} ('none': the env's own goals)."
        )
    factory: GoalSetterFactory = _load_unique(found, "Goal setter", name)
    return factory


def sampler_available(name: str) -> bool:
    """Whether a batch sampler ``name`` is installed (reads metadata, imports nothing)."""
    return bool(importlib.metadata.entry_points(group=SAMPLER_GROUP, name=name))


class GoalSetter(NamedTuple):
    """Three pure functions that choose, or change, the goals of a goal-conditioned loop.

    Observations, rewards and flags carry a leading ``num_envs`` axis; whatever the setter keeps
    (a curriculum, a goal held per env, counters) is its explicit state, so setters compile into
    the training scan and vmap over seeds.

    Attributes:
        init: ``init(key, obs) -> setter_state`` for the first observations of the training envs.
        reset: ``reset(key, setter_state, obs, started) -> (obs, setter_state)``: called
            before every action with the observations the agent is about to act on; envs
            where ``started`` (bool ``(num_envs,)``) begin an episode, and the setter may give
            them a goal (or show a goal it changed in ``step``). Called once after ``init``
            with ``started`` all True.
        step: ``step(key, setter_state, next_obs, reward, terminated, truncated, info) ->
            (next_obs, reward, terminated, truncated, info, setter_state)``, after every env
            step and before the transition is stored.
        goals: the :class:`GoalFunctions` ``step`` scores transitions with, where the setter
            scores them (a ``goal_override`` with its own reward); the loop's batch sampler
            (HER) relabels with the same, so stored and relabelled transitions agree. ``None``:
            the env's own.
    """

    init: Callable[[PRNGKey, Any], Any]
    reset: Callable[[PRNGKey, Any, Any, jax.Array], tuple[Any, Any]]
    step: Callable[..., tuple[Any, jax.Array, jax.Array, jax.Array, dict[str, Any], Any]]
    goals: GoalFunctions | None = None


#: ``make(config, env, env_params) -> GoalSetter``: a goal setter built from a loop config (its
#: own settings are config fields) for the bare goal env the loop trains on.
GoalSetterFactory = Callable[[Any, Any, Any], GoalSetter]


def passthrough() -> GoalSetter:
    """The setter that changes nothing: the env's own goals, rewards and flags."""
    return GoalSetter(
        init=lambda key, obs: (),
        reset=lambda key, state, obs, started: (obs, state),
        step=lambda key, state, obs, reward, terminated, truncated, info: (
            obs,
            reward,
            terminated,
            truncated,
            info,
            state,
        ),
    )
