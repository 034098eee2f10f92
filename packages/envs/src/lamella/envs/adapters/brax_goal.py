"""Goal-conditioned views of Brax bodies: the goal-env contract (HER, goal setters) on Brax physics.

>>> import jax, lamella.envs
>>> env, params = lamella.envs.make("brax-goal:reacher@spring", autoreset=False)
>>> obs, state = env.reset(jax.random.key(0), params)  # obs: observation / achieved_goal / desired_goal

A :class:`BraxGoalEnv` is a bare lamella env (no auto-reset; goal loops call ``reset_done``)
whose observations are the dicts ``observation / achieved_goal / desired_goal``, with a pure
``compute_reward(achieved_goal, desired_goal, params)`` (sparse: ``-1`` while the goal is
farther than ``params.distance_threshold``, else ``0``), ``is_success`` and
``info["is_success"]``: what lamella-gcrl's HER relabels and what the off-policy loop scores.
Brax's own reward is kept in ``info["env_reward"]``.

Ids: ``brax-goal:<name>`` or ``brax-goal:<name>@<backend>``, ``<name>`` one of
:data:`GOAL_TASKS` (``reacher``). :func:`from_brax_goal` takes the same name and backend, or any
Brax env with a :class:`BraxGoalTask` of your own.

Needs the ``brax`` extra (``pip install 'lamella-envs[brax]'``), imported when an env is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import spaces, struct
from lamella.envs.adapters.brax import (
    BraxEnv,
    BraxError,
    BraxParams,
    BraxState,
    _did_you_mean,
    _quat_rotate,
    from_brax,
)
from lamella.envs.environment import Environment, StepOutput

__all__ = [
    "GOAL_PREFIX",
    "GOAL_TASKS",
    "BraxGoalEnv",
    "BraxGoalParams",
    "BraxGoalState",
    "BraxGoalTask",
    "from_brax_goal",
    "reacher_goal_task",
]

PRNGKey = jax.Array
GOAL_PREFIX = "brax-goal:"


@dataclasses.dataclass(frozen=True)
class BraxGoalTask:
    """What makes a Brax body a goal-reaching task: pure functions of Brax's ``State``.

    Attributes:
        observation: ``(brax_state) -> float32 (O,)``, what the agent sees besides the goal.
            Leave the desired goal out of it: HER gives a transition another goal, and an
            observation that still holds the original one contradicts it.
        achieved_goal: ``(brax_state) -> float32 (G,)``, the goal the state achieves.
        desired_goal: ``(key, brax_state) -> float32 (G,)``, the goal of an episode, drawn at
            reset (from ``key``, or read from the physics state where Brax draws it).
        goal_low, goal_high: bounds of the desired goals, ``(G,)`` each (the space's box).
        distance_threshold: default success radius, ``||achieved - desired|| <`` it.
        max_steps_in_episode: default episode length.
    """

    observation: Callable[[Any], jax.Array]
    achieved_goal: Callable[[Any], jax.Array]
    desired_goal: Callable[[PRNGKey, Any], jax.Array]
    goal_low: tuple[float, ...]
    goal_high: tuple[float, ...]
    distance_threshold: float
    max_steps_in_episode: int


# Reacher: a two-link arm (0.1 m and 0.11 m) in the plane, its fingertip 0.11 m along the second
# link; Brax draws the target uniformly in the disc of radius 0.2 about the base at reset and
# keeps it in the physics state (two slide joints, link 2), so the target drawn is also drawn.
_REACHER_TIP = np.array([0.11, 0.0, 0.0], np.float32)


def _reacher_tip(brax_state: Any) -> jax.Array:
    x = brax_state.pipeline_state.x
    return (x.pos[1] + _quat_rotate(x.rot[1], jnp.asarray(_REACHER_TIP)))[:2]


def _reacher_observation(brax_state: Any) -> jax.Array:
    # Brax's observation is cos(2), sin(2), target xy, fingertip velocity xy, tip - target (3):
    # keep the arm's part and add the fingertip position, drop everything about the target.
    obs = brax_state.obs
    return jnp.concatenate([obs[0:4], obs[6:8], _reacher_tip(brax_state)])


def _reacher_target(key: PRNGKey, brax_state: Any) -> jax.Array:
    del key  # Brax's reset drew it
    return brax_state.pipeline_state.x.pos[2, :2]


def reacher_goal_task() -> BraxGoalTask:
    """Brax's ``reacher`` as a goal task: put the fingertip on the target.

    Observation float32 ``(8,)``: cos and sin of the two joint angles (4), the fingertip's
    velocity in the plane (2) and its position (2). Achieved goal: the fingertip's ``(x, y)``.
    Desired goal: the target's ``(x, y)``, Brax's draw (uniform in the disc of radius 0.2
    about the base; the arm reaches 0.21). Success within 0.02 m (the fingertip sphere, radius
    0.01, touches the target sphere, radius 0.009); 50 steps of 0.02 s (Gym's Reacher-v1 episode).
    """
    return BraxGoalTask(
        observation=_reacher_observation,
        achieved_goal=_reacher_tip,
        desired_goal=_reacher_target,
        goal_low=(-0.2, -0.2),
        goal_high=(0.2, 0.2),
        distance_threshold=0.02,
        max_steps_in_episode=50,
    )


#: The Brax bodies with a built-in goal task: name -> task factory.
GOAL_TASKS: dict[str, Callable[[], BraxGoalTask]] = {"reacher": reacher_goal_task}


@struct.dataclass
class BraxGoalParams:
    """Params of a goal view (traced, except where a loop reads them on the host).

    Attributes:
        max_steps_in_episode: int, steps after which an episode is truncated.
        distance_threshold: float, success when ``||achieved - desired|| <`` it.
        terminate_on_success: bool, end the episode on success (default False: the body must
            reach the goal and stay there, and success is read at the episode's last step).
            Goal loops read it on the host (HER recomputes terminations with it).
    """

    max_steps_in_episode: int = struct.field(default=50, bounds=(1, None))
    # <= 0 or NaN would make success impossible, inf every state a success
    distance_threshold: float = struct.field(default=0.02, above=0.0, finite=True)
    terminate_on_success: bool = False


@struct.dataclass
class BraxGoalState:
    """State of a goal view.

    Attributes:
        brax: the adapted Brax env's :class:`~lamella.envs.adapters.brax.BraxState`.
        goal: float32 ``(G,)``, the episode's desired goal.
    """

    brax: BraxState
    goal: jax.Array


class BraxGoalEnv(Environment[BraxGoalState, BraxGoalParams]):
    """A Brax body as a goal-conditioned env; built by :func:`from_brax_goal` or
    ``make("brax-goal:<name>[@<backend>]")``.

    Observation: dict of float32 arrays ``observation`` ``(O,)`` (the task's, without the goal),
    ``achieved_goal`` ``(G,)`` and ``desired_goal`` ``(G,)`` (in ``[goal_low, goal_high]``).
    Action: float32 ``(A,)`` in ``[-1, 1]``, the Brax env's (clipped).
    Reward: ``compute_reward``: float32 ``-1`` while ``||achieved - desired||`` is at least
    ``params.distance_threshold``, else ``0``. ``info["is_success"]``: bool, the distance is
    below the threshold; ``info["env_reward"]``: Brax's own reward; Brax's metrics as in
    :class:`~lamella.envs.adapters.brax.BraxEnv`.
    Terminated: Brax's termination (the body fell), or success when
    ``params.terminate_on_success``. Truncated: after ``params.max_steps_in_episode`` steps
    when not terminated.
    Reset: Brax's reset with ``key``; the desired goal from the task (``reacher``: Brax's
    target). ``step`` draws nothing.
    Render: the Brax body's sketch (:meth:`BraxEnv.render`).
    """

    stochastic_step = False

    def __init__(self, brax: BraxEnv, task: BraxGoalTask, name: str):
        self.brax = brax
        self.task = task
        self._name = name
        self.goal_low = np.asarray(task.goal_low, np.float32).reshape(-1)
        self.goal_high = np.asarray(task.goal_high, np.float32).reshape(-1)
        if self.goal_low.shape != self.goal_high.shape or np.any(self.goal_low > self.goal_high):
            raise BraxError(
                f"{name}: goal_low {self.goal_low} and goal_high {self.goal_high} must have the same "
                "shape with low <= high."
            )
        self._params = BraxGoalParams(
            max_steps_in_episode=int(task.max_steps_in_episode),
            distance_threshold=float(task.distance_threshold),
        )
        template = jax.eval_shape(self.brax.brax_env.reset, jax.random.key(0))
        shapes = {
            "observation": jax.eval_shape(task.observation, template),
            "achieved_goal": jax.eval_shape(task.achieved_goal, template),
            "desired_goal": jax.eval_shape(task.desired_goal, jax.random.key(0), template),
        }
        for key, shape in shapes.items():
            if not isinstance(shape, jax.ShapeDtypeStruct) or len(shape.shape) != 1:
                raise BraxError(f"{name}: the task's {key} must return one vector, got {shape}.")
        for key in ("achieved_goal", "desired_goal"):
            if shapes[key].shape != self.goal_low.shape:
                raise BraxError(
                    f"{name}: the task's {key} has shape {shapes[key].shape}, but goal_low/goal_high "
                    f"have {self.goal_low.shape}."
                )
        self._obs_size = int(shapes["observation"].shape[0])

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> BraxGoalParams:
        return self._params

    def compute_reward(
        self, achieved_goal: jax.Array, desired_goal: jax.Array, params: BraxGoalParams | None = None
    ) -> jax.Array:
        threshold = (self._params if params is None else params).distance_threshold
        distance = jnp.linalg.norm(achieved_goal - desired_goal, axis=-1)
        return jnp.where(distance >= threshold, -1.0, 0.0).astype(jnp.float32)

    def is_success(
        self, achieved_goal: jax.Array, desired_goal: jax.Array, params: BraxGoalParams | None = None
    ) -> jax.Array:
        threshold = (self._params if params is None else params).distance_threshold
        return jnp.linalg.norm(achieved_goal - desired_goal, axis=-1) < threshold

    def _obs(self, brax_state: Any, goal: jax.Array) -> dict[str, jax.Array]:
        return {
            "observation": jnp.asarray(self.task.observation(brax_state), jnp.float32),
            "achieved_goal": jnp.asarray(self.task.achieved_goal(brax_state), jnp.float32),
            "desired_goal": goal,
        }

    def reset_env(self, key: PRNGKey, params: BraxGoalParams) -> tuple[dict[str, jax.Array], BraxGoalState]:
        key_body, key_goal = jax.random.split(key)
        _, state = self.brax.reset_env(key_body, self.brax.default_params)
        goal = jnp.asarray(self.task.desired_goal(key_goal, state.brax_state), jnp.float32)
        return self._obs(state.brax_state, goal), BraxGoalState(brax=state, goal=goal)

    def step_env(self, key: PRNGKey, state: BraxGoalState, action: Any, params: BraxGoalParams) -> StepOutput:
        body_params = BraxParams(max_steps_in_episode=params.max_steps_in_episode)
        _, body, env_reward, terminated, truncated, info = self.brax.step_env(
            key, state.brax, action, body_params
        )
        obs = self._obs(body.brax_state, state.goal)
        success = self.is_success(obs["achieved_goal"], state.goal, params)
        terminated = terminated | (success & jnp.asarray(params.terminate_on_success, jnp.bool_))
        truncated = truncated & ~terminated
        reward = self.compute_reward(obs["achieved_goal"], state.goal, params)
        info = {**info, "is_success": success, "env_reward": env_reward}
        return obs, BraxGoalState(brax=body, goal=state.goal), reward, terminated, truncated, info

    def observation_space(self, params: BraxGoalParams | None = None) -> spaces.Dict:
        goal_shape = self.goal_low.shape
        return spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (self._obs_size,), jnp.float32),
                # The body can reach beyond the box goals are drawn from.
                "achieved_goal": spaces.Box(-np.inf, np.inf, goal_shape, jnp.float32),
                "desired_goal": spaces.Box(self.goal_low, self.goal_high, goal_shape, jnp.float32),
            }
        )

    def action_space(self, params: BraxGoalParams | None = None) -> spaces.Box:
        return self.brax.action_space()

    def render(self, state: BraxGoalState, params: BraxGoalParams | None = None) -> jax.Array:
        """The Brax body's RGB uint8 ``(H, W, 3)`` sketch (:meth:`BraxEnv.render`)."""
        return self.brax.render(state.brax)


def from_brax_goal(
    name: str,
    backend: str | None = None,
    *,
    task: BraxGoalTask | None = None,
    render_size: tuple[int, int] = (120, 160),
    render_view_width: float | None = None,
    **kwargs: Any,
) -> BraxGoalEnv:
    """A Brax body as a goal-conditioned lamella env (bare: no auto-reset).

    Args:
        name: a Brax env name; without ``task``, one of :data:`GOAL_TASKS` (``reacher``).
        backend: the physics backend (:data:`lamella.envs.adapters.brax.BACKENDS`); ``None``:
            the Brax env's default.
        task: your own :class:`BraxGoalTask` for any Brax env (an ant's torso position, say).
        render_size, render_view_width: as :func:`lamella.envs.adapters.brax.from_brax`.
        **kwargs: the Brax env's own constructor settings.

    Raises:
        BraxError: a name with no built-in goal task and no ``task``, an unknown env or
            backend, or a task whose functions do not return vectors of the goal's shape.
        BraxNotInstalledError: brax is not installed.
    """
    if task is None:
        if name not in GOAL_TASKS:
            raise BraxError(
                f"No built-in goal task for Brax env {name!r}{_did_you_mean(name, GOAL_TASKS)}; the "
                f"built-in ones are {', '.join(sorted(GOAL_TASKS))}. For another body pass "
                "from_brax_goal(name, task=BraxGoalTask(...))."
            )
        task = GOAL_TASKS[name]()
    body = from_brax(name, backend, render_size=render_size, render_view_width=render_view_width, **kwargs)
    return BraxGoalEnv(body, task, f"{GOAL_PREFIX}{name}@{body.backend}")


def make_goal_from_id(
    env_id: str,
    *,
    backend: str | None = None,
    task: BraxGoalTask | None = None,
    render_size: tuple[int, int] = (120, 160),
    render_view_width: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> BraxGoalEnv:
    """:func:`from_brax_goal` for an id ``brax-goal:<name>[@<backend>]``: what
    ``lamella.envs.make("brax-goal:...", **overrides)`` calls. Params fields among the overrides
    (``max_steps_in_episode``, ``distance_threshold``, ``terminate_on_success``) go to the
    params; the Brax env's own settings go in ``env_kwargs``."""
    if not env_id.startswith(GOAL_PREFIX) or not env_id[len(GOAL_PREFIX) :]:
        raise BraxError(
            f"{env_id!r} is not a Brax goal id; write brax-goal:<name> or brax-goal:<name>@<backend>."
        )
    name, _, id_backend = env_id[len(GOAL_PREFIX) :].partition("@")
    if backend is not None and id_backend and backend != id_backend:
        raise BraxError(
            f"{env_id!r} names backend {id_backend!r} but backend={backend!r} was given; give one."
        )
    return from_brax_goal(
        name,
        backend or id_backend or None,
        task=task,
        render_size=render_size,
        render_view_width=render_view_width,
        **(env_kwargs or {}),
    )
