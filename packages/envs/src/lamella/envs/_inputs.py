"""Trace-time checks of what a user passes to ``reset`` and ``step``.

:meth:`Environment.reset` and :meth:`Environment.step` run these before the
env's own code, so a wrong key or action fails with a message naming the env,
what was expected, what was given and the fix, instead of an error from inside
JAX. They read only shapes and dtypes, which are known while a function is
traced: under ``jit`` they run once, when the function is traced, and add
nothing to the compiled program; under ``vmap`` they see one env's shapes.

What is accepted:

* ``key``: a typed key (``jax.random.key(seed)``, dtype ``key<impl>``, shape
  ``()``) or a legacy raw key (``jax.random.PRNGKey(seed)``, uint32 of the
  default implementation's key shape, ``(2,)`` for threefry). Anything else,
  a Python int seed first of all, is refused.
* actions, checked against ``env.action_space(params)`` (its shape already holds
  the agent axis of a multi-agent env): the exact shape; for integer spaces
  (``Discrete``, ``MultiDiscrete``, integer ``Box``) any integer or bool dtype,
  Python ints included, since they convert exactly; for float ``Box`` spaces any
  integer or float dtype, Python floats included. Refused: floats for integer
  spaces (``1.7`` would be truncated silently), bools or complex numbers for
  float spaces, and any other shape (a batch of actions outside ``vmap``
  included). ``Tuple`` and ``Dict`` spaces are checked entry by entry.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import spaces
from lamella.envs.errors import UserError

__all__ = [
    "EnvInputError",
    "check_action",
    "check_env_object",
    "check_key",
    "check_one_state",
    "check_param_overrides",
    "check_param_values",
    "check_params_type",
    "check_prng_key",
    "check_reset_done",
    "check_state",
    "check_unbatched",
    "count_argument",
]


class EnvInputError(UserError, TypeError, ValueError):
    """A key or action that does not fit the env; the message names the fix.

    A subclass of both ``TypeError`` and ``ValueError``, so code that catches
    either keeps working, and a user error of the ``lamella`` command (one line, exit 2).
    """


def env_label(env: Any) -> str:
    """``"CartPole-v1"`` for an env built by ``make``, else the class name."""
    unwrapped = getattr(env, "unwrapped", env)
    env_id = getattr(unwrapped, "env_id", None)
    return str(env_id) if env_id else str(getattr(env, "name", type(env).__name__))


@functools.cache
def _raw_key_shape() -> tuple[int, ...]:
    """Shape of a legacy raw key of the default PRNG implementation ((2,) for threefry)."""
    return tuple(jax.eval_shape(lambda: jax.random.PRNGKey(0)).shape)


def _shape_dtype(value: Any) -> tuple[tuple[int, ...], Any] | None:
    """``(shape, dtype)`` of an array, tracer or Python number; None for anything else."""
    if isinstance(value, bool):
        return (), np.dtype(np.bool_)
    if isinstance(value, int):
        return (), np.dtype(np.int32)
    if isinstance(value, float):
        return (), np.dtype(np.float32)
    if isinstance(value, complex):
        return (), np.dtype(np.complex64)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return tuple(value.shape), value.dtype
    if isinstance(value, (list, tuple)):
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):
            return None
        return (array.shape, array.dtype) if array.dtype != object else None
    return None


def _describe(value: Any) -> str:
    described = _shape_dtype(value)
    if described is None:
        return f"{type(value).__name__} {value!r}"[:120]
    if isinstance(value, (bool, int, float, complex)):
        return f"the Python {type(value).__name__} {value!r}"
    shape, dtype = described
    return f"shape {shape}, dtype {dtype if _is_key(dtype) else np.dtype(dtype).name}"


def _is_key(dtype: Any) -> bool:
    return bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))


def check_key(env: Any, key: Any, method: str) -> None:
    """Raise :class:`EnvInputError` unless ``key`` is one PRNG key (see the module docs)."""
    check_prng_key(key, f"{env_label(env)}.{method}", f"jax.vmap(env.{method}, in_axes=(0, ...))")


def check_prng_key(key: Any, where: str, vmapped: str = "jax.vmap(f)") -> None:
    """Raise :class:`EnvInputError` unless ``key`` is one PRNG key (a typed key of shape ``()``
    or a raw uint32 key): the message starts with ``where`` (``"CartPole-v1.reset"``,
    ``"train"``) and, for a batch of keys, names ``vmapped``, the call that maps over them.
    Reads only the shape and dtype, so it adds nothing to a compiled program."""
    described = _shape_dtype(key)
    if described is not None:
        shape, dtype = described
        if _is_key(dtype) and shape == ():
            return
        if not _is_key(dtype) and np.dtype(dtype) == np.uint32 and shape == _raw_key_shape():
            return
    fix = "Pass jax.random.key(seed) (or split one: jax.random.split(key))."
    if described is not None:
        shape, dtype = described
        if _is_key(dtype) and shape:
            fix = f"That is a batch of {int(np.prod(shape))} keys: vmap over them, e.g. {vmapped}, or pass one key."
        elif not _is_key(dtype) and np.dtype(dtype) == np.uint32 and shape[-1:] == _raw_key_shape()[-1:]:
            fix = "That is a batch of raw keys: vmap over them, or pass one key."
    raise EnvInputError(
        f"{where}: `key` must be a PRNG key: a typed key (jax.random.key(seed), "
        f"shape ()) or a raw uint32 key of shape {_raw_key_shape()} (jax.random.PRNGKey(seed)); "
        f"got {_describe(key)}. {fix}"
    )


def _plain_value(value: Any) -> bool:
    """None, an array, a number, or a dict, tuple or list: what an observation is, and an env
    state (a dataclass) is not."""
    return value is None or isinstance(value, (Mapping, tuple, list)) or _shape_dtype(value) is not None


def _reset_shapes(env: Any, params: Any) -> tuple[Any, Any]:
    """The shapes and dtypes of one env's ``(obs, state)`` from ``reset`` (traced, nothing runs)."""
    return jax.eval_shape(lambda: env.reset(jax.random.key(0), params))


