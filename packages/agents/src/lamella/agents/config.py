"""Typed configs: presets, ``key=value`` overrides, and checks that run before anything compiles.

Every algorithm has one frozen config dataclass whose fields have plain types (``int``,
``float``, ``bool``, ``str``, ``tuple[int, ...]``, ``tuple[float, ...]``, ``tuple[str, ...]``,
optionally ``| None``). This module turns command-line text into such a config::

    config = resolve_config("ppo", env_id="CartPole-v1", overrides=["num_envs=8", "learning_rate=3e-4"])

An unknown key raises :class:`ConfigError` listing the valid keys; a value of the wrong type
raises :class:`ConfigError` naming the key, the expected type and the value. Nothing here
builds a runner (resolving a config imports only that algorithm's module), so every mistake is
reported before any compilation.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lamella.envs.errors import UserError

__all__ = [
    "ConfigError",
    "algorithm_spec",
    "algorithm_table",
    "apply_overrides",
    "check_config_type",
    "check_numbers",
    "check_single_agent",
    "check_unused_settings",
    "config_defaults",
    "config_diff",
    "config_from_dict",
    "config_to_dict",
    "field_types",
    "is_swept",
    "parse_overrides",
    "parse_value",
    "preset_table",
    "register_algorithm",
    "registered_algorithms",
    "resolve_config",
    "switch_overrides",
    "type_name",
    "unregister_algorithm",
    "unused_setting_message",
    "unused_settings_of",
]

DEFAULT_ENV_ID = "CartPole-v1"

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ConfigError(UserError, ValueError):
    """A configuration mistake found before anything compiled (unknown key, wrong type, ...)."""


def check_single_agent(env: Any, algorithm: str, env_id: str | None, instead: str) -> None:
    """Refuse a multi-agent env (``env.num_agents > 1``) for the single-agent ``algorithm``, naming
    the multi-agent algorithms to use ``instead`` (for example ``"ippo or mappo"``): without this
    its first step fails on the agent axis of the actions, far from the cause."""
    num_agents = int(getattr(env, "num_agents", 1))
    if num_agents > 1:
        name = env_id or getattr(env, "name", type(env).__name__)
        raise ConfigError(
            f"{algorithm} trains single-agent envs; {name} has {num_agents} agents. Train it with {instead} "
            f"(lamella-marl: lamella train {instead.split()[0]} --env {name}), or pick a single-agent env "
            f"such as {DEFAULT_ENV_ID}."
        )


def check_config_type(
    config: Any, expected: type, where: str, build: str | None = None, *, algorithm: str = "algorithm"
) -> None:
    """Raise :class:`ConfigError` naming the fix unless ``config`` is an ``expected`` (a runner
    given an algorithm's name, a dict of settings, the dict of presets or another algorithm's
    config fails with an AttributeError deep inside otherwise).

    Args:
        config: what the user passed as the config.
        expected: the config class ``where`` takes (a subclass passes).
        where: the function, for the message (``"make_ppo_runner"``).
        build: how to get one, for the message (default: ``{expected}(...)``, or
            ``resolve_config(algorithm, env_id)`` for a registered algorithm's preset).
        algorithm: the registered name the default ``build`` text gives ``resolve_config``.
    """
    if isinstance(config, expected):
        return
    name = expected.__name__
    # "an" before a vowel sound: ESConfig, MFOSConfig (an acronym's letter named "em").
    article = "an" if name[0] in "AEIOU" or (name[0] in "FHLMNRSX" and name[1:2].isupper()) else "a"
    fix = (
        build
        or f"Build one: {name}(...), or a preset: lamella.agents.config.resolve_config({algorithm!r}, env_id)."
    )
    given = type(config).__name__
    if isinstance(config, str):
        given = f"the str {config!r}"
    elif isinstance(config, Mapping):
        keys = ", ".join(repr(key) for key in list(config)[:3]) + (", ..." if len(config) > 3 else "")
        if config and all(
            dataclasses.is_dataclass(value) or isinstance(value, Mapping) for value in config.values()
        ):
            fix = f"That is a dict of configs (presets?): pick one by its key ({keys}). {fix}"
        elif build is None:
            fix = f"That is a dict: build {name}(**settings), or config_from_dict({name}, settings) to check each value's type."
        else:
            fix = f"That is a dict. {fix}"
    raise ConfigError(f"{where}: config must be {article} {name}, got {given}. {fix}")


def is_swept(value: Any) -> bool:
    """Whether a config number is traced: a sweep's varied value while the runner is built inside
    the sweep's program (``lamella sweep``, ``run(..., variants=...)``). The driver builds the
    runner of each variant with plain numbers first, so a range check may skip a traced value;
    code that needs the number itself (a shape, a loop length, a branch) makes the sweep compile
    one program per value instead."""
    import jax

    try:
        float(value)
    except jax.errors.ConcretizationTypeError:  # what any JAX tracer raises (public API)
        return True
    return False


def _traced(value: Any) -> bool:
    """:func:`is_swept` for a field of any type (a string or a tuple is never traced)."""
    try:
        return is_swept(value)
    except (TypeError, ValueError):
        return False


def _field_default(config: Any, name: str) -> Any:
    """The default of the field ``name`` of the config dataclass ``config`` (an instance or its
    class; a subclass's own default where it re-declares the field), or ``dataclasses.MISSING``."""
    field = next(f for f in dataclasses.fields(config) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _setting_text(config: Any, name: str) -> str:
    """``"SACConfig.tau=0.01"`` (``"... (swept)"`` for a traced value): a setting in a message."""
    value = getattr(config, name)
    shown = " (swept)" if _traced(value) else f"={value!r}"
    return f"{type(config).__name__}.{name}{shown}"


def unused_setting_message(config: Any, name: str, meaning: str, mode: str, fix: str) -> str:
    """The message for the field ``name`` of ``config`` that its mode never reads: what it
    ``meaning``, the ``mode`` that leaves it unread, and the ``fix`` (or keeping its default)."""
    return (
        f"{_setting_text(config, name)} {meaning}, but {mode}, so it is never read; {fix}, or leave "
        f"{name} at {_field_default(config, name)!r}."
    )


def unused_settings_of(config: Any, meanings: Mapping[str, str], mode: str, fix: str) -> dict[str, str]:
    """``{field: message}`` for a config's ``unused_settings()``: each field of ``meanings``
    (``{field: what it sets}``, for example ``{"tau": "is the rate of the soft target update"}``)
    is never read in ``config``'s ``mode``, and ``fix`` makes it read. Each message is
    :func:`unused_setting_message`'s, so a config with several such settings in one mode writes
    them as one table::

        if not self.recurrent:
            unused |= unused_settings_of(self, RECURRENT_CORE_SETTINGS, "recurrent=False ...", "set recurrent=True")
    """
    return {
        name: unused_setting_message(config, name, meaning, mode, fix) for name, meaning in meanings.items()
    }


def check_unused_settings(config: Any, names: Iterable[str]) -> None:
    """Raise :class:`ConfigError` for the first of the fields ``names`` (those a user set) that
    ``config``'s mode never reads: the ones its ``unused_settings()`` method (if it has one) lists
    as ``{field: message}``, for example DQN's ``target_update_period`` with ``tau < 1``.

    :func:`resolve_config` checks its overrides with it, so a preset's value for a field of the
    other mode (a tuned ``target_update_period``) is no error when a user switches modes. A config's
    ``validate()`` does not check this: it cannot tell a value a user set from a preset's, and a
    sweep over the mode (``tau=0.5,1.0``) legitimately carries the other mode's setting."""
    unused_settings = getattr(config, "unused_settings", None)
    if unused_settings is None:
        return
    names = list(names)
    if not names:
        return
    unused = unused_settings()
    for name in names:
        if name in unused:
            raise ConfigError(unused[name])


def _number_rule(name: str) -> tuple[float, float, bool, str] | None:
    """A config number's range by its field's name: ``(low, high, low excluded, meaning)``."""
    if name.endswith("gamma"):
        return 0.0, 1.0, False, "a discount"
    if name.endswith("gae_lambda"):
        return 0.0, 1.0, False, "GAE's lambda"
    if name.endswith(("probability", "_prob")) or name in ("staleness_coef", "min_fill_ratio"):
        return 0.0, 1.0, False, "a fraction"
    if name.endswith(("learning_rate", "_lr")):
        return 0.0, math.inf, False, "a step size; 0 freezes what it trains"
    if name.endswith("clip_eps") or name in ("temperature", "max_grad_norm"):
        return 0.0, math.inf, True, "a positive bound; inf for none"
    if name == "tau":
        return 0.0, 1.0, True, "the target networks' update rate"
    if name == "eval_max_steps":
        return 0.0, math.inf, False, "a step cap: 0 for the env's own limit, else a positive number of steps"
    return None


_PLAIN = (bool, int, float, complex, str, bytes, type(None), tuple, list, dict)


def _value_text(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"[:120]


def _type_problem(value: Any, tp: Any) -> str | None:
    """Why the plain Python ``value`` (a number, string, None, tuple, list or dict) cannot be a
    ``tp``, the field's declared type; None where it can, and for anything else (an array, a
    tracer, a user's object), which is left to the code that reads it."""
    if not isinstance(value, _PLAIN) or tp is Any:
        return None
    inner = _optional_inner(tp)
    if inner is not None:
        return None if value is None else _type_problem(value, inner)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (tuple, collections.abc.Sequence):
        if not isinstance(value, (tuple, list)):
            return "a tuple"
        if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed length: tuple[int, int]
            if len(value) != len(args):
                return f"a tuple of {len(args)}"
            item_types = args
        else:
            item_types = (args[0] if args else Any,) * len(value)
        for item, item_tp in zip(value, item_types, strict=True):
            if _type_problem(item, item_tp) is not None:
                return f"a tuple of {type_name(item_tp)}"
        return None
    if tp is bool:
        return None if isinstance(value, (bool, int)) else "True or False"
    if tp is int:
        return None if isinstance(value, int) else "an int"
    if tp is float:
        return None if isinstance(value, (int, float)) else "a number"
    if tp is str:
        return None if isinstance(value, str) else "a string"
    return None


def _type_fix(field: str, value: Any, tp: Any) -> str:
    """The fix named after a wrong type: the form the field takes."""
    base = _optional_inner(tp) or tp
    if isinstance(value, float) and value.is_integer() and base is int:
        return f" Write {int(value)}."
    if isinstance(value, str) and base in (int, float, bool):
        return " Write the value itself, not a string (the command line parses text; Python does not)."
    if isinstance(value, Mapping) and field.endswith("env_kwargs"):
        example = tuple(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in value.items())
        return f" Write each entry as 'name=value': {field}={example!r}."
    if isinstance(value, (int, str)) and typing.get_origin(base) in (tuple, collections.abc.Sequence):
        return f" Write a tuple: {field}=({value!r},)."
    return ""


def _check_types(config: Any) -> None:
    cls = type(config).__name__
    try:
        types_ = field_types(type(config))
    except (NameError, TypeError):  # a user's config whose annotations do not resolve
        return
    for name, tp in types_.items():
        value = getattr(config, name)
        wanted = _type_problem(value, tp)
        if wanted is not None:
            declared = "" if tp in (int, float, str, bool) else f" ({type_name(tp)})"
            raise ConfigError(
                f"{cls}.{name} must be {wanted}{declared}, got {_value_text(value)}."
                f"{_type_fix(name, value, tp)}"
            )
        # Layer widths (hidden_sizes, post_torso_sizes, ...) and int sizes (rnn_hidden_size, ...).
        sizes = value if name.endswith("_sizes") and isinstance(value, (tuple, list)) else ()
        if name.endswith("_size") and tp is int and isinstance(value, int):
            sizes = (value,)
        for size in sizes:
            if isinstance(size, int) and size < 1:
                raise ConfigError(f"{cls}.{name} must hold sizes >= 1, got {value!r}.")


def check_numbers(config: Any) -> None:
    """Raise :class:`ConfigError` naming the first setting of ``config`` (a dataclass) that cannot
    train. First a Python value of the wrong type for its field (a string where a number goes,
    ``4.0`` for an int, a number for a tuple, a dict for ``env_kwargs``) or a size below 1 (a
    field ending in ``_sizes`` or an int field ending in ``_size``); then NaN anywhere; by the
    field's name, a discount, GAE lambda or fraction outside [0, 1], a learning rate below 0 or
    infinite, a clip range, ``temperature`` or ``max_grad_norm`` not > 0, a ``tau`` outside
    (0, 1], an infinite ``*_coef``, a negative ``eval_max_steps`` (0 is the env's own limit). Found here, the mistake is one line before anything compiles
    instead of a shape error or NaN losses later. Arrays and traced numbers (a sweep's varied
    value, :func:`is_swept`) are skipped: the driver checks each variant's plain numbers first."""
    if not dataclasses.is_dataclass(config):
        return
    _check_types(config)
    cls = type(config).__name__
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        for item in value if isinstance(value, tuple) else (value,):
            # A Python number or a 0-d array (a tracer included); larger arrays are not settings.
            number_like = isinstance(item, (int, float)) or getattr(item, "shape", None) == ()
            if isinstance(item, bool) or not number_like or is_swept(item):
                continue
            number = float(item)
            if math.isnan(number):
                raise ConfigError(f"{cls}.{field.name} is NaN; give it a number.")
            rule = _number_rule(field.name) if item is value else None
            if rule is None:
                if field.name.endswith("_coef") and math.isinf(number):
                    raise ConfigError(f"{cls}.{field.name} must be finite, got {number:g}.")
                continue
            low, high, low_open, meaning = rule
            finite_only = high == math.inf and not low_open  # a learning rate: inf is no setting
            above = number > low if low_open else number >= low
            if above and number <= high and not (finite_only and math.isinf(number)):
                continue
            if high < math.inf:
                wanted = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
            elif low_open:
                wanted = f"> {low:g}"
            else:  # an int cannot be infinite
                wanted = f">= {low:g}" + (" and finite" if isinstance(item, float) else "")
            raise ConfigError(f"{cls}.{field.name} must be {wanted} ({meaning}), got {number:g}.")


_REGISTERED: dict[str, tuple[type, Callable[..., Any], dict[str, Any]]] = {}


def register_algorithm(
    name: str,
    config_cls: type,
    make_runner: Callable[..., Any],
    presets: Mapping[str, Any] | None = None,
    *,
    overwrite: bool = False,
) -> None:
    """Make an unpackaged runner available to :func:`resolve_config`, the driver and ``lamella train``
    for the running process (a notebook, a test).

    A package declares its algorithms as entry points instead (:mod:`lamella.agents.algorithms`),
    so they are found whenever it is installed, with no import needed.

    Args:
        name: algorithm name (the ``algorithm`` level of the run log).
        config_cls: its frozen config dataclass (with ``env_id``, ``total_timesteps`` and
            ``eval_episodes`` fields).
        make_runner: ``config -> Runner``.
        presets: ``{preset_name: config}``.
        overwrite: replace an algorithm registered under ``name`` before.
    """
    field_types(config_cls)  # a dataclass with resolvable types, or ConfigError now
    if name in _REGISTERED and not overwrite:
        raise ValueError(f"Algorithm {name!r} is already registered; pass overwrite=True to replace it.")
    _REGISTERED[name] = (config_cls, make_runner, dict(presets or {}))


def unregister_algorithm(name: str) -> None:
    """Remove an algorithm added with :func:`register_algorithm`."""
    _REGISTERED.pop(name, None)


def registered_algorithms() -> list[str]:
    """The names added with :func:`register_algorithm` in this process, sorted."""
    return sorted(_REGISTERED)


def algorithm_spec(name: str) -> tuple[type, Callable[..., Any], dict[str, Any]]:
    """``(config class, make_runner, presets)`` of one algorithm, importing only its module.

    An algorithm added with :func:`register_algorithm` comes first, then the installed entry
    points (:mod:`lamella.agents.algorithms`).

    Raises:
        ConfigError: unknown algorithm (listing the installed ones), or one that cannot load.
    """
    return _algorithm_spec(name, None)


def _algorithm_spec(name: str, installed: Any) -> tuple[type, Callable[..., Any], dict[str, Any]]:
    """:func:`algorithm_spec` with the installed entry points already scanned (``None``: scan)."""
    if name in _REGISTERED:
        config_cls, make_runner, presets = _REGISTERED[name]
        return config_cls, make_runner, dict(presets)
    from lamella.agents.algorithms import algorithm_entries, load_algorithm

    installed = algorithm_entries() if installed is None else installed
    if name not in {entry.name for entry in installed}:
        available = sorted({entry.name for entry in installed} | set(_REGISTERED))
        raise ConfigError(
            f"Unknown algorithm {name!r}. Available: {', '.join(available) or 'none'} "
            "(lamella train --list shows where each comes from)."
        )
    spec = load_algorithm(name, installed)
    return spec.config_class, spec.make_runner, dict(spec.presets)


def _all_specs() -> dict[str, tuple[type, Callable[..., Any], dict[str, Any]]]:
    from lamella.agents.algorithms import algorithm_entries

    installed = algorithm_entries()  # one scan of the installed distributions for every name
    names = {entry.name for entry in installed} | set(_REGISTERED)
    return {name: _algorithm_spec(name, installed) for name in sorted(names)}


def algorithm_table() -> dict[str, tuple[type, Callable[..., Any]]]:
    """``{name: (ConfigClass, make_runner)}`` of every installed algorithm (entry points of the
    group ``lamella.algorithms``) and those added with :func:`register_algorithm`.

    This imports every algorithm's module; :func:`algorithm_spec` imports only one.
    """
    return {name: (cls, make) for name, (cls, make, _) in _all_specs().items()}


def preset_table() -> dict[str, dict[str, Any]]:
    """``{algorithm: {preset_name: config}}`` of every algorithm (see :func:`algorithm_table`)."""
    return {name: presets for name, (_, _, presets) in _all_specs().items()}


def field_types(config_cls: type) -> dict[str, Any]:
    """The resolved type of every field of a config dataclass, in declaration order."""
    if not dataclasses.is_dataclass(config_cls):
        raise ConfigError(f"{config_cls!r} is not a dataclass; configs must be (frozen) dataclasses.")
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(config_cls) if f.init}


def type_name(tp: Any) -> str:
    """How a field type reads in error messages: ``int``, ``tuple[int, ...]``, ``float | None``."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "").replace("collections.abc.", "")


def _optional_inner(tp: Any) -> Any | None:
    """``X`` for ``X | None`` / ``Optional[X]``, else None."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def parse_value(key: str, text: str, tp: Any) -> Any:
    """Parse the command-line ``text`` of field ``key`` as type ``tp``.

    ``int`` accepts ``1000``, ``1_000`` and integral floats such as ``1e6``; ``bool`` accepts
    true/false, yes/no, on/off, 1/0; tuples are comma separated, brackets optional
    (``64,64`` or ``(64, 64)``; ``()`` is empty); ``X | None`` also accepts ``none``.

    Raises:
        ConfigError: naming the key, the expected type and the value.
    """

    def fail(detail: str = "") -> ConfigError:
        return ConfigError(f"{key}={text!r}: expected {type_name(tp)}{detail}.")

    inner = _optional_inner(tp)
    if inner is not None:
        if text.strip().lower() in {"none", "null"}:
            return None
        try:
            return parse_value(key, text, inner)
        except ConfigError:
            raise fail() from None
    if tp is bool:
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise fail(" (true/false)")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            pass
        try:
            as_float = float(text)
        except ValueError:
            raise fail() from None
        if as_float.is_integer():
            return int(as_float)
        raise fail(" (a whole number)")
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise fail() from None
    if tp is str:
        return text
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        stripped = text.strip()
        if stripped[:1] in "([" and stripped[-1:] in ")]":
            stripped = stripped[1:-1]
        items = [item.strip() for item in stripped.split(",") if item.strip()]
        if len(args) == 2 and args[1] is Ellipsis:
            element_types = [args[0]] * len(items)
        else:
            if len(items) != len(args):
                raise fail(f" ({len(args)} comma-separated values)")
            element_types = list(args)
        try:
            return tuple(parse_value(key, item, t) for item, t in zip(items, element_types))
        except ConfigError:
            raise fail(" (comma-separated values)") from None
    if tp is Any:
        return text
    raise ConfigError(f"{key}: fields of type {type_name(tp)} cannot be set from the command line.")


def _check_value(key: str, value: Any, tp: Any) -> Any:
    """Check (and lightly normalise) a programmatic override value against ``tp``."""
    if isinstance(value, str) and tp is not str:
        return parse_value(key, value, tp)
    inner = _optional_inner(tp)
    if inner is not None:
        return None if value is None else _check_value(key, value, inner)
    bad = ConfigError(f"{key}={value!r}: expected {type_name(tp)}, got {type(value).__name__}.")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, list | tuple):
            raise bad
        args = typing.get_args(tp)
        element_types = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(element_types) != len(value):
            raise bad
        return tuple(_check_value(key, v, t) for v, t in zip(value, element_types))
    return value


def switch_overrides(
    config_cls: type, switches: Iterable[str], overrides: Mapping[str, str] = {}
) -> dict[str, str]:
    """``["--her"]`` -> ``{"her": "true"}``: command-line switches of boolean config fields.

    Raises:
        ConfigError: a switch that names no boolean field of ``config_cls`` (listing those that
            exist), or a field given both as a switch and as ``key=value``.
    """
    types_ = field_types(config_cls)
    booleans = [name for name, tp in types_.items() if tp is bool]
    out: dict[str, str] = {}
    for switch in switches:
        key = switch.lstrip("-").replace("-", "_")
        if key not in booleans:
            raise ConfigError(
                f"Unknown option {switch}: {config_cls.__name__} has no boolean field {key!r}. "
                f"Boolean fields (switch on with --NAME): {', '.join(booleans) or 'none'}."
            )
        if key in overrides or key in out:
            raise ConfigError(f"{key} is given twice ({switch} and {key}=...).")
        out[key] = "true"
    return out


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; a malformed item raises :class:`ConfigError`."""
    parsed: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"Override {item!r} is not of the form key=value (for example num_envs=8).")
        if key in parsed:
            raise ConfigError(f"Override key {key!r} is given twice.")
        parsed[key] = value
    return parsed


def _abbreviated(key: str, names: Iterable[str]) -> list[str]:
    """The field names ``key`` abbreviates: their words' initials (``lr``: ``learning_rate``) or
    their first word (``ent``: ``ent_coef``), as other libraries spell these settings."""
    return [
        name
        for name in names
        if "_" in name
        and (key == "".join(word[:1] for word in name.split("_")) or name.startswith(key + "_"))
    ]


def _unknown_key_error(unknown: list[str], types_: Mapping[str, Any], config_cls: type) -> ConfigError:
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, types_, n=3, cutoff=0.6) or _abbreviated(key, types_)
        if close:
            hints.append(f"{key!r} (did you mean {', '.join(map(repr, close))}?)")
        else:
            hints.append(repr(key))
    valid = ", ".join(f"{name}: {type_name(tp)}" for name, tp in types_.items())
    return ConfigError(
        f"Unknown config key(s) for {config_cls.__name__}: {', '.join(hints)}. Valid keys: {valid}."
    )


def apply_overrides(config: Any, overrides: Mapping[str, Any] | Iterable[str]) -> Any:
    """Return ``config`` with ``overrides`` applied (``{"key": value}`` or ``["key=value", ...]``).

    String values are parsed as the field's type; other values are type checked.

    Raises:
        ConfigError: unknown keys (all of them, with the list of valid keys) or a bad value.
    """
    if not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    types_ = field_types(type(config))
    unknown = [key for key in overrides if key not in types_]
    if unknown:
        raise _unknown_key_error(unknown, types_, type(config))
    values = {key: _check_value(key, value, types_[key]) for key, value in overrides.items()}
    return dataclasses.replace(config, **values) if values else config


def resolve_config(
    algorithm: str,
    env_id: str | None = None,
    preset: str | None = None,
    overrides: Mapping[str, Any] | Iterable[str] = (),
    *,
    check_unused: bool = True,
) -> Any:
    """Build the config of a run: a preset (or the defaults), then ``env_id``, then overrides.

    The preset is ``preset`` if given, else the preset named like ``env_id`` if there is one,
    else the config class's defaults with ``env_id`` set. With neither, the preset for
    ``CartPole-v1`` (or the plain defaults).

    Raises:
        ConfigError: unknown algorithm or preset, unknown key, a value of the wrong type, or an
            override of a field the config's mode never reads (:func:`check_unused_settings`:
            ``tau=0.005 target_update_period=100`` for DQN, whose soft update has no period);
            ``check_unused=False`` skips that (``lamella sweep``: a grid over the mode reads it).
    """
    config_cls, _, presets = algorithm_spec(algorithm)
    config: Any
    if preset is not None:
        if preset not in presets:
            raise ConfigError(
                f"Unknown preset {preset!r} for {algorithm}. Available: {', '.join(sorted(presets)) or 'none'}."
            )
        config = presets[preset]
    elif env_id is not None and env_id in presets:
        config = presets[env_id]
    elif env_id is None and DEFAULT_ENV_ID in presets:
        config = presets[DEFAULT_ENV_ID]
    else:
        config = config_cls()
    if not isinstance(config, config_cls):
        raise ConfigError(
            f"Preset for {algorithm} is a {type(config).__name__}, not a {config_cls.__name__}."
        )
    resolved: Any = config  # isinstance against a runtime class narrows to object for mypy
    if env_id is not None and env_id != resolved.env_id:
        resolved = dataclasses.replace(resolved, env_id=env_id)
    if not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    resolved = apply_overrides(resolved, overrides)
    if check_unused:  # a field the user set that the chosen mode never reads
        check_unused_settings(resolved, overrides)
    return resolved


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no inf; config_from_dict parses "inf" back for a float field
    return value


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain JSON-compatible dict of a config (tuples become lists; an infinite float, as in
    ``max_grad_norm=inf``, becomes the string ``"inf"``, which :func:`config_from_dict` reads back)."""
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}


