"""The environment registry: ``make``, ``register``, ``registered``."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from lamella.envs import _inputs
from lamella.envs.environment import Environment

__all__ = ["env_family", "make", "register", "registered"]

_REGISTRY: dict[str, Callable[..., Environment[Any, Any]]] = {}
# Ids registered as option variants of another id (lbforaging's 1920 sizes, say): makeable and
# listed by registered(), but left out of registered(variants=False), which `lamella demo` and
# `lamella animate` walk.
_VARIANTS: set[str] = set()
_BUILTIN_REGISTERED = False
# Id prefixes of adapters that build any env of another library by name (``brax:ant@spring``):
# prefix -> (module, factory). The factory takes the whole id first; the adapter's library is
# imported only when such an id is made.
_PREFIXES: dict[str, tuple[str, str]] = {
    "brax:": ("lamella.envs.adapters.brax", "make_from_id"),
    "brax-goal:": ("lamella.envs.adapters.brax_goal", "make_goal_from_id"),
    "jaxmarl:": ("lamella.envs.adapters.jaxmarl", "make_from_id"),
}


def _ensure_builtin() -> None:
    """Register the built-in envs once, before the first lookup (``import lamella.envs`` is lazy)."""
    global _BUILTIN_REGISTERED
    if not _BUILTIN_REGISTERED:
        _BUILTIN_REGISTERED = True
        from lamella.envs import _register_builtin

        _register_builtin()


def register(
    env_id: str,
    factory: Callable[..., Environment[Any, Any]],
    *,
    overwrite: bool = False,
    variant: bool = False,
) -> None:
    """Register ``factory`` (a class or function returning a bare env) under ``env_id``.

    Keyword arguments that :func:`make` receives and that are not fields of the
    env's params are passed to ``factory`` (static settings such as sizes).
    ``variant=True`` marks an id as one setting of a family whose main ids are registered
    without it: it is made like any other id but left out of ``registered(variants=False)``.
    """
    _ensure_builtin()
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"register: env_id must be a non-empty string, got {env_id!r}.")
    if not callable(factory):
        hint = ""
        if callable(getattr(factory, "step", None)):  # an env object: register what builds one
            hint = (
                f" That is an env object: register its class, register({env_id!r}, {type(factory).__name__})."
            )
        raise TypeError(
            f"register({env_id!r}, ...): factory must be callable (a class or a function returning a "
            f"bare env), got {factory!r:.80}.{hint}"
        )
    for name, flag in (("overwrite", overwrite), ("variant", variant)):
        if not isinstance(flag, (bool, np.bool_)):
            # A str such as "no" is truthy: it would replace an env or hide the id silently.
            raise TypeError(f"register({env_id!r}, ...): {name} must be True or False, got {flag!r:.80}.")
    if env_id in _REGISTRY and not overwrite and _REGISTRY[env_id] is not factory:
        raise ValueError(f"{env_id!r} is already registered; pass overwrite=True to replace it.")
    _REGISTRY[env_id] = factory
    if variant:
        _VARIANTS.add(env_id)
    else:
        _VARIANTS.discard(env_id)


def registered(variants: bool = True) -> list[str]:
    """All registered ids, sorted; ``variants=False`` leaves out ids registered as variants."""
    if not isinstance(variants, (bool, np.bool_)):  # "no" is truthy: every variant, silently
        raise TypeError(f"registered: variants must be True or False, got {variants!r:.80}.")
    _ensure_builtin()
    return sorted(env_id for env_id in _REGISTRY if variants or env_id not in _VARIANTS)


def _factory_kwargs(factory: Callable[..., Any]) -> set[str] | None:
    """Names ``factory`` accepts, or None if it takes ``**kwargs``."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    names = set()
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            return None
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            names.add(p.name)
    return names


