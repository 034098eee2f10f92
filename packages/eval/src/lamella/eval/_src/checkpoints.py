"""Evaluation of saved checkpoints on test environments (``lamella eval checkpoints``).

A checkpoint written by ``lamella.agents.driver.run_experiment`` holds the runner state of every
seed of a run. :func:`evaluate_checkpoints` rebuilds the run's runner on each *test* env (the
config's ``env_id`` replaced, env params overridden), moves the trained policy into it, and runs
the runner's greedy ``evaluate`` for ``episodes`` episodes per seed, all seeds in one vmapped
call. Results come back as rows (one per seed and one ``"mean"`` row per checkpoint and test env)
and are written to a CSV file and, optionally, to the run-log format.

This is the only module of lamella-eval that imports lamella-agents (and lamella-envs), and it
does so inside functions, so ``import lamella.eval`` and the aggregation work without them.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import functools
import inspect
import json
import math
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from lamella.eval._src.errors import EvalError, EvalFileNotFoundError, MissingExtraError, one_or_many

__all__ = [
    "CSV_COLUMNS",
    "SUITE_GROUP",
    "SUMMARY_COLUMNS",
    "CheckpointResult",
    "EnvSpec",
    "ResultSummary",
    "evaluate_checkpoints",
    "parse_env_spec",
    "summarize_results",
    "summary_table",
    "test_suites",
    "write_results_csv",
    "write_results_run_log",
    "write_summary",
]

SUITE_GROUP = "lamella.test_suites"
"""The entry-point group of test-suite providers (``lamella eval checkpoints --suite``).

Each entry point names an object with ``suites`` (suite name -> test case names), ``cases``
(every case name a custom comma-separated list may hold), ``resolve(text) -> case names``
(raising ``ValueError`` with the fix for an unknown name), ``supports(config) -> bool`` (whether
it can evaluate checkpoints of that config) and ``evaluate(config, state, cases, keys,
episodes) -> {case: {"episode_return", "episode_length", <success flag>: (seeds, episodes)}}``
on a checkpoint's runner state (seeds leading, one key per seed), with ``metric`` naming the
success flag (0 or 1 per episode). lamella-ued provides ``maze`` (the named-maze suites)."""

CSV_COLUMNS = (
    "checkpoint",
    "algorithm",
    "train_env",
    "test_env",
    "overrides",
    "seed",
    "episodes",
    "mean_return",
    "std_return",
)
"""The columns of the results CSV; ``success_rate`` follows when any evaluation reports one, then
``mean_<key>`` for each run-log key of a metric with named axes (``CheckpointResult.by_axis``)."""


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """A test environment: a registered id and overrides of its params or constructor arguments.

    Attributes:
        env_id: the registered id, e.g. ``CartPole-v1``.
        overrides: ``((name, value), ...)`` in the order given; values are ``bool``, ``int``,
            ``float`` or ``str``.
    """

    env_id: str
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def overrides_text(self) -> str:
        """``length=1.0;gravity=9.0`` (empty without overrides), as in the CSV's ``overrides``."""
        return ";".join(f"{k}={_format_value(v)}" for k, v in self.overrides)

    @property
    def name(self) -> str:
        """``CartPole-v1:length=1.0,gravity=9.0``: the spec's canonical text (the run-log task)."""
        if not self.overrides:
            return self.env_id
        return f"{self.env_id}:" + ",".join(f"{k}={_format_value(v)}" for k, v in self.overrides)


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _parse_literal(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_env_spec(text: str) -> EnvSpec:
    """Parse ``ENV_ID`` or ``ENV_ID:key=value[,key=value...]``.

    Values read as ``true``/``false``, an int, a float, or else a string; a value for an env
    params field is then converted to the type of that field's default (so ``length=1`` is the
    float ``1.0`` for CartPole).

    Raises:
        ValueError: an empty id, an item that is not ``key=value``, or a key given twice.
    """
    env_id, sep, rest = text.partition(":")
    env_id = env_id.strip()
    if not env_id:
        raise EvalError(f"Test env {text!r} has no env id; write ENV_ID or ENV_ID:key=value,key=value.")
    overrides: list[tuple[str, Any]] = []
    if sep:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or not key or not value.strip():
                raise EvalError(
                    f"Test env {text!r}: override {item!r} is not key=value "
                    "(write for example CartPole-v1:length=1.0,gravity=9.0)."
                )
            if key in dict(overrides):
                raise EvalError(f"Test env {text!r}: override {key!r} is given twice.")
            overrides.append((key, _parse_literal(value)))
    return EnvSpec(env_id, tuple(overrides))


@dataclasses.dataclass(frozen=True)
class CheckpointResult:
    """One row of the results: one seed (or the mean over seeds) of a checkpoint on a test env.

    Attributes:
        checkpoint: the checkpoint file.
        algorithm: the runner's name (``ppo``); for a checkpoint of a sweep (``lamella sweep``,
            several configs in one program), the config's name in the run log
            (``ppo[learning_rate=0.001]``).
        train_env: the env id the checkpoint was trained on.
        test_env: the test env id; ``overrides`` its overrides (``length=1.0;gravity=9.0``).
        seed: the run's seed (``"0"``), or ``"mean"`` for the mean over the run's seeds.
        episodes: episodes behind the row (per seed; seeds x episodes for ``"mean"``).
        mean_return: mean undiscounted return of the greedy episodes; for ``"mean"`` the mean of
            the per-seed values.
        std_return: standard deviation (ddof 0) of the episode returns of the seed; for ``"mean"``
            the standard deviation over seeds of the per-seed mean returns.
        success_rate: fraction of successful episodes when the runner's ``evaluate`` reports
            success (goal-conditioned runners), else None; for ``"mean"`` the mean over seeds.
        returns: the episode returns behind the row, float64 ``(episodes,)`` (``(seeds,
            episodes)`` for ``"mean"``).
        lengths: the episode lengths when ``evaluate`` reports them (same shape), else None.
        by_axis: the entries of the metrics with named axes (``Runner.metric_axes``: the marl
            runners' per-agent ``return``), by run-log key (``return_agent_0``), each shaped as
            ``returns``; empty for runners without such metrics.
    """

    checkpoint: str
    algorithm: str
    train_env: str
    test_env: str
    overrides: str
    seed: str
    episodes: int
    mean_return: float
    std_return: float
    success_rate: float | None
    returns: np.ndarray = dataclasses.field(repr=False, compare=False)
    lengths: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    by_axis: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict, repr=False, compare=False)