def check_state(env: Any, state: Any, params: Any, method: str = "step") -> None:
    """Raise :class:`EnvInputError` when ``state`` is an array, a number, a dict, a tuple or None
    where ``env``'s state is a dataclass (what ``reset`` returns second): most often the
    observation, from ``state, obs = env.reset(...)`` in the wrong order. The env's state is traced (shapes only)
    just in that case, so a right call costs one ``isinstance``."""
    if not _plain_value(state):
        return
    label = env_label(env)
    obs, expected = _reset_shapes(env, params)
    if state is not None and _plain_value(expected):
        return  # this env's state is an array (or a dict, a tuple) itself
    hint = ""
    same_tree: bool = state is not None and str(jax.tree.structure(state)) == str(jax.tree.structure(obs))
    if same_tree:
        same = [np.shape(a) == tuple(b.shape) for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(obs))]
        if all(same):
            hint = " It has the observation's shape: reset returns (obs, state), the observation first."
    raise EnvInputError(
        f"{label}.{method}: `state` must be the env state that reset returns ({type(expected).__name__}: "
        f"obs, state = env.reset(key, params)), got {_describe(state) if state is not None else 'None'}.{hint}"
    )


def check_reset_done(env: Any, state: Any, obs: Any, params: Any) -> None:
    """Raise :class:`EnvInputError` when ``reset_done`` gets the observation and the state swapped
    (``reset`` returns ``(obs, state)``, ``reset_done`` takes ``state, obs``), or a ``state`` that
    is not the env's (:func:`check_state`)."""
    if _plain_value(state) and state is not None and not _plain_value(obs):
        raise EnvInputError(
            f"{env_label(env)}.reset_done: `state` and `obs` are swapped: it takes (key, done, state, "
            "obs, params), the state first; reset returns (obs, state), the observation first."
        )
    check_state(env, state, params, "reset_done")


def _batched_leaves(value: Any, expected: Any) -> dict[str, tuple[int, ...]]:
    """``{path: leading axes}`` of ``value``'s leaves shaped like ``expected``'s with leading axes
    added, where the two have the same structure; else empty."""
    paths = jax.tree_util.tree_flatten_with_path(value)[0]
    wanted = jax.tree.leaves(expected)
    if len(paths) != len(wanted):
        return {}
    found = {}
    for (path, leaf), want in zip(paths, wanted):
        shape, want_shape = tuple(np.shape(leaf)), tuple(np.shape(want))
        extra = len(shape) - len(want_shape)
        if extra > 0 and shape[extra:] == want_shape:
            found[jax.tree_util.keystr(path).lstrip(".") or "(the whole value)"] = shape[:extra]
    return found


