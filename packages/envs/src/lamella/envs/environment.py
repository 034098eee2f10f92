"""The environment contract.

An :class:`Environment` is a set of pure functions over explicit state::

    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

``params`` is a pytree of (traceable) numbers, so a batch of environments with
different physics is one ``jax.vmap`` over params. Static settings (grid sizes,
number of agents) live on the env object and change shapes; they are fixed when
the env is built.

A bare environment's ``step`` does *not* reset at episode end. What happens then
is chosen by a wrapper: :class:`lamella.envs.wrappers.AutoReset` (the default
of :func:`lamella.envs.make`), :class:`~lamella.envs.wrappers.OptimisticReset`,
or no reset at all with :meth:`Environment.reset_done` called by the loop.

Multi-agent environments follow the same contract with a leading agent axis on
observations, actions, rewards, ``terminated`` and ``truncated``
(``num_agents > 1``); the episode ends when every agent is done.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import jax
import jax.numpy as jnp

from lamella.envs import _inputs, spaces
from lamella.envs._inputs import EnvInputError

__all__ = ["EnvInputError", "Environment", "StepOutput", "Wrapper", "episode_done"]

PRNGKey = jax.Array
TEnvState = TypeVar("TEnvState")
TEnvParams = TypeVar("TEnvParams")
StepOutput = tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]


def episode_done(terminated: jax.Array, truncated: jax.Array) -> jax.Array:
    """Whether the episode is over: all agents (if there is an agent axis) done."""
    done = jnp.logical_or(terminated, truncated)
    return jnp.all(done) if done.ndim else done


class Environment(Generic[TEnvState, TEnvParams]):
    """Base class of every lamella environment.

    Subclasses implement :meth:`reset_env`, :meth:`step_env`,
    :attr:`default_params`, :meth:`observation_space` and :meth:`action_space`,
    and usually :meth:`render`. Class attributes:

    * ``num_agents``: 1 for single-agent envs (no agent axis); n > 1 adds a
      leading agent axis of size n.
    * ``stochastic_step``: False when ``step_env`` ignores its key, which lets
      the auto-reset wrapper give the whole key to the reset instead of
      splitting it (a split costs about as much as a CartPole step).
    * ``cheap_done``: True when ``terminated`` and ``truncated`` are a few
      integer operations on the state (a step counter compared with the
      episode length). The auto-reset wrapper then lets XLA recompute
      ``done`` in each select that reads it instead of storing it once,
      which costs an XLA kernel per step: a third of DiscountingChain's step
      on CPU. Leave it False where ``done`` depends on the dynamics (physics,
      collisions): recomputing those in every select costs more.
    * ``sparse_reset``: True when a reset costs more than a step and, in a
      batch, few envs end on any one step (random layouts drawn by rejection,
      episodes of tens of steps). The auto-reset wrapper then computes the
      batch's resets under ``vmap`` only on steps where some env is done (a
      branch over the batch) instead of on every step. The branch computes
      what the select would keep; XLA may fuse the step otherwise around it,
      so float dynamics can differ in the last bits (XLA's CPU backend makes
      ``a*b+c`` an FMA inside a fusion). Leave it False where envs end on most steps of a
      large batch: the branch then only adds its own cost.
    * ``sparse_reset_on_accelerators``: with ``sparse_reset``, whether the branch is
      also taken on a GPU (or TPU). There a branch costs a conditional in XLA's
      command buffer, about as much as a few kernels, on every step: False where a
      reset is only a few kernels itself (no loop), so that it is cheaper to reset
      every env and select. Decided at trace time from JAX's default backend.
    """

    num_agents: ClassVar[int] = 1
    stochastic_step: ClassVar[bool] = True
    cheap_done: ClassVar[bool] = False
    sparse_reset: ClassVar[bool] = False
    sparse_reset_on_accelerators: ClassVar[bool] = True

    @property
    def default_params(self) -> TEnvParams:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return type(self).__name__

    def reset(self, key: PRNGKey, params: TEnvParams | None = None) -> tuple[Any, TEnvState]:
        """Start an episode: ``(obs, state)``.

        Raises:
            EnvInputError: ``key`` is not one PRNG key (checked while tracing; see
                :mod:`lamella.envs._inputs` for what is accepted), or a concrete params field
                lies outside its range (``struct.field(bounds=...)``: ``params.replace(length=0.0)``
                on CartPole); traced params are not checked. ``params`` of another env (a
                type other than ``default_params``'s, or a subclass with fields it lacks).
        """
        _inputs.check_key(self, key, "reset")
        params = self.default_params if params is None else params
        _check_params_type(self, params, "reset")
        _inputs.check_param_values(self, params)
        try:
            return self.reset_env(key, params)
        except AttributeError as error:
            _name_params_of_another_env(self, params, "reset", error)
            raise

    def step(
        self,
        key: PRNGKey,
        state: TEnvState,
        action: Any,
        params: TEnvParams | None = None,
    ) -> StepOutput:
        """Advance one step: ``(obs, state, reward, terminated, truncated, info)``.

        A bare env does not reset when the episode ends; see the module docs.

        Raises:
            EnvInputError: ``key`` is not one PRNG key, ``state`` is an array or None
                (the observation, say) where the env's state is a structure, or
                ``action``'s shape or dtype does not fit ``action_space(params)``, or
                ``state`` or ``params`` is a batch given outside ``vmap``, or ``params`` are
                another env's (as in :meth:`reset`). Checked while tracing (no cost in
                compiled code); under ``vmap`` per env.
        """
        params = self.default_params if params is None else params
        _inputs.check_key(self, key, "step")
        _check_params_type(self, params, "step")
        _inputs.check_state(self, state, params)
        _inputs.check_action(self, action, params)
        try:
            out = self.step_env(key, state, action, params)
        except Exception as error:
            if isinstance(error, AttributeError):
                _name_params_of_another_env(self, params, "step", error)
            _inputs.check_unbatched(self, state, params)  # name a batch given outside vmap, if it was one
            raise
        _inputs.check_unbatched(self, state, params, out[2:5])
        return out

    def reset_done(
        self,
        key: PRNGKey,
        done: jax.Array,
        state: TEnvState,
        obs: Any,
        params: TEnvParams | None = None,
    ) -> tuple[Any, TEnvState]:
        """Reset where ``done`` is True, keep ``(obs, state)`` elsewhere.

        For loops that step without auto-reset (off-policy and goal-conditioned
        training). ``done`` may carry an agent axis; the env resets when all
        agents are done. Note the order: the state first, then the observation
        (``reset`` returns them the other way round).

        Raises:
            EnvInputError: ``state`` and ``obs`` swapped, or ``state`` otherwise not the
                env's state (as in :meth:`step`); checked while tracing.
        """
        params = self.default_params if params is None else params
        _inputs.check_reset_done(self, state, obs, params)
        return self.reset_done_env(key, done, state, obs, params)

    def reset_done_env(
        self, key: PRNGKey, done: jax.Array, state: TEnvState, obs: Any, params: TEnvParams
    ) -> tuple[Any, TEnvState]:
        """What :meth:`reset_done` does once its inputs are checked; wrappers with state of their
        own override this."""
        done = jnp.all(done) if jnp.ndim(done) else done
        reset_obs, reset_state = self.reset(key, params)
        select = lambda new, old: jnp.where(done, new, old)  # noqa: E731
        return jax.tree.map(select, reset_obs, obs), jax.tree.map(select, reset_state, state)

    # Subclass interface -------------------------------------------------------------------

    def reset_env(self, key: PRNGKey, params: TEnvParams) -> tuple[Any, TEnvState]:
        raise NotImplementedError

    def step_env(self, key: PRNGKey, state: TEnvState, action: Any, params: TEnvParams) -> StepOutput:
        raise NotImplementedError

    def observation_space(self, params: TEnvParams | None = None) -> spaces.Space:
        raise NotImplementedError

    def action_space(self, params: TEnvParams | None = None) -> spaces.Space:
        raise NotImplementedError

    def render(self, state: TEnvState, params: TEnvParams | None = None) -> jax.Array:
        """An RGB frame, uint8 of shape ``(height, width, 3)``, computed in JAX."""
        raise NotImplementedError(f"{self.name} has no renderer")

    def unwrapped_state(self, state: Any) -> Any:
        """The bare env's state inside ``state`` (wrappers nest it under ``env_state``)."""
        return state

    @property
    def unwrapped(self) -> Environment[Any, Any]:
        return self

    def __repr__(self) -> str:
        return f"{self.name}()"