def require_checkpoints_extra() -> None:
    """Raise :class:`MissingExtraError` (one line naming the extra) unless lamella-envs and
    lamella-agents are installed."""
    missing = [name for name in ("lamella.envs", "lamella.agents") if _find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"Evaluating checkpoints needs {' and '.join(m.replace('.', '-') for m in missing)}; "
            "install them with: pip install 'lamella-eval[checkpoints]'"
        )


def _find_spec(name: str) -> Any:
    import importlib.util

    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:  # the parent namespace is absent
        return None


# Spaces ----------------------------------------------------------------------------------------


def _space_signature(space: Any) -> Any:
    """What a policy depends on: the kind, shape, dtype and number of actions (not Box bounds)."""
    kind = type(space).__name__
    if hasattr(space, "spaces"):
        inner = space.spaces
        if isinstance(inner, Mapping):
            return (kind, tuple((k, _space_signature(v)) for k, v in inner.items()))
        return (kind, tuple(_space_signature(v) for v in inner))
    extra: Any = None
    if hasattr(space, "n"):
        extra = int(space.n)
    elif hasattr(space, "nvec"):
        extra = tuple(np.asarray(space.nvec).tolist())
    return (kind, tuple(space.shape), str(space.dtype), extra)


def _env_spaces(env_id: str, overrides: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """``(env, params, observation_space, action_space)`` of a bare env with overrides."""
    import lamella.envs

    env, params = lamella.envs.make(env_id, autoreset=False, **overrides)
    return env, params, env.observation_space(params), env.action_space(params)


def _typed_overrides(spec: EnvSpec) -> dict[str, Any]:
    """The spec's overrides, params fields converted to the type of their default."""
    import lamella.envs

    try:
        env, _ = lamella.envs.make(spec.env_id, autoreset=False)
    except KeyError as error:
        raise EvalError(f"Test env {spec.name!r}: {error.args[0]}") from None
    defaults = env.default_params
    fields = {f.name for f in dataclasses.fields(defaults)} if dataclasses.is_dataclass(defaults) else set()
    typed: dict[str, Any] = {}
    for key, value in spec.overrides:
        if key in fields:
            default = getattr(defaults, key)
            try:
                if isinstance(default, bool):
                    if not isinstance(value, bool):
                        raise ValueError
                elif isinstance(default, int):
                    if isinstance(value, bool) or not float(value).is_integer():
                        raise ValueError
                    value = int(value)
                elif isinstance(default, float):
                    if isinstance(value, bool | str):
                        raise ValueError
                    value = float(value)
                else:
                    import jax.numpy as jnp

                    value = jnp.asarray(value, dtype=jnp.asarray(default).dtype)
            except (TypeError, ValueError):
                raise EvalError(
                    f"Test env {spec.name!r}: {key}={_format_value(value)} does not fit the params "
                    f"field {key} (default {default!r})."
                ) from None
        typed[key] = value
    return typed


class _Variant:
    """Factories of the env registered under a spec's name: the bare env with its params replaced.

    A runner may make its env with keywords of its own (the marl runners' ``env_kwargs``, such as
    ``sight=2``): they reach the env too, the spec's overrides winning where both name a key."""

    def __init__(self, env_id: str, overrides: Mapping[str, Any]):
        self.env_id = env_id
        self.overrides = dict(overrides)

    def __call__(self, **runner_kwargs: Any) -> Any:
        import lamella.envs

        env, params = lamella.envs.make(self.env_id, autoreset=False, **{**runner_kwargs, **self.overrides})

        class WithParams(lamella.envs.Wrapper):
            @property
            def default_params(self) -> Any:
                return params

        return WithParams(env)


def _register_variant(spec: EnvSpec, overrides: Mapping[str, Any]) -> str:
    """The env id a runner should ``make`` for ``spec`` (registered here for overrides)."""
    if not spec.overrides:
        return spec.env_id
    import lamella.envs

    lamella.envs.register(spec.name, _Variant(spec.env_id, overrides), overwrite=True)
    return spec.name


# Checkpoints -----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Plan:
    """One checkpoint and the test envs it is evaluated on, checked before anything compiles."""

    path: str
    metadata: dict[str, Any]
    specs: list[tuple[EnvSpec, dict[str, Any]]]


def _resolve_checkpoints(path: str) -> list[str]:
    """The checkpoint file ``path`` names: itself, a run directory's newest, or the newest of each
    run directory in the folder (a ``lamella sweep`` folder's programs, ``p0/``, ``p1/``, ..., or
    a folder of runs, as ``lamella eval aggregate`` and ``report`` read them)."""
    from lamella.agents import checkpoint as ckpt

    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise EvalFileNotFoundError(f"{path!r}: no such run directory or checkpoint file.")
    found = ckpt.latest_checkpoint(os.path.join(path, "checkpoints"))
    if found is not None:
        return [found]
    runs = [
        newest
        for root, dirs, _ in sorted(os.walk(path))
        if "checkpoints" in dirs and (newest := ckpt.latest_checkpoint(os.path.join(root, "checkpoints")))
    ]
    if not runs:
        raise EvalFileNotFoundError(
            f"{path!r} holds no checkpoints/checkpoint_*.msgpack, nor does any folder below it; pass a "
            "run directory written by lamella train or lamella sweep (run_experiment) or a checkpoint file."
        )
    return runs


def _check_config(path: str, metadata: Mapping[str, Any]) -> None:
    config = metadata.get("config", {})
    for field in ("env_id", "eval_episodes"):
        if field not in config:
            raise EvalError(
                f"{path}: the {metadata.get('algorithm')!r} config has no {field!r} field, which "
                "evaluation replaces (the test env and the number of episodes)."
            )


def _run_env_kwargs(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords the run's runner passes to ``lamella.envs.make`` for every env it makes: the
    config's ``env_kwargs`` (the marl runners' ``("sight=2",)``), values read as the runner reads
    them (``true``/``false``, an int, a float, else the text)."""
    raw = config.get("env_kwargs") or ()
    if isinstance(raw, Mapping):
        return dict(raw)
    items = [str(item).partition("=") for item in raw]
    return {name.strip(): _parse_literal(text) for name, _, text in items}


def _config_keywords(config: Mapping[str, Any], env_id: str, skip: Collection[str]) -> dict[str, Any]:
    """The run's config fields (scalars, not in ``skip``) that are also keywords of ``env_id``'s
    env: its params fields or its class's constructor arguments (``n_walls`` of lamella-ued's
    configs for AMaze). A runner may pass them to the env it makes; this module cannot know."""
    import lamella.envs

    try:
        env, params = lamella.envs.make(env_id, autoreset=False)
        names = set(inspect.signature(type(getattr(env, "unwrapped", env)).__init__).parameters)
    except (KeyError, TypeError, ValueError):
        return {}
    names |= {f.name for f in dataclasses.fields(params)} if dataclasses.is_dataclass(params) else set()
    names -= {"self", "env_id", "eval_episodes", *skip}
    return {k: v for k, v in config.items() if k in names and isinstance(v, bool | int | float | str)}


def _plan(paths: Sequence[str], specs: Sequence[EnvSpec] | None) -> list[_Plan]:
    from lamella.agents import checkpoint as ckpt
    from lamella.agents.config import algorithm_table

    table = algorithm_table()
    typed = {spec: _typed_overrides(spec) for spec in specs or ()}
    plans = []
    for path in [found for given in paths for found in _resolve_checkpoints(os.fspath(given))]:
        metadata = ckpt.read_metadata(path)
        if metadata.get("algorithm") not in table:
            raise EvalError(
                f"{path} is a {metadata.get('algorithm')!r} checkpoint; known algorithms: "
                f"{', '.join(sorted(table))}. An algorithm from another package is known once that "
                "package has registered it (the lamella command loads every plug-in)."
            )
        _check_config(path, metadata)
        train_id = metadata["config"]["env_id"]
        # The runner makes the training env and every test env with the run's env_kwargs (the
        # test env's overrides winning, as in _Variant): the spaces are compared on those envs.
        run_kwargs = _run_env_kwargs(metadata["config"])
        kwargs_text = ",".join(f"{k}={_format_value(v)}" for k, v in run_kwargs.items())
        trained_on = f"{train_id} with env_kwargs {kwargs_text}" if run_kwargs else train_id
        try:
            _, _, train_obs, train_act = _env_spaces(train_id, run_kwargs)
        except (KeyError, TypeError, ValueError) as error:
            raise EvalError(f"{path}: its training env {trained_on} cannot be made: {error}") from None
        chosen = list(specs) if specs else [EnvSpec(train_id)]
        planned = []
        for spec in chosen:
            overrides = typed[spec] if spec in typed else _typed_overrides(spec)
            try:
                _, _, obs, act = _env_spaces(spec.env_id, {**run_kwargs, **overrides})
            except (TypeError, ValueError) as error:
                # An override that is neither a params field nor an argument, or a value the
                # env's constructor refuses (IteratedPrisonersDilemma-v0:num_inner_steps=-1).
                where = (
                    f" (the run's env_kwargs {kwargs_text} reach every test env, as its runner makes "
                    "them; evaluate on envs that take them)"
                    if run_kwargs
                    else ""
                )
                shared = _config_keywords(metadata["config"], spec.env_id, {*run_kwargs, *overrides})
                if shared:
                    given = ",".join(f"{k}={_format_value(v)}" for k, v in shared.items())
                    with_them = EnvSpec(spec.env_id, (*spec.overrides, *shared.items())).name
                    where += (
                        f" The run's config sets {given.replace(',', ', ')} (keywords of this env, "
                        "which its runner may pass to the env it makes, but which this check does "
                        f"not): if it does, give them in the test env, {with_them!r}."
                    )
                raise EvalError(f"Test env {spec.name!r}: {error}{where}") from None
            if _space_signature(obs) != _space_signature(train_obs) or _space_signature(
                act
            ) != _space_signature(train_act):
                raise EvalError(
                    f"Test env {spec.name!r} does not fit the checkpoint {path}: it was trained on "
                    f"{trained_on} (observation space {train_obs!r}, action space {train_act!r}), and "
                    f"{spec.name} has observation space {obs!r} and action space {act!r}. A policy "
                    "can be evaluated only where the spaces have the same kind, shape, dtype and "
                    "number of actions."
                )
            # The spec as evaluated (values converted to the params' types) names the results.
            planned.append((EnvSpec(spec.env_id, tuple(overrides.items())), overrides))
        plans.append(_Plan(path, metadata, planned))
    return plans


Variants = tuple[tuple[tuple[str, Any], ...], ...]


@dataclasses.dataclass(frozen=True)
class _Members:
    """A checkpoint's population as the driver laid it out: every variant of a sweep (one
    without) trained the run's seeds, the variants one after the other."""

    seeds: list[int]
    labels: list[str]  # each variant's name in the run log (the algorithm's, without a sweep)
    variants: Variants | None  # ((field, value), ...) per variant, hashable; None without a sweep

    @property
    def size(self) -> int:
        return len(self.seeds) * len(self.labels)

    def keys(self, base: Any = None) -> Any:
        """One key per member: its seed's (folded into ``base`` if given), the same for every
        variant, as the driver gives them (common random numbers across a sweep)."""
        import jax
        import jax.numpy as jnp

        seeds = jnp.asarray(self.seeds * len(self.labels), dtype=jnp.uint32)
        if base is None:
            return jax.vmap(jax.random.key)(seeds)
        return jax.vmap(lambda s: jax.random.fold_in(base, s))(seeds)

    def config(self, config: Any, index: int) -> Any:
        """Variant ``index``'s config."""
        return config if self.variants is None else dataclasses.replace(config, **dict(self.variants[index]))