def _batch_text(env: Any, what: str, fields: dict[str, tuple[int, ...]], method: str) -> str:
    batch = next(iter(fields.values()))
    size = int(np.prod(batch))
    names = list(fields)
    listed = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    if method == "render":
        fix = (
            "render draws one env: pick one, jax.tree.map(lambda x: x[0], state), or vmap over the "
            "batch: jax.vmap(env.render, in_axes=(0, None))(states, params)."
        )
    else:
        axes = "(0, 0, 0, 0)" if what == "params" else "(0, 0, 0, None)"
        fix = (
            f"step takes one env's {what}; broadcasting would step the whole batch with one key and "
            f"one action. vmap over the batch: jax.vmap(env.step, in_axes={axes})(keys, states, "
            f"actions, params), with keys = jax.random.split(key, {size})."
        )
    return (
        f"{env_label(env)}.{method}: `{what}` is a batch of {size} (leading axes {batch} on {listed}). {fix}"
    )


def check_unbatched(
    env: Any, state: Any, params: Any, flags: tuple[Any, ...] | None = None, method: str = "step"
) -> None:
    """Raise :class:`EnvInputError` when ``state`` or ``params`` is a batch given outside ``vmap``.

    After a step traced, ``flags`` are its reward, terminated and truncated: the check runs only
    when one of them has leading axes the env's have not (``()``, or ``(num_agents,)`` for a
    multi-agent env), since broadcasting then stepped every env of a batch with one key and one
    action, silently; a right call costs three shape reads. With ``flags=None`` (a step that
    failed while tracing, or ``render``), the leaves are compared with one env's state and the
    default params. An env whose flags have other shapes of their own, or that cannot be reset,
    is left alone."""
    if flags is not None:
        agent_axes = 1 if getattr(env, "num_agents", 1) > 1 else 0
        if all(len(d[0]) <= agent_axes for d in map(_shape_dtype, flags) if d is not None):
            return
    candidates = []
    for reset_params in (params, getattr(env, "default_params", None)):
        try:  # one env's state: from the given params, else (a batch of them) the default ones
            one_state = _reset_shapes(env, reset_params)[1]
        except Exception:
            continue
        candidates.append(("state", state, one_state))
        break
    if method != "render" and hasattr(env, "default_params"):
        candidates.append(("params", params, env.default_params))
    for what, value, expected in candidates:
        fields = _batched_leaves(value, expected)
        if what == "state" and len(fields) < len(jax.tree.leaves(expected)):
            continue  # a batch of states has the axes on every field
        if fields:
            raise EnvInputError(_batch_text(env, what, fields, method))


def check_one_state(env: Any, state: Any, method: str, field: str = "time", rank: int = 0) -> None:
    """Raise :class:`EnvInputError` when ``state`` is a batch of states given outside ``vmap`` to
    ``env.<method>``, a function of one env's state (``action_mask``, ``global_state``,
    ``observation_of``, ``render``): broadcasting a batch there fails inside JAX or mixes the envs.

    Seen from ``state.<field>``, an array of ``rank`` axes in one env's state (the step counter
    ``time``, ``()``, in every multi-agent env): it reads one shape, so it costs nothing under
    ``jit``, and under ``vmap`` it sees one env's state."""
    value = getattr(state, field, None)
    shape = () if value is None else np.shape(value)
    if len(shape) <= rank:
        return
    batch = tuple(shape[: len(shape) - rank])
    if method == "render":
        fix = (
            "render draws one env: pick one, jax.tree.map(lambda x: x[0], states), or vmap over the "
            "batch: jax.vmap(env.render, in_axes=(0, None))(states, params)."
        )
    else:
        fix = (
            f"{method} reads one env's state. vmap over the batch: "
            f"jax.vmap(env.{method}, in_axes=(0, None))(states, params)."
        )
    raise EnvInputError(
        f"{env_label(env)}.{method}: `state` is a batch of {int(np.prod(batch))} (leading axes {batch}); {fix}"
    )


