"""Goal setters: pure functions that choose, or change, the goals of a goal-conditioned loop.

After xpag's setter idea, as pure JAX. A goal setter
(:class:`lamella.agents.offpolicy.GoalSetter`, the hook of lamella-agents' off-policy loop,
re-exported here) sits between the environment and the agent: at each episode start (``reset``) and after every step (``step``) it may rewrite the
``desired_goal`` the agent sees and, consistently, the reward, ``is_success`` and termination
of that step. Everything it keeps (a curriculum, a goal held per env, step counters) is in an
explicit state, so setters compile into the training scan and vmap over seeds. Setters compose
with :func:`chain`; :func:`passthrough` (the default) changes nothing. Observations, rewards and
flags carry a leading ``num_envs`` axis.

:func:`frontier_goals` draws training goals where the agent has rarely been; it is also the
``frontier`` entry point of the group ``lamella.goal_setters``
(:func:`make_frontier_goal_setter`), so a config reaches it by name:
``lamella train sac --env GMazeGoalDubinsWalls-v0 --her goal_setter=frontier frontier_probability=0.8``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.config import ConfigError, is_swept
from lamella.agents.offpolicy.loop import goal_functions
from lamella.agents.offpolicy.plugins import GoalFunctions, GoalSetter, passthrough

__all__ = [
    "GoalSetter",
    "chain",
    "frontier_goals",
    "goal_override",
    "make_frontier_goal_setter",
    "passthrough",
]

PRNGKey = jax.Array


def chain(*setters: GoalSetter) -> GoalSetter:
    """Apply ``setters`` in order (each sees what the previous one produced); state is a tuple.

    Raises:
        ConfigError: a setter that is not a :class:`GoalSetter` (a factory such as
            ``frontier_goals`` not yet called, or a list of setters instead of several arguments).
    """
    if len(setters) == 1 and isinstance(setters[0], list | tuple) and not isinstance(setters[0], GoalSetter):
        raise ConfigError("chain takes the setters as arguments: chain(*setters), not a list of them.")
    for index, setter in enumerate(setters):
        if not all(callable(getattr(setter, part, None)) for part in ("init", "reset", "step")):
            name = getattr(setter, "__name__", type(setter).__name__)
            fix = f": call it to build the setter, e.g. {name}(...)" if callable(setter) else ""
            raise ConfigError(
                f"chain: setter {index} is {name}, not a GoalSetter (its init, reset and step){fix}."
            )
    if not setters:
        return passthrough()

    def init(key: PRNGKey, obs: Any) -> tuple[Any, ...]:
        keys = jax.random.split(key, len(setters))
        return tuple(s.init(k, obs) for s, k in zip(setters, keys, strict=True))

    def reset(
        key: PRNGKey, state: tuple[Any, ...], obs: Any, started: jax.Array
    ) -> tuple[Any, tuple[Any, ...]]:
        keys = jax.random.split(key, len(setters))
        new_states = []
        for setter, k, s in zip(setters, keys, state, strict=True):
            obs, s = setter.reset(k, s, obs, started)
            new_states.append(s)
        return obs, tuple(new_states)

    def step(
        key: PRNGKey,
        state: tuple[Any, ...],
        obs: Any,
        reward: jax.Array,
        terminated: jax.Array,
        truncated: jax.Array,
        info: dict[str, Any],
    ) -> tuple[Any, ...]:
        keys = jax.random.split(key, len(setters))
        new_states = []
        for setter, k, s in zip(setters, keys, state, strict=True):
            obs, reward, terminated, truncated, info, s = setter.step(
                k, s, obs, reward, terminated, truncated, info
            )
            new_states.append(s)
        return obs, reward, terminated, truncated, info, tuple(new_states)

    # The last setter that scores transitions scores them last: HER relabels with its functions.
    scored = [s.goals for s in setters if getattr(s, "goals", None) is not None]
    return GoalSetter(init, reset, step, scored[-1] if scored else None)


def _rows(flag: jax.Array, x: jax.Array) -> jax.Array:
    return flag.reshape(flag.shape + (1,) * (x.ndim - flag.ndim))


# Each setter's documented arguments, quoted by the errors that catch misplaced ones.
_ORDER = {
    "goal_override": "goal_override(sample_goal(key, obs) -> goal, compute_reward(achieved_goal, "
    "desired_goal) -> reward, is_success(achieved_goal, desired_goal) -> bool)",
    "frontier_goals": "frontier_goals(compute_reward(achieved_goal, desired_goal) -> reward, "
    "is_success(achieved_goal, desired_goal) -> bool, low, high)",
    # HER's functions come from the goal env (or train_host's compute_reward), as GoalFunctions.
    "make_her_batch_sampler": "GoalFunctions(compute_reward(achieved_goal, desired_goal) -> reward, "
    "is_success(achieved_goal, desired_goal) -> bool), JAX functions of one pair of goals: the goal env's "
    "own, or train_host's compute_reward",
}


def _trace(setter: str, role: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``jax.eval_shape(fn, *args)`` (nothing runs), a failure re-raised naming ``role``: the
    usual cause is a function given in another one's position."""
    try:
        return jax.eval_shape(fn, *args)
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"{setter}: calling {role} failed ({type(err).__name__}: {err}). Pass the functions in the "
            f"documented order, each with that signature: {_ORDER[setter]}."
        ) from err