def _members(metadata: Mapping[str, Any]) -> _Members:
    from lamella.agents.driver import variant_name

    seeds = [int(s) for s in metadata["seeds"]]
    algorithm = str(metadata["algorithm"])
    variants, labels = metadata.get("variants"), metadata.get("labels")
    if not variants:  # a sweep's program of one config is named by its label
        return _Members(seeds, [str(labels[0]) if labels else algorithm], None)
    labels = labels or [variant_name(algorithm, v) for v in variants]
    return _Members(seeds, [str(label) for label in labels], tuple(tuple(v.items()) for v in variants))


@functools.lru_cache(maxsize=16)
def _compiled(
    make_runner: Callable[[Any], Any], config: Any, num_seeds: int, variants: Variants | None = None
) -> tuple[Any, Any, Any]:
    """``(runner, init, evaluate)`` over ``num_seeds`` seeds (of each of a sweep's ``variants``)
    as the training driver compiles them, built once per config and process."""
    from lamella.agents.driver import compile_runner

    if variants is None:
        compiled = compile_runner(make_runner(config), num_seeds)
    else:
        compiled = compile_runner(
            lambda values: make_runner(dataclasses.replace(config, **values)),
            num_seeds,
            variants=[dict(v) for v in variants],
        )
    return compiled.runner, compiled.init, compiled.evaluate