def check_params_type(env: Any, params: Any, method: str) -> None:
    """Raise :class:`EnvInputError` when ``params`` are not of the type of ``env.default_params``
    (another env's params: ``RobotWarehouseParams`` given to an LBF env), or are of a subclass
    with fields the env's params lack (they would be ignored, silently: simple_spread's
    ``local_ratio`` given to MPE's simple). Before, the step failed inside with an
    ``AttributeError`` naming a field, or ran. Only dataclass params are compared (an env whose
    default params are None or a dict is left alone); reads types only, free under ``jit``."""
    if params is None:
        return
    try:
        default = env.default_params
    except Exception:
        return
    if not dataclasses.is_dataclass(default) or isinstance(default, type):
        return
    expected = type(default)
    extra: list[str] = []
    if isinstance(params, expected):
        if type(params) is expected or not dataclasses.is_dataclass(params):
            return
        own = {field.name for field in dataclasses.fields(default)}
        extra = [field.name for field in dataclasses.fields(params) if field.name not in own]
        if not extra:
            return  # a subclass that adds no field: the same params
    given = f"{type(params).__name__}" + (
        f", whose {', '.join(extra)} this env would ignore" if extra else ""
    )
    env_id = getattr(getattr(env, "unwrapped", env), "env_id", None)
    made = f"the params made with it (env, params = lamella.envs.make({env_id!r})) or " if env_id else ""
    raise EnvInputError(
        f"{env_label(env)}.{method}: `params` must be {expected.__name__}, this env's params; got "
        f"{given}. Params of another env (or of another scenario of the family) do not fit its "
        f"dynamics: pass {made}env.default_params (.replace(field=...) to change a field)."
    )


# What a runner calls on an env object it is given: a user-written env need not subclass
# Environment (gymnax's envs have the same methods), so these are checked, not the class.
_ENV_METHODS = ("reset", "step", "observation_space", "action_space")
# Packages whose envs are stepped by Python on the host, never inside compiled JAX code.
_HOST_ENV_PACKAGES = ("gymnasium", "gym", "pettingzoo", "mpe2")


def check_env_object(
    env: Any,
    env_params: Any,
    where: str,
    host_loop: str | None = None,
    *,
    takes_id: bool = True,
    takes_params: bool = True,
) -> None:
    """Raise :class:`EnvInputError` unless ``env`` is an env object a compiled runner can step: one
    with ``reset``, ``step``, ``observation_space`` and ``action_space`` methods, and
    ``default_params`` when ``env_params`` is None. The message starts with ``where``
    (``"make_ppo_runner"``) and names the fix for what was given instead: an env id, the
    ``(env, env_params)`` pair ``make`` returns, an env class, or a gymnasium or PettingZoo env
    (``host_loop`` names the runner that steps such an env on the host, where there is one).
    ``takes_id``: the caller makes its env from its config's ``env_id`` when ``env`` is left out.
    ``takes_params``: the caller takes an ``env_params=`` argument (a wrapper does not)."""
    if isinstance(env, str):
        by_id = f"Leave env out and set the config's env_id={env!r}, or pass" if takes_id else "Pass"
        raise EnvInputError(
            f"{where}: env must be an env object, got the id {env!r}. {by_id} the object: "
            f"env, env_params = lamella.envs.make({env!r})."
        )
    if isinstance(env, (tuple, list)) and len(env) == 2 and callable(getattr(env[0], "step", None)):
        then = (
            "pass env=env, env_params=env_params."
            if takes_params
            else "pass env alone (env_params goes to reset and step)."
        )
        raise EnvInputError(
            f"{where}: env got a pair ({type(env[0]).__name__}, {type(env[1]).__name__}), what "
            f"lamella.envs.make returns. Unpack it: env, env_params = lamella.envs.make(...), then {then}"
        )
    if isinstance(env, type):
        raise EnvInputError(
            f"{where}: env must be an env object, got the class {env.__name__}. Pass an instance: "
            f"env={env.__name__}(...)."
        )
    packages = [cls.__module__.split(".")[0] for cls in type(env).__mro__]
    package = next((name for name in packages if name in _HOST_ENV_PACKAGES), None)
    if package is not None:
        fix = f" To train on it, use {host_loop}." if host_loop else ""
        raise EnvInputError(
            f"{where}: env is a {package} env ({type(env).__name__}), stepped by Python; this runner "
            "steps its env inside compiled JAX code and needs a lamella env: lamella.envs.make(id), "
            f"or your own lamella.envs.Environment.{fix}"
        )
    missing = [name for name in _ENV_METHODS if not callable(getattr(env, name, None))]
    if env_params is None and not hasattr(env, "default_params"):
        missing.append("default_params (or pass env_params=)")
    if missing:
        raise EnvInputError(
            f"{where}: env must be a lamella env (a lamella.envs.Environment, or an object with its "
            f"reset, step, observation_space and action_space methods); got {_describe(env)}, "
            f"which lacks {', '.join(missing)}."
        )