class Made(tuple):  # type: ignore[type-arg]
    """What :func:`make` returns: the pair ``(env, params)``, a plain tuple to unpack. Reading an
    env attribute off the pair (``le.make(id).reset``, gymnasium's ``env = gym.make(id)`` habit)
    names the unpacking instead of ``'tuple' object has no attribute 'reset'``."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or not hasattr(self[0], name):
            raise AttributeError(name)
        raise AttributeError(
            f"make returns the pair (env, params), not the env: unpack it, env, params = "
            f"lamella.envs.make(...), then use env.{name}."
        )


def make(env_id: str, *, autoreset: bool = True, **overrides: Any) -> tuple[Environment[Any, Any], Any]:
    """Build a registered environment: ``env, params = make("CartPole-v1", gravity=9.0)``.

    Args:
        env_id: a registered id (see :func:`registered`).
        autoreset: wrap the env in :class:`~lamella.envs.wrappers.AutoReset` (default).
            With ``autoreset=False`` the bare env is returned and the loop calls
            ``env.reset_done(...)`` itself.
        **overrides: fields of the env's params (traced values, vmappable) or
            keyword arguments of its constructor (static settings).

    Raises:
        KeyError: unknown id; the message lists the closest registered ids.
        TypeError: an id that is not a str, an ``autoreset`` that is not a bool, an override
            that is neither a params field nor a constructor argument, or a registered factory
            that returned no env object.
        EnvInputError: a params override of the wrong kind (a float for an int field such as
            ``max_steps_in_episode``, a str, None, NaN) or outside the field's ``bounds``
            (``struct.field(bounds=...)``: ``max_steps_in_episode=-1``, a probability above 1).
    """
    if not isinstance(env_id, str):
        raise TypeError(
            f"make: env_id must be a registered id (a str such as 'CartPole-v1'), got "
            f"{type(env_id).__name__} {env_id!r:.80}. See lamella.envs.registered() for the ids."
        )
    if not isinstance(autoreset, (bool, np.bool_)):
        raise TypeError(f"make({env_id!r}): autoreset must be True or False, got {autoreset!r:.80}.")
    _ensure_builtin()
    prefixed = _prefixed_factory(env_id) if env_id not in _REGISTRY else None
    base, _, settings = env_id.partition(":")
    if env_id not in _REGISTRY and prefixed is None and base in _REGISTRY and "=" in settings:
        keywords = ", ".join(part.strip() for part in settings.split(","))
        raise KeyError(
            f"Unknown environment id {env_id!r}: settings are not part of an id; pass them to make as "
            f"keyword arguments: make({base!r}, {keywords})."
        )
    if env_id not in _REGISTRY and prefixed is None:
        close = difflib.get_close_matches(env_id, _REGISTRY, n=5, cutoff=0.4)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise KeyError(
            f"Unknown environment id {env_id!r}.{hint} "
            "See lamella.envs.registered() for all ids, or register your own with lamella.envs.register()."
        )
    factory = _REGISTRY[env_id] if prefixed is None else prefixed
    accepted = _factory_kwargs(factory)
    static_kwargs = {k: v for k, v in overrides.items() if accepted is None or k in accepted}
    env = factory(**static_kwargs)
    _check_made(env_id, factory, env)
    params = env.default_params
    param_names = {f.name for f in dataclasses.fields(params)} if dataclasses.is_dataclass(params) else set()
    param_overrides = {k: v for k, v in overrides.items() if k not in static_kwargs}
    unknown = sorted(set(param_overrides) - param_names)
    if unknown:
        raise TypeError(
            f"make({env_id!r}): unknown override(s) {unknown}. "
            f"Params fields: {sorted(param_names)}; constructor arguments: {sorted(accepted or [])}."
        )
    if param_overrides:
        _inputs.check_param_overrides(params, param_overrides, f"make({env_id!r})")
        params = dataclasses.replace(params, **param_overrides)
    _check_constructor_param_overrides(env_id, params, static_kwargs)
    env.env_id = env_id  # type: ignore[attr-defined]
    if autoreset:
        from lamella.envs.wrappers import AutoReset

        env = AutoReset(env)
    return Made((env, params))


def _check_constructor_param_overrides(env_id: str, params: Any, static_kwargs: dict[str, Any]) -> None:
    """The params checks for overrides that name a params field but went to the constructor.

    LBF, RWARE, MPE and the matrix games take their params' defaults as constructor arguments,
    and a constructor converts what it gets (``bool("no")`` is True). Scalar fields only (an
    array field such as a payoff is the constructor's to check) and not None (a constructor's
    "use the default").
    """
    if not dataclasses.is_dataclass(params) or isinstance(params, type):
        return
    fields = {f.name: f for f in dataclasses.fields(params)}
    given = {
        name: value
        for name, value in static_kwargs.items()
        if name in fields and value is not None and np.ndim(getattr(params, name)) == 0
    }
    if given:
        # The field defaults, not the values the constructor just made of what was given.
        defaults = {
            name: fields[name].default for name in given if fields[name].default is not dataclasses.MISSING
        }
        _inputs.check_param_overrides(dataclasses.replace(params, **defaults), given, f"make({env_id!r})")


def _check_made(env_id: str, factory: Callable[..., Any], env: Any) -> None:
    """Raise TypeError when ``factory`` (what ``register`` was given) returned no env object."""
    missing = [
        name
        for name in ("reset", "step", "action_space", "observation_space")
        if not callable(getattr(env, name, None))
    ]
    if isinstance(env, type) or missing or not hasattr(env, "default_params"):
        what = f"the class {env.__name__}" if isinstance(env, type) else f"{type(env).__name__} {env!r:.60}"
        fix = f" Return an instance: {env.__name__}(...)." if isinstance(env, type) else ""
        raise TypeError(
            f"make({env_id!r}): the factory registered for it ({getattr(factory, '__name__', repr(factory))}) "
            f"returned {what}, not an env (an object with reset, step, action_space, "
            f"observation_space and default_params, such as a lamella.envs.Environment).{fix}"
        )


def adapter_prefix(env_id: str) -> str | None:
    """The adapter prefix of ``env_id`` (``"brax"`` for ``"brax:ant@spring"``), else None."""
    for prefix in _PREFIXES:
        if env_id.startswith(prefix):
            return prefix.rstrip(":")
    return None


def _prefixed_factory(env_id: str) -> Callable[..., Environment[Any, Any]] | None:
    """The adapter factory for an id with an adapter prefix (``brax:...``), bound to the id."""
    import functools
    import importlib

    for prefix, (module, name) in _PREFIXES.items():
        if env_id.startswith(prefix):
            return functools.partial(getattr(importlib.import_module(module), name), env_id)
    return None


# Modules of lamella.envs that hold no env family of their own.
_NOT_FAMILIES = {"adapters", "wrappers", "environment", "registry", "testing"}


def env_family(env: Environment[Any, Any] | str) -> str:
    """The ``lamella.envs`` sub-package that defines ``env`` (an env object or a registered id).

    ``classic_control``, ``minatar``, ``bsuite``, ``multi_agent``, ...: what the run log calls the
    environment family and what ``lamella animate`` takes one env of. ``"custom"`` for an id that is
    not registered and for envs defined outside ``lamella.envs``.
    """
    if isinstance(env, str):
        prefix = adapter_prefix(env)
        if prefix is not None:
            return prefix
        if env not in registered():
            return "custom"
        env, _ = make(env, autoreset=False)
    parts = type(getattr(env, "unwrapped", env)).__module__.split(".")
    if parts[:2] == ["lamella", "envs"] and len(parts) > 3 and parts[2] not in _NOT_FAMILIES:
        return parts[2]
    return "custom"