def _by_axis(metrics: Mapping[str, Any], declared: Any, size: int) -> dict[str, np.ndarray]:
    """``{run-log key: (size, episodes)}`` of each evaluation metric with named axes, one key per
    index as the driver logs it (``return_agent_1``); ``declared`` is ``Runner.metric_axes``."""
    from lamella.agents.driver import metric_key

    out: dict[str, np.ndarray] = {}
    for name, axes in dict(declared or {}).items():
        if name not in metrics or name in ("episode_return", "episode_length") or not axes:
            continue
        value = np.asarray(metrics[name], np.float64)
        for index in np.ndindex(*value.shape[value.ndim - len(axes) :]):
            out[metric_key(name, axes, index)] = value[(Ellipsis, *index)].reshape(size, -1)
    return out


def _seed_rows(
    common: Mapping[str, Any],
    seeds: Sequence[int],
    returns: np.ndarray,
    lengths: np.ndarray | None,
    success: np.ndarray | None,
    by_axis: Mapping[str, np.ndarray] | None = None,
) -> list[CheckpointResult]:
    """One row per seed (``returns`` and each of ``by_axis``: ``(seeds, episodes)``; ``success``:
    ``(seeds,)``), then their mean."""
    by_axis = by_axis or {}
    per_seed = returns.mean(-1)
    rows = [
        CheckpointResult(
            **common,
            seed=str(s),
            episodes=returns.shape[1],
            mean_return=float(per_seed[i]),
            std_return=float(returns[i].std()),
            success_rate=None if success is None else float(success[i]),
            returns=returns[i],
            lengths=None if lengths is None else lengths[i],
            by_axis={key: value[i] for key, value in by_axis.items()},
        )
        for i, s in enumerate(seeds)
    ]
    rows.append(
        CheckpointResult(
            **common,
            seed="mean",
            episodes=returns.size,
            mean_return=float(per_seed.mean()),
            std_return=float(per_seed.std()),
            success_rate=None if success is None else float(success.mean()),
            returns=returns,
            lengths=lengths,
            by_axis=dict(by_axis),
        )
    )
    return rows


def _replace(state: Any, **fields: Any) -> Any:
    if hasattr(state, "_replace"):  # NamedTuple
        return state._replace(**fields)
    return dataclasses.replace(state, **fields)


def _state_for(path: str, loaded: Any, init: Any, keys: Any) -> Any:
    """The trained state in the structure of the test runner.

    Same structure (the same env, params overridden): the checkpoint's state as it is.
    Otherwise (another env with the same spaces, whose env state differs): the test runner's
    fresh state with the checkpoint's ``train_state`` (the Agent protocol's learned part).
    """
    import jax

    target = jax.eval_shape(init, keys)

    def layout(tree: Any) -> Any:
        leaves, treedef = jax.tree.flatten(tree)
        return treedef, [(tuple(x.shape), str(x.dtype)) for x in leaves]

    if layout(target) == layout(loaded):
        return loaded
    if not (hasattr(target, "train_state") and hasattr(loaded, "train_state")):
        raise EvalError(
            f"{path}: the test env's runner state differs from the checkpoint's and the runner "
            "state has no train_state field to carry the policy over; evaluate on an env with the "
            "same state structure (the training env with params overrides)."
        )
    if layout(target.train_state) != layout(loaded.train_state):
        raise EvalError(
            f"{path}: the policy of the checkpoint (its train_state) does not fit the runner built "
            "for the test env; the networks differ although the spaces match."
        )
    return _replace(init(keys), train_state=loaded.train_state)


def _test_config(train_config: Any, env_id: str, overrides: Mapping[str, Any], episodes: int) -> Any:
    """The training config on the test env ``env_id``: an override that names a config field
    too (``num_inner_steps`` of the marl shaping runners, ``height`` of lamella-ued's, which
    the runner applies to the env it makes) replaces that field, else the runner would make the
    env with its training value again and the override would be ignored."""
    fields = {f.name: getattr(train_config, f.name) for f in dataclasses.fields(train_config)}
    shared = {}
    for name, value in overrides.items():
        if name in fields and name not in ("env_id", "eval_episodes"):
            old = fields[name]
            # The override's parsed value in the config field's own type (an int field stays int).
            kind = type(old) if isinstance(old, (bool, int, float)) and not isinstance(value, bool) else None
            shared[name] = kind(value) if kind is not None and isinstance(value, (int, float)) else value
    return dataclasses.replace(train_config, env_id=env_id, eval_episodes=episodes, **shared)


def _steps_per_iteration(make_runner: Callable[[Any], Any], config: Any) -> int:
    """The steps of one iteration of ``config``'s runner, built with the budget doubled until it
    is one iteration at least (up to 2**40 times); a refusal no budget lifts is the first one."""
    try:
        return int(make_runner(config).steps_per_iteration)
    except ValueError as refusal:  # ConfigError among them
        budget = max(int(config.total_timesteps), 1)
        for _ in range(40):
            budget *= 2
            try:
                return int(
                    make_runner(dataclasses.replace(config, total_timesteps=budget)).steps_per_iteration
                )
            except (ValueError, TypeError, OverflowError):
                continue
        raise refusal from None


