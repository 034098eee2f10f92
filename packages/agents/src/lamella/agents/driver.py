"""The host-side training driver shared by every runner.

:func:`run_experiment` trains one config for several seeds at once. The seeds are a ``vmap``
axis: ``runner.init`` is vmapped over one key per seed, and training runs in *chunks* of
iterations, each chunk one call of a compiled ``vmap`` over seeds of a loop of
``runner.step`` (a ``lax.while_loop`` whose trip count is an argument, so every chunk length,
the shorter last one included, runs the same compiled program). Between chunks, on the host, the driver

* evaluates the greedy policy of every seed (``vmap(runner.evaluate)``),
* appends to the run log (``metrics.json`` in the marl-eval layout, ``metrics.csv``,
  optionally TensorBoard), rewritten atomically,
* writes a checkpoint (msgpack, no code on load, atomic, the newest few kept),
* updates the progress display,

and at the end it plots ``learning_curve.png``. The compiled functions are reused across
calls with an equal config in one process.

Resume: ``run_experiment(config, out_dir=..., resume=True)`` restores the newest checkpoint
into the structure of ``runner.init``, cuts the run log back to the evaluations that
checkpoint had seen, and continues with the same chunks and evaluation keys, so the final
parameters and the run log are bit-identical to a run that never stopped. A config that
differs from the checkpoint's is refused, naming the differing keys.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TextIO

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents import checkpoint as ckpt
from lamella.agents import config as config_lib
from lamella.agents._files import atomic_write_text
from lamella.agents.config import ConfigError, config_diff, config_to_dict
from lamella.agents.progress import Progress
from lamella.agents.runlog import RunLog, env_family

__all__ = [
    "CompiledRunner",
    "LoadedRun",
    "RunResult",
    "compile_ahead",
    "compile_options",
    "compile_runner",
    "default_chunk_iterations",
    "default_out_dir",
    "find_algorithm",
    "load_run",
    "run_experiment",
]

# Evaluation keys are fold_in(key(seed), _EVAL_STREAM) folded with the evaluation index, so they
# never coincide with the keys a runner derives from key(seed) by splitting, and a resumed run
# evaluates with exactly the keys of an uninterrupted one.
_EVAL_STREAM = 0x6576616C  # "eval"


@dataclasses.dataclass
class RunResult:
    """What :func:`run_experiment` did.

    Attributes:
        out_dir: the run directory.
        state: the runner state after the last chunk run, seed axis leading.
        iteration: training iterations done (per seed).
        num_iterations: iterations of the whole run.
        step_count: environment steps done per seed.
        finished: whether the run reached ``num_iterations``.
        metrics_path: ``metrics.json``; ``csv_path``: ``metrics.csv``; ``config_path``: ``config.json``.
        checkpoint_path: the newest checkpoint (None if none was written).
        plot_path: ``learning_curve.png`` (None until the run finishes or with ``plot=False``).
        final_return: mean greedy return of the last evaluation, one per seed.
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
    values = [int(s) for s in seeds]
    if not values or len(set(values)) != len(values) or min(values) < 0:
        raise ValueError(f"seeds must be distinct non-negative integers, got {list(seeds)}.")
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
_RUN_ONCE_CPU = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
_COMPILE_FAST_CPU = {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": False}


@functools.cache
def _cpu_options_supported(options: tuple[tuple[str, Any], ...]) -> bool:
    """Whether the installed XLA accepts ``options`` (a flag can disappear in a later jaxlib)."""
    try:
        jax.jit(lambda x: x + 1, compiler_options=dict(options)).lower(jnp.zeros(())).compile()
    except Exception:  # any rejection of an option: use XLA's defaults
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
    if program == "chunk":
        options = _COMPILE_FAST_CPU if (num_seeds == 1 or mode == "fast") else None
    else:
        options = _RUN_ONCE_CPU if program == "init" else _COMPILE_FAST_CPU
    if options is None or not _cpu_options_supported(tuple(sorted(options.items()))):
        return None
    return dict(options)


class CompiledRunner(NamedTuple):
    """A runner with the driver's vmapped, jitted functions (seeds on the leading axis).

    Attributes:
        runner: the :class:`~lamella.agents.runner.Runner`.
        init: ``init(keys) -> states``.
        evaluate: ``evaluate(states, keys) -> metrics``.
        chunk: ``chunk(states, length) -> (states, mean step metrics)``: ``length``
            iterations of ``runner.step``.
    """

    runner: Any
    init: Callable[[jax.Array], Any]
    evaluate: Callable[[Any, jax.Array], dict[str, jax.Array]]
    chunk: Callable[[Any, jax.Array], tuple[Any, dict[str, jax.Array]]]


def over_seeds(fn: Callable[..., Any], num_seeds: int, in_axes: Any = 0) -> Callable[..., Any]:
    """``jax.vmap(fn, in_axes)``, or for one seed ``fn`` on the only entry of the seed axis.

    The result has the seed axis either way. A single seed is not vmapped so that a
    ``lax.cond`` in the runner (an off-policy warm-up, for example) stays a branch instead of
    becoming a select that computes both sides.
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


def compile_runner(runner: Any, num_seeds: int = 1, mode: str = "auto") -> CompiledRunner:
    """The functions :func:`run_experiment` calls for ``num_seeds`` seeds, jitted with
    :func:`compile_options` for ``mode`` (each compiles at its first call)."""
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
        _make_chunk(runner, num_seeds, compile_options("chunk", num_seeds, mode)),
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


def compile_ahead(compiled: CompiledRunner, keys: jax.Array) -> None:
    """Compile ``compiled``'s three programs for ``keys`` (one key per seed) before their first
    call, XLA compiling while Python traces.

    Each program is traced and lowered in turn on this thread (Python work), then handed to a
    worker thread for XLA's compilation, which runs without the interpreter lock: the training
    chunk, the longest compile, overlaps the tracing of the evaluation and the compilation of
    the others. The executables land in jax's cache, so the later calls with these shapes run
    at once; a call with other shapes or types compiles at its first call, as without this.
    """
    length = jax.ShapeDtypeStruct((), jnp.int32)
    workers = max(1, min(3, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        init = compiled.init.trace(keys).lower()
        jobs = [pool.submit(init.compile)]
        states = init.out_info
        jobs.append(pool.submit(compiled.chunk.trace(states, length).lower().compile))
        jobs.append(pool.submit(compiled.evaluate.trace(states, keys).lower().compile))
        for job in jobs:
            job.result()


def _make_chunk(
    runner: Any, num_seeds: int, options: dict[str, Any] | None
) -> Callable[[Any, jax.Array], tuple[Any, dict[str, jax.Array]]]:
    """``chunk(states, length) -> (states, mean step metrics)`` for every seed at once.

    The number of iterations is a traced argument of a ``while_loop``, so one compiled
    program serves every chunk length (the last, shorter chunk of a run included).
    """

    # Jitted so that its trace is cached: finding the metrics' structure traces the step once,
    # and the loop body reuses that trace (tracing is a good part of a small program's compile).
    step = jax.jit(runner.step)

    def run_chunk(state: Any, length: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        # The structure of the step metrics (for the loop carry), from an abstract trace.
        metric_shapes = jax.eval_shape(lambda s: step(s)[1], state)
        sums = jax.tree.map(lambda m: jnp.zeros(m.shape, jnp.float32), metric_shapes)

        def body(carry: tuple[jax.Array, Any, Any]) -> tuple[jax.Array, Any, Any]:
            i, state, sums = carry
            state, metrics = step(state)
            sums = jax.tree.map(lambda total, m: total + jnp.asarray(m, jnp.float32), sums, metrics)
            return i + 1, state, sums

        _, state, sums = jax.lax.while_loop(
            lambda c: c[0] < length, body, (jnp.zeros((), jnp.int32), state, sums)
        )
        return state, jax.tree.map(lambda total: total / length, sums)

    return jax.jit(over_seeds(run_chunk, num_seeds, in_axes=(0, None)), compiler_options=options)


def _compile(make_runner: Callable[[Any], Any], config: Any, num_seeds: int, mode: str) -> CompiledRunner:
    try:
        runner = make_runner(config)
    except (KeyError, TypeError, ValueError) as error:
        # Building a runner validates the config against the env (unknown env id, sizes that
        # do not divide, ...): a config mistake, reported as one, before anything compiles.
        detail = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise ConfigError(f"Cannot build the runner for {type(config).__name__}: {detail}") from error
    return compile_runner(runner, num_seeds, mode)


@functools.lru_cache(maxsize=8)
def _compile_cached(
    make_runner: Callable[[Any], Any], config: Any, num_seeds: int, mode: str
) -> CompiledRunner:
    return _compile(make_runner, config, num_seeds, mode)


def _compiled(make_runner: Callable[[Any], Any], config: Any, num_seeds: int, mode: str) -> CompiledRunner:
    try:
        return _compile_cached(make_runner, config, num_seeds, mode)
    except TypeError:  # an unhashable config: build afresh
        return _compile(make_runner, config, num_seeds, mode)


def _per_run(metrics: Mapping[str, Any], runs: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """``{name: array (seeds, ...)}`` -> ``{run: {name: list}}``."""
    host = {name: np.asarray(value) for name, value in metrics.items()}
    return {
        run: {name: value[i].reshape(-1).tolist() for name, value in host.items()}
        for i, run in enumerate(runs)
    }


def _eval_metrics(raw: Mapping[str, Any]) -> dict[str, Any]:
    if "episode_return" not in raw:
        raise KeyError(f"runner.evaluate must return 'episode_return'; it returned {sorted(raw)}.")
    return {
        ("mean_episode_return" if name == "episode_return" else name): value for name, value in raw.items()
    }


def _train_metrics(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Chunk means of the scalar step metrics (arrays (seeds,)), named ``train_<name>``."""
    return {f"train_{name}": np.asarray(value) for name, value in raw.items() if np.ndim(value) == 1}


def run_experiment(
    config: Any,
    *,
    seeds: int | Sequence[int] = 1,
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
) -> RunResult:
    """Train ``config`` for every seed (one vmapped program), logging, checkpointing and plotting.

    Args:
        config: an algorithm config (frozen dataclass with ``env_id``, ``total_timesteps``,
            ``eval_episodes``).
        seeds: number of seeds (``0..n-1``) or an explicit list; each becomes run ``seed_<n>``.
        out_dir: run directory; default ``runs/<algorithm>-<env_id>-<timestamp>``. A fresh run
            refuses a directory that already holds a run log or checkpoints.
        resume: True continues from the newest checkpoint in ``out_dir``; a path to a run
            directory or a checkpoint file continues from there (``out_dir`` is then the run
            directory of that checkpoint).
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
        compile_mode: ``"auto"`` (default), ``"fast"`` or ``"optimized"``: which XLA options
            the programs compile with (:func:`compile_options`). A resumed run uses the stored
            mode.

    Returns:
        A :class:`RunResult`.

    Raises:
        ConfigError: unknown algorithm, or resuming with a config, algorithm or seeds that
            differ from the checkpoint's (the message names the differing keys).
        FileExistsError: a fresh run into a directory that holds a previous run.
        FileNotFoundError: nothing to resume from.
    """
    started = time.perf_counter()
    # Everything that can be wrong with the arguments is checked before anything compiles.
    if make_runner is None:
        algorithm, make_runner = find_algorithm(config, algorithm)
    elif algorithm is None:
        raise ValueError("run_experiment: pass algorithm= (its name in the run log) with make_runner=.")
    seed_list = _seed_list(seeds)
    if chunk_iterations is not None and chunk_iterations < 1:
        raise ValueError(f"chunk_iterations must be >= 1, got {chunk_iterations}.")
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}.")
    if max_chunks is not None and max_chunks < 0:
        raise ValueError(f"max_chunks must be >= 0, got {max_chunks}.")
    if compile_mode is not None and compile_mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, got {compile_mode!r}.")
    config_dict = config_to_dict(config)
    env_id = config_dict["env_id"]

    resume_from: str | None = None
    if resume is not False and resume is not None:
        if resume is True:
            if out_dir is None:
                raise ValueError("run_experiment(resume=True) needs out_dir (the run directory to continue).")
            resume_path = os.fspath(out_dir)
        else:
            resume_path = os.fspath(resume)
        if os.path.isfile(resume_path):
            resume_from = resume_path
            out_dir = os.path.dirname(os.path.dirname(os.path.abspath(resume_path)))
        else:
            out_dir = resume_path
            resume_from = ckpt.latest_checkpoint(os.path.join(resume_path, "checkpoints"))
            if resume_from is None:
                raise FileNotFoundError(
                    f"Nothing to resume in {resume_path!r}: no checkpoints/checkpoint_*.msgpack there."
                )
    out_dir = os.fspath(out_dir) if out_dir is not None else default_out_dir(algorithm, env_id)
    checkpoint_dir = os.path.join(out_dir, "checkpoints")
    runs = [f"seed_{s}" for s in seed_list]

    metadata: dict[str, Any] = {}
    if resume_from is not None:
        metadata = ckpt.read_metadata(resume_from)
        differences = config_diff(metadata["config"], config_dict)
        if differences:
            listed = "; ".join(
                f"{k}: checkpoint {old!r}, now {new!r}" for k, (old, new) in differences.items()
            )
            raise ConfigError(
                f"Cannot resume {resume_from}: the config differs in {', '.join(differences)} ({listed}). "
                "Resume with the original config, or start a new run in another --out-dir."
            )
        if metadata["algorithm"] != algorithm:
            raise ConfigError(
                f"Cannot resume: the checkpoint is from {metadata['algorithm']!r}, not {algorithm!r}."
            )
        if list(metadata["seeds"]) != seed_list:
            raise ConfigError(
                f"Cannot resume: the checkpoint has seeds {metadata['seeds']}, not {seed_list}."
            )
        if chunk_iterations is not None and chunk_iterations != metadata["chunk_iterations"]:
            raise ConfigError(
                f"Cannot resume with chunk_iterations={chunk_iterations}: the run used {metadata['chunk_iterations']} "
                "(evaluations happen between chunks, so the run log would differ)."
            )
        chunk_iterations = int(metadata["chunk_iterations"])
        stored_mode = metadata.get("compile_mode", "auto")
        if compile_mode is not None and compile_mode != stored_mode:
            raise ConfigError(
                f"Cannot resume with compile_mode={compile_mode!r}: the run used {stored_mode!r} "
                "(the compiler options change results in the last bits)."
            )
        compile_mode = stored_mode
    elif os.path.exists(os.path.join(out_dir, "metrics.json")) or ckpt.list_checkpoints(checkpoint_dir):
        raise FileExistsError(
            f"{out_dir!r} already holds a run; continue it with resume (--resume {out_dir}) or pick another out_dir."
        )

    compile_mode = compile_mode or "auto"
    compiled = _compiled(make_runner, config, len(seed_list), compile_mode)
    runner = compiled.runner
    num_iterations = int(runner.num_iterations)
    steps_per_iteration = int(runner.steps_per_iteration)
    if num_iterations < 1:
        raise ConfigError(
            f"The config gives {num_iterations} training iterations (total_timesteps={config_dict['total_timesteps']}, "
            f"{steps_per_iteration} steps per iteration); raise total_timesteps."
        )
    if chunk_iterations is None:
        chunk_iterations = default_chunk_iterations(num_iterations)
    chunk_iterations = min(chunk_iterations, num_iterations)

    keys = jax.vmap(jax.random.key)(jnp.asarray(seed_list, dtype=jnp.uint32))
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, _EVAL_STREAM))(keys)
    compile_ahead(compiled, keys)
    log = RunLog(out_dir, env_family(env_id), env_id, algorithm, runs, tensorboard=tensorboard)
    config_path = os.path.join(out_dir, "config.json")

    def evaluate(state: Any, index: int) -> dict[str, Any]:
        step_keys = jax.vmap(lambda k: jax.random.fold_in(k, index))(eval_keys)
        return _eval_metrics(compiled.evaluate(state, step_keys))

    def save(state: Any, iteration: int) -> str:
        meta = {
            "algorithm": algorithm,
            "config": config_dict,
            "seeds": seed_list,
            "iteration": iteration,
            "num_iterations": num_iterations,
            "steps_per_iteration": steps_per_iteration,
            "chunk_iterations": chunk_iterations,
            "compile_mode": compile_mode,
            "num_evaluations": len(log.steps),
            "versions": ckpt.versions(),
        }
        return ckpt.save_checkpoint(checkpoint_dir, state, meta, step=iteration, keep=keep_checkpoints)

    if resume_from is not None:
        target = jax.eval_shape(compiled.init, keys)  # traced already by compile_ahead
        state, metadata = ckpt.load_checkpoint(resume_from, target)
        iteration = int(metadata["iteration"])
        log.load()
        if len(log.steps) < metadata["num_evaluations"]:
            raise ValueError(
                f"{log.json_path} has {len(log.steps)} evaluations, the checkpoint expects {metadata['num_evaluations']}."
            )
        # A run killed after logging an evaluation but before its checkpoint logged more than the
        # checkpoint has seen; those entries are recomputed identically below.
        log.truncate(int(metadata["num_evaluations"]))
        checkpoint_path: str | None = resume_from
    else:
        os.makedirs(out_dir, exist_ok=True)
        run_info = {
            "algorithm": algorithm,
            "config": config_dict,
            "config_class": f"{type(config).__module__}.{type(config).__qualname__}",
            "seeds": seed_list,
            "chunk_iterations": chunk_iterations,
            "compile_mode": compile_mode,
            "num_iterations": num_iterations,
            "steps_per_iteration": steps_per_iteration,
            "environment": log.environment,
            "versions": ckpt.versions(),
            **dict(extra_metadata or {}),
        }
        atomic_write_text(config_path, json.dumps(run_info, indent=1) + "\n")
        state = compiled.init(keys)
        iteration = 0
        first = evaluate(state, 0)
        log.add(0, _per_run(first, runs))
        log.write()
        checkpoint_path = None

    bar = Progress(
        num_iterations * steps_per_iteration,
        f"{algorithm} {env_id} x{len(seed_list)} seeds",
        stream=progress_stream,
        enabled=progress,
        initial_steps=iteration * steps_per_iteration,
        seeds=len(seed_list),
        start_time=started,
    )
    chunks_done = 0
    try:
        while iteration < num_iterations and (max_chunks is None or chunks_done < max_chunks):
            length = min(chunk_iterations, num_iterations - iteration)
            state, step_metrics = compiled.chunk(state, jnp.asarray(length, jnp.int32))
            iteration += length
            chunks_done += 1
            evaluation = evaluate(state, len(log.steps))
            entry = _per_run({**evaluation, **_train_metrics(step_metrics)}, runs)
            log.add(iteration * steps_per_iteration, entry)
            log.write()
            last_return = float(np.mean(np.asarray(evaluation["mean_episode_return"])))
            if iteration >= num_iterations or (iteration // chunk_iterations) % checkpoint_every == 0:
                checkpoint_path = save(state, iteration)
            bar.update(iteration * steps_per_iteration, last_return)
    finally:
        bar.close()
        log.close()

    finished = iteration >= num_iterations
    plot_path = None
    if finished:
        final = log.steps[-1]["metrics"]
        log.set_absolute(
            {run: {k: v for k, v in final[run].items() if not k.startswith("train_")} for run in runs}
        )
        log.write()
        if checkpoint_path is None or ckpt.read_metadata(checkpoint_path)["iteration"] != iteration:
            checkpoint_path = save(state, iteration)
        if plot:
            from lamella.agents.plotting import plot_learning_curve

            plot_path = plot_learning_curve(log.json_path, os.path.join(out_dir, "learning_curve.png"))
    final_return = np.array(
        [np.mean(log.steps[-1]["metrics"][run].get("mean_episode_return", [np.nan])) for run in runs]
    )
    return RunResult(
        out_dir=out_dir,
        state=state,
        iteration=iteration,
        num_iterations=num_iterations,
        step_count=iteration * steps_per_iteration,
        finished=finished,
        metrics_path=log.json_path,
        csv_path=log.csv_path,
        config_path=config_path,
        checkpoint_path=checkpoint_path,
        plot_path=plot_path,
        final_return=final_return,
    )


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
    state restored into the structure of ``vmap(runner.init)`` (seed axis leading). Evaluate
    it with ``jax.vmap(loaded.runner.evaluate)(loaded.state, keys)``.
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
    keys = jax.vmap(jax.random.key)(jnp.asarray(metadata["seeds"], dtype=jnp.uint32))
    state, metadata = ckpt.load_checkpoint(path, jax.eval_shape(jax.vmap(runner.init), keys))
    return LoadedRun(metadata["algorithm"], config, runner, state, metadata)
