"""Brax adapter: any Brax env (physics bodies in JAX) behind the lamella :class:`~lamella.envs.Environment` API.

>>> import jax, lamella.envs
>>> env, params = lamella.envs.make("brax:inverted_pendulum@spring", max_steps_in_episode=100)
>>> obs, state = env.reset(jax.random.key(0), params)   # obs: float32 (4,)

Ids: ``brax:<name>`` (brax's own default physics backend for that env) or
``brax:<name>@<backend>`` with ``backend`` one of ``generalized``, ``spring``, ``positional``
or ``mjx`` (MuJoCo XLA). ``<name>`` is a Brax env name (``brax.envs.get_environment``: ``ant``,
``halfcheetah``, ``hopper``, ``humanoid``, ``inverted_pendulum``, ...). :func:`from_brax` takes
the same name and backend as arguments, plus the Brax env's own constructor settings.

Needs the ``brax`` extra (``pip install 'lamella-envs[brax]'``); brax is imported when an env is
built, never when this module is.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import rendering, spaces, struct
from lamella.envs.adapters._notices import without_import_notices
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.errors import MissingExtraError, UserError

__all__ = [
    "BACKENDS",
    "BraxEnv",
    "BraxError",
    "BraxNotInstalledError",
    "BraxParams",
    "BraxState",
    "from_brax",
    "parse_env_id",
]

PRNGKey = jax.Array
#: Brax's physics backends, cheapest to compile first on CPU (measured in the package README).
BACKENDS = ("spring", "positional", "generalized", "mjx")
PREFIX = "brax:"
_INSTALL = "pip install 'lamella-envs[brax]'"

# Bodies that walk away from the origin: the camera follows their root link. The others (fixed
# bases: pendulums, reacher, pusher, swimmer's plane) keep a fixed camera.
_TRACKED = {"ant", "fast", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "walker2d", "swimmer"}
# Bodies that move in the ground plane (x, y) are drawn from above; the others from the side (x, z).
_TOP_DOWN = {"reacher", "pusher", "swimmer"}
_VIEW_WIDTH = {"reacher": 0.6, "pusher": 2.0, "inverted_pendulum": 3.0, "inverted_double_pendulum": 3.0}


class BraxError(UserError, ValueError):
    """A Brax env name, backend or setting the adapter cannot use; the message names the fix."""


class BraxNotInstalledError(MissingExtraError):
    """brax is not installed; the message names the extra to install."""


def _import_brax_envs() -> Any:
    try:
        # brax's "not actively maintained" warning and mujoco's notices that it has no Warp (a
        # GPU backend no Brax backend here uses), once per process.
        with warnings.catch_warnings(), without_import_notices():
            warnings.simplefilter("ignore")
            return importlib.import_module("brax.envs")
    except ImportError as error:
        raise BraxNotInstalledError(
            f"Brax envs need brax (0.14), which is not installed: {_INSTALL}"
        ) from error


def parse_env_id(env_id: str) -> tuple[str, str | None]:
    """``"brax:ant@spring"`` -> ``("ant", "spring")``; ``"brax:ant"`` -> ``("ant", None)``.

    Raises:
        BraxError: ``env_id`` does not start with ``brax:`` or names no env.
    """
    if not env_id.startswith(PREFIX) or not env_id[len(PREFIX) :]:
        raise BraxError(f"{env_id!r} is not a Brax id; write brax:<name> or brax:<name>@<backend>.")
    name, _, backend = env_id[len(PREFIX) :].partition("@")
    return name, backend or None


def _did_you_mean(name: str, choices: Any) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


@struct.dataclass
class BraxParams:
    """The adapted env's params (traced, so a batch of envs may have different time limits).

    Attributes:
        max_steps_in_episode: int, steps after which an episode is truncated (Brax's default
            episode length, 1000). Brax keeps its physics constants on the env object: pass
            them to :func:`from_brax`.
    """

    max_steps_in_episode: int = struct.field(default=1000, bounds=(1, None))


@struct.dataclass
class BraxState:
    """The adapted env's state.

    Attributes:
        brax_state: Brax's own ``brax.envs.State`` (``pipeline_state``, ``obs``, ``reward``,
            ``done``, ``metrics``, ``info``), its leaves cast to the dtypes its reset returns.
        time: int32 ``()``, steps taken in this episode.
    """

    brax_state: Any
    time: jax.Array


def _quat_rotate(quat: jax.Array, vec: jax.Array) -> jax.Array:
    """``vec`` rotated by the unit quaternion ``quat`` (w, x, y, z)."""
    w, axis = quat[..., :1], quat[..., 1:]
    t = 2.0 * jnp.cross(axis, vec)
    return vec + w * t + jnp.cross(axis, t)


class BraxEnv(Environment[BraxState, BraxParams]):
    """A Brax env behind the lamella API; built by :func:`from_brax` or ``make("brax:<name>")``.

    The Brax env is the bare one (``brax.envs.get_environment``), without Brax's training
    wrappers: its ``done`` is termination only, and the time limit is lamella's.

    Observation: float32 ``(O,)``, Brax's observation (``O = env.brax_env.observation_size``),
    bounds ``(-inf, inf)``.

    Action: float32 ``(A,)`` in ``[-1, 1]`` (Brax's convention: its envs scale an action to
    their actuators' control ranges or clip to them), ``A = env.brax_env.action_size``.

    Reward: float32 ``()``, Brax's reward. Brax's per-step metrics (``reward_forward``,
    ``x_velocity``, ...) are ``info`` entries, float32 ``()`` each.

    Terminated: Brax's ``done`` (the body fell, the pole tipped over; never for bodies without a
    termination rule such as halfcheetah). Truncated: after ``params.max_steps_in_episode``
    steps (default 1000, Brax's episode length) when not terminated. Brax's own
    ``EpisodeWrapper`` folds the time limit into ``done``; here the two stay apart, so
    a learner can bootstrap at time limits from ``info["final_observation"]`` under
    ``AutoReset``.

    Reset: Brax's reset with the given key (its initial-state noise).

    ``step`` ignores its key (Brax's step is deterministic): ``stochastic_step = False``.

    Render: RGB uint8 ``(H, W, 3)`` computed in JAX (so a batch of states renders under
    ``vmap``): each geom of the MuJoCo model drawn at its pose, projected onto the side plane
    (x, z) or, for the bodies that move in the ground plane (reacher, pusher, swimmer), onto
    (x, y). Capsules and cylinders are thick segments, spheres and ellipsoids discs, boxes a
    thick segment along their longest axis, the ground plane a band; meshes are not drawn. The
    camera follows the root body of walkers. A sketch for GIFs, not MuJoCo's renderer (that is
    ``env.brax_env.render(list_of_pipeline_states)``, which needs OpenGL).

    Params: :class:`BraxParams`. State: :class:`BraxState`.
    """

    stochastic_step = False

    def __init__(
        self,
        brax_env: Any,
        name: str,
        backend: str,
        *,
        render_size: tuple[int, int] = (120, 160),
        render_view_width: float | None = None,
    ):
        self.brax_env = brax_env
        self.brax_name = name
        self.backend = backend
        self._name = f"{PREFIX}{name}@{backend}"
        self._params = BraxParams()
        template = jax.eval_shape(brax_env.reset, jax.random.key(0))
        if not isinstance(template.obs, jax.ShapeDtypeStruct) or len(template.obs.shape) != 1:
            raise BraxError(
                f"{self._name}: its observation is {jax.tree.map(lambda x: x.shape, template.obs)}, not one "
                "vector; the adapter converts Brax envs with a flat observation."
            )
        self._template = template
        self._obs_shape = tuple(template.obs.shape)
        self._obs_dtype = template.obs.dtype
        self.action_size = int(brax_env.action_size)
        self.metric_names = tuple(sorted(template.metrics))
        self.render_size = (int(render_size[0]), int(render_size[1]))
        self._view_width = float(render_view_width or _VIEW_WIDTH.get(name, 4.0))
        self._init_render()

    # lamella API -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> BraxParams:
        return self._params

    def observation_space(self, params: BraxParams | None = None) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, self._obs_shape, self._obs_dtype)

    def action_space(self, params: BraxParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.action_size,), jnp.float32)

    def _cast(self, brax_state: Any) -> Any:
        """``brax_state`` with the leaf dtypes of the reset state (Brax's steps return Python
        floats and weakly typed values for some leaves, e.g. inverted_pendulum's reward 1.0,
        which would change the type of a scan carry)."""
        return jax.tree.map(lambda x, ref: jnp.asarray(x, ref.dtype), brax_state, self._template)

    def reset_env(self, key: PRNGKey, params: BraxParams) -> tuple[jax.Array, BraxState]:
        brax_state = self._cast(self.brax_env.reset(key))
        return brax_state.obs, BraxState(brax_state=brax_state, time=jnp.zeros((), jnp.int32))

    def step_env(self, key: PRNGKey, state: BraxState, action: Any, params: BraxParams) -> StepOutput:
        action = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        brax_state = self._cast(self.brax_env.step(state.brax_state, action))
        time = state.time + 1
        terminated = brax_state.done > 0.5
        truncated = (time >= params.max_steps_in_episode) & ~terminated
        info = {name: jnp.asarray(brax_state.metrics[name], jnp.float32) for name in self.metric_names}
        reward = jnp.asarray(brax_state.reward, jnp.float32)
        return (
            brax_state.obs,
            BraxState(brax_state=brax_state, time=time),
            reward,
            terminated,
            truncated,
            info,
        )

    # Rendering -------------------------------------------------------------------------------

    def _init_render(self) -> None:
        sys = self.brax_env.sys
        self._geom_type = np.asarray(sys.geom_type)
        self._geom_link = np.asarray(sys.geom_bodyid) - 1  # body 0 is the world; links are the others
        self._geom_size = np.asarray(sys.geom_size, np.float32)
        self._geom_pos = np.asarray(sys.geom_pos, np.float32)
        self._geom_quat = np.asarray(sys.geom_quat, np.float32)
        rgba = np.asarray(sys.geom_rgba, np.float32)
        self._geom_color = [tuple(int(c) for c in np.clip(row[:3] * 255, 0, 255)) for row in rgba]
        self._renderable = int(sys.num_links()) == int(sys.nbody) - 1
        self._top_down = self.brax_name in _TOP_DOWN
        self._tracked = self.brax_name in _TRACKED

    def render(self, state: BraxState, params: BraxParams | None = None) -> jax.Array:
        """An RGB uint8 ``(H, W, 3)`` sketch of the bodies (see the class docs)."""
        if not self._renderable:
            raise NotImplementedError(f"{self.name}: its links do not map one to one onto MuJoCo bodies.")
        height, width = self.render_size
        scale = width / self._view_width  # pixels per metre
        pipeline = state.brax_state.pipeline_state
        link_pos, link_rot = pipeline.x.pos, pipeline.x.rot  # (L, 3), (L, 4)
        second = 1 if self._top_down else 2  # screen y is world y (from above) or z (from the side)
        centre_x = link_pos[0, 0] if self._tracked else jnp.zeros(())
        centre_y = link_pos[0, 1] if (self._tracked and self._top_down) else jnp.zeros(())
        ground = 0.5 if self._top_down else 0.75  # where world 0 sits, as a fraction of the height

        def to_screen(point: jax.Array) -> tuple[jax.Array, jax.Array]:
            return (
                width / 2 + (point[0] - centre_x) * scale,
                height * ground - (point[second] - centre_y) * scale,
            )

        frame = rendering.canvas(height, width, (235, 240, 245))
        for g, kind in enumerate(self._geom_type):
            link = int(self._geom_link[g])
            local_pos = jnp.asarray(self._geom_pos[g])
            local_rot = jnp.asarray(self._geom_quat[g])
            if link < 0:
                pos, rot = local_pos, local_rot
            else:
                pos = link_pos[link] + _quat_rotate(link_rot[link], local_pos)
                w1, v1 = link_rot[link][0], link_rot[link][1:]
                w2, v2 = local_rot[0], local_rot[1:]
                rot = jnp.concatenate([(w1 * w2 - v1 @ v2)[None], w1 * v2 + w2 * v1 + jnp.cross(v1, v2)])
            size = self._geom_size[g]
            color = self._geom_color[g]
            if kind == 0:  # plane: the ground
                if not self._top_down:
                    frame = rendering.fill_rect(frame, 0, height * ground, width, height, (170, 160, 150))
                continue
            if kind in (2, 4):  # sphere, ellipsoid
                x, y = to_screen(pos)
                frame = rendering.fill_circle(frame, x, y, float(size[0]) * scale, color)
                continue
            if kind in (3, 5):  # capsule, cylinder: along the local z axis
                axis, half, radius = np.array([0.0, 0.0, 1.0]), float(size[1]), float(size[0])
            elif kind == 6:  # box: along its longest half-extent
                longest = int(np.argmax(size[:3]))
                axis = np.eye(3)[longest]
                half = float(size[longest])
                radius = float(np.sort(size[:3])[1])
            else:  # meshes, height fields: not drawn
                continue
            offset = _quat_rotate(rot, jnp.asarray(axis, jnp.float32) * half)
            x0, y0 = to_screen(pos - offset)
            x1, y1 = to_screen(pos + offset)
            frame = rendering.draw_segment(frame, x0, y0, x1, y1, max(2.0 * radius * scale, 1.0), color)
        return frame


def from_brax(
    name: str,
    backend: str | None = None,
    *,
    render_size: tuple[int, int] = (120, 160),
    render_view_width: float | None = None,
    **kwargs: Any,
) -> BraxEnv:
    """A Brax env as a lamella :class:`~lamella.envs.Environment` (bare: no auto-reset).

    Args:
        name: a Brax env name (``brax.envs._envs``: ``ant``, ``halfcheetah``, ``hopper``,
            ``humanoid``, ``humanoidstandup``, ``inverted_pendulum``,
            ``inverted_double_pendulum``, ``pusher``, ``reacher``, ``swimmer``, ``walker2d``,
            ``fast``, and any env registered with ``brax.envs.register_environment``).
        backend: the physics backend, one of :data:`BACKENDS`; ``None``: the Brax env's own
            default (``generalized`` for the standard bodies). ``mjx`` is MuJoCo XLA.
        render_size: ``(height, width)`` of rendered frames, in pixels.
        render_view_width: metres of the world shown across a frame (default per body, 4 m).
        **kwargs: the Brax env's own constructor settings (``ctrl_cost_weight=...``).

    Raises:
        BraxNotInstalledError: brax is not installed (an ``ImportError`` and a lamella user
            error naming ``pip install 'lamella-envs[brax]'``).
        BraxError: an unknown env name or backend, or settings the Brax env does not take.
    """
    if backend is not None and backend not in BACKENDS:
        raise BraxError(
            f"Unknown Brax backend {backend!r}{_did_you_mean(backend, BACKENDS)}; the backends are "
            f"{', '.join(BACKENDS)} (write brax:<name>@<backend>)."
        )
    brax_envs = _import_brax_envs()
    known = sorted(getattr(brax_envs, "_envs", {}))
    if name not in known:
        raise BraxError(
            f"Unknown Brax env {name!r}{_did_you_mean(name, known)}; Brax's envs are {', '.join(known)}."
        )
    settings = dict(kwargs)
    if backend is not None:
        settings["backend"] = backend
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            brax_env = brax_envs.get_environment(name, **settings)
    except TypeError as error:
        raise BraxError(f"Brax env {name!r} does not take the settings {sorted(kwargs)}: {error}") from error
    return BraxEnv(
        brax_env,
        name,
        str(brax_env.backend),
        render_size=render_size,
        render_view_width=render_view_width,
    )


def make_from_id(
    env_id: str,
    *,
    backend: str | None = None,
    render_size: tuple[int, int] = (120, 160),
    render_view_width: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> BraxEnv:
    """:func:`from_brax` for an id ``brax:<name>[@<backend>]``: what
    ``lamella.envs.make("brax:...", **overrides)`` calls. ``max_steps_in_episode`` among the
    overrides goes to the params; the Brax env's own settings go in ``env_kwargs``."""
    name, id_backend = parse_env_id(env_id)
    if backend is not None and id_backend is not None and backend != id_backend:
        raise BraxError(
            f"{env_id!r} names backend {id_backend!r} but backend={backend!r} was given; give one."
        )
    return from_brax(
        name,
        backend or id_backend,
        render_size=render_size,
        render_view_width=render_view_width,
        **(env_kwargs or {}),
    )