def _evaluation_budget(make_runner: Callable[[Any], Any], config: Any, iterations: int) -> Any:
    """``config`` with ``total_timesteps`` giving the test runner the run's ``iterations``.

    An override of a config field that sizes an iteration (``num_inner_steps`` of lola, meta_es
    and the shaping runners) changes the steps per iteration, and the run's budget can then be
    under one iteration, which the runner refuses although evaluation trains nothing. The budget
    is the one field evaluation does not use: it is set to ``iterations`` of the test runner's
    steps (found by raising it until the runner builds). A refusal that no budget lifts is
    raised as the config raised it."""
    if not hasattr(config, "total_timesteps"):
        return config
    steps = _steps_per_iteration(make_runner, config)
    if int(config.total_timesteps) // steps == iterations:
        return config
    return dataclasses.replace(config, total_timesteps=iterations * steps)


def _evaluate_plan(plan: _Plan, episodes: int, seed: int) -> list[CheckpointResult]:
    import jax

    from lamella.agents import checkpoint as ckpt
    from lamella.agents.config import algorithm_table, config_from_dict

    metadata = plan.metadata
    algorithm = metadata["algorithm"]
    config_cls, make_runner = algorithm_table()[algorithm]
    train_config = config_from_dict(config_cls, metadata["config"])
    train_id = train_config.env_id
    members = _members(metadata)
    seeds, size = members.seeds, members.size
    init_keys = members.keys()
    train_runner, train_init, _ = _compiled(make_runner, train_config, len(seeds), members.variants)
    loaded, _ = ckpt.load_checkpoint(plan.path, jax.eval_shape(train_init, init_keys))
    # One key per seed of the run, the same for every test env and checkpoint (common random
    # numbers make the comparison between test envs and checkpoints less noisy).
    eval_keys = members.keys(jax.random.key(seed))

    rows: list[CheckpointResult] = []
    for spec, overrides in plan.specs:
        config = _test_config(train_config, _register_variant(spec, overrides), overrides, episodes)
        try:
            # An override of a config field (or the test env's own size) may outgrow the budget.
            config = _evaluation_budget(make_runner, config, int(train_runner.num_iterations))
            runner, init, evaluate = _compiled(make_runner, config, len(seeds), members.variants)
        except ValueError as error:  # ConfigError among them
            shared = [f"{k}={getattr(config, k)!r}" for k in overrides if hasattr(train_config, k)]
            if not shared:
                raise
            raise EvalError(
                f"{plan.path}: --envs {spec.name} sets {', '.join(shared)}, which the run's config also "
                f"holds (its runner makes the env with it), and the run's config with that value is "
                f"refused: {error}"
            ) from None
        state = _state_for(plan.path, loaded, init, init_keys)
        metrics = jax.device_get(evaluate(state, eval_keys))
        by_axis = _by_axis(metrics, getattr(runner, "metric_axes", None), size)
        if "episode_return" not in metrics:
            raise KeyError(f"{algorithm}'s evaluate returned {sorted(metrics)}, without 'episode_return'.")
        returns = np.asarray(metrics["episode_return"], np.float64).reshape(size, -1)
        lengths = metrics.get("episode_length")
        lengths = None if lengths is None else np.asarray(lengths, np.float64).reshape(size, -1)
        flag = "success" if "success" in metrics else "success_rate" if "success_rate" in metrics else None
        success = None if flag is None else np.asarray(metrics[flag], np.float64).reshape(size, -1).mean(-1)
        for index, label in enumerate(members.labels):
            block = slice(index * len(seeds), (index + 1) * len(seeds))
            common = {
                "checkpoint": plan.path,
                "algorithm": label,
                "train_env": train_id,
                "test_env": spec.env_id,
                "overrides": spec.overrides_text,
            }
            rows += _seed_rows(
                common,
                seeds,
                returns[block],
                None if lengths is None else lengths[block],
                None if success is None else success[block],
                {key: value[block] for key, value in by_axis.items()},
            )
    return rows


def evaluate_checkpoints(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    envs: str | EnvSpec | Sequence[str | EnvSpec] | None = None,
    *,
    suite: str | None = None,
    episodes: int = 100,
    seed: int = 0,
) -> list[CheckpointResult]:
    """Evaluate checkpoints on test envs (greedy episodes) or on a test suite, seeds vmapped.

    Args:
        paths: run directories (their newest checkpoint) or checkpoint files (one, or a list).
        envs: test envs (one, or a list) as :class:`EnvSpec` or text (``CartPole-v1``,
            ``CartPole-v1:length=1.0,gravity=9.0``, see :func:`parse_env_spec`); None evaluates
            each checkpoint on the env it was trained on.
        suite: instead of ``envs``, a test suite of a provider of the ``lamella.test_suites``
            entry points (:data:`SUITE_GROUP`): a suite name (``minimax-test``, lamella-ued's
            named mazes) or a comma-separated list of its cases (``SixteenRooms,PerfectMazeXL``).
            Each case is a row's ``test_env``; ``success_rate`` is the fraction of solved
            episodes, ``lengths`` the episode lengths. The provider plays the episodes its own
            way (the UED runners: sampled actions unless the config says ``eval_greedy``).
        episodes: greedy episodes per seed and test env (per seed and case for a suite).
        seed: the evaluation seed (episode ``k`` of the run's seed ``s`` gets the same key for
            every checkpoint and test env, so results are deterministic for a given seed).

    Returns:
        For each checkpoint and test env, one :class:`CheckpointResult` per seed of the run,
        then one with ``seed="mean"``.

    Raises:
        ValueError: a malformed spec, an unknown env id or override, a test env whose
            observation or action space differs from the checkpoint's (the message names both),
            or a checkpoint of an unknown algorithm; all checked before anything compiles.
        FileNotFoundError: a path that is neither a checkpoint nor a run directory with one.
    """
    require_checkpoints_extra()
    paths = one_or_many(paths, "evaluate_checkpoints(paths=...)")
    if isinstance(envs, EnvSpec):
        envs = [envs]
    envs = None if envs is None else one_or_many(envs, "evaluate_checkpoints(envs=...)")
    if suite is not None and envs:
        raise EvalError("Give test envs (--envs) or a test suite (--suite), not both.")
    if isinstance(episodes, bool) or int(episodes) != episodes or episodes < 1:
        raise EvalError(f"episodes must be a whole number >= 1, got {episodes!r}.")
    if not paths:
        raise EvalError("evaluate_checkpoints: give at least one run directory or checkpoint file.")
    if suite is not None:
        provider, cases = _resolve_suite(suite)
        suite_plans = _plan_suite([os.fspath(p) for p in paths], provider, suite)
        rows: list[CheckpointResult] = []
        for plan in suite_plans:
            rows += _evaluate_suite_plan(plan, provider, cases, int(episodes), int(seed))
        return rows
    specs = None if envs is None else [e if isinstance(e, EnvSpec) else parse_env_spec(e) for e in envs]
    plans = _plan([os.fspath(p) for p in paths], specs or None)
    rows = []
    for plan in plans:
        rows += _evaluate_plan(plan, int(episodes), int(seed))
    return rows