def _check_params_type(env: Environment[Any, Any], params: Any, method: str) -> None:
    """An env's params must be of its default params' type (:func:`_inputs.check_params_type`).
    A wrapper may take params of its own (lamella-ued's ``OnLevel`` takes a level and the env's
    params) while its ``default_params`` are the inner env's: unless every wrapper around the
    bare env says it hands the params on unchanged (``keeps_params``), only a reset or step that
    failed is checked."""
    layer: Any = env
    while isinstance(layer, Wrapper):
        if not layer.keeps_params:
            return
        layer = layer.env
    _inputs.check_params_type(env, params, method)


def _name_params_of_another_env(
    env: Environment[Any, Any], params: Any, method: str, error: AttributeError
) -> None:
    """After ``error`` from a wrapped env's reset or step: when it says the given params lack a
    field (``'RobotWarehouseParams' object has no attribute 'normalize_reward'``), name the
    params type the env takes instead."""
    if f"'{type(params).__name__}' object has no attribute" in str(error):
        _inputs.check_params_type(env, params, method)


# The multi-agent contract's methods of (state, params) that a wrapper does not override: a
# wrapper with state of its own hands them the inner env's state, as render does.
_STATE_READERS = frozenset({"action_mask", "global_state"})


class Wrapper(Environment[Any, Any]):
    """Base class of wrappers: delegates everything it does not override to ``env``.

    A wrapper that adds state keeps the inner state in an ``env_state`` field
    and sets ``wraps_state = True``; ``action_mask`` and ``global_state`` (multi-agent envs)
    then get the inner state, as ``render`` does. A wrapper that hands the params it is given
    to the inner env unchanged sets ``keeps_params = True``: ``reset`` and ``step`` then refuse
    another env's params while tracing (a wrapper with params of its own keeps False).
    """

    wraps_state: ClassVar[bool] = False
    keeps_params: ClassVar[bool] = False

    def __init__(self, env: Environment[Any, Any]):
        if isinstance(env, str | tuple | list | type):  # an id, make's pair, a class: name the fix
            _inputs.check_env_object(
                env, None, f"{type(self).__name__}(env)", takes_id=False, takes_params=False
            )
        self.env = env
        # Class attributes of the inner env become instance attributes of the wrapper.
        self.num_agents = env.num_agents  # type: ignore[misc]
        self.stochastic_step = env.stochastic_step  # type: ignore[misc]
        self.cheap_done = env.cheap_done  # type: ignore[misc]
        # getattr: an env written before the attribute existed may not subclass Environment.
        self.sparse_reset = getattr(env, "sparse_reset", False)  # type: ignore[misc]
        self.sparse_reset_on_accelerators = getattr(env, "sparse_reset_on_accelerators", True)  # type: ignore[misc]

    def __getattr__(self, name: str) -> Any:
        if name == "env":
            raise AttributeError(name)
        value = getattr(self.env, name)
        if self.wraps_state and name in _STATE_READERS:
            # The inner env reads its own state, which this wrapper's state holds in env_state.
            def read(state: Any, params: Any = None) -> Any:
                return value(state.env_state, params)

            return read
        return value

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    @property
    def name(self) -> str:
        return self.env.name

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, Any]:
        return self.env.reset_env(key, params)

    def step_env(self, key: PRNGKey, state: Any, action: Any, params: Any) -> StepOutput:
        return self.env.step_env(key, state, action, params)

    def observation_space(self, params: Any = None) -> spaces.Space:
        return self.env.observation_space(params)

    def action_space(self, params: Any = None) -> spaces.Space:
        return self.env.action_space(params)

    def unwrapped_state(self, state: Any) -> Any:
        inner = state.env_state if self.wraps_state else state
        return self.env.unwrapped_state(inner)

    @property
    def unwrapped(self) -> Environment[Any, Any]:
        return self.env.unwrapped

    def render(self, state: Any, params: Any = None) -> jax.Array:
        _inputs.check_state(self, state, self.default_params if params is None else params, "render")
        _inputs.check_unbatched(self, state, params, method="render")
        return self.unwrapped.render(self.unwrapped_state(state), params)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"
