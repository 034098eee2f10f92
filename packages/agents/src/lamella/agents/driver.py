"""The host-side training driver shared by every runner.

:func:`run` trains any :class:`~lamella.agents.runner.Runner` for a *population*: several seeds,
optionally times several config variants (a sweep), all one ``vmap`` axis of one compiled
program. :func:`run_experiment` is the convenience over it for an algorithm config
(``run_experiment(PPOConfig(...), seeds=4)``). Training runs in *chunks* of iterations, each
chunk one call of a compiled ``vmap`` over the population of a loop of ``runner.step`` (a
``lax.while_loop`` whose trip count is an argument, so every chunk length, the shorter last
one included, runs the same compiled program). Between chunks, on the host, the driver

* evaluates the greedy policy of every member (``vmap(runner.evaluate)``),
* appends to the run log (``metrics.json`` in the marl-eval layout, ``metrics.csv``,
  optionally TensorBoard), rewritten atomically; metrics with named axes
  (``Runner.metric_axes``: agent, level, ...) get one key per index,
* writes a checkpoint (msgpack, no code on load, atomic, the newest few kept),
* updates the progress display,

and at the end it plots ``learning_curve.png``. The compiled functions are reused across
calls with an equal config in one process.

The steps of :func:`run`, each its own function: check the arguments; resolve where the run
starts (:func:`_resolve_start`: fresh, a checkpoint, or a run that never checkpointed) and
check it against what is stored (:func:`_check_stored`); compile (:func:`compile_runner`,
:func:`compile_ahead`); then :class:`_Session` runs the chunk loop, logging and
checkpointing, and finishes the run.

Resume: ``run_experiment(config, out_dir=..., resume=True)`` restores the newest checkpoint
into the structure of ``runner.init``, cuts the run log back to the evaluations that
checkpoint had seen, and continues with the same chunks and evaluation keys, so the final
parameters and the run log are bit-identical to a run that never stopped. A config that
differs from the checkpoint's is refused, naming the differing keys. A run killed before its
first checkpoint resumes from the beginning (its ``config.json`` says what it was); a run
that had finished is reported as such and nothing is compiled. Resuming removes the
temporary files of atomic writes a killed run left behind and prunes checkpoints to
``keep_checkpoints``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import json
import math
import operator
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TextIO

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from lamella.agents import checkpoint as ckpt
from lamella.agents import config as config_lib
from lamella.agents import devices as devices_lib
from lamella.agents import hosts
from lamella.agents._files import atomic_write_text, remove_temp_files
from lamella.agents.config import ConfigError, config_defaults, config_diff, config_to_dict
from lamella.agents.progress import Progress
from lamella.agents.runlog import RunLog, env_family, require_tensorboard
from lamella.agents.runner import render_problem

__all__ = [
    "CompiledRunner",
    "LoadedRun",
    "ProgramShapes",
    "RunResult",
    "RunSpec",
    "compile_ahead",
    "compile_options",
    "compile_runner",
    "default_chunk_iterations",
    "default_out_dir",
    "find_algorithm",
    "load_run",
    "metric_key",
    "run",
    "run_directory",
    "run_experiment",
    "run_log_task",
    "variant_name",
]

# Evaluation keys are fold_in(key(seed), _EVAL_STREAM) folded with the evaluation index, so they
# never coincide with the keys a runner derives from key(seed) by splitting, and a resumed run
# evaluates with exactly the keys of an uninterrupted one.
_EVAL_STREAM = 0x6576616C  # "eval"
_GIF_STREAM = 0x67696600  # "gif"

# What makes a swept field unusable in one program: the runner uses it as a Python value.
_STATIC_USE_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerArrayConversionError,
)

Variant = Mapping[str, int | float]


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What a run is called in its run log and checks on resume (everything but the runner).

    Attributes:
        algorithm: the ``algorithm`` level of the run log (``ppo``, ``my-a2c``).
        task: the ``task`` level (usually the env id; any name).
        environment: the ``environment`` level; default ``env_family(task)``
            (``classic_control`` for ``CartPole-v1``, ``custom`` for an unknown name).
        config: JSON-compatible settings stored in ``config.json`` and the checkpoints; a
            resume with different settings is refused, naming the keys. ``None`` stores
            nothing (then nothing is checked).
        score: the evaluation metric shown in the progress display, plotted and returned as
            ``RunResult.final_return`` (mean over its values): a run-log key, so for a metric
            with named axes one of its entries (``score_agent_0``). Another name is a
            ``ConfigError`` before the run, except the default ``episode_return``: absent from
            a runner's evaluation, the display shows no return and ``final_return`` is NaN.
        config_defaults: what a stored config that lacks a key of ``config`` ran with (the
            config class's defaults, :func:`lamella.agents.config.config_defaults`): resuming a
            run stored before a field was added is refused only where ``config`` sets that
            field to something other than its default. ``None``: a missing key reads as None.
    """

    algorithm: str
    task: str = "custom"
    environment: str | None = None
    config: Mapping[str, Any] | None = None
    score: str = "episode_return"
    config_defaults: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("algorithm", "task", "score"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"RunSpec.{name} must be a non-empty string, got {value!r}.")
        if self.config is not None:
            try:
                json.dumps(dict(self.config), allow_nan=False)
            except (TypeError, ValueError) as error:
                raise ValueError(f"RunSpec.config must be JSON-compatible: {error}") from None


@dataclasses.dataclass
class RunResult:
    """What :func:`run` / :func:`run_experiment` did.

    Attributes:
        out_dir: the run directory.
        state: the runner state after the last chunk run, population axis leading (the
            members in the order of ``members``).
        iteration: training iterations done (per member).
        num_iterations: iterations of the whole run.
        step_count: environment steps done per member.
        finished: whether the run reached ``num_iterations``.
        metrics_path: ``metrics.json``; ``csv_path``: ``metrics.csv``; ``config_path``: ``config.json``.
        checkpoint_path: the newest checkpoint (None if none was written).
        plot_path: ``learning_curve.png`` (None until the run finishes or with ``plot=False``).
        final_return: mean of the score metric (``RunSpec.score``, by default the greedy
            return) at the last evaluation, one per member (NaN where it is not logged).
        already_finished: the call resumed a run that had finished, and trained nothing.
        members: ``(algorithm, run)`` of each member as in the run log: ``run`` is
            ``seed_<n>``, ``algorithm`` the runner's name, with the variant for a sweep
            (:func:`variant_name`).
        gif_path: ``episode.gif`` written with ``gif=True`` (else None).
        dry_run: the call was a dry run (``dry_run=True``): it checked and traced, nothing
            compiled, trained or was written; ``state`` holds shapes.
    """

    out_dir: str
    state: Any
    iteration: int
    num_iterations: int
    step_count: int
    finished: bool
    metrics_path: str
    csv_path: str
    config_path: str
    checkpoint_path: str | None
    plot_path: str | None
    final_return: np.ndarray
    already_finished: bool = False
    members: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    gif_path: str | None = None
    dry_run: bool = False


def find_algorithm(config: Any, algorithm: str | None = None) -> tuple[str, Callable[[Any], Any]]:
    """``(name, make_runner)`` for ``config`` from :data:`lamella.agents.algorithms.ALGORITHMS`."""
    table = config_lib.algorithm_table()
    if algorithm is not None:
        if algorithm not in table:
            raise ConfigError(
                f"Unknown algorithm {algorithm!r}. Available: {', '.join(sorted(table)) or 'none'}."
            )
        config_cls, make_runner = table[algorithm]
        if not isinstance(config, config_cls):
            raise ConfigError(
                f"Algorithm {algorithm!r} takes a {config_cls.__name__}, got {type(config).__name__}."
            )
        return algorithm, make_runner
    for name, (config_cls, make_runner) in table.items():
        if type(config) is config_cls:
            return name, make_runner
    if isinstance(config, str):
        raise ConfigError(
            f"config must be an algorithm's config, got the str {config!r}. Build it: "
            f"lamella.agents.config.resolve_config({config!r}, env_id) for a preset, or the config "
            "class itself (PPOConfig(...), ...)."
        )
    if isinstance(config, Mapping):
        raise ConfigError(
            "config must be an algorithm's config, got a dict. Build it from the dict: "
            "lamella.agents.config.resolve_config(algorithm, env_id, overrides=settings), or "
            "config_from_dict(PPOConfig, settings) (any config class)."
        )
    raise ConfigError(
        f"No algorithm takes a {type(config).__name__}; pass algorithm= and make_runner= for a custom runner."
    )