# Test suites ----------------------------------------------------------------------------------


def test_suites() -> dict[str, Any]:
    """The test-suite providers installed: entry-point name -> provider (:data:`SUITE_GROUP`)."""
    from importlib.metadata import entry_points

    providers = {}
    for entry in sorted(entry_points(group=SUITE_GROUP), key=lambda e: e.name):
        providers[entry.name] = entry.load()
    return providers


def _resolve_suite(text: str) -> tuple[Any, tuple[str, ...]]:
    """``(provider, case names)`` of a suite name or a comma-separated list of cases."""
    if not isinstance(text, str) or not text.strip():
        raise EvalError(f"--suite must name a test suite or a comma-separated list of cases, got {text!r}.")
    providers = test_suites()
    if not providers:
        raise EvalError(
            f"No test suites are installed (entry point group {SUITE_GROUP}); install the package "
            "that provides them, e.g. pip install lamella-ued for the named-maze suites."
        )
    problems = []
    for name, provider in providers.items():
        first = text.split(",")[0].strip()
        if text.strip() in provider.suites or first in provider.cases:
            try:
                return provider, tuple(provider.resolve(text))
            except ValueError as error:
                raise EvalError(f"--suite {text!r}: {error}") from None
        problems.append(f"{name}: suites {', '.join(provider.suites)}; cases {', '.join(provider.cases)}")
    # No provider knows the first name: let each say why (a close match, a case it refuses),
    # the provider whose names are closest to it first, so that its "did you mean" is the answer.
    first = text.split(",")[0].strip()

    def closeness(provider: Any) -> float:
        names = [*provider.suites, *provider.cases]
        return max((difflib.SequenceMatcher(None, first, n).ratio() for n in names), default=0.0)

    for provider in sorted(providers.values(), key=closeness, reverse=True):
        try:
            provider.resolve(text)
        except ValueError as error:
            raise EvalError(f"--suite {text!r}: {error}") from None
    raise EvalError(f"--suite {text!r}: unknown suite or case. Known: " + "; ".join(problems) + ".")


def _plan_suite(paths: Sequence[str], provider: Any, suite: str) -> list[_Plan]:
    from lamella.agents import checkpoint as ckpt
    from lamella.agents.config import algorithm_table, config_from_dict

    table = algorithm_table()
    plans = []
    for path in [found for given in paths for found in _resolve_checkpoints(os.fspath(given))]:
        metadata = ckpt.read_metadata(path)
        algorithm = metadata.get("algorithm")
        if algorithm not in table:
            raise EvalError(
                f"{path} is a {algorithm!r} checkpoint; known algorithms: {', '.join(sorted(table))}. "
                "An algorithm from another package is known once that package has registered it "
                "(the lamella command loads every plug-in)."
            )
        config = config_from_dict(table[algorithm][0], metadata.get("config", {}))
        if not provider.supports(config):
            raise EvalError(
                f"--suite {suite!r} cannot evaluate {path}: it is a {algorithm!r} checkpoint trained on "
                f"{getattr(config, 'env_id', '?')}, and the suite evaluates other students (the named "
                "mazes: DR, PLR, ACCEL and PAIRED runs on AMaze; the foraging suites: runs on Level-Based "
                "Foraging). Evaluate it on test envs with --envs."
            )
        plans.append(_Plan(path, metadata, []))
    return plans


def _evaluate_suite_plan(
    plan: _Plan, provider: Any, cases: Sequence[str], episodes: int, seed: int
) -> list[CheckpointResult]:
    import jax

    from lamella.agents import checkpoint as ckpt
    from lamella.agents.config import algorithm_table, config_from_dict

    metadata = plan.metadata
    algorithm = metadata["algorithm"]
    config_cls, make_runner = algorithm_table()[algorithm]
    config = config_from_dict(config_cls, metadata["config"])
    members = _members(metadata)
    seeds = members.seeds
    _, init, _ = _compiled(make_runner, config, len(seeds), members.variants)
    state, _ = ckpt.load_checkpoint(plan.path, jax.eval_shape(init, members.keys()))
    eval_keys = _Members(seeds, [algorithm], None).keys(jax.random.key(seed))
    rows: list[CheckpointResult] = []
    # The provider evaluates one config: each variant of a sweep with its own.
    for index, label in enumerate(members.labels):
        block = jax.tree.map(lambda x: x[index * len(seeds) : (index + 1) * len(seeds)], state)
        results = provider.evaluate(members.config(config, index), block, list(cases), eval_keys, episodes)
        for case in cases:
            metrics = results[case]
            common = {
                "checkpoint": plan.path,
                "algorithm": label,
                "train_env": str(getattr(config, "env_id", "")),
                "test_env": case,
                "overrides": "",
            }
            rows += _seed_rows(
                common,
                seeds,
                np.asarray(metrics["episode_return"], np.float64).reshape(len(seeds), -1),
                np.asarray(metrics["episode_length"], np.float64).reshape(len(seeds), -1),
                np.asarray(metrics[provider.metric], np.float64).reshape(len(seeds), -1).mean(-1),
            )
    return rows