def _check_goal_functions(
    setter: str,
    compute_reward: Callable[[jax.Array, jax.Array], jax.Array],
    is_success: Callable[[jax.Array, jax.Array], jax.Array] | None,
    goal_shape: tuple[int, ...],
) -> None:
    """Refuse goal functions whose outputs cannot be a reward and a success flag for one pair of
    goals of ``goal_shape``: a scalar number (not bool) and a scalar bool (``is_success`` None: not
    checked). Shapes and dtypes only, so it works on traced goals; swapped functions are caught by
    the dtypes."""
    pair = jax.ShapeDtypeStruct(goal_shape, jnp.float32)
    reward = _trace(setter, "compute_reward(achieved_goal, desired_goal)", compute_reward, pair, pair)
    success = (
        jax.ShapeDtypeStruct((), jnp.bool_)
        if is_success is None
        else _trace(setter, "is_success(achieved_goal, desired_goal)", is_success, pair, pair)
    )
    if isinstance(reward, jax.ShapeDtypeStruct) and isinstance(success, jax.ShapeDtypeStruct):
        if reward.dtype == jnp.bool_ and success.dtype != jnp.bool_:
            raise ConfigError(
                f"{setter}: compute_reward returns bool and is_success returns {success.dtype}: they look "
                f"swapped. Pass compute_reward before is_success: {_ORDER[setter]}."
            )
    for role, out, want in (
        ("compute_reward", reward, "a scalar number (a float reward, not bool)"),
        ("is_success", success, "a scalar bool"),
    ):
        wrong = (
            not isinstance(out, jax.ShapeDtypeStruct)
            or out.shape != ()
            or ((out.dtype == jnp.bool_) != (role == "is_success"))
        )
        if wrong:
            got = (
                f"{out.dtype}{list(out.shape)}"
                if isinstance(out, jax.ShapeDtypeStruct)
                else type(out).__name__
            )
            raise ConfigError(
                f"{setter}: {role}(achieved_goal, desired_goal) must return {want} for one pair of goals of "
                f"shape {goal_shape} (it is vmapped), got {got}. Give it the one-pair "
                f"function, in its position: {_ORDER[setter]}."
            )


def _score_against(
    goal: jax.Array,
    obs: Any,
    reward: jax.Array,
    terminated: jax.Array,
    info: dict[str, Any],
    compute_reward: Callable[[jax.Array, jax.Array], jax.Array],
    is_success: Callable[[jax.Array, jax.Array], jax.Array],
    terminate_on_success: bool,
) -> tuple[Any, jax.Array, jax.Array, dict[str, Any]]:
    """A step's ``(obs, reward, terminated, info)`` scored against the setter's ``goal``: the
    agent sees it as ``desired_goal``; reward, ``is_success`` and ``terminated`` are recomputed.
    A termination of the env's own (where the goal it held was not reached: a failure) is kept."""
    achieved = obs["achieved_goal"]
    env_own = jnp.logical_and(terminated, ~jax.vmap(is_success)(achieved, obs["desired_goal"]))
    reward = jax.vmap(compute_reward)(achieved, goal).astype(reward.dtype)
    success = jax.vmap(is_success)(achieved, goal)
    terminated = jnp.logical_or(env_own, jnp.logical_and(success, terminate_on_success))
    obs = {**obs, "desired_goal": goal.astype(obs["desired_goal"].dtype)}
    return obs, reward, terminated, {**info, "is_success": success}