def default_chunk_iterations(num_iterations: int, target_evaluations: int = 20) -> int:
    """A chunk length giving about ``target_evaluations`` evaluations, preferring exact divisors."""
    if num_iterations <= target_evaluations:
        return 1
    best = None
    for chunk in range(1, num_iterations + 1):
        if num_iterations % chunk:
            continue
        count = num_iterations // chunk
        if target_evaluations / 2 <= count <= 2 * target_evaluations:
            distance = abs(count - target_evaluations)
            if best is None or distance < best[0]:
                best = (distance, chunk)
    return best[1] if best else -(-num_iterations // target_evaluations)


_RUN_DIRECTORY: str | None = None


def run_directory() -> str | None:
    """The directory of the run whose iterations the driver is training in this process, while
    it trains them (``None`` otherwise): a runner's host callbacks put the files they write
    there (lamella-ued's screenshots: ``<run>/screenshots/``), so that each run of a sweep, each
    program of one and a run on a Ray worker keeps them in its own folder."""
    return _RUN_DIRECTORY


def run_log_task(config: Any) -> str:
    """The run log's ``task`` of ``config``: its ``run_log_task()`` where the config class defines
    one (a config whose settings change the env beyond its id, such as lamella-ued's maze sizes,
    names them there), else its ``env_id`` (``"custom"`` without one)."""
    named = getattr(config, "run_log_task", None)
    if callable(named):
        return str(named())
    return str(getattr(config, "env_id", None) or "custom")


def default_out_dir(algorithm: str, env_id: str, root: str = "runs") -> str:
    """``runs/<algorithm>-<env_id>-<YYYYmmdd-HHMMSS>``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe_env = "".join(c if c.isalnum() or c in "-_." else "_" for c in env_id)
    return os.path.join(root, f"{algorithm}-{safe_env}-{stamp}")


def _seed_list(seeds: int | Sequence[int]) -> list[int]:
    if isinstance(seeds, bool):
        raise ValueError(f"seeds must be a count or a list of seeds, got {seeds}.")
    if isinstance(seeds, int | np.integer):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1 (a count) or a list of seeds, got {seeds}.")
        return list(range(int(seeds)))
    if isinstance(seeds, str | bytes | float) or not isinstance(seeds, Iterable):
        raise ValueError(
            f"seeds must be a count (an int such as 2) or a list of seeds (such as [0, 1]), got "
            f"{type(seeds).__name__} {seeds!r:.60}."
        )
    if not all(hasattr(type(s), "__index__") and not isinstance(s, bool | np.bool_) for s in seeds):
        raise ValueError(f"seeds must be distinct non-negative integers, got {list(seeds)!r:.120}.")
    values = [operator.index(s) for s in seeds]
    if not values or len(set(values)) != len(values) or min(values) < 0:
        raise ValueError(f"seeds must be distinct non-negative integers, got {list(seeds)}.")
    return values


def _variant_list(variants: Sequence[Variant] | None) -> list[dict[str, int | float]] | None:
    """``variants`` checked: a non-empty list of ``{name: number}`` with the same names."""
    if variants is None:
        return None
    if isinstance(variants, Mapping) or not isinstance(variants, Sequence) or not variants:
        raise ValueError(
            "variants must be a non-empty list of {field: number} dicts, "
            f"for example [{{'learning_rate': 1e-3}}, {{'learning_rate': 3e-3}}]; got {variants!r}."
        )
    checked = []
    for index, variant in enumerate(variants):
        if not isinstance(variant, Mapping) or not variant:
            raise ValueError(
                f"variants[{index}] must be a non-empty {{field: number}} dict, got {variant!r}."
            )
        for name, value in variant.items():
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
                raise ValueError(
                    f"variants[{index}][{name!r}] is {value!r}; a variant sets numbers only "
                    "(they become traced values of one program). Sweep other settings with separate runs."
                )
            if not math.isfinite(float(value)):
                raise ValueError(f"variants[{index}][{name!r}] is {value!r}; it must be finite.")
        checked.append(
            {str(k): (float(v) if isinstance(v, float | np.floating) else int(v)) for k, v in variant.items()}
        )
    names = list(checked[0])
    for index, variant in enumerate(checked):
        if sorted(variant) != sorted(names):
            raise ValueError(
                f"variants[{index}] sets {sorted(variant)}, variants[0] sets {sorted(names)}; every variant "
                "must set the same fields."
            )
    if len({tuple(sorted(v.items())) for v in checked}) != len(checked):
        raise ValueError(f"variants must be distinct, got {checked}.")
    return checked


def _label_list(
    labels: Sequence[str] | None, variants: list[dict[str, int | float]] | None
) -> list[str] | None:
    """``labels`` checked: distinct non-empty strings, one per variant (one without variants)."""
    if labels is None:
        return None
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise ValueError(f"labels must be a list of names, one per variant, got {labels!r}.")
    names = list(labels)
    expected = len(variants) if variants is not None else 1
    if len(names) != expected or not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"labels must be {expected} non-empty name(s), one per variant (one without variants), got {names!r}."
        )
    if len(set(names)) != len(names):
        raise ValueError(f"labels must be distinct, got {names!r}.")
    return names


def variant_name(algorithm: str, variant: Variant | None) -> str:
    """The run log's ``algorithm`` for one variant of a sweep: ``ppo[learning_rate=0.001]``."""
    if not variant:
        return algorithm
    return f"{algorithm}[{','.join(f'{k}={v}' for k, v in variant.items())}]"


def _variant_values(variants: list[dict[str, int | float]], num_seeds: int) -> dict[str, np.ndarray]:
    """``{field: (variants * seeds,)}``: each variant's value repeated for its seeds."""
    values = {}
    for name in variants[0]:
        column = [v[name] for v in variants]
        dtype = np.float32 if any(isinstance(x, float) for x in column) else np.int32
        values[name] = np.repeat(np.asarray(column, dtype), num_seeds)
    return values


# XLA's CPU back end spends most of a compile generating code for each fused kernel (tens of
# milliseconds apiece with its default emitters). Measured on PPO CartPole-v1 (2-core x86,
# jax 0.10.2, benchmarks/ppo_cartpole.py):
# * init runs once: unoptimised code from the older emitters compiles in about a third of the
#   time, and the slower run costs less than that.
# * evaluate runs once per chunk, a loop of hundreds of env steps: the older emitters at
#   optimisation level 1 compile as fast as unoptimised code (0.3 s) and run 5x faster (one
#   seed: 6 against 32 ms per evaluation; XLA's defaults: 4.5 ms after a 0.5 s compile).
# * the training chunk of a single seed: the older emitters at optimisation level 1 compile in
#   about half the time (PPO 1.0 s against 1.6 s, SAC 1.0 s against 1.9 s). They run as fast on
#   one core but slower on two (PPO 19 against 10 ms per iteration, SAC 15% slower), which pays
#   off for runs of up to a few dozen iterations; ``compile_mode="optimized"`` is for longer
#   ones. Vmapped over several seeds they run about 1.7x slower, so several seeds keep XLA's
#   defaults.
# jax 0.11 and later have no older emitters; the optimisation levels alone are kept. Measured
# there (benchmarks/driver_cpu_options.py: whole run_experiment processes, one seed, the same
# 2-core machine idle, four pairs), XLA's defaults / these options: PPO CartPole-v1 100k steps
# 1.14x wall, 1.19x CPU (jax 0.11.2), 1.06x, 1.12x (jax 0.12.0.1); SAC Pendulum-v1 8k steps
# 1.10x, 1.13x and 1.04x, 1.06x; every pair faster with the levels.
# * Only init compiles at optimisation level 0. A training program at level 0 is not safe: XLA's
#   CPU code at level 0 computed NaN gradients for SAC on Pendulum-v1 from its second update,
#   one seed or four (the same optimised HLO and the same inputs give finite values at level 1;
#   jax 0.10.2 and 0.12.0.1; benchmarks/xla_cpu_level0_sac.py reproduces it). Every built-in
#   single-agent runner's init at level 0 was checked against XLA's defaults: finite where they
#   are, within 2e-6 (2026-12-05; the reproducer's --check-init).
_RUN_ONCE_CPU = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
_COMPILE_FAST_CPU = {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": False}


@functools.cache
def _cpu_option_supported(name: str, value: Any) -> bool:
    """Whether the installed XLA accepts the option ``name=value`` (a flag can disappear in a
    later jaxlib: jax 0.11's XLA has no ``xla_cpu_use_fusion_emitters``)."""
    try:
        jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(jnp.zeros(())).compile()
    except Exception:  # any rejection of the option: leave it out
        return False
    return True


COMPILE_MODES = ("auto", "fast", "optimized")


def compile_options(program: str, num_seeds: int = 1, mode: str = "auto") -> dict[str, Any] | None:
    """The ``compiler_options`` the driver jits ``program`` with (``None``: XLA's defaults).

    Args:
        program: ``"init"``, ``"evaluate"`` or ``"chunk"``.
        num_seeds: seeds vmapped in one program.
        mode: ``"auto"`` (the measured choices above: the training chunk compiles fast for one
            seed), ``"fast"`` (every program compiles fast, for short runs), ``"optimized"``
            (XLA's defaults everywhere, for long runs of one seed).

    Only the CPU back end gets options (see the measurements above); they change
    floating-point results in the last bits (as any change of compiler does), the same
    way on every run, so runs stay reproducible and resume exactly.
    """
    if program not in ("init", "evaluate", "chunk"):
        raise ValueError(f"program must be 'init', 'evaluate' or 'chunk', got {program!r}.")
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {COMPILE_MODES}, got {mode!r}.")
    if jax.default_backend() != "cpu" or mode == "optimized":
        return None
    options: dict[str, Any] | None
    if program == "chunk":
        options = _COMPILE_FAST_CPU if (num_seeds == 1 or mode == "fast") else None
    else:
        options = _RUN_ONCE_CPU if program == "init" else _COMPILE_FAST_CPU
    if options is None:
        return None
    # The options this XLA has (jax 0.11 and later: the optimisation level alone).
    kept = {name: value for name, value in options.items() if _cpu_option_supported(name, value)}
    return kept or None


class CompiledRunner(NamedTuple):
    """A runner with the driver's vmapped, jitted functions (population axis leading).

    Attributes:
        runner: the :class:`~lamella.agents.runner.Runner` (of a sweep: the first
            variant's, for its static settings and declared metrics).
        init: ``init(keys) -> states``.
        evaluate: ``evaluate(states, keys) -> metrics``.
        chunk: ``chunk(states, length) -> (states, mean step metrics)``: ``length``
            iterations of ``runner.step``.
        num_members: the population: seeds, times variants for a sweep (each variant's
            seeds together, in the order of the variants).
    """

    runner: Any
    # jitted (jax.stages.Wrapped: callable, with the .trace that compile_ahead uses); the
    # signatures are in the docstring above.
    init: jax.stages.Wrapped
    evaluate: jax.stages.Wrapped
    chunk: jax.stages.Wrapped
    num_members: int = 1


def over_seeds(fn: Callable[..., Any], num_seeds: int, in_axes: Any = 0) -> Callable[..., Any]:
    """``jax.vmap(fn, in_axes)``, or for one member ``fn`` on the only entry of the leading axis.

    The result has the leading (seed, or population) axis either way. A single member is not
    vmapped so that a ``lax.cond`` in the runner (an off-policy warm-up, for example) stays a
    branch instead of becoming a select that computes both sides.
    """
    if num_seeds != 1:
        return jax.vmap(fn, in_axes=in_axes)
    axes = in_axes if isinstance(in_axes, (tuple, list)) else None

    def first(x: jax.Array) -> jax.Array:
        if x.shape[:1] != (1,):
            raise ValueError(
                f"over_seeds(num_seeds=1) got a seed axis of shape {x.shape[:1]}; pass num_seeds."
            )
        return x[0]

    def single(*args: Any) -> Any:
        taken = [jax.tree.map(first, a) if (axes is None or axes[i] == 0) else a for i, a in enumerate(args)]
        return jax.tree.map(lambda x: jnp.expand_dims(x, 0), fn(*taken))

    return single


def compile_runner(
    runner: Any,
    num_seeds: int = 1,
    mode: str = "auto",
    *,
    variants: Sequence[Variant] | None = None,
    num_devices: int = 1,
) -> CompiledRunner:
    """The functions :func:`run` calls, jitted with :func:`compile_options` for ``mode`` (each
    compiles at its first call, or ahead with :func:`compile_ahead`).

    Args:
        runner: a :class:`~lamella.agents.runner.Runner`; with ``variants``, a function
            ``values -> Runner`` that builds the runner from ``{field: value}`` (called with
            plain numbers once per variant to check it, then with traced scalars inside the
            compiled programs).
        num_seeds: seeds per variant (the population is ``num_seeds * len(variants)``).
        mode: see :func:`compile_options`.
        variants: ``[{field: number}, ...]``: a sweep over values the runner uses as traced
            numbers (learning rates, coefficients), one compiled program for all of them.
        num_devices: split the runner's batch axis over this many devices
            (``Runner.sharding``, :mod:`lamella.agents.devices`): ``init`` and ``chunk`` run
            under ``jax.shard_map``; ``evaluate`` is the unsharded runner's. A sweep's members
            stay a ``vmap`` inside each device, its values replicated on every device.

    Raises:
        ConfigError: a variant changes the number of iterations or steps per iteration, or
            ``runner`` uses a swept value as a Python number (a shape, a loop length, a branch).
    """
    checked = _variant_list(variants)
    sharded = num_devices != 1 or jax.process_count() > 1  # many hosts: check_devices refuses one device
    if checked is None and sharded:
        return _compile_sharded(runner, num_seeds, mode, num_devices)
    if checked is None:
        return CompiledRunner(
            runner,
            jax.jit(
                over_seeds(_strongly_typed(runner.init), num_seeds),
                compiler_options=compile_options("init", num_seeds, mode),
            ),
            jax.jit(
                over_seeds(runner.evaluate, num_seeds),
                compiler_options=compile_options("evaluate", num_seeds, mode),
            ),
            _make_chunk(
                runner.step, num_seeds, compile_options("chunk", num_seeds, mode), weights=_weights(runner)
            ),
            num_seeds,
        )
    make = runner
    if not callable(make) or hasattr(make, "step"):
        raise TypeError(
            "compile_runner(variants=...) takes a function values -> Runner (it builds one runner per "
            f"variant), got {type(make).__name__}."
        )
    concrete = [make(dict(v)) for v in checked]
    first = concrete[0]
    for index, other in enumerate(concrete[1:], 1):
        for name in ("num_iterations", "steps_per_iteration"):
            if int(getattr(other, name)) != int(getattr(first, name)):
                raise ConfigError(
                    f"Variant {checked[index]} gives {name}={getattr(other, name)}, variant {checked[0]} "
                    f"{getattr(first, name)}: the variants of one program must train for the same iterations "
                    "and steps. Sweep such settings with separate runs."
                )
    values = _variant_values(checked, num_seeds)
    members = len(checked) * num_seeds
    try:  # building the runner from traced values: a static use of a value fails here
        jax.eval_shape(lambda v: (make(v), jnp.zeros(()))[1], {k: a[0] for k, a in values.items()})
    except _STATIC_USE_ERRORS as error:
        raise _static_use_error(checked[0], error) from error
    if sharded:
        return _compile_sharded(first, members, mode, num_devices, make, values)

    def init(key: jax.Array, v: dict[str, jax.Array]) -> Any:
        return _strongly_typed(make(v).init)(key)

    def evaluate(state: Any, key: jax.Array, v: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return make(v).evaluate(state, key)

    def step(state: Any, v: dict[str, jax.Array]) -> tuple[Any, dict[str, jax.Array]]:
        return make(v).step(state)

    init_members = over_seeds(init, members)
    evaluate_members = over_seeds(evaluate, members)
    return CompiledRunner(
        first,
        jax.jit(
            lambda keys: init_members(keys, values), compiler_options=compile_options("init", members, mode)
        ),
        jax.jit(
            lambda states, keys: evaluate_members(states, keys, values),
            compiler_options=compile_options("evaluate", members, mode),
        ),
        _make_chunk(step, members, compile_options("chunk", members, mode), values, weights=_weights(first)),
        members,
    )


def _compile_sharded(
    runner: Any,
    num_members: int,
    mode: str,
    num_devices: int,
    make: Callable[[Mapping[str, Any]], Any] | None = None,
    values: dict[str, np.ndarray] | None = None,
) -> CompiledRunner:
    """:func:`compile_runner` for ``num_devices`` devices: the checks, then ``init`` and the
    chunk of the per-device runner under ``jax.shard_map`` (see :mod:`lamella.agents.devices`).

    With ``make`` and ``values`` (a sweep; ``runner`` is the first variant's), each member
    builds its per-device runner from its variant's values, which every device holds whole
    (replicated inputs of the ``shard_map``, vmapped with the members inside each device).
    """
    num_devices, axis, local = devices_lib.check_runner(num_devices, runner)
    sharding = runner.sharding
    mesh = devices_lib.make_mesh(num_devices)
    init_member: Callable[..., Any] = _strongly_typed(local.init)
    step: Callable[..., Any] = local.step
    evaluate_member: Callable[..., Any] = runner.evaluate
    extra: tuple[dict[str, np.ndarray], ...] = ()
    if make is not None and values is not None:
        build = make

        def per_device(v: Mapping[str, jax.Array]) -> Any:
            return build(v).sharding.make(axis)

        def variant_init(key: jax.Array, v: Mapping[str, jax.Array]) -> Any:
            return _strongly_typed(per_device(v).init)(key)

        def variant_step(state: Any, v: Mapping[str, jax.Array]) -> tuple[Any, dict[str, jax.Array]]:
            return per_device(v).step(state)

        def variant_evaluate(state: Any, key: jax.Array, v: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
            return build(v).evaluate(state, key)

        init_member, step, evaluate_member = variant_init, variant_step, variant_evaluate
        extra = (values,)

    # The state's layout, fixed in every program's signature, so that the programs compiled
    # ahead (compile_ahead, from shapes alone) are the ones the sharded arrays call.
    keys = jax.eval_shape(lambda: jax.vmap(jax.random.key)(jnp.zeros((num_members,), jnp.uint32)))
    specs = devices_lib.state_partition(jax.eval_shape(over_seeds(runner.init, num_members), keys), sharding)
    layout = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), specs, is_leaf=lambda x: isinstance(x, PartitionSpec)
    )
    replicated = NamedSharding(mesh, PartitionSpec())
    init = jax.shard_map(
        over_seeds(init_member, num_members),
        mesh=mesh,
        in_specs=(PartitionSpec(),) * (1 + len(extra)),
        out_specs=specs,
        check_vma=False,
    )
    evaluate = over_seeds(evaluate_member, num_members)
    chunk_layout = (mesh, sharding, layout)
    sharded = CompiledRunner(
        runner,
        jax.jit(
            lambda keys: init(keys, *extra),
            in_shardings=replicated,
            out_shardings=layout,
            compiler_options=compile_options("init", num_members, mode),
        ),
        jax.jit(
            lambda states, keys: evaluate(states, keys, *extra),
            in_shardings=(layout, replicated),
            # Replicated, so that every process holds the whole evaluation (its devices may hold
            # no shard of a split one on many hosts).
            out_shardings=replicated,
            compiler_options=compile_options("evaluate", num_members, mode),
        ),
        _make_chunk(
            step,
            num_members,
            compile_options("chunk", num_members, mode),
            values,
            mesh=chunk_layout,
            weights=_weights(runner),
        ),
        num_members,
    )
    if not extra:  # a sweep records no experience (_recording refuses it)
        _SHARDED[id(sharded.chunk)] = (chunk_layout, local)
    return sharded


# The mesh, sharding and per-device runner of each sharded chunk (by the chunk's id), for the
# recording chunk built from it later.
_SHARDED: dict[int, tuple[tuple[Any, Any, Any], Any]] = {}


def _recording(
    compiled: CompiledRunner, capacity: int, variants: Any, spec: RunSpec, mode: str
) -> CompiledRunner:
    """``compiled`` with a chunk that also returns the experience of its iterations."""
    record_step = getattr(compiled.runner, "record_step", None)
    if record_step is None:
        raise ConfigError(
            f"{spec.algorithm}'s runner cannot record experience (its Runner has no record_step); "
            "run without --record-vault."
        )
    if variants is not None:
        raise ConfigError(
            "Recording experience (record_vault) does not take a sweep (variants); record one run each."
        )
    key = (id(compiled.chunk), capacity, mode)
    if key not in _RECORDING_CHUNKS:  # reused by an equal run in this process, as the other programs
        options = compile_options("chunk", compiled.num_members, mode)
        sharded = _SHARDED.get(id(compiled.chunk))
        if sharded is not None:
            chunk_layout, local = sharded
            chunk = _make_chunk(
                local.record_step,
                compiled.num_members,
                options,
                record_capacity=capacity,
                mesh=chunk_layout,
                weights=_weights(compiled.runner),
            )
        else:
            chunk = _make_chunk(
                record_step,
                compiled.num_members,
                options,
                record_capacity=capacity,
                weights=_weights(compiled.runner),
            )
        while len(_RECORDING_CHUNKS) >= 8:
            _RECORDING_CHUNKS.pop(next(iter(_RECORDING_CHUNKS)))
        _RECORDING_CHUNKS[key] = (compiled.chunk, chunk)  # holding the key's chunk keeps its id unique
    return compiled._replace(chunk=_RECORDING_CHUNKS[key][1])


_RECORDING_CHUNKS: dict[tuple[int, int, str], tuple[Any, Any]] = {}


def _static_use_error(variant: Variant, error: Exception) -> ConfigError:
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ConfigError(
        f"The runner uses a swept field ({', '.join(variant)}) as a Python value (a shape, a loop "
        "length or a branch), so its variants cannot share one compiled program. Sweep only "
        f"numbers the runner computes with (learning rates, coefficients), or run the values "
        f"separately. (JAX: {first_line})"
    )


def _strongly_typed(init: Callable[[jax.Array], Any]) -> Callable[[jax.Array], Any]:
    """``init`` with weak types (left by Python scalars in a state) made strong.

    A state then has the same types whether it comes from ``init``, a chunk or a checkpoint,
    so one compiled chunk serves all three (a weak/strong difference is a new compile).
    """

    def strong(x: Any) -> Any:
        if isinstance(x, jax.Array) and not jax.dtypes.issubdtype(x.dtype, jax.dtypes.extended):
            return jax.lax.convert_element_type(x, x.dtype)
        return x

    return lambda key: jax.tree.map(strong, init(key))


class ProgramShapes(NamedTuple):
    """What :func:`compile_ahead` found while tracing: shapes and dtypes (``jax.ShapeDtypeStruct``)
    of the population's state, of a chunk's step metrics and of an evaluation's metrics."""

    state: Any
    step_metrics: dict[str, Any]
    evaluation: dict[str, Any]
    #: a recording chunk's experience (``(members, chunk_iterations, time, batch, ...)``), else None
    experience: Any = None


def compile_ahead(compiled: CompiledRunner, keys: jax.Array, *, compile: bool = True) -> ProgramShapes:
    """Compile ``compiled``'s three programs for ``keys`` (one key per member) before their
    first call, XLA compiling while Python traces.

    With ``compile=False`` the programs are traced and lowered (to StableHLO) but XLA compiles
    nothing: every error of the runner's Python code and every shape mismatch shows, in a
    fraction of the time (a dry run).

    Each program is traced and lowered in turn on this thread (Python work), then handed to a
    worker thread for XLA's compilation, which runs without the interpreter lock: the training
    chunk, the longest compile, overlaps the tracing of the evaluation and the compilation of
    the others. The executables land in jax's cache, so the later calls with these shapes run
    at once; a call with other shapes or types compiles at its first call, as without this.

    Returns:
        The shapes of the state and of the metrics (:class:`ProgramShapes`).
    """
    length = jax.ShapeDtypeStruct((), jnp.int32)
    if not compile:
        init = compiled.init.trace(keys)
        init.lower()
        states = init.out_info
        chunk = compiled.chunk.trace(states, length)
        chunk.lower()
        evaluate = compiled.evaluate.trace(states, keys)
        evaluate.lower()
        experience = chunk.out_info[2] if len(chunk.out_info) > 2 else None
        return ProgramShapes(states, dict(chunk.out_info[1]), dict(evaluate.out_info), experience)
    workers = max(1, min(3, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        init = compiled.init.trace(keys).lower()
        jobs = [pool.submit(init.compile)]
        states = init.out_info
        chunk = compiled.chunk.trace(states, length)
        jobs.append(pool.submit(chunk.lower().compile))
        evaluate = compiled.evaluate.trace(states, keys)
        jobs.append(pool.submit(evaluate.lower().compile))
        for job in jobs:
            job.result()
    experience = chunk.out_info[2] if len(chunk.out_info) > 2 else None
    return ProgramShapes(states, dict(chunk.out_info[1]), dict(evaluate.out_info), experience)


def _make_chunk(
    step: Callable[..., tuple[Any, dict[str, jax.Array]]],
    num_members: int,
    options: dict[str, Any] | None,
    values: dict[str, np.ndarray] | None = None,
    record_capacity: int = 0,
    mesh: tuple[Any, Any, Any] | None = None,
    weights: Mapping[str, str] | None = None,
) -> jax.stages.Wrapped:
    """``chunk(states, length) -> (states, mean step metrics)`` for every member at once.

    A metric of ``weights`` (``Runner.metric_weights``: ``{metric: count metric}``) is the
    mean weighted by its count, NaN where the chunk's count is 0 (not measured); every other
    metric is the mean over the chunk's iterations.

    With ``record_capacity`` (recording experience), ``step`` is a runner's ``record_step``
    and the chunk also returns the experience of its iterations, leaves
    ``(record_capacity, time, batch, ...)`` per member, the first ``length`` filled.

    The number of iterations is a traced argument of a ``while_loop``, so one compiled
    program serves every chunk length (the last, shorter chunk of a run included). With
    ``values`` (a sweep), ``step(state, member_values)``; the values are constants of the
    program, one per member (with ``mesh``, replicated inputs of the ``shard_map``).

    With ``mesh`` (``(jax.sharding.Mesh, BatchSharding, the state's NamedShardings)``), ``step``
    is a per-device runner's
    and the chunk runs under ``jax.shard_map``: the state's batch leaves (and the recorded
    experience's batch axis) split over the devices, the metrics replicated (the runner
    reduced them).
    """

    # Jitted so that its trace is cached: finding the metrics' structure traces the step once,
    # and the loop body reuses that trace (tracing is a good part of a small program's compile).
    step = jax.jit(step)

    def run_chunk(state: Any, length: jax.Array, *extra: Any) -> tuple[Any, ...]:
        # The structure of the step metrics (for the loop carry), from an abstract trace.
        out_shapes = jax.eval_shape(lambda s, *e: step(s, *e)[1:], state, *extra)
        _check_weights(weights, out_shapes[0])
        sums = jax.tree.map(lambda m: jnp.zeros(m.shape, jnp.float32), out_shapes[0])
        # The recorded experience of every iteration of the chunk (nothing without recording).
        records = [jax.tree.map(lambda x: jnp.zeros((record_capacity, *x.shape), x.dtype), out_shapes[1:])]

        def body(carry: tuple[jax.Array, Any, Any, Any]) -> tuple[jax.Array, Any, Any, Any]:
            i, state, sums, records = carry
            new_state, metrics, *experience = step(state, *extra)
            # The state keeps its input's types: a leaf the step makes weakly typed (a Python
            # number in a ``where``, say) would make the chunk's output state another input
            # type, so the next chunk and the evaluation would compile a second time.
            state = jax.tree.map(_same_type, new_state, state)
            sums = jax.tree.map(lambda total, m: total + m, sums, _weighted(metrics, weights))
            records = jax.tree.map(lambda r, x: r.at[i].set(x), records, [tuple(experience)])
            return i + 1, state, sums, records

        _, state, sums, records = jax.lax.while_loop(
            lambda c: c[0] < length, body, (jnp.zeros((), jnp.int32), state, sums, records)
        )
        means = jax.tree.map(lambda total: total / length, sums)
        for name, count_name in (weights or {}).items():
            count = sums[count_name]
            means[name] = jnp.where(count > 0, sums[name] / jnp.where(count > 0, count, 1.0), jnp.nan)
        return (state, means, records[0][0]) if record_capacity else (state, means)

    extra: tuple[dict[str, np.ndarray], ...] = () if values is None else (values,)
    if mesh is not None:
        device_mesh, sharding, layout = mesh
        members_chunk = over_seeds(run_chunk, num_members, in_axes=(0, None, *[0] * len(extra)))
        replicated = PartitionSpec()
        # Recorded experience: (members, capacity, time, batch, ...) per leaf.
        experience = PartitionSpec(None, None, None, devices_lib.MESH_AXIS)

        def sharded_chunk(states: Any, length: jax.Array) -> tuple[Any, ...]:
            specs = devices_lib.state_partition(states, sharding)
            out_specs: tuple[Any, ...] = (specs, replicated)
            if record_capacity:
                out_specs = (*out_specs, experience)
            mapped = jax.shard_map(
                members_chunk,
                mesh=device_mesh,
                # A sweep's values: every device holds every member's.
                in_specs=(specs, replicated, *[replicated] * len(extra)),
                out_specs=out_specs,
                check_vma=False,
            )
            return mapped(states, length, *extra)

        shardings = (layout, NamedSharding(device_mesh, replicated))
        out_shardings: tuple[Any, ...] = shardings
        if record_capacity:
            out_shardings = (*shardings, NamedSharding(device_mesh, experience))
        return jax.jit(
            sharded_chunk, in_shardings=shardings, out_shardings=out_shardings, compiler_options=options
        )
    if values is None:
        return jax.jit(over_seeds(run_chunk, num_members, in_axes=(0, None)), compiler_options=options)
    chunk = over_seeds(run_chunk, num_members, in_axes=(0, None, 0))
    return jax.jit(lambda states, length: chunk(states, length, values), compiler_options=options)


def _weights(runner: Any) -> dict[str, str] | None:
    """``runner.metric_weights`` as a dict (None without any)."""
    weights = getattr(runner, "metric_weights", None)
    return dict(weights) if weights else None


def _check_weights(weights: Mapping[str, str] | None, metrics: Mapping[str, Any]) -> None:
    """Refuse ``Runner.metric_weights`` that do not name the step's metrics (trace time)."""
    for name, count in (weights or {}).items():
        problem = None
        if name not in metrics or count not in metrics:
            missing = name if name not in metrics else count
            problem = f"names {missing!r}, which runner.step does not return (it returns {sorted(metrics)})"
        elif count in (weights or {}) or name == count:
            problem = f"weights by {count!r}, itself a weighted metric; a count is a plain step metric"
        elif metrics[count].shape != ():
            problem = (
                f"weights by {count!r} of shape {metrics[count].shape}; a count is a scalar per iteration"
            )
        if problem is not None:
            raise ConfigError(
                f"Runner.metric_weights[{name!r}] {problem}: give {{metric: count}} with both among the step "
                'metrics, for example {"loss": "updates"}.'
            )


def _weighted(metrics: Any, weights: Mapping[str, str] | None) -> Any:
    """The step's metrics as float32, each metric of ``weights`` times its count (0 where the
    count is 0, whatever the metric holds then)."""
    metrics = jax.tree.map(lambda m: jnp.asarray(m, jnp.float32), metrics)
    if not weights:
        return metrics
    weighted = dict(metrics)
    for name, count_name in weights.items():
        count = metrics[count_name]
        weighted[name] = jnp.where(count > 0, metrics[name] * count, 0.0)
    return weighted


def _same_type(new: jax.Array, old: jax.Array) -> jax.Array:
    """``new`` with ``old``'s dtype and weak type (a strong ``old`` makes a weakly typed ``new``
    strong; PRNG keys pass unchanged)."""
    if not isinstance(old, jax.Array) or jnp.issubdtype(old.dtype, jax.dtypes.prng_key):
        return new
    if jax.typeof(old).weak_type or not jax.typeof(new).weak_type:
        return new
    return jax.lax.convert_element_type(new, old.dtype)


def _build_runner(make_runner: Callable[[Any], Any], config: Any) -> Any:
    try:
        return make_runner(config)
    except _STATIC_USE_ERRORS:
        raise
    except (KeyError, TypeError, ValueError) as error:
        # Building a runner validates the config against the env (unknown env id, sizes that
        # do not divide, ...): a config mistake, reported as one, before anything compiles.
        detail = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise ConfigError(f"Cannot build the runner for {type(config).__name__}: {detail}") from error


def _compile(
    make_runner: Callable[[Any], Any],
    config: Any,
    num_seeds: int,
    mode: str,
    variants: tuple[tuple[tuple[str, Any], ...], ...] | None = None,
    num_devices: int = 1,
) -> CompiledRunner:
    if variants is None:
        return compile_runner(_build_runner(make_runner, config), num_seeds, mode, num_devices=num_devices)

    def make(values: Mapping[str, Any]) -> Any:
        return _build_runner(make_runner, dataclasses.replace(config, **values))

    return compile_runner(
        make, num_seeds, mode, variants=[dict(v) for v in variants], num_devices=num_devices
    )


@functools.lru_cache(maxsize=8)
def _compile_cached(
    make_runner: Callable[[Any], Any],
    config: Any,
    num_seeds: int,
    mode: str,
    variants: tuple[tuple[tuple[str, Any], ...], ...] | None = None,
    num_devices: int = 1,
) -> CompiledRunner:
    return _compile(make_runner, config, num_seeds, mode, variants, num_devices)


def _compiled(
    make_runner: Callable[[Any], Any],
    config: Any,
    num_seeds: int,
    mode: str,
    variants: tuple[tuple[tuple[str, Any], ...], ...] | None = None,
    num_devices: int = 1,
) -> CompiledRunner:
    try:
        hash((make_runner, config, variants))
    except TypeError:  # an unhashable config: build afresh
        return _compile(make_runner, config, num_seeds, mode, variants, num_devices)
    return _compile_cached(make_runner, config, num_seeds, mode, variants, num_devices)


@functools.lru_cache(maxsize=8)
def _compile_runner_cached(
    runner: Any,
    num_seeds: int,
    mode: str,
    variants: tuple[tuple[tuple[str, Any], ...], ...] | None,
    num_devices: int = 1,
) -> CompiledRunner:
    return compile_runner(
        runner,
        num_seeds,
        mode,
        variants=None if variants is None else [dict(v) for v in variants],
        num_devices=num_devices,
    )


def _compiled_runner(
    runner: Any,
    num_seeds: int,
    mode: str,
    variants: tuple[tuple[tuple[str, Any], ...], ...] | None,
    num_devices: int = 1,
) -> CompiledRunner:
    """:func:`compile_runner`, reused for an equal (hashable) runner in one process."""
    try:
        hash(runner)
    except TypeError:  # a runner holding a dict (metric_axes): compile afresh
        return compile_runner(
            runner,
            num_seeds,
            mode,
            variants=None if variants is None else [dict(v) for v in variants],
            num_devices=num_devices,
        )
    return _compile_runner_cached(runner, num_seeds, mode, variants, num_devices)


def metric_key(name: str, axes: Sequence[str], index: Sequence[int]) -> str:
    """The run-log key of one entry of a metric with named axes: ``episode_return_agent_0``,
    ``score_level_2``, ``return_agent_1_level_0`` (axis name and index, in axis order)."""
    return name + "".join(f"_{axis}_{i}" for axis, i in zip(axes, index, strict=True))


def _log_name(name: str) -> str:
    """The run-log name of an evaluation metric (``episode_return`` is ``mean_episode_return``,
    the marl-eval name)."""
    return "mean_episode_return" if name == "episode_return" else name


class _MetricLayout:
    """Which run-log keys a runner's metrics become, checked once against their shapes.

    Step metrics (chunk means, one value per member): a scalar is ``train_<name>``; a metric
    with named axes is one key per index, ``train_<name>_<axis>_<i>``. A metric weighted by a
    count (``Runner.metric_weights``) is left out for a member whose chunk counted none. Evaluation metrics:
    ``<name>`` (``mean_episode_return`` for ``episode_return``) with one number per episode;
    with named axes (the last ones), one such key per index. Anything else is an error that
    names the metric and the fix, raised before the run starts.
    """

    def __init__(self, runner: Any, shapes: ProgramShapes) -> None:
        declared = dict(getattr(runner, "metric_axes", None) or {})  # a mapping or its items
        for name, axes in declared.items():
            if (
                not isinstance(axes, tuple)
                or not axes
                or not all(isinstance(a, str) and a.isidentifier() for a in axes)
                or len(set(axes)) != len(axes)
            ):
                raise ConfigError(
                    f"Runner.metric_axes[{name!r}] is {axes!r}; give a tuple of distinct axis names, "
                    "for example ('agent',) or ('agent', 'level')."
                )
        unknown = sorted(set(declared) - set(shapes.step_metrics) - set(shapes.evaluation))
        if unknown:
            raise ConfigError(
                f"Runner.metric_axes names {unknown}, which neither step nor evaluate returns "
                f"(step: {sorted(shapes.step_metrics)}; evaluate: {sorted(shapes.evaluation)})."
            )
        self.axes = declared
        self.weights = _weights(runner) or {}
        self.step_sizes: dict[str, tuple[int, ...]] = {}
        for name, shape in shapes.step_metrics.items():
            sizes = tuple(shape.shape[1:])
            axes = declared.get(name, ())
            if len(sizes) != len(axes):
                fix = (
                    f"declare its axes, for example Runner(metric_axes={{{name!r}: ('agent',)}})"
                    if not axes
                    else f"its declared axes {axes} need {len(axes)} dimension(s)"
                )
                raise ConfigError(
                    f"runner.step returns metric {name!r} of shape {sizes} per member; a step metric is a "
                    f"scalar or has the axes named in Runner.metric_axes: {fix}."
                )
            self.step_sizes[name] = sizes
        self.eval_sizes: dict[str, tuple[int, ...]] = {}
        for name, shape in shapes.evaluation.items():
            sizes = tuple(shape.shape[1:])
            axes = declared.get(name, ())
            if len(sizes) < len(axes):
                raise ConfigError(
                    f"runner.evaluate returns metric {name!r} of shape {sizes} per member, fewer dimensions "
                    f"than its declared axes {axes} (evaluation metrics are (episodes, *axes))."
                )
            self.eval_sizes[name] = sizes[len(sizes) - len(axes) :]

    @staticmethod
    def _expand(
        name: str, value: np.ndarray, axes: tuple[str, ...], sizes: tuple[int, ...]
    ) -> dict[str, np.ndarray]:
        """``{key: (members, values)}`` for ``value`` ``(members, ..., *sizes)``."""
        if not axes:
            return {name: value.reshape(value.shape[0], -1)}
        return {
            metric_key(name, axes, index): value[(Ellipsis, *index)].reshape(value.shape[0], -1)
            for index in np.ndindex(*sizes)
        }

    def evaluation(self, raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, value in raw.items():
            axes = self.axes.get(name, ())
            out.update(self._expand(_log_name(name), np.asarray(value), axes, self.eval_sizes[name]))
        return out

    def evaluation_keys(self) -> list[str]:
        """The run-log keys of the evaluation metrics, in order."""
        keys = []
        for name, sizes in self.eval_sizes.items():
            axes = self.axes.get(name, ())
            keys += [metric_key(_log_name(name), axes, index) for index in np.ndindex(*sizes)]
        return keys

    def check_score(self, score: str) -> None:
        """Refuse a ``RunSpec.score`` the run log will not hold (its progress, plot and
        ``final_return`` would be empty); the default ``episode_return`` may be absent."""
        keys = self.evaluation_keys()
        if _log_name(score) in keys:
            return
        names = {_log_name(name): name for name in self.eval_sizes}
        axes = self.axes.get(names.get(_log_name(score), ""), ())
        if axes:
            entries = [k for k in keys if k.startswith(f"{_log_name(score)}_{axes[0]}_")]
            raise ConfigError(
                f"RunSpec.score={score!r} is an evaluation metric with axes {axes}, which the run log holds "
                f"as one key per index ({', '.join(map(repr, entries))}): score one of them, for example "
                f"RunSpec(..., score={entries[0]!r})."
            )
        if score != "episode_return":
            raise ConfigError(
                f"RunSpec.score={score!r} is not an evaluation metric of this runner; runner.evaluate logs "
                f"{', '.join(map(repr, keys))}. Score one of them."
            )

    def step(self, raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, value in raw.items():
            axes = self.axes.get(name, ())
            out.update(self._expand(f"train_{name}", np.asarray(value), axes, self.step_sizes[name]))
        return out

    def not_measured(self, raw: Mapping[str, Any]) -> list[tuple[int, str]]:
        """``(member, run-log key)`` of each weighted step metric (``Runner.metric_weights``)
        whose count was 0 in the chunk: it was not measured and is left out of the run log."""
        missing = []
        for name, count in self.weights.items():
            keys = [
                metric_key(f"train_{name}", self.axes.get(name, ()), i)
                for i in np.ndindex(*self.step_sizes[name])
            ]
            missing += [(int(m), key) for m in np.flatnonzero(np.asarray(raw[count]) == 0) for key in keys]
        return missing


def _per_member(
    metrics: Mapping[str, np.ndarray], members: Sequence[Any]
) -> dict[Any, dict[str, list[float]]]:
    """``{key: array (members, values)}`` -> ``{member: {key: list}}``."""
    return {
        member: {name: value[i].tolist() for name, value in metrics.items()}
        for i, member in enumerate(members)
    }


class _Start(NamedTuple):
    """Where a run starts: ``checkpoint`` to continue from (None: from the beginning), with
    ``stored`` its metadata, or the ``config.json`` of a run that never wrote a checkpoint."""

    out_dir: str
    checkpoint: str | None
    stored: dict[str, Any] | None


def _finished_log(out_dir: str) -> bool:
    """Whether ``out_dir/metrics.json`` holds a final evaluation (``absolute_metrics``)."""
    try:
        with open(os.path.join(out_dir, "metrics.json"), encoding="utf-8") as handle:
            return '"absolute_metrics"' in handle.read()
    except OSError:
        return False


def _resolve_start(
    out_dir: str | os.PathLike[str] | None,
    resume: bool | str | os.PathLike[str] | None,
    default_dir: Callable[[], str],
) -> _Start:
    """The run directory, and what to continue from; refuses to start over a run."""
    if resume is False or resume is None:
        out_dir = os.fspath(out_dir) if out_dir is not None else default_dir()
        _check_not_a_file(out_dir)
        checkpoints = ckpt.list_checkpoints(os.path.join(out_dir, "checkpoints"))
        if checkpoints:
            raise FileExistsError(
                f"{out_dir!r} already holds a run; continue it with resume (--resume {out_dir}) or pick "
                "another out_dir."
            )
        if os.path.exists(os.path.join(out_dir, "metrics.json")):
            raise FileExistsError(
                f"{out_dir!r} already holds a run that stopped before its first checkpoint; start it over with "
                f"resume (--resume {out_dir}: its config.json, from the beginning) or pick another out_dir."
            )
        return _Start(out_dir, None, None)
    if resume is True:
        if out_dir is None:
            raise ValueError("resume=True needs out_dir (the run directory to continue).")
        path = os.fspath(out_dir)
    else:
        path = os.fspath(resume)
    if os.path.isfile(path):
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.basename(folder) != "checkpoints":
            # The run directory is the folder above checkpoints/; above any other folder it is
            # someone else's folder, without this run's log (or with another run's).
            raise ConfigError(
                f"Cannot resume from {path}: {os.path.basename(path)} is not in a run directory's checkpoints/ "
                "folder, and a resumed run continues the run log beside it (metrics.json). Resume the run "
                "directory, or put it back in <run>/checkpoints/ and resume from there."
            )
        return _Start(os.path.dirname(folder), path, ckpt.read_metadata(path))
    found = ckpt.latest_checkpoint(os.path.join(path, "checkpoints"))
    if found is not None:
        return _Start(path, found, ckpt.read_metadata(found))
    config_path = os.path.join(path, "config.json")
    if os.path.isfile(config_path) and not _finished_log(path):
        # Killed before its first checkpoint: continuing means starting over, with the same
        # settings (checked against config.json like a checkpoint's).
        with open(config_path, encoding="utf-8") as handle:
            return _Start(path, None, json.load(handle))
    why = (
        "its run log is finished but the checkpoints are gone"
        if os.path.isfile(config_path)
        else "no checkpoints/checkpoint_*.msgpack and no config.json there"
    )
    raise FileNotFoundError(f"Nothing to resume in {path!r}: {why}.")


def _check_not_a_file(out_dir: str) -> None:
    """Refuse an ``out_dir`` that is a file or lies below one (os.makedirs fails there, after
    the compile)."""
    path = os.path.abspath(out_dir)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise FileExistsError(
            f"Cannot write the run to {out_dir!r}: {path} is a file, not a folder; pick another out_dir "
            "(--out-dir)."
        )


def _check_run_log(log: RunLog, stored: Mapping[str, Any], checkpoint: str) -> None:
    """Refuse to resume ``checkpoint`` when its run log cannot be continued (deleted, cut,
    another run's), before anything compiles; a resumed run reads it back to the evaluations
    the checkpoint had seen."""
    expected = int(stored.get("num_evaluations", 0))
    try:
        log.load()
    except FileNotFoundError:
        problem = "is missing"
    except (OSError, ValueError) as error:  # json's JSONDecodeError is a ValueError
        problem = f"cannot be read ({error})"
    else:
        if len(log.steps) >= expected:
            return
        problem = f"holds {len(log.steps)} evaluations, the checkpoint expects {expected}"
    raise ConfigError(
        f"Cannot resume {checkpoint}: its run log {log.json_path} {problem}. A resumed run continues the "
        "run log its checkpoint saw: put that metrics.json back, or start a new run in another out_dir."
    )


def _record_dir_metadata(record_dir: str, out_dir: str) -> dict[str, str]:
    """``record_vault`` (the recording folder) for ``config.json`` and the checkpoints, and
    ``record_vault_in_run``, its path relative to the run directory where it lies inside it:
    a run directory moved or copied elsewhere resumes recording into its own folder."""
    relative = os.path.relpath(record_dir, os.path.abspath(out_dir))
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return {"record_vault": record_dir}
    return {"record_vault": record_dir, "record_vault_in_run": relative}


def _stored_record_dir(stored: Mapping[str, Any], out_dir: str) -> str | None:
    """Where a resumed run records: inside its run directory as it is now (``record_vault_in_run``),
    else the stored ``record_vault`` (a folder outside the run, or a run stored before that key)."""
    relative = stored.get("record_vault_in_run")
    if isinstance(relative, str):
        return os.path.join(os.path.abspath(out_dir), relative)
    return stored.get("record_vault")


def _check_stored(
    stored: Mapping[str, Any],
    where: str,
    spec: RunSpec,
    seed_list: list[int],
    variants: list[dict[str, int | float]] | None,
    chunk_iterations: int | None,
    compile_mode: str | None,
    num_devices: int | None = None,
    num_processes: int = 1,
) -> tuple[int, str, int]:
    """Refuse to continue ``stored`` (a checkpoint's metadata or a ``config.json``) with other
    settings; return its ``(chunk_iterations, compile_mode, num_devices)``."""
    differences = config_diff(stored.get("config") or {}, dict(spec.config or {}), spec.config_defaults)
    if differences:
        listed = "; ".join(f"{k}: checkpoint {old!r}, now {new!r}" for k, (old, new) in differences.items())
        raise ConfigError(
            f"Cannot resume {where}: the config differs in {', '.join(differences)} ({listed}). "
            "Resume with the original config, or start a new run in another --out-dir."
        )
    if stored["algorithm"] != spec.algorithm:
        raise ConfigError(
            f"Cannot resume: the checkpoint is from {stored['algorithm']!r}, not {spec.algorithm!r}."
        )
    if list(stored["seeds"]) != seed_list:
        raise ConfigError(f"Cannot resume: the checkpoint has seeds {stored['seeds']}, not {seed_list}.")
    if stored.get("variants") != variants:
        raise ConfigError(
            f"Cannot resume: the checkpoint has variants {stored.get('variants')}, not {variants}."
        )
    if chunk_iterations is not None and chunk_iterations != stored["chunk_iterations"]:
        raise ConfigError(
            f"Cannot resume with chunk_iterations={chunk_iterations}: the run used {stored['chunk_iterations']} "
            "(evaluations happen between chunks, so the run log would differ)."
        )
    stored_mode = stored.get("compile_mode", "auto")
    if compile_mode is not None and compile_mode != stored_mode:
        raise ConfigError(
            f"Cannot resume with compile_mode={compile_mode!r}: the run used {stored_mode!r} "
            "(the compiler options change results in the last bits)."
        )
    layout = stored.get("devices") or {}
    stored_devices = int(layout.get("num_devices", stored.get("num_devices", 1)))
    stored_processes = int(layout.get("num_processes", stored.get("num_processes", 1)))
    if num_processes != stored_processes:
        fix = (
            "on one process (without --coordinator-address, --num-processes and --process-id)"
            if stored_processes == 1
            else f"on {stored_processes} processes (--num-processes {stored_processes}, one --process-id each)"
        )
        raise ConfigError(
            f"Cannot resume {where} on {num_processes} process(es): the run used {stored_processes} "
            f"({stored_devices} devices; its state is split over the devices of every process). Resume it {fix}."
        )
    if num_devices is not None and num_devices != stored_devices:
        raise ConfigError(
            f"Cannot resume with num_devices={num_devices}: the run used {stored_devices} (sums over "
            f"devices change results in the last bits); resume with num_devices={stored_devices}."
        )
    return int(stored["chunk_iterations"]), stored_mode, stored_devices


def _clean_after_kill(out_dir: str, checkpoint_dir: str, keep: int | None, resume_from: str | None) -> None:
    """Remove what a killed run can leave: temporary files of atomic writes that never got
    renamed, and a checkpoint beyond ``keep`` (killed between a save and its pruning).

    Pruning waits for the next save when the run resumes from an older checkpoint than the
    newest (a checkpoint file named by the user), so that file is never deleted first.
    """
    for name in ("metrics.json", "metrics.csv", "config.json"):
        remove_temp_files(out_dir, name)
    if os.path.isdir(checkpoint_dir):
        ckpt.remove_stale_temp_files(checkpoint_dir)
        newest = ckpt.latest_checkpoint(checkpoint_dir)
        if resume_from is None or (newest is not None and os.path.samefile(newest, resume_from)):
            ckpt.prune_checkpoints(checkpoint_dir, keep)


@dataclasses.dataclass
class _Session:
    """One call of :func:`run` once the programs are compiled: the chunk loop, the run log,
    checkpoints and the end of the run."""

    compiled: CompiledRunner
    layout: _MetricLayout
    log: RunLog
    spec: RunSpec
    seed_list: list[int]
    variants: list[dict[str, int | float]] | None
    eval_keys: jax.Array
    chunk_iterations: int
    compile_mode: str
    checkpoint_dir: str
    keep_checkpoints: int | None
    checkpoint_every: int
    recorder: Any = None  # a lamella.agents.recording.VaultRecorder when recording
    num_devices: int = 1
    labels: list[str] | None = None
    # Process 0 of a many-host run (every one-process run) writes checkpoints and the plot.
    writer: bool = True
    # The iteration of the newest checkpoint (saved or resumed from), None before the first.
    saved: int | None = None
    versions: dict[str, str] = dataclasses.field(default_factory=dict)  # ckpt.versions(algorithm)

    @property
    def num_iterations(self) -> int:
        return int(self.compiled.runner.num_iterations)

    @property
    def steps_per_iteration(self) -> int:
        return int(self.compiled.runner.steps_per_iteration)

    def evaluate(self, state: Any, index: int) -> dict[str, np.ndarray]:
        step_keys = jax.vmap(lambda k: jax.random.fold_in(k, index))(self.eval_keys)
        return self.layout.evaluation(self.compiled.evaluate(state, step_keys))

    def save(self, state: Any, iteration: int) -> str:
        meta = {
            "algorithm": self.spec.algorithm,
            "config": dict(self.spec.config or {}),
            "seeds": self.seed_list,
            **({"variants": self.variants} if self.variants is not None else {}),
            **({"labels": self.labels} if self.labels is not None else {}),
            "iteration": iteration,
            "num_iterations": self.num_iterations,
            "steps_per_iteration": self.steps_per_iteration,
            "chunk_iterations": self.chunk_iterations,
            "compile_mode": self.compile_mode,
            "num_devices": self.num_devices,
            **({"num_processes": jax.process_count()} if jax.process_count() > 1 else {}),
            **(
                _record_dir_metadata(self.recorder.directory, os.path.dirname(self.checkpoint_dir))
                if self.recorder is not None
                else {}
            ),
            "num_evaluations": len(self.log.steps),
            "versions": self.versions,
        }
        # Every process takes part in gathering a state split over many hosts; one writes it.
        state = hosts.global_values(state)
        self.saved = iteration
        if not self.writer:
            return ckpt.checkpoint_file(self.checkpoint_dir, iteration)
        return ckpt.save_checkpoint(
            self.checkpoint_dir, state, meta, step=iteration, keep=self.keep_checkpoints
        )

    def score(self, evaluation: Mapping[str, Any]) -> float:
        values = evaluation.get(_log_name(self.spec.score))
        return float(np.mean(values)) if values is not None else math.nan

    def start(self, state: Any) -> None:
        """Log the evaluation before training (``step_0``)."""
        self.log.add(0, _per_member(self.evaluate(state, 0), self.log.runs))
        self.log.write()

    def train(
        self, state: Any, iteration: int, checkpoint_path: str | None, max_chunks: int | None, bar: Progress
    ) -> tuple[Any, int, str | None]:
        """Chunks until the run ends or ``max_chunks`` ran: train, evaluate, log, checkpoint."""
        chunks_done = 0
        while iteration < self.num_iterations and (max_chunks is None or chunks_done < max_chunks):
            length = min(self.chunk_iterations, self.num_iterations - iteration)
            state, step_metrics, *experience = self.compiled.chunk(state, jnp.asarray(length, jnp.int32))
            if self.recorder is not None:  # before the checkpoint, so a resume never misses steps
                self.recorder.write(experience[0], length, iteration)
            iteration += length
            chunks_done += 1
            evaluation = self.evaluate(state, len(self.log.steps))
            entry = _per_member({**evaluation, **self.layout.step(step_metrics)}, self.log.runs)
            for member, key in self.layout.not_measured(step_metrics):
                del entry[self.log.runs[member]][key]
            self.log.add(iteration * self.steps_per_iteration, entry)
            self.log.write()
            if (
                iteration >= self.num_iterations
                or (iteration // self.chunk_iterations) % self.checkpoint_every == 0
                or chunks_done == max_chunks  # a stop to resume from: never lose its chunks
            ):
                checkpoint_path = self.save(state, iteration)
            bar.update(iteration * self.steps_per_iteration, self.score(evaluation))
        return state, iteration, checkpoint_path

    def finish(
        self, state: Any, iteration: int, checkpoint_path: str | None, plot: bool
    ) -> tuple[str, str | None]:
        """The end of a run: ``absolute_metrics``, the final checkpoint, the plot."""
        _complete_log(self.log)
        if checkpoint_path is None or self.saved != iteration:
            checkpoint_path = self.save(state, iteration)
        plot_path = _plot(self.log, self.spec) if plot and self.writer else None
        return checkpoint_path, plot_path


def _gif_key(keys: jax.Array) -> jax.Array:
    """The key of the GIF's episode: the first seed's, on a stream of its own."""
    return jax.random.fold_in(keys[0], _GIF_STREAM)


def _write_gif(runner: Any, state: Any, keys: jax.Array, out_dir: str) -> str:
    """``<out_dir>/episode.gif``: one episode of the first member's policy (``runner.render_episode``).

    In a many-process run ``state`` must be readable by every process (``hosts.global_values``);
    process 0 draws the episode and writes the file, the others return its path.
    """
    from lamella.envs.rendering import save_frames

    path = os.path.join(out_dir, "episode.gif")
    if not hosts.is_writer():
        return path
    first = jax.tree.map(lambda x: x[0], state)
    frames, length = jax.jit(runner.render_episode)(first, _gif_key(keys))
    return save_frames(np.asarray(frames)[: int(length)], path, fps=10)


def _complete_log(log: RunLog) -> None:
    """Give the run log its ``absolute_metrics`` (the last evaluation, without training metrics)."""
    final = log.steps[-1]["metrics"]
    log.set_absolute(
        {run: {k: v for k, v in final[run].items() if not k.startswith("train_")} for run in log.runs}
    )
    log.write()


def _plot(log: RunLog, spec: RunSpec) -> str:
    from lamella.agents.plotting import plot_learning_curve

    out = os.path.join(log.directory, "learning_curve.png")
    return plot_learning_curve(log.json_path, out, metric=_log_name(spec.score))


def _final_scores(log: RunLog, spec: RunSpec) -> np.ndarray:
    name = _log_name(spec.score)
    last = log.steps[-1]["metrics"] if log.steps else {}
    return np.array([np.mean(last.get(run, {}).get(name, [np.nan])) for run in log.runs])


def _variants_key(
    variants: list[dict[str, int | float]] | None,
) -> tuple[tuple[tuple[str, Any], ...], ...] | None:
    return None if variants is None else tuple(tuple(v.items()) for v in variants)


def _resume_from(checkpoint: str, shapes: ProgramShapes, log: RunLog) -> tuple[Any, int]:
    """The state and iteration of ``checkpoint``, with ``log`` read back to its evaluations."""
    try:
        state, metadata = ckpt.load_checkpoint(checkpoint, shapes.state)
    except ckpt.CheckpointError as error:
        raise ConfigError(
            f"Cannot resume {checkpoint}: its state does not fit this runner ({error}) It was written "
            "for another env (for example another number of agents), network or batch size; resume it "
            "with the runner that wrote it."
        ) from error
    log.load()
    if len(log.steps) < metadata["num_evaluations"]:
        raise ValueError(
            f"{log.json_path} has {len(log.steps)} evaluations, the checkpoint expects {metadata['num_evaluations']}."
        )
    # A run killed after logging an evaluation but before its checkpoint logged more than the
    # checkpoint has seen; those entries are recomputed identically below.
    log.truncate(int(metadata["num_evaluations"]))
    return state, int(metadata["iteration"])


def run(
    runner: Any,
    spec: RunSpec,
    *,
    seeds: int | Sequence[int] = 1,
    variants: Sequence[Variant] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    resume: bool | str | os.PathLike[str] = False,
    chunk_iterations: int | None = None,
    checkpoint_every: int = 1,
    keep_checkpoints: int | None = 3,
    progress: bool = True,
    progress_stream: TextIO | None = None,
    tensorboard: bool = False,
    plot: bool = True,
    max_chunks: int | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
    compile_mode: str | None = None,
    record_vault: bool | str | os.PathLike[str] | None = None,
    gif: bool = False,
    num_devices: int | None = None,
    dry_run: bool = False,
) -> RunResult:
    """Train any runner for a population (seeds, times config variants) in one vmapped
    program, logging, checkpointing and plotting.

    Args:
        runner: a :class:`~lamella.agents.runner.Runner` built by any code; with ``variants``,
            a function ``values -> Runner`` (see :func:`compile_runner`).
        spec: names for the run log and the settings checked on resume (:class:`RunSpec`).
        seeds: number of seeds (``0..n-1``) or an explicit list; each becomes run ``seed_<n>``.
        variants: ``[{field: number}, ...]``: a sweep; every variant trains every seed, all in
            one compiled program. Each variant is its own ``algorithm`` in the run log
            (``ppo[learning_rate=0.001]``, :func:`variant_name`), so lamella-eval compares them.
        out_dir, resume, chunk_iterations, checkpoint_every, keep_checkpoints, progress,
        progress_stream, tensorboard, plot, max_chunks, extra_metadata, compile_mode,
        record_vault, gif, num_devices, dry_run: as for :func:`run_experiment`.

    Returns:
        A :class:`RunResult`.
    """
    if not isinstance(spec, RunSpec):
        raise TypeError(f"run(runner, spec): spec must be a RunSpec, got {type(spec).__name__}.")
    if variants is None and not all(hasattr(runner, name) for name in ("init", "step", "evaluate")):
        raise TypeError(
            f"run(runner, spec) takes a Runner (init, step, evaluate, ...), got {type(runner).__name__}; "
            "with variants=, a function values -> Runner."
        )
    checked = _variant_list(variants)
    axes = getattr(runner, "metric_axes", None)
    if isinstance(axes, Mapping) and hasattr(
        runner, "_replace"
    ):  # hashable, so an equal runner reuses its compiled programs
        runner = runner._replace(metric_axes=tuple(axes.items()))

    def build(num_seeds: int, mode: str, num_devices: int) -> CompiledRunner:
        return _compiled_runner(runner, num_seeds, mode, _variants_key(checked), num_devices)

    return _run(
        build,
        spec,
        seeds=seeds,
        variants=checked,
        out_dir=out_dir,
        resume=resume,
        chunk_iterations=chunk_iterations,
        checkpoint_every=checkpoint_every,
        keep_checkpoints=keep_checkpoints,
        progress=progress,
        progress_stream=progress_stream,
        tensorboard=tensorboard,
        plot=plot,
        max_chunks=max_chunks,
        extra_metadata=extra_metadata,
        compile_mode=compile_mode,
        record_vault=record_vault,
        gif=gif,
        num_devices=num_devices,
        dry_run=dry_run,
    )


def run_experiment(
    config: Any,
    *,
    seeds: int | Sequence[int] = 1,
    variants: Sequence[Variant] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    resume: bool | str | os.PathLike[str] = False,
    chunk_iterations: int | None = None,
    algorithm: str | None = None,
    make_runner: Callable[[Any], Any] | None = None,
    checkpoint_every: int = 1,
    keep_checkpoints: int | None = 3,
    progress: bool = True,
    progress_stream: TextIO | None = None,
    tensorboard: bool = False,
    plot: bool = True,
    max_chunks: int | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
    compile_mode: str | None = None,
    record_vault: bool | str | os.PathLike[str] | None = None,
    gif: bool = False,
    num_devices: int | None = None,
    labels: Sequence[str] | None = None,
    dry_run: bool = False,
) -> RunResult:
    """Train ``config`` for every seed (one vmapped program), logging, checkpointing and plotting.

    Args:
        config: an algorithm config (a frozen dataclass; the run log's task is
            :func:`run_log_task`: its ``env_id``, or what its ``run_log_task()`` names).
        seeds: number of seeds (``0..n-1``) or an explicit list; each becomes run ``seed_<n>``.
        variants: ``[{field: number}, ...]``: config fields to sweep, for example
            ``[{"learning_rate": 1e-3}, {"learning_rate": 3e-3}]``. Every variant trains every
            seed in one compiled program (the fields are traced, so they must be numbers the
            runner computes with, not shapes or loop lengths: that is refused with a
            :class:`ConfigError`). Each variant is its own algorithm in the run log
            (``ppo[learning_rate=0.001]``).
        out_dir: run directory; default ``runs/<algorithm>-<env_id>-<timestamp>``. A fresh run
            refuses a directory that already holds a run log or checkpoints.
        resume: True continues from the newest checkpoint in ``out_dir``; a path to a run
            directory or a checkpoint file continues from there (``out_dir`` is then the run
            directory of that checkpoint). A run killed before its first checkpoint starts
            over (its ``config.json`` must match); a finished run is reported
            (``RunResult.already_finished``) and nothing compiles.
        chunk_iterations: iterations per compiled call (default: about 20 evaluations per
            run, preferring a divisor of the number of iterations). A resumed run uses the
            stored value.
        algorithm: runner name in the run log; looked up from the config's type if omitted.
        make_runner: ``config -> Runner``; looked up with ``algorithm`` if omitted (pass both for
            a custom runner).
        checkpoint_every: write a checkpoint every this many chunks (and always at the end).
        keep_checkpoints: newest checkpoints kept (None keeps all).
        progress: show the progress display on ``progress_stream`` (default stderr).
        tensorboard: also log to TensorBoard (needs ``lamella-agents[tensorboard]``).
        plot: write ``learning_curve.png`` when the run finishes.
        max_chunks: stop after this many chunks in this call (a job with a time limit);
            the run continues later with ``resume=True``.
        extra_metadata: JSON-compatible data added to ``config.json`` (for example the preset).
        compile_mode: ``"auto"`` (default), ``"fast"`` or ``"optimized"``: which XLA
            options the programs compile with
            (:func:`compile_options`). A resumed run uses the stored mode.
        record_vault: record every env step the runner collects to flashbax Vaults, one per
            seed, in this folder (``True``: ``<out_dir>/vault``); needs a runner with
            ``Runner.record_step`` (PPO, the off-policy loop, IPPO, MAPPO, ...) and no ``variants``. A resumed run goes on
            recording where it recorded (:mod:`lamella.agents.recording`).
        gif: at the end of the call, draw one evaluation episode of the first seed's policy
            to ``<out_dir>/episode.gif`` (needs ``Runner.render_episode``, as PPO, IPPO and MAPPO
            have, and ``lamella-envs[render]``); a finished run resumed with ``gif=True``
            draws it without training.
        num_devices: split the runner's batch axis (PPO: its envs) over this many devices
            with ``jax.shard_map`` (:mod:`lamella.agents.devices`); the result equals the
            one-device run of the same config up to the order of floating-point sums. Default
            1, or on resume the stored count (a different one is refused). More devices than
            present, a batch it does not divide, or a runner without ``Runner.sharding`` is a
            :class:`ConfigError` before anything compiles. ``config.json`` records the layout.
            Many hosts (:mod:`lamella.agents.hosts`; joined by this call when the
            ``LAMELLA_*`` variables are set): the default is every device of every process;
            process 0 alone writes the run directory (``out_dir`` is required), every process
            gets the global ``RunResult.state``, and a resume on another process count is
            refused.

        labels: the run log's ``algorithm`` name of each variant (one name without
            ``variants``), instead of :func:`variant_name`'s; ``lamella sweep`` names each
            config of a program this way with its shape-changing settings too. Stored, and
            checked on resume.
        dry_run: check everything a run does before XLA compiles, then stop: the arguments,
            the config, the run directory (and, resuming, the checkpoint: read, not changed),
            building the env and the runner, the devices, and tracing and lowering the init,
            chunk and evaluation programs (:func:`compile_ahead` with ``compile=False``).
            Nothing compiles, trains or is written; the result has ``dry_run=True``,
            ``state`` holds the state's shapes (``jax.ShapeDtypeStruct``) and ``iteration``
            where the run would start. Every error is the one the real run raises.

    Returns:
        A :class:`RunResult`.

    Raises:
        ConfigError: unknown algorithm, a variant field that is not a number of the config, or
            resuming with a config, algorithm, seeds or variants that differ from the
            checkpoint's (the message names the differing keys).
        FileExistsError: a fresh run into a directory that holds a previous run.
        FileNotFoundError: nothing to resume from.
    """
    # Everything that can be wrong with the arguments is checked before anything compiles.
    if make_runner is None:
        algorithm, make_runner = find_algorithm(config, algorithm)
    elif algorithm is None:
        raise ValueError("run_experiment: pass algorithm= (its name in the run log) with make_runner=.")
    checked = _variant_list(variants)
    for variant in checked or ():
        fields = config_lib.field_types(type(config))
        wrong = [name for name in variant if name not in fields]
        if wrong:
            raise ConfigError(
                f"variants set {wrong}, which {type(config).__name__} does not have; its fields: {', '.join(fields)}."
            )
        # The values' types, as for key=value overrides, and their ranges (traced in the program).
        config_lib.check_numbers(config_lib.apply_overrides(config, variant))
    config_lib.check_numbers(config)
    config_dict = config_to_dict(config)
    task = run_log_task(config)
    spec = RunSpec(algorithm, task=task, config=config_dict, config_defaults=config_defaults(type(config)))
    metadata = {"config_class": f"{type(config).__module__}.{type(config).__qualname__}"}

    def build(num_seeds: int, mode: str, num_devices: int) -> CompiledRunner:
        return _compiled(make_runner, config, num_seeds, mode, _variants_key(checked), num_devices)

    return _run(
        build,
        spec,
        seeds=seeds,
        variants=checked,
        out_dir=out_dir,
        resume=resume,
        chunk_iterations=chunk_iterations,
        checkpoint_every=checkpoint_every,
        keep_checkpoints=keep_checkpoints,
        progress=progress,
        progress_stream=progress_stream,
        tensorboard=tensorboard,
        plot=plot,
        max_chunks=max_chunks,
        extra_metadata={**metadata, **dict(extra_metadata or {})},
        compile_mode=compile_mode,
        record_vault=record_vault,
        gif=gif,
        num_devices=num_devices,
        labels=labels,
        dry_run=dry_run,
    )


def _run(
    build: Callable[[int, str, int], CompiledRunner],
    spec: RunSpec,
    *,
    seeds: int | Sequence[int],
    variants: list[dict[str, int | float]] | None,
    out_dir: str | os.PathLike[str] | None,
    resume: bool | str | os.PathLike[str],
    chunk_iterations: int | None,
    checkpoint_every: int,
    keep_checkpoints: int | None,
    progress: bool,
    progress_stream: TextIO | None,
    tensorboard: bool,
    plot: bool,
    max_chunks: int | None,
    extra_metadata: Mapping[str, Any] | None,
    compile_mode: str | None,
    record_vault: bool | str | os.PathLike[str] | None = None,
    gif: bool = False,
    num_devices: int | None = None,
    labels: Sequence[str] | None = None,
    dry_run: bool = False,
) -> RunResult:
    started = time.perf_counter()
    # A many-host run set up by the environment joins its processes before JAX runs anything.
    hosts.initialize()
    num_processes = jax.process_count()
    writer = hosts.is_writer()
    seed_list = _seed_list(seeds)
    label_list = _label_list(labels, variants)
    if chunk_iterations is not None and chunk_iterations < 1:
        raise ValueError(f"chunk_iterations must be >= 1, got {chunk_iterations}.")
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}.")
    if tensorboard:
        require_tensorboard()
    if keep_checkpoints is not None and keep_checkpoints < 1:
        raise ValueError(f"keep_checkpoints must be >= 1 or None, got {keep_checkpoints}.")
    if max_chunks is not None and max_chunks < 0:
        raise ValueError(f"max_chunks must be >= 0, got {max_chunks}.")
    if compile_mode is not None and compile_mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, got {compile_mode!r}.")

    if num_processes > 1 and out_dir is None and (resume is False or resume is None):
        raise ConfigError(
            "A run on many processes needs out_dir: the processes must agree on the run directory, and a "
            "default one is named after each process's clock."
        )

    start = _resolve_start(out_dir, resume, lambda: default_out_dir(spec.algorithm, spec.task))
    out_dir = start.out_dir
    record_dir = None
    if record_vault is not None or (start.stored or {}).get("record_vault"):
        from lamella.agents.recording import resolve_record_dir

        stored_dir = _stored_record_dir(start.stored or {}, out_dir)
        record_dir = resolve_record_dir(
            record_vault, stored_dir, out_dir, start.checkpoint is not None, spec.task, start.stored is None
        )
    checkpoint_dir = os.path.join(out_dir, "checkpoints")
    if start.stored is not None:
        where = start.checkpoint or os.path.join(out_dir, "config.json")
        chunk_iterations, compile_mode, num_devices = _check_stored(
            start.stored,
            where,
            spec,
            seed_list,
            variants,
            chunk_iterations,
            compile_mode,
            num_devices,
            num_processes,
        )
        if start.stored.get("labels") != label_list:
            raise ConfigError(
                f"Cannot resume: the run has labels {start.stored.get('labels')}, not {label_list}."
            )
    compile_mode = compile_mode or "auto"
    if num_devices is None:  # many hosts: every device of every process
        num_devices = jax.device_count() if num_processes > 1 else 1
    members: list[Any] = [
        (variant_name(spec.algorithm, variant), f"seed_{s}") if variant is not None else f"seed_{s}"
        for variant in (variants if variants else [None])
        for s in seed_list
    ]
    if label_list is not None:
        members = [(label, f"seed_{s}") for label in label_list for s in seed_list]
    log = RunLog(
        out_dir,
        spec.environment or env_family(spec.task),
        spec.task,
        spec.algorithm,
        members,
        tensorboard=tensorboard and writer,
        writes=writer and not dry_run,
    )

    if start.checkpoint is not None and start.stored is not None:
        _check_run_log(log, start.stored, start.checkpoint)

    def make_keys() -> jax.Array:
        seed_keys = jax.vmap(jax.random.key)(jnp.asarray(seed_list, dtype=jnp.uint32))
        # Every variant trains with the same seeds' keys (common random numbers across a sweep).
        return jnp.concatenate([seed_keys] * len(variants or [None]))

    # A dry run traces with the keys' shape alone: computing them would compile (small) programs.
    keys = jax.eval_shape(make_keys) if dry_run else make_keys()
    config_path = os.path.join(out_dir, "config.json")
    compiled = build(len(seed_list), compile_mode, num_devices)
    # Asked before training (abstractly: nothing compiles), so a run that cannot write its GIF
    # stops now, not after it trained.
    problem = (
        render_problem(compiled.runner, jax.eval_shape(compiled.init, keys), jax.eval_shape(_gif_key, keys))
        if gif
        else None
    )
    if problem is not None:
        raise ConfigError(
            f"{spec.algorithm}'s runner cannot draw its episodes ({problem}); run without --gif."
        )
    # Every process has looked at the run directory (fresh or resumed) before process 0 changes it.
    hosts.barrier("lamella: run directory resolved")
    if start.stored is not None and writer and not dry_run:
        _clean_after_kill(out_dir, checkpoint_dir, keep_checkpoints, start.checkpoint)

    def result(
        state: Any, iteration: int, checkpoint_path: str | None, plot_path: str | None, **kw: Any
    ) -> RunResult:
        steps = int(compiled.runner.steps_per_iteration)
        num_iterations = int(compiled.runner.num_iterations)
        return RunResult(
            out_dir=out_dir,
            state=state,
            iteration=iteration,
            num_iterations=num_iterations,
            step_count=iteration * steps,
            finished=iteration >= num_iterations,
            metrics_path=log.json_path,
            csv_path=log.csv_path,
            config_path=config_path,
            checkpoint_path=checkpoint_path,
            plot_path=plot_path,
            final_return=_final_scores(log, spec),
            members=[m if isinstance(m, tuple) else (spec.algorithm, m) for m in members],
            **kw,
        )

    if (
        not dry_run
        and start.checkpoint is not None
        and start.stored is not None
        and (int(start.stored["iteration"]) >= int(start.stored["num_iterations"]))
    ):
        # A finished run: finish its bookkeeping if a kill cut it short, compile nothing.
        state, stored = ckpt.load_checkpoint(start.checkpoint, jax.eval_shape(compiled.init, keys))
        log.load()
        log.truncate(int(stored["num_evaluations"]))
        _complete_log(log)
        plot_path = os.path.join(out_dir, "learning_curve.png")
        if plot and writer and not os.path.exists(plot_path):
            plot_path = _plot(log, spec)
        hosts.barrier("lamella: run written")
        return result(
            state,
            int(stored["iteration"]),
            start.checkpoint,
            plot_path if os.path.exists(plot_path) else None,
            already_finished=True,
            gif_path=_write_gif(compiled.runner, state, keys, out_dir) if gif else None,
        )

    runner = compiled.runner
    num_iterations = int(runner.num_iterations)
    steps_per_iteration = int(runner.steps_per_iteration)
    if num_iterations < 1:
        budget = (spec.config or {}).get("total_timesteps")
        raise ConfigError(
            f"The runner has {num_iterations} training iterations ("
            + (f"total_timesteps={budget}, " if budget is not None else "")
            + f"{steps_per_iteration} steps per iteration); "
            + ("raise total_timesteps." if budget is not None else "give it at least one.")
        )
    if chunk_iterations is None:
        chunk_iterations = default_chunk_iterations(num_iterations)
    chunk_iterations = min(chunk_iterations, num_iterations)
    if record_dir is not None:
        compiled = _recording(compiled, chunk_iterations, variants, spec, compile_mode)
    try:
        shapes = compile_ahead(compiled, keys, compile=not dry_run)
    except TypeError as error:
        # A swept value used where JAX needs a Python number (a shape, a loop length, a branch).
        if variants is None or not (isinstance(error, _STATIC_USE_ERRORS) or "Tracer" in str(error)):
            raise
        raise _static_use_error(variants[0], error) from error
    layout = _MetricLayout(runner, shapes)
    layout.check_score(spec.score)
    if dry_run:
        iteration = 0
        if start.checkpoint is not None:
            _, iteration = _resume_from(start.checkpoint, shapes, log)
        hosts.barrier("lamella: dry run checked")
        return result(shapes.state, iteration, start.checkpoint, None, dry_run=True)
    session = _Session(
        compiled=compiled,
        layout=layout,
        log=log,
        spec=spec,
        seed_list=seed_list,
        variants=variants,
        eval_keys=jax.vmap(lambda k: jax.random.fold_in(k, _EVAL_STREAM))(keys),
        chunk_iterations=chunk_iterations,
        compile_mode=compile_mode,
        checkpoint_dir=checkpoint_dir,
        keep_checkpoints=keep_checkpoints,
        checkpoint_every=checkpoint_every,
        num_devices=num_devices,
        labels=label_list,
        writer=writer,
        versions=ckpt.versions(spec.algorithm),
    )
    if record_dir is not None:
        from lamella.agents.recording import VaultRecorder

        session.recorder = VaultRecorder(
            record_dir,
            spec.task,
            [m if isinstance(m, str) else "_".join(m) for m in members],
            shapes.experience,
            {"algorithm": spec.algorithm, "config": dict(spec.config or {})},
        )
        first = int((start.stored or {}).get("iteration", 0)) if start.checkpoint is not None else 0
        session.recorder.open(first, fresh=start.stored is None)

    if start.checkpoint is not None:
        state, iteration = _resume_from(start.checkpoint, shapes, log)
        checkpoint_path: str | None = start.checkpoint
        session.saved = iteration
    else:
        run_info = {
            "algorithm": spec.algorithm,
            "config": dict(spec.config or {}),
            **{k: v for k, v in dict(extra_metadata or {}).items() if k == "config_class"},
            "seeds": seed_list,
            **({"variants": variants} if variants is not None else {}),
            **({"labels": label_list} if label_list is not None else {}),
            "chunk_iterations": chunk_iterations,
            "compile_mode": compile_mode,
            "devices": devices_lib.device_layout(num_devices, getattr(runner, "sharding", None)),
            **(_record_dir_metadata(record_dir, out_dir) if record_dir is not None else {}),
            "num_iterations": num_iterations,
            "steps_per_iteration": steps_per_iteration,
            "environment": log.environment,
            "versions": session.versions,
            **{k: v for k, v in dict(extra_metadata or {}).items() if k != "config_class"},
        }
        if writer:
            os.makedirs(out_dir, exist_ok=True)
            atomic_write_text(config_path, json.dumps(run_info, indent=1) + "\n")
        state = compiled.init(keys)
        iteration = 0
        session.start(state)
        checkpoint_path = None

    label = f"{spec.algorithm} {spec.task} x{len(seed_list)} seeds"
    if variants is not None:
        label += f" x{len(variants)} variants"
    if num_devices > 1:
        label += f" on {num_devices} devices"
    if num_processes > 1:
        label += f" of {num_processes} processes"
    bar = Progress(
        num_iterations * steps_per_iteration,
        label,
        stream=progress_stream,
        enabled=progress and writer,
        initial_steps=iteration * steps_per_iteration,
        seeds=len(members),
        start_time=started,
    )
    global _RUN_DIRECTORY
    outer, _RUN_DIRECTORY = _RUN_DIRECTORY, os.path.abspath(out_dir)
    try:
        state, iteration, checkpoint_path = session.train(state, iteration, checkpoint_path, max_chunks, bar)
    finally:
        _RUN_DIRECTORY = outer
        bar.close()
        log.close()
    final_plot_path: str | None = None
    if iteration >= num_iterations:
        checkpoint_path, final_plot_path = session.finish(state, iteration, checkpoint_path, plot)
    state = hosts.global_values(state)
    gif_path = _write_gif(runner, state, keys, out_dir) if gif else None
    # Every process returns once process 0 has written the run directory (a caller may read it).
    hosts.barrier("lamella: run written")
    return result(state, iteration, checkpoint_path, final_plot_path, gif_path=gif_path)


class LoadedRun(NamedTuple):
    """A checkpoint brought back to life by :func:`load_run`."""

    algorithm: str
    config: Any
    runner: Any
    state: Any
    metadata: dict[str, Any]


def load_run(path: str | os.PathLike[str]) -> LoadedRun:
    """Load a run's newest checkpoint (``path`` is a run directory) or a given checkpoint file.

    The config is rebuilt from the checkpoint, the runner from the algorithm table, and the
    state restored into the structure of ``vmap(runner.init)`` (population axis leading: the
    seeds, repeated for each variant of a sweep, ``metadata["variants"]``). Evaluate it with
    ``jax.vmap(loaded.runner.evaluate)(loaded.state, keys)``.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        found = ckpt.latest_checkpoint(os.path.join(path, "checkpoints"))
        if found is None:
            raise FileNotFoundError(f"No checkpoints/checkpoint_*.msgpack in {path!r}.")
        path = found
    metadata = ckpt.read_metadata(path)
    table = config_lib.algorithm_table()
    if metadata["algorithm"] not in table:
        raise ConfigError(
            f"{path} is a {metadata['algorithm']!r} checkpoint; known algorithms: {', '.join(sorted(table))}."
        )
    config_cls, make_runner = table[metadata["algorithm"]]
    config = config_lib.config_from_dict(config_cls, metadata["config"])
    runner = make_runner(config)
    seeds = list(metadata["seeds"]) * len(metadata.get("variants") or [None])
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, dtype=jnp.uint32))
    state, metadata = ckpt.load_checkpoint(path, jax.eval_shape(jax.vmap(runner.init), keys))
    return LoadedRun(metadata["algorithm"], config, runner, state, metadata)
