"""Algorithms by entry point: how ``lamella train NAME``, the driver and lamella-eval find a runner.

Every trainable algorithm is one entry point in the group ``lamella.algorithms`` of the
distribution that provides it. lamella-agents declares its own this way::

    [project.entry-points."lamella.algorithms"]
    ppo = "lamella.agents.presets:PPO"
    dqn = "lamella.agents.offpolicy.presets:DQN"

The entry point names an :class:`Algorithm`: the config class, the runner factory
(``config -> Runner``) and the presets. Installing the distribution is all it takes; nothing is
registered by importing a module. Listing the algorithms (``lamella train --list``,
:func:`algorithm_entries`) reads installed metadata only and imports nothing; an algorithm's
module is imported when that algorithm is used.

A runner that is not packaged (a notebook, a test) is added for the running process with
:func:`lamella.agents.config.register_algorithm`.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "ALGORITHMS",
    "GROUP",
    "Algorithm",
    "AlgorithmEntry",
    "algorithm_entries",
    "load_algorithm",
    "make_runner",
]

#: The entry-point group every trainable algorithm is declared in.
GROUP = "lamella.algorithms"


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """What an entry point of the ``lamella.algorithms`` group names.

    Attributes:
        config_class: the frozen config dataclass (with ``env_id``, ``total_timesteps`` and
            ``eval_episodes`` fields; every field settable as ``key=value``).
        make_runner: ``config -> Runner`` (:class:`lamella.agents.runner.Runner`).
        presets: ``{preset name: config}``; a preset named like an env id is that env's default.
    """

    config_class: type
    make_runner: Callable[[Any], Any]
    presets: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class AlgorithmEntry(NamedTuple):
    """One installed entry point, read from metadata without importing anything.

    Attributes:
        name: the algorithm name (``lamella train NAME``; the run log's ``algorithm``).
        target: ``"module:attribute"`` of its :class:`Algorithm`.
        package: the distribution that declares it (``lamella-agents``), ``""`` if unknown.
        version: that distribution's version.
    """

    name: str
    target: str
    package: str
    version: str


def algorithm_entries() -> list[AlgorithmEntry]:
    """Every installed ``lamella.algorithms`` entry point, sorted by name (imports nothing).

    The same name declared by two distributions gives two entries; using that name is then an
    error that names both (:func:`load_algorithm`).
    """
    entries = []
    seen: set[tuple[str, str, str]] = set()
    # Each distribution's metadata parsed once (parsing it per entry point cost ~0.1 s a scan).
    parsed: dict[Any, tuple[str, str]] = {}
    for point in importlib.metadata.entry_points(group=GROUP):
        dist = getattr(point, "dist", None)
        if dist is None:
            package, version = "", ""
        else:
            where = getattr(dist, "_path", None) or id(dist)
            if where not in parsed:
                metadata = dist.metadata
                parsed[where] = (metadata["Name"], metadata["Version"])
            package, version = parsed[where]
        # An editable install can list one distribution twice (two paths to one dist-info).
        if (point.name, point.value, package) in seen:
            continue
        seen.add((point.name, point.value, package))
        entries.append(AlgorithmEntry(point.name, point.value, package, version))
    return sorted(entries, key=lambda e: (e.name, e.package))


def _load_entry(entry: AlgorithmEntry) -> Algorithm:
    from lamella.agents.config import ConfigError

    module, _, attribute = entry.target.partition(":")
    where = f"algorithm {entry.name!r} ({entry.target}, from {entry.package or 'an unknown package'})"
    try:
        value: Any = importlib.import_module(module)
        for part in attribute.split(".") if attribute else []:
            value = getattr(value, part)
    except (ImportError, AttributeError) as error:
        raise ConfigError(
            f"Cannot load {where}: {error}. Reinstall {entry.package or 'the package that declares it'}."
        ) from error
    if not isinstance(value, Algorithm):
        raise ConfigError(f"{where} is a {type(value).__name__}, not a lamella.agents.algorithms.Algorithm.")
    return value


def load_algorithm(name: str, installed: Sequence[AlgorithmEntry] | None = None) -> Algorithm:
    """The :class:`Algorithm` installed under ``name`` (imports only its module).

    ``installed``: :func:`algorithm_entries`' answer, when the caller has it (one scan of the
    installed distributions for many look-ups); default: scanned now.

    Raises:
        lamella.agents.config.ConfigError: no such algorithm (listing the installed ones), two
            distributions declare it, or its module fails to import.
    """
    from lamella.agents.config import ConfigError

    installed = algorithm_entries() if installed is None else installed
    entries = [e for e in installed if e.name == name]
    if not entries:
        names = sorted({e.name for e in installed})
        raise ConfigError(
            f"Unknown algorithm {name!r}. Installed: {', '.join(names) or 'none'} "
            "(lamella train --list shows where each comes from)."
        )
    if len(entries) > 1:
        raise ConfigError(
            f"Algorithm {name!r} is declared by {len(entries)} packages: "
            f"{', '.join(f'{e.package} ({e.target})' for e in entries)}; uninstall all but one."
        )
    return _load_entry(entries[0])


class _AlgorithmTable(Mapping[str, tuple[type, Callable[[Any], Any]]]):
    """``{name: (config class, make_runner)}`` of every algorithm, looked up when read."""

    def _table(self) -> dict[str, tuple[type, Callable[[Any], Any]]]:
        from lamella.agents.config import algorithm_table

        return algorithm_table()

    def __getitem__(self, name: str) -> tuple[type, Callable[[Any], Any]]:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __contains__(self, name: object) -> bool:
        return name in self._table()

    def __repr__(self) -> str:
        return f"ALGORITHMS({sorted(self._table())})"


#: ``{name: (config class, make_runner)}`` of the installed and registered algorithms (read live).
ALGORITHMS: Mapping[str, tuple[type, Callable[[Any], Any]]] = _AlgorithmTable()


def make_runner(config: Any) -> Any:
    """The runner of ``config``, whichever installed algorithm's config it is."""
    table = ALGORITHMS.values()
    for config_class, factory in table:
        if type(config) is config_class:
            return factory(config)
    for config_class, factory in table:
        if isinstance(config, config_class):
            return factory(config)
    raise TypeError(
        f"make_runner: {type(config).__name__} is not the config of an installed algorithm "
        f"({', '.join(c.__name__ for c, _ in ALGORITHMS.values())})."
    )