def goal_override(
    sample_goal: Callable[[PRNGKey, Any], jax.Array],
    compute_reward: Callable[[jax.Array, jax.Array], jax.Array],
    is_success: Callable[[jax.Array, jax.Array], jax.Array],
    terminate_on_success: bool = True,
    change_every: int = 0,
) -> GoalSetter:
    """A setter that replaces the env's goals with its own.

    Each env's goal is drawn by ``sample_goal(key, obs) -> goal`` (one env's observation dict
    in, one goal out; it is vmapped) at every episode start, and again every ``change_every``
    steps of an episode when ``change_every > 0`` (a goal that moves during the episode). The
    agent sees the setter's goal in ``desired_goal``; the reward and ``info["is_success"]`` of
    every step are recomputed against it with the env's pure ``compute_reward`` and
    ``is_success`` (bind params with ``functools.partial``); ``terminated`` becomes
    ``is_success & terminate_on_success`` (the env's own goal no longer ends episodes), or the
    env's own termination where its goal was not reached (a failure ends the episode still).

    State: ``{"goal": float32 (num_envs, goal_dim), "age": int32 (num_envs,)}``.

    Raises:
        ValueError: ``change_every < 0``.
        ConfigError: from ``init`` (at trace time, so also under jit: only shapes and dtypes are
            checked), when ``sample_goal`` does not return one goal of the env's goal shape, or
            ``compute_reward`` / ``is_success`` do not return a scalar number (not bool) / a
            scalar bool for one pair of goals; swapped or misplaced functions are caught so.
    """
    if change_every < 0:
        raise ValueError(f"goal_override: change_every must be >= 0, got {change_every}.")

    def draw(key: PRNGKey, obs: Any) -> jax.Array:
        num_envs = jax.tree.leaves(obs)[0].shape[0]
        return jax.vmap(sample_goal)(jax.random.split(key, num_envs), obs)

    def check(key: PRNGKey, obs: Any) -> None:
        # Shapes and dtypes only (trace time): the first moment the goal shape is known.
        one_env = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), obs)
        one_key = jax.ShapeDtypeStruct(key.shape, key.dtype)
        goal_shape = tuple(obs["desired_goal"].shape[1:])
        goal = _trace("goal_override", "sample_goal(key, obs)", sample_goal, one_key, one_env)
        if not isinstance(goal, jax.ShapeDtypeStruct) or goal.shape != goal_shape:
            got = f"shape {goal.shape}" if isinstance(goal, jax.ShapeDtypeStruct) else type(goal).__name__
            raise ConfigError(
                f"goal_override: sample_goal(key, obs) must return one goal of the env's goal shape "
                f"{goal_shape} (desired_goal of one env), got {got}. Return one env's goal, e.g. "
                f"jax.random.uniform(key, {goal_shape}, minval=low, maxval=high)."
            )
        _check_goal_functions("goal_override", compute_reward, is_success, goal_shape)

    def init(key: PRNGKey, obs: Any) -> dict[str, jax.Array]:
        check(key, obs)
        goal = jnp.asarray(draw(key, obs), jnp.float32)
        return {"goal": goal, "age": jnp.zeros(goal.shape[:1], jnp.int32)}

    def reset(key: PRNGKey, state: dict[str, jax.Array], obs: Any, started: jax.Array) -> tuple[Any, Any]:
        goal = jnp.where(_rows(started, state["goal"]), draw(key, obs), state["goal"])
        age = jnp.where(started, 0, state["age"])
        return {**obs, "desired_goal": goal.astype(obs["desired_goal"].dtype)}, {"goal": goal, "age": age}

    def step(
        key: PRNGKey,
        state: dict[str, jax.Array],
        obs: Any,
        reward: jax.Array,
        terminated: jax.Array,
        truncated: jax.Array,
        info: dict[str, Any],
    ) -> tuple[Any, ...]:
        goal, age = state["goal"], state["age"] + 1
        # The step is scored against the goal it was taken for; a change applies from the next step.
        obs, reward, terminated, info = _score_against(
            goal, obs, reward, terminated, info, compute_reward, is_success, terminate_on_success
        )
        if change_every > 0:
            change = age % change_every == 0
            goal = jnp.where(_rows(change, goal), draw(key, obs), goal)
            age = jnp.where(change, 0, age)
        return obs, reward, terminated, truncated, info, {"goal": goal, "age": age}

    return GoalSetter(
        init, reset, step, GoalFunctions(compute_reward, is_success, bool(terminate_on_success))
    )