def _space_text(space: spaces.Space) -> str:
    return f"{space!r} (shape {space.shape}, dtype {np.dtype(space.dtype).name})"


def _check_leaf(env: Any, space: spaces.Space, action: Any, where: str) -> None:
    label = f"{env_label(env)}.step"
    described = _shape_dtype(action)
    if described is None:
        raise EnvInputError(
            f"{label}: {where} must be an array of the action space {_space_text(space)}; "
            f"got {_describe(action)}. Pass a jax or numpy array (or a Python number for a scalar space)."
        )
    shape, dtype = described
    if _is_key(dtype):
        raise EnvInputError(
            f"{label}: {where} is a PRNG key, not an action. Arguments are (key, state, action, params)."
        )
    if shape != tuple(space.shape):
        batch = shape[: len(shape) - len(space.shape)]
        if len(shape) > len(space.shape) and shape[len(batch) :] == tuple(space.shape):
            fix = (
                f"It looks like a batch of {batch} actions: step one env per call and vmap over the "
                "batch (jax.vmap(env.step, in_axes=(0, 0, 0, None)))."
            )
        elif isinstance(space, spaces.Discrete):
            fix = "Pass one integer, e.g. jnp.int32(a) or action[0] if it carries a trailing axis of 1."
        else:
            fix = f"Reshape it to {tuple(space.shape)}."
        raise EnvInputError(
            f"{label}: expected {where} of shape {tuple(space.shape)} (the action space is {_space_text(space)}); "
            f"got {_describe(action)}. {fix}"
        )
    integral = bool(jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.bool_))
    wants_integer = bool(jnp.issubdtype(space.dtype, jnp.integer))
    floating = bool(jnp.issubdtype(dtype, jnp.floating))
    if wants_integer and not integral:
        raise EnvInputError(
            f"{label}: expected {where} in {_space_text(space)}, an integer; "
            f"got {_describe(action)}. Cast it with action.astype({np.dtype(space.dtype).name}) "
            "(after rounding, if it comes from a continuous policy)."
        )
    if not wants_integer and not (floating or (integral and not jnp.issubdtype(dtype, jnp.bool_))):
        raise EnvInputError(
            f"{label}: expected {where} in {_space_text(space)}, real numbers; "
            f"got {_describe(action)}. Cast it with action.astype({np.dtype(space.dtype).name})."
        )


def _check(env: Any, space: spaces.Space, action: Any, where: str) -> None:
    if isinstance(space, spaces.Dict):
        if not isinstance(action, Mapping) or set(action) != set(space.spaces):
            given = sorted(action) if isinstance(action, Mapping) else _describe(action)
            raise EnvInputError(
                f"{env_label(env)}.step: {where} must be a dict with keys {sorted(space.spaces)} "
                f"(the action space is {space!r}); got {given}."
            )
        for name, sub in space.spaces.items():
            _check(env, sub, action[name], f"{where}[{name!r}]")
        return
    if isinstance(space, spaces.Tuple):
        if not isinstance(action, (tuple, list)) or len(action) != len(space.spaces):
            raise EnvInputError(
                f"{env_label(env)}.step: {where} must be a tuple of {len(space.spaces)} actions "
                f"(the action space is {space!r}); got {_describe(action)}."
            )
        for i, (sub, value) in enumerate(zip(space.spaces, action)):
            _check(env, sub, value, f"{where}[{i}]")
        return
    if space.dtype is None:  # a custom space without shape/dtype: nothing to check statically
        return
    _check_leaf(env, space, action, where)


def action_space_for_checks(env: Any, params: Any) -> spaces.Space | None:
    """``env.action_space(params)``; the default params' space when traced params cannot build one.

    Shapes and dtypes never depend on params values (static settings live on the
    env object), so the default params' space has the same ones.
    """
    try:
        return env.action_space(params)
    except NotImplementedError:
        return None
    except Exception:
        try:
            return env.action_space(env.default_params)
        except Exception:
            return None


def check_action(env: Any, action: Any, params: Any) -> None:
    """Raise :class:`EnvInputError` unless ``action`` fits ``env.action_space(params)`` (module docs)."""
    space = action_space_for_checks(env, params)
    if space is not None:
        _check(env, space, action, "action")