# Output ----------------------------------------------------------------------------------------


def write_results_csv(results: Sequence[CheckpointResult], path: str | os.PathLike[str]) -> str:
    """Write the results table (columns :data:`CSV_COLUMNS`, plus ``success_rate`` when any row
    has one, then ``mean_<key>`` for each key of the rows' ``by_axis``, such as the marl runners'
    ``mean_return_agent_<i>``; an empty cell for rows without). Floats are written with ``repr``;
    atomic."""
    path = os.fspath(path)
    with_success = any(r.success_rate is not None for r in results)
    axis_keys = list(dict.fromkeys(key for r in results for key in r.by_axis))  # first-seen order
    header = (
        list(CSV_COLUMNS) + (["success_rate"] if with_success else []) + [f"mean_{key}" for key in axis_keys]
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for r in results:
            row = [
                r.checkpoint,
                r.algorithm,
                r.train_env,
                r.test_env,
                r.overrides,
                r.seed,
                r.episodes,
                repr(r.mean_return),
                repr(r.std_return),
            ]
            if with_success:
                row.append("" if r.success_rate is None else repr(r.success_rate))
            # Per seed the mean over its episodes; for "mean" ((seeds, episodes)) the mean of the
            # per-seed means, as mean_return.
            row += [repr(float(np.mean(r.by_axis[key]))) if key in r.by_axis else "" for key in axis_keys]
            writer.writerow(row)
    os.replace(tmp, path)
    return path


def _labels(results: Sequence[CheckpointResult]) -> dict[tuple[str, str], str]:
    """The run-log ``algorithm`` of each ``(checkpoint, algorithm)``: the algorithm name (a
    sweep's config name), made unique with the run directory and checkpoint file when two
    checkpoints share it."""
    by_algorithm: dict[str, list[str]] = {}
    for r in results:
        names = by_algorithm.setdefault(r.algorithm, [])
        if r.checkpoint not in names:
            names.append(r.checkpoint)
    labels = {}
    for algorithm, checkpoints in by_algorithm.items():
        for checkpoint in checkpoints:
            if len(checkpoints) == 1:
                labels[checkpoint, algorithm] = algorithm
            else:
                run_dir = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(checkpoint))))
                stem = os.path.splitext(os.path.basename(checkpoint))[0]
                labels[checkpoint, algorithm] = f"{algorithm}@{run_dir}/{stem}"
    return labels


def _check_run_log_dir(out_dir: str | os.PathLike[str]) -> None:
    """Refuse a training run directory (``config.json`` or ``checkpoints/`` in it) as the
    checkpoints' run-log directory: its ``metrics.json`` is the training run log."""
    out_dir = os.fspath(out_dir)
    held = [name for name in ("config.json", "checkpoints") if os.path.exists(os.path.join(out_dir, name))]
    if held:
        raise EvalError(
            f"--run-log {out_dir!r} is a training run directory (it holds {' and '.join(held)}); its "
            "metrics.json, the training run log, would be replaced: pass another directory, such as "
            "eval/test-suite."
        )


def write_results_run_log(results: Sequence[CheckpointResult], out_dir: str | os.PathLike[str]) -> list[str]:
    """Write the per-seed results as a run log (``metrics.json`` and ``metrics.csv`` in ``out_dir``).

    ``environment`` is the test env's family, ``task`` the test env spec
    (``CartPole-v1:length=1.0``), ``algorithm`` the checkpoint's algorithm (with its run
    directory and file when two checkpoints share an algorithm), ``run`` ``seed_<n>``, and each
    run holds only ``absolute_metrics``: ``mean_episode_return`` (one value per episode),
    ``episode_length`` and ``success_rate`` when reported, and the per-index keys of metrics
    with named axes (the marl runners' ``return_agent_<i>``). ``lamella eval aggregate out_dir``
    then aggregates over test envs as tasks.
    """
    require_checkpoints_extra()
    from lamella.agents.runlog import env_family
    from lamella.eval._src.runlog import runs_from_dict, write_csv

    out_dir = os.fspath(out_dir)
    _check_run_log_dir(out_dir)
    labels = _labels(results)
    data: dict[str, Any] = {}
    for r in results:
        if r.seed == "mean":
            continue
        task = r.test_env + (":" + r.overrides.replace(";", ",") if r.overrides else "")
        metrics: dict[str, list[float]] = {"mean_episode_return": r.returns.tolist()}
        if r.lengths is not None:
            metrics["episode_length"] = r.lengths.tolist()
        if r.success_rate is not None:
            metrics["success_rate"] = [r.success_rate]
        metrics.update({key: np.asarray(value).tolist() for key, value in r.by_axis.items()})
        bad = [k for k, v in metrics.items() if not all(math.isfinite(x) for x in v)]
        if bad:
            raise EvalError(f"{r.checkpoint} on {task}, seed {r.seed}: non-finite {', '.join(bad)}.")
        runs = data.setdefault(env_family(r.test_env), {}).setdefault(task, {})
        runs.setdefault(labels[r.checkpoint, r.algorithm], {})[f"seed_{r.seed}"] = {
            "absolute_metrics": metrics
        }
    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, "metrics.json")
    tmp = f"{json_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1)
        file.write("\n")
    os.replace(tmp, json_path)
    csv_path = os.path.join(out_dir, "metrics.csv")
    write_csv(runs_from_dict(data, json_path), csv_path)
    return [json_path, csv_path]


# Summaries across seeds ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ResultSummary:
    """One checkpoint on one test env or suite case, over the run's seeds, with bootstrap CIs.

    Each statistic is the mean over seeds of the per-seed value (a seed's mean return, its
    fraction of successful episodes, its mean episode length) with a percentile bootstrap
    confidence interval that resamples the seeds (lamella-eval's stratified bootstrap with one
    task; with one seed the interval is the point).

    Attributes:
        checkpoint, algorithm, train_env, test_env, overrides: as in :class:`CheckpointResult`.
        seeds: the number of seeds; ``episodes``: episodes per seed.
        mean_return, return_low, return_high: the mean return and its interval.
        success_rate, success_low, success_high: the success (solve) rate and its interval, or
            None when the evaluation reports no success.
        mean_length, length_low, length_high: the mean episode length and its interval, or None
            when the evaluation reports no lengths.
        confidence: the intervals' coverage; ``reps`` the bootstrap replicates.
    """

    checkpoint: str
    algorithm: str
    train_env: str
    test_env: str
    overrides: str
    seeds: int
    episodes: int
    mean_return: float
    return_low: float
    return_high: float
    success_rate: float | None
    success_low: float | None
    success_high: float | None
    mean_length: float | None
    length_low: float | None
    length_high: float | None
    confidence: float
    reps: int