def frontier_goals(
    compute_reward: Callable[[jax.Array, jax.Array], jax.Array],
    is_success: Callable[[jax.Array, jax.Array], jax.Array],
    low: Any,
    high: Any,
    probability: float = 0.8,
    grid: int = 20,
    terminate_on_success: bool = True,
) -> GoalSetter:
    """Training goals drawn where the agent has rarely been: the frontier of what it reaches.

    The box ``[low, high]`` of the goal space is cut into ``grid`` cells per dimension, and
    every step's ``achieved_goal`` adds one visit to its cell. At each episode start an env's
    goal is, with ``probability``, drawn uniformly in a cell chosen among the visited cells with
    weight ``1 / visits`` (the rarely visited ones: the edge of what the agent reaches, where
    a goal is both new and reachable), else uniformly in the box (as a goal env draws them).
    Before any visit the cell is uniform. The goal is held for the episode; rewards, success
    and termination (``is_success & terminate_on_success``) are recomputed against it with
    the env's ``compute_reward`` and ``is_success`` (one pair in, as :func:`goal_override`); the
    env's own terminations away from its goal (failures) are kept.

    Args:
        compute_reward: ``compute_reward(achieved_goal, desired_goal) -> reward`` for one pair.
        is_success: ``is_success(achieved_goal, desired_goal) -> bool`` for one pair.
        low, high: float ``(goal_dim,)``: finite bounds of the goal space.
        probability: the share of goals drawn at the frontier, in [0, 1]; a traced number too
            (a sweep over ``frontier_probability`` is one program, each member with its own).
        grid: cells per goal dimension (``grid ** goal_dim`` cells in all).
        terminate_on_success: a reached goal ends the episode.

    State: ``{"goal": float32 (num_envs, goal_dim), "visits": float32 (grid ** goal_dim,)}``
    (cell index row-major over the goal dimensions).

    Raises:
        ConfigError: ``probability`` outside [0, 1] (when it is not traced), ``grid < 1``,
            bounds that are not finite with ``low < high``, or ``compute_reward`` / ``is_success`` that do not return a
            scalar number (not bool) / a scalar bool for one pair of ``(goal_dim,)`` goals (swapped
            functions); from ``init``, ``reset`` and ``step`` (at trace time), goals of the env
            whose size is not the ``goal_dim`` of ``low`` and ``high``.
    """
    # A sweep traces the probability (is_swept); the driver checks each member's plain value first.
    if not is_swept(probability) and not 0.0 <= probability <= 1.0:
        raise ConfigError(
            f"frontier_goals: probability must be in [0, 1] (the share of goals drawn in rarely visited "
            f"cells), got {probability}; set frontier_probability=0.8, for example."
        )
    if grid < 1:
        raise ConfigError(f"frontier_goals: grid must be >= 1 (cells per goal dimension), got {grid}.")
    low_np, high_np = np.broadcast_arrays(np.asarray(low, np.float64), np.asarray(high, np.float64))
    if (
        low_np.ndim != 1
        or not (np.all(np.isfinite(low_np)) and np.all(np.isfinite(high_np)))
        or np.any(low_np >= high_np)
    ):
        raise ConfigError(
            f"frontier_goals needs finite goal bounds with low < high, one per goal dimension; got "
            f"low={low_np.tolist()}, high={high_np.tolist()}. Give the bounds of the goal space."
        )
    goal_dim = low_np.shape[0]
    _check_goal_functions("frontier_goals", compute_reward, is_success, (goal_dim,))
    num_cells = grid**goal_dim
    low_j, high_j = jnp.asarray(low_np, jnp.float32), jnp.asarray(high_np, jnp.float32)
    width = jnp.asarray((high_np - low_np) / grid, jnp.float32)
    # Row-major place values of the cell index: dimension 0 is the most significant digit.
    place = jnp.asarray([grid ** (goal_dim - 1 - d) for d in range(goal_dim)], jnp.int32)

    def check(obs: Any) -> None:
        # Static shapes, so it runs once at trace time: without it a mismatch is a broadcasting
        # error inside the visit count (or, in reset, goals of the wrong size handed to the agent).
        for name in ("achieved_goal", "desired_goal"):
            shape = tuple(obs[name].shape)
            if len(shape) != 2 or shape[1] != goal_dim:
                each = f" ({shape[1]} values each)" if len(shape) == 2 else ""
                raise ConfigError(
                    f"frontier_goals: the env's {name} has shape {shape}, expected (num_envs, {goal_dim}): "
                    f"low and high give {goal_dim} goal dimension(s) (low={low_np.tolist()}, "
                    f"high={high_np.tolist()}). Give low and high one bound per goal dimension of the "
                    f"env{each}: the bounds of its desired_goal space."
                )

    def draw(key: PRNGKey, visits: jax.Array, num_envs: int) -> jax.Array:
        k_mix, k_cell, k_offset, k_uniform = jax.random.split(key, 4)
        logits = jnp.where(visits > 0, -jnp.log(jnp.maximum(visits, 1.0)), -jnp.inf)
        logits = jnp.where((visits > 0).any(), logits, 0.0)
        index = jax.random.categorical(k_cell, logits, shape=(num_envs,))
        digits = (index[:, None] // place) % grid
        frontier = digits * width + low_j + jax.random.uniform(k_offset, (num_envs, goal_dim)) * width
        uniform = jax.random.uniform(k_uniform, (num_envs, goal_dim), minval=low_j, maxval=high_j)
        return jnp.where(jax.random.uniform(k_mix, (num_envs, 1)) < probability, frontier, uniform)

    def init(key: PRNGKey, obs: Any) -> dict[str, jax.Array]:
        check(obs)
        visits = jnp.zeros((num_cells,), jnp.float32)
        return {"goal": draw(key, visits, obs["desired_goal"].shape[0]), "visits": visits}

    def reset(key: PRNGKey, state: dict[str, jax.Array], obs: Any, started: jax.Array) -> tuple[Any, Any]:
        check(obs)
        fresh = draw(key, state["visits"], obs["desired_goal"].shape[0])
        goal = jnp.where(started[:, None], fresh, state["goal"])
        obs = {**obs, "desired_goal": goal.astype(obs["desired_goal"].dtype)}
        return obs, {**state, "goal": goal}

    def step(
        key: PRNGKey,
        state: dict[str, jax.Array],
        obs: Any,
        reward: jax.Array,
        terminated: jax.Array,
        truncated: jax.Array,
        info: dict[str, Any],
    ) -> tuple[Any, ...]:
        check(obs)
        achieved, goal = obs["achieved_goal"], state["goal"]
        digits = jnp.clip(((achieved - low_j) / width).astype(jnp.int32), 0, grid - 1)
        visits = state["visits"].at[digits @ place].add(1.0)
        obs, reward, terminated, info = _score_against(
            goal, obs, reward, terminated, info, compute_reward, is_success, terminate_on_success
        )
        return obs, reward, terminated, truncated, info, {**state, "visits": visits}

    return GoalSetter(
        init, reset, step, GoalFunctions(compute_reward, is_success, bool(terminate_on_success))
    )


def make_frontier_goal_setter(config: Any, env: Any, env_params: Any) -> GoalSetter:
    """:func:`frontier_goals` for a loop config (``goal_setter="frontier"``; the entry point
    ``frontier`` of ``lamella.goal_setters``): ``frontier_probability`` and ``frontier_grid``
    from the config, the bounds of the env's ``desired_goal`` space, its ``compute_reward``,
    ``is_success`` and ``terminate_on_success``."""
    goals = goal_functions(env, env_params)
    if goals.is_success is None:
        raise ConfigError(
            f"goal_setter='frontier' needs the env's is_success; {type(env).__name__} has none."
        )
    space = env.observation_space(env_params).spaces["desired_goal"]
    return frontier_goals(
        goals.compute_reward,
        goals.is_success,
        np.broadcast_to(np.asarray(space.low), space.shape),
        np.broadcast_to(np.asarray(space.high), space.shape),
        probability=config.frontier_probability,  # traced in a sweep: one program for all values
        grid=int(config.frontier_grid),
        terminate_on_success=goals.terminate_on_success,
    )