_KINDS = {"bool": "bool", "int": "int", "float": "float", bool: "bool", int: "int", float: "float"}
_KIND_TEXT = {
    "bool": "True or False or a bool array",
    "int": "an integer or an integer array",
    "float": "a real number or a float array",
}


def _field_kind(field: dataclasses.Field[Any], default: Any) -> str | None:
    """``"bool"``, ``"int"`` or ``"float"``: from the annotation, else from the default's dtype."""
    kind = _KINDS.get(field.type) if isinstance(field.type, (str, type)) else None  # type: ignore[call-overload]
    if kind is not None:
        return kind
    described = _shape_dtype(default)
    if described is None or _is_key(described[1]):
        return None
    dtype = np.dtype(described[1])
    if dtype == np.bool_:
        return "bool"
    if np.issubdtype(dtype, np.integer):
        return "int"
    return "float" if np.issubdtype(dtype, np.floating) else None


def _fits_kind(kind: str, dtype: Any) -> bool:
    dtype = np.dtype(dtype)
    if kind == "bool":
        return dtype == np.bool_
    if kind == "int":
        return bool(np.issubdtype(dtype, np.integer))
    return bool(np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating))


def integer_setting(value: Any, name: str, where: str, minimum: int = 0, maximum: int | None = None) -> int:
    """``value`` as an int, for a constructor's count or step setting, else a ``ValueError``
    ``"{where}: {name} must be an integer >= {minimum}, got {value!r}."`` (``in {minimum}..{maximum}``
    with a maximum). Refused: bools, strings, NaN, inf and fractions (``int(2.5)`` would make 2.5
    steps or envs 2, silently); a whole float such as ``3.0`` is taken."""
    whole = not isinstance(value, (bool, np.bool_, str, bytes)) and np.ndim(value) == 0
    if whole:
        try:
            whole = float(value).is_integer()  # False for NaN and inf
        except (TypeError, ValueError):
            whole = False
    if whole and int(value) >= minimum and (maximum is None or int(value) <= maximum):
        return int(value)
    wanted = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
    raise ValueError(f"{where}: {name} must be an integer {wanted}, got {value!r}.")


def count_argument(value: Any, name: str, where: str) -> Any:
    """``value``, a count a function takes as a plain number or a traced one (``mutate_level``'s
    ``num_edits``): a whole number >= 0 (an int for a plain one, as :func:`integer_setting` takes
    it), or a 0-d integer array or tracer, else a ``ValueError`` naming ``name`` and ``where``.
    A float or bool array would be cut to an int (2.5 edits as 2, ``True`` as 1) or fail inside a
    ``fori_loop`` with "lower and upper arguments ... must have equal types"."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or isinstance(value, np.generic):
        return integer_setting(value, name, where)
    if np.ndim(value) == 0 and np.issubdtype(dtype, np.integer):
        if not isinstance(value, jax.core.Tracer) and int(value) < 0:
            raise ValueError(f"{where}: {name} must be an integer >= 0, got {int(value)}.")
        return value
    raise ValueError(
        f"{where}: {name} must be an integer >= 0 (one number, or a traced int32), got "
        f"{_describe(value)}; pass jnp.int32(n) or a whole number."
    )


def bool_setting(value: Any, name: str, where: str) -> bool:
    """``value`` as a bool, for a constructor's switch, else a ``ValueError``
    ``"{where}: {name} must be True or False, got {value!r}."``: ``bool("false")`` and ``bool("no")``
    are True, so a string (from a config file) would turn the switch on, silently. A 0-d bool
    array (what ``make`` takes for a bool params field) is taken."""
    if isinstance(value, (bool, np.bool_)) or (
        np.ndim(value) == 0 and getattr(value, "dtype", None) == np.bool_
    ):
        return bool(value)
    raise ValueError(f"{where}: {name} must be True or False, got {value!r}.")


def _range_text(field: dataclasses.Field[Any]) -> str:
    """``"in [0.0, 1.0)"``, ``"> 0.0"``, ``">= 1"``: a field's range (:func:`lamella.envs.struct.field`)."""
    low, high = field.metadata["bounds"]
    low_open, high_open = field.metadata.get("open_bounds", (False, False))
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    return f"{'<' if high_open else '<='} {high}"