SUMMARY_COLUMNS = tuple(f.name for f in dataclasses.fields(ResultSummary))


def summarize_results(
    results: Sequence[CheckpointResult], *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> list[ResultSummary]:
    """One :class:`ResultSummary` per checkpoint and test env (or suite case) of ``results``
    (what :func:`evaluate_checkpoints` returns), in their order."""
    from lamella.eval._src.bootstrap import _check, interval_estimates

    _check(reps, confidence)
    groups: dict[tuple[str, str, str, str], list[CheckpointResult]] = {}
    for r in results:
        if r.seed != "mean":
            groups.setdefault((r.checkpoint, r.algorithm, r.test_env, r.overrides), []).append(r)
    if not groups:
        raise EvalError("summarize_results: no per-seed results to summarise.")
    scores: dict[str, np.ndarray] = {}
    for index, rows in enumerate(groups.values()):
        scores[f"{index}/return"] = np.asarray([r.mean_return for r in rows])
        if all(r.success_rate is not None for r in rows):
            scores[f"{index}/success"] = np.asarray([r.success_rate for r in rows], np.float64)
        if all(r.lengths is not None for r in rows):
            scores[f"{index}/length"] = np.asarray([np.mean(r.lengths) for r in rows])  # type: ignore[arg-type]
    key = np.random.SeedSequence(seed).generate_state(1)[0].item()
    estimates = interval_estimates(
        {name: values[:, None] for name, values in scores.items()},
        ("mean",),
        reps=reps,
        confidence=confidence,
        key=key,
        backend="numpy",
    )

    def stat(name: str) -> tuple[float | None, float | None, float | None]:
        if name not in estimates.point:
            return None, None, None
        return (
            float(estimates.point[name][0]),
            float(estimates.lower[name][0]),
            float(estimates.upper[name][0]),
        )

    summaries = []
    for index, rows in enumerate(groups.values()):
        first = rows[0]
        ret, success, length = stat(f"{index}/return"), stat(f"{index}/success"), stat(f"{index}/length")
        summaries.append(
            ResultSummary(
                checkpoint=first.checkpoint,
                algorithm=first.algorithm,
                train_env=first.train_env,
                test_env=first.test_env,
                overrides=first.overrides,
                seeds=len(rows),
                episodes=first.episodes,
                mean_return=ret[0],  # type: ignore[arg-type]
                return_low=ret[1],  # type: ignore[arg-type]
                return_high=ret[2],  # type: ignore[arg-type]
                success_rate=success[0],
                success_low=success[1],
                success_high=success[2],
                mean_length=length[0],
                length_low=length[1],
                length_high=length[2],
                confidence=confidence,
                reps=reps,
            )
        )
    return summaries


def summary_table(summaries: Sequence[ResultSummary], digits: int = 3) -> tuple[list[str], list[list[str]]]:
    """Rows of checkpoints x test envs, cells ``point [low, high]`` (a table for
    :func:`lamella.eval.to_markdown` / ``to_csv`` / ``to_latex``)."""
    labels = _labels(summaries)  # type: ignore[arg-type]
    with_success = any(s.success_rate is not None for s in summaries)
    with_length = any(s.mean_length is not None for s in summaries)
    header = ["checkpoint", "test env", "seeds"]
    header += ["success rate"] if with_success else []
    header += ["return"]
    header += ["episode length"] if with_length else []

    def cell(point: float | None, low: float | None, high: float | None) -> str:
        if point is None:
            return ""
        return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    rows = []
    for s in summaries:
        env = s.test_env + (":" + s.overrides.replace(";", ",") if s.overrides else "")
        row = [labels[s.checkpoint, s.algorithm], env, str(s.seeds)]
        row += [cell(s.success_rate, s.success_low, s.success_high)] if with_success else []
        row += [cell(s.mean_return, s.return_low, s.return_high)]
        row += [cell(s.mean_length, s.length_low, s.length_high)] if with_length else []
        rows.append(row)
    return header, rows


def write_summary(
    summaries: Sequence[ResultSummary],
    prefix: str | os.PathLike[str],
    results: Sequence[CheckpointResult] = (),
) -> list[str]:
    """Write ``<prefix>.csv`` (columns ``SUMMARY_COLUMNS``, empty cells for None) and
    ``<prefix>.json`` (``{"summary": [...], "per_seed": [...]}``, the per-seed rows of
    ``results`` with their episode returns and lengths); atomic. Returns both paths."""
    prefix = os.fspath(prefix)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    csv_path, json_path = f"{prefix}.csv", f"{prefix}.json"
    tmp = f"{csv_path}.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(SUMMARY_COLUMNS)
        for s in summaries:
            values = [getattr(s, name) for name in SUMMARY_COLUMNS]
            writer.writerow(["" if v is None else repr(v) if isinstance(v, float) else v for v in values])
    os.replace(tmp, csv_path)
    per_seed = [
        {
            "checkpoint": r.checkpoint,
            "algorithm": r.algorithm,
            "train_env": r.train_env,
            "test_env": r.test_env,
            "overrides": r.overrides,
            "seed": int(r.seed),
            "mean_return": r.mean_return,
            "success_rate": r.success_rate,
            "episode_returns": np.asarray(r.returns).tolist(),
            "episode_lengths": None if r.lengths is None else np.asarray(r.lengths).tolist(),
        }
        for r in results
        if r.seed != "mean"
    ]
    data = {"summary": [dataclasses.asdict(s) for s in summaries], "per_seed": per_seed}
    tmp = f"{json_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1, allow_nan=False)
        file.write("\n")
    os.replace(tmp, json_path)
    return [csv_path, json_path]