def config_from_dict(config_cls: type, values: Mapping[str, Any]) -> Any:
    """Inverse of :func:`config_to_dict` (type checked like overrides)."""
    types_ = field_types(config_cls)
    unknown = [key for key in values if key not in types_]
    if unknown:
        raise _unknown_key_error(unknown, types_, config_cls)
    return config_cls(**{key: _check_value(key, value, types_[key]) for key, value in values.items()})


def config_defaults(config_cls: type) -> dict[str, Any]:
    """The default of every field of the config class ``config_cls`` that has one, as
    :func:`config_to_dict` writes values (tuples become lists)."""
    defaults: dict[str, Any] = {}
    for field in dataclasses.fields(config_cls):
        if not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            continue
        defaults[field.name] = _plain(value)
    return defaults


def config_diff(
    old: Mapping[str, Any], new: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> dict[str, tuple[Any, Any]]:
    """``{key: (old, new)}`` for every key whose value differs (missing values read as None).

    A key of ``new`` that ``old`` lacks reads as its value in ``defaults`` where it has one: a
    field added to a config class after ``old`` was stored (the field's default is what the old
    run did) is not a difference unless ``new`` sets it to something else.
    """
    defaults = defaults or {}

    def before(key: str) -> Any:
        return old[key] if key in old else defaults.get(key)

    return {
        key: (before(key), new.get(key)) for key in sorted(set(old) | set(new)) if before(key) != new.get(key)
    }