def _out_of_range(field: dataclasses.Field[Any], value: Any) -> bool:
    """Whether a concrete ``value`` (any shape) has an entry outside ``field``'s range or NaN;
    False for a traced value and for a field without a range."""
    bounds = field.metadata.get("bounds")
    if bounds is None:
        return False
    try:
        array = np.asarray(value)
    except jax.errors.TracerArrayConversionError:  # traced: its values are not known yet
        return False
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        return False  # a wrong kind is the kind check's (make) or the env's to report
    (low, high), (low_open, high_open) = bounds, field.metadata.get("open_bounds", (False, False))
    inside = np.ones(array.shape, bool)  # NaN fails every comparison, so it is outside too
    if low is not None:
        inside &= array > low if low_open else array >= low
    if high is not None:
        inside &= array < high if high_open else array <= high
    return not bool(inside.all())


def check_param_values(env: Any, params: Any, method: str = "reset") -> None:
    """Raise :class:`EnvInputError` for a concrete params field outside its range (see
    :func:`lamella.envs.struct.field`): ``params.replace(length=0.0)``, which ``make``'s override
    check never saw, divides by zero in the step. Traced values (a sweep under ``vmap``, params
    passed into ``jit``) are left alone; under ``jit`` it runs once, while tracing."""
    if not dataclasses.is_dataclass(params) or isinstance(params, type):
        return
    for field in dataclasses.fields(params):
        value = getattr(params, field.name)
        if _out_of_range(field, value):
            text = _range_text(field)
            try:
                default = f" (default: {_default_text(getattr(env.default_params, field.name))})"
            except Exception:
                default = ""
            raise EnvInputError(
                f"{env_label(env)}.{method}: params.{field.name} must be {text}, got {value!r:.80}. "
                f"Pass a value {text}{default}: params.replace({field.name}=...)."
            )


def check_param_overrides(params: Any, overrides: Mapping[str, Any], where: str) -> None:
    """Raise :class:`EnvInputError` for an override of a params field that cannot be meant.

    ``params`` are the env's default params (a dataclass), ``overrides`` the fields ``make`` was
    given. What a field takes comes from its annotation (``int``, ``float``, ``bool``), else
    from its default's dtype: a bool field takes bools; an int field integers, never a float (a
    step limit of 2.5 would end episodes after 3 steps) or a bool; a float field real numbers,
    not NaN; an array field an array whose trailing shape is the default's. Concrete values
    must lie inside the field's ``bounds`` (:func:`lamella.envs.struct.field`). A traced value
    (``make`` called inside ``jit``) is checked for its dtype and shape only. Leading axes are
    allowed everywhere (a batch of params for ``vmap``).
    """
    fields = {field.name: field for field in dataclasses.fields(params)}
    for name, value in overrides.items():
        default = getattr(params, name)
        kind = _field_kind(fields[name], default)
        if kind is None:
            continue  # a nested structure or a key: the env's own code checks it
        label = f"{where}: {name}"
        expected = f"{_KIND_TEXT[kind]} ({type(params).__name__} default: {_default_text(default)})"
        given = _shape_dtype(value)
        if given is None or _is_key(given[1]):
            raise EnvInputError(
                f"{label} must be {expected}, got {_describe(value)}. Pass {_example(kind, name)}."
            )
        shape, dtype = given
        if not _fits_kind(kind, dtype):
            raise EnvInputError(
                f"{label} must be {expected}, got {_describe(value)}. Pass {_example(kind, name)}."
            )
        default_shape = tuple(np.shape(default))
        if default_shape and tuple(shape[len(shape) - len(default_shape) :]) != default_shape:
            raise EnvInputError(
                f"{label} must be an array of shape {default_shape} (or a batch of them: "
                f"(..., {', '.join(map(str, default_shape))})), got {_describe(value)}."
            )
        try:
            array = np.asarray(value)
        except jax.errors.TracerArrayConversionError:  # traced: its values are not known yet
            continue
        if kind == "float" and np.isnan(array).any():
            raise EnvInputError(f"{label} is NaN; pass {_example(kind, name)}.")
        if _out_of_range(fields[name], array):
            text = _range_text(fields[name])
            raise EnvInputError(
                f"{label} must be {text}, got {value!r:.80}. Pass a value {text} "
                f"({type(params).__name__} default: {_default_text(default)})."
            )


def _default_text(default: Any) -> str:
    if isinstance(default, (bool, int, float)):
        return repr(default)
    return f"an array of {_describe(default)}"


def _example(kind: str, name: str) -> str:
    return {
        "bool": f"{name}=True or {name}=False",
        "int": "a Python int or an integer array",
        "float": "a float",
    }[kind]
