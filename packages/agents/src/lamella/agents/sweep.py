"""Hyper-parameter sweeps: a grid of configs, as few compiled programs as the grid allows.

::

    plan = plan_sweep("ppo", config, {"learning_rate": [1e-4, 3e-4], "num_envs": [4, 8]}, seeds=3)
    result = run_sweep(plan, "runs/sweep")            # or run_sweep(plan, ..., ray_address="host:6379")

The grid's cartesian product is split by what each swept field does in the runner:

* a *traced* field (a number the runner computes with: a learning rate, a clip range, a
  coefficient) becomes a ``variants`` axis of the driver, so every config that differs only in
  traced fields trains in ONE compiled program, side by side over the population axis
  (configs x seeds);
* a *static* field (a shape, a loop length, a branch, a string or a boolean, or a number that
  changes the number of iterations) splits the grid into *programs*, one per combination of
  static values, each compiled on its own.

Which fields are traced is found, not declared: a numeric field whose values give the same
iteration counts is traced if the runner builds, initialises, steps and evaluates with it as
an abstract traced scalar (``jax.eval_shape``: tracing only, nothing compiles); any failure
makes it static (safe: a static field only costs a compile). ``sweep.json`` records the
choice and why.

Every program is an ordinary run directory ``<out>/<program>/`` (``metrics.json``,
``metrics.csv``, ``config.json``, ``checkpoints/``) whose run-log ``algorithm`` names are the
configs, ``ppo[learning_rate=0.0003,num_envs=8]`` (grid order), so ``lamella eval aggregate
<out>`` reads the whole sweep as one comparison of algorithms and ranks them by IQM. With a
Ray address the programs run as Ray tasks (one per program, each holding one GPU where the
cluster has GPUs, else one CPU), and their run directories are copied back into ``<out>``.
With ``num_devices`` every program splits its batch over that many devices (variants and
seeds a ``vmap`` inside each device), and a Ray task holds that many GPUs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lamella.agents import config as config_lib
from lamella.agents._files import atomic_write_text
from lamella.agents.config import ConfigError

__all__ = [
    "SWEEP_FILE",
    "SweepPlan",
    "SweepProgram",
    "SweepResult",
    "config_label",
    "connect_ray",
    "parse_grid",
    "plan_sweep",
    "run_sweep",
]

SWEEP_FILE = "sweep.json"


def _split_top_level(text: str) -> list[str]:
    """``"1e-4,3e-4"`` -> two items; commas inside brackets stay (``"(64,64),(32,32)"``)."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    items.append("".join(current).strip())
    return items


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """``["learning_rate=1e-4,3e-4", "clip_eps=0.1"]`` -> ``{"learning_rate": ["1e-4", "3e-4"], "clip_eps": ["0.1"]}``.

    Values are comma separated; a tuple value is written in brackets
    (``hidden_sizes=(64,64),(32,32)``). A key with one value is a plain override.

    Raises:
        ConfigError: an item without ``=``, an empty value, or a key or value given twice.
    """
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"Grid item {item!r} is not of the form key=value1,value2 (for example learning_rate=1e-4,3e-4)."
            )
        if key in grid:
            raise ConfigError(f"Grid key {key!r} is given twice; list all its values in one item.")
        values = _split_top_level(text)
        if any(not v for v in values):
            raise ConfigError(f"Grid item {item!r} has an empty value; write key=value1,value2.")
        if len(set(values)) != len(values):
            raise ConfigError(f"Grid item {item!r} lists a value twice.")
        grid[key] = values
    return grid


def _text(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "(" + ",".join(_text(v) for v in value) + ")"
    return str(value)


def config_label(algorithm: str, settings: Mapping[str, Any]) -> str:
    """The run log's ``algorithm`` name of one config of a sweep: ``ppo[learning_rate=0.0003,num_envs=8]``.

    Numbers read as :func:`lamella.agents.driver.variant_name` writes them; tuples as
    ``(64,64)``. ``docs/run-log-format.md`` ("Sweeps") is the contract lamella-eval parses.
    """
    if not settings:
        return algorithm
    return f"{algorithm}[{','.join(f'{k}={_text(v)}' for k, v in settings.items())}]"


@dataclasses.dataclass(frozen=True)
class SweepProgram:
    """One compiled program of a sweep.

    Attributes:
        name: its run directory under the sweep's folder (``p0``, ``p1-num_envs=8``).
        fixed: the static settings this program's configs share (grid fields that are not traced).
        variants: ``[{traced field: value}, ...]`` trained side by side, or None (one config).
        labels: the run-log ``algorithm`` name of each config (one per variant).
        config: the program's config (static settings applied; traced fields at the first variant's values).
    """

    name: str
    fixed: dict[str, Any]
    variants: list[dict[str, int | float]] | None
    labels: list[str]
    config: Any


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """What :func:`plan_sweep` decided: the grid, which fields are traced, and the programs.

    Attributes:
        algorithm: the algorithm name (``lamella train --list``).
        config: the base config (single-valued grid items applied).
        grid: ``{field: [typed values]}`` of the swept fields (two values or more), in grid order.
        traced: swept fields that run as traced numbers in one program.
        static: swept fields that split the grid into programs, with the reason for each.
        seeds: the seeds every config trains with.
        programs: the programs, in grid order.
        num_devices: the devices each program splits its runner's batch over (``None``: the
            driver's default, or a resumed program's).
    """

    algorithm: str
    config: Any
    grid: dict[str, list[Any]]
    traced: list[str]
    static: dict[str, str]
    seeds: list[int]
    programs: list[SweepProgram]
    num_devices: int | None = None

    @property
    def num_configs(self) -> int:
        return sum(len(p.labels) for p in self.programs)


@dataclasses.dataclass
class SweepResult:
    """What :func:`run_sweep` did: ``out_dir``, the plan, one summary per program (its run
    directory, wall time, host, final score per config) and ``scores``: ``{label: [final score per seed]}``."""

    out_dir: str
    plan: SweepPlan
    programs: list[dict[str, Any]]
    scores: dict[str, list[float]]


# What a traced probe raises when the runner needs a Python value (a shape, a loop length, a branch).
def _static_reason(error: Exception) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"used as a Python value ({type(error).__name__}: {first[:160]})"


def _numeric(values: Sequence[Any], tp: Any) -> bool:
    return tp in (int, float) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )


def _probe(make_runner: Callable[[Any], Any], config: Any, fields: Mapping[str, Sequence[Any]]) -> str | None:
    """None if the runner builds, initialises, steps and evaluates with ``fields`` as traced
    scalars (abstract tracing only), else why not."""
    import jax
    import jax.numpy as jnp

    def trace(values: dict[str, Any]) -> Any:
        runner = make_runner(dataclasses.replace(config, **values))
        key = jax.random.key(0)
        state = runner.init(key)
        state, metrics = runner.step(state)[:2]
        return state, metrics, runner.evaluate(state, key)

    shapes = {
        name: jax.ShapeDtypeStruct((), jnp.float32 if any(isinstance(v, float) for v in vals) else jnp.int32)
        for name, vals in fields.items()
    }
    try:
        jax.eval_shape(trace, shapes)
    except Exception as error:  # any failure: the field cannot be one program's traced value
        return _static_reason(error)
    return None


def _classify(
    make_runner: Callable[[Any], Any], config: Any, grid: Mapping[str, list[Any]]
) -> tuple[list[str], dict[str, str]]:
    """``(traced fields, {static field: reason})`` for the swept fields of ``grid``."""
    types_ = config_lib.field_types(type(config))
    static: dict[str, str] = {}
    candidates: dict[str, list[Any]] = {}
    for name, values in grid.items():
        if not _numeric(values, types_[name]):
            static[name] = f"not a number ({config_lib.type_name(types_[name])})"
            continue
        counts = set()
        for value in values:
            runner = make_runner(dataclasses.replace(config, **{name: value}))
            counts.add((int(runner.num_iterations), int(runner.steps_per_iteration)))
        if len(counts) > 1:
            static[name] = "changes the number of iterations or steps per iteration"
            continue
        candidates[name] = values
    if candidates and _probe(make_runner, config, candidates) is not None:
        for name in list(candidates):
            reason = _probe(make_runner, config, {name: candidates[name]})
            if reason is not None:
                static[name] = reason
                del candidates[name]
    return list(candidates), {name: static[name] for name in grid if name in static}


def _folder_name(index: int, fixed: Mapping[str, Any]) -> str:
    text = ",".join(f"{k}={_text(v)}" for k, v in fixed.items())
    safe = "".join(c if c.isalnum() or c in "-_.,=()" else "_" for c in text)[:80]
    return f"p{index}" + (f"-{safe}" if safe else "")


def plan_sweep(
    algorithm: str,
    config: Any,
    grid: Mapping[str, Sequence[Any]],
    seeds: int | Sequence[int] = 1,
    *,
    make_runner: Callable[[Any], Any] | None = None,
    num_devices: int | None = None,
) -> SweepPlan:
    """Check a grid against ``algorithm``'s config and split it into programs (nothing compiles).

    Args:
        algorithm: a registered algorithm (``lamella train --list``).
        config: the base config (a preset with overrides).
        grid: ``{field: values}``; values a list (or an array) of text (parsed as the field's
            type, like ``key=value`` overrides) or typed values. A field with one value is an override.
        seeds: a count (``0..n-1``) or a list; every config trains every seed.
        make_runner: ``config -> Runner``; default: the algorithm's.
        num_devices: split every config's batch (PPO: its envs) over this many devices, as
            ``run_experiment(num_devices=...)`` does for one run; ``None``: its default.

    Raises:
        ConfigError: an unknown field or a value of the wrong type (naming the valid keys), values
            that are not a list (a string, a number), no
            field with two values or more, a value listed twice, a config the runner refuses
            (a size that does not divide, ...), or one it cannot split over ``num_devices``
            (:func:`lamella.agents.devices.check_runner`), all before anything compiles.
    """
    from lamella.agents.devices import check_runner
    from lamella.agents.driver import _build_runner, _seed_list

    config_cls, default_make, _ = config_lib.algorithm_spec(algorithm)
    make = make_runner or default_make
    if not isinstance(config, config_cls):
        raise ConfigError(
            f"Algorithm {algorithm!r} takes a {config_cls.__name__}, got {type(config).__name__}."
        )
    try:
        seed_list = _seed_list(seeds)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if not grid:
        raise ConfigError(
            "The grid is empty; give at least one field with two values (learning_rate=1e-4,3e-4)."
        )
    typed: dict[str, list[Any]] = {}
    overrides: dict[str, Any] = {}
    for name, given in grid.items():
        # A string is one value, not a list of its characters ({"num_envs": "24"} swept 2 and 4).
        if isinstance(given, str | bytes | Mapping) or not hasattr(given, "__iter__"):
            raise ConfigError(
                f"Grid field {name!r} takes a list of values ([1e-4, 3e-4], or text values as "
                f"parse_grid returns them), got {given!r}."
            )
        values = given.tolist() if hasattr(given, "tolist") else list(given)  # arrays: plain numbers
        if not values:
            raise ConfigError(f"Grid field {name!r} has no values.")
        parsed = [getattr(config_lib.apply_overrides(config, {name: v}), name) for v in values]
        if len({json.dumps(v) if isinstance(v, tuple) else repr(v) for v in parsed}) != len(parsed):
            raise ConfigError(f"Grid field {name!r} lists the same value twice: {list(values)}.")
        if len(parsed) == 1:
            overrides[name] = parsed[0]
        else:
            typed[name] = parsed
    if not typed:
        raise ConfigError(
            "No grid field has two values or more, so there is nothing to sweep; give values as "
            "key=value1,value2 (or use lamella train for one config)."
        )
    original: Any = config  # isinstance against a runtime class narrows to object for mypy
    base: Any = dataclasses.replace(original, **overrides)

    def build(settings: Mapping[str, Any]) -> Any:
        return _build_runner(make, dataclasses.replace(base, **settings))

    # Every config of the grid must build before anything compiles (sizes that do not divide, ...).
    combos = [dict(zip(typed, values)) for values in itertools.product(*typed.values())]
    for combo in combos:
        runner = build(combo)
        if int(runner.num_iterations) < 1:
            raise ConfigError(
                f"The config {config_label(algorithm, combo)} has {int(runner.num_iterations)} training "
                f"iterations ({int(runner.steps_per_iteration)} steps per iteration); raise total_timesteps."
            )
        if num_devices is not None:
            check_runner(num_devices, runner, f"The config {config_label(algorithm, combo)}")
    # Fields are classified around the grid's first config (the base alone may not build).
    traced, static = _classify(
        lambda c: _build_runner(make, c), dataclasses.replace(base, **combos[0]), typed
    )
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for combo in combos:
        key = tuple(repr(combo[name]) for name in static)
        groups.setdefault(key, []).append(combo)
    programs = []
    for index, members in enumerate(groups.values()):
        fixed = {name: members[0][name] for name in static}
        variants = [{name: combo[name] for name in traced} for combo in members] if traced else None
        labels = [config_label(algorithm, combo) for combo in members]
        program_config = dataclasses.replace(base, **fixed, **(variants[0] if variants else {}))
        programs.append(SweepProgram(_folder_name(index, fixed), fixed, variants, labels, program_config))
    return SweepPlan(algorithm, base, typed, traced, static, seed_list, programs, num_devices)


def _payload(plan: SweepPlan, program: SweepProgram, options: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a (possibly remote) worker needs to run ``program``, as plain JSON data."""
    return {
        "algorithm": plan.algorithm,
        "config": config_lib.config_to_dict(program.config),
        "variants": program.variants,
        "labels": program.labels,
        "seeds": plan.seeds,
        "name": program.name,
        **dict(options),
    }


def _run_program(payload: Mapping[str, Any], out_dir: str) -> dict[str, Any]:
    """Train one program into ``out_dir`` (a fresh run directory); its summary."""
    from lamella.agents.driver import run_experiment

    config_cls, _, _ = config_lib.algorithm_spec(payload["algorithm"])
    config = config_lib.config_from_dict(config_cls, payload["config"])
    start = time.perf_counter()
    result = run_experiment(
        config,
        algorithm=payload["algorithm"],
        seeds=payload["seeds"],
        variants=payload["variants"],
        labels=payload["labels"],
        out_dir=out_dir,
        resume=bool(payload.get("resume", False)),
        chunk_iterations=payload.get("chunk_iterations"),
        compile_mode=payload.get("compile_mode"),
        num_devices=payload.get("num_devices"),
        progress=bool(payload.get("progress", False)),
        plot=bool(payload.get("plot", False)),
    )
    scores: dict[str, list[float]] = {}
    for (label, _run), score in zip(result.members, result.final_return.tolist()):
        scores.setdefault(label, []).append(float(score))
    return {
        "name": payload["name"],
        "seconds": round(time.perf_counter() - start, 3),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "steps_per_seed": result.step_count,
        "scores": scores,
    }


def _remote_program(payload: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A Ray task: run the program in a temporary folder on the worker; return its summary and
    the files of its run directory (relative path -> bytes) for the caller to write."""
    import jax

    with tempfile.TemporaryDirectory(prefix="lamella-sweep-") as folder:
        run_dir = os.path.join(folder, payload["name"])
        summary = _run_program(payload, run_dir)
        files = {}
        for root, _, names in os.walk(run_dir):
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as handle:
                    files[os.path.relpath(path, run_dir)] = handle.read()
    summary["device"] = str(jax.devices()[0])
    return summary, files


# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5): what
# a gRPC client sends first; a gRPC server (a Ray head's GCS, its Ray Client server) answers
# with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _speaks_http2(address: tuple[str, int], timeout: float = 10.0) -> bool:
    """Whether the listener at ``address`` answers HTTP/2's preface with a SETTINGS frame, as
    a gRPC server does (an HTTP/1 server answers ``HTTP/1.1 400``, another service otherwise or
    not at all). With Ray's TLS on (``RAY_USE_TLS``) the plain preface proves nothing: True.

    Raises:
        OSError: nothing accepts a TCP connection there.
    """
    with socket.create_connection(address, timeout=timeout) as connection:
        if os.environ.get("RAY_USE_TLS", "0").lower() not in ("", "0", "false"):
            return True
        try:
            connection.sendall(_HTTP2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = connection.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
        except (TimeoutError, ConnectionError):
            return False
    return header[3] == 4  # the frame type: SETTINGS


def connect_ray(address: str) -> Any:
    """Connect to the Ray cluster at ``address`` (``host:port``, ``ray://host:port`` or
    ``auto``); return the ``ray`` module.

    Raises:
        ConfigError: Ray is not installed, or nothing answers at the address, or what answers
            does not speak gRPC as a Ray head does (both checked first, so a wrong address fails in
            seconds; Ray itself retries for minutes).
    """
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--ray needs Ray, which is not installed: pip install 'lamella-agents[ray]'."
        ) from None
    if address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(
                f"--ray {address!r} is not an address; give HOST:PORT (the head's GCS port, 6379 by default)."
            )
        try:
            speaks_grpc = _speaks_http2((host, int(port)))
        except OSError as error:
            raise ConfigError(
                f"Cannot reach a Ray cluster at {address} ({error.strerror or error}); start one with "
                "`ray start --head` or fix --ray."
            ) from None
        if not speaks_grpc:
            raise ConfigError(
                f"{address} answers, but not as a Ray cluster (no gRPC: a Ray head's GCS port, 6379 by "
                "default, or its Ray Client port for ray://, 10001 by default); fix --ray."
            )
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    except Exception as error:  # Ray raises ConnectionError, RuntimeError, ... for a bad cluster
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"Cannot connect to the Ray cluster at {address}: {first}") from None
    return ray


def _write_files(run_dir: str, files: Mapping[str, bytes]) -> None:
    for relative, data in files.items():
        path = os.path.join(run_dir, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)


def _plan_record(plan: SweepPlan) -> dict[str, Any]:
    return {
        "algorithm": plan.algorithm,
        "config": config_lib.config_to_dict(plan.config),
        "grid": {k: [list(v) if isinstance(v, tuple) else v for v in vs] for k, vs in plan.grid.items()},
        "traced": plan.traced,
        "static": plan.static,
        "seeds": plan.seeds,
        "programs": [
            {
                "name": p.name,
                "fixed": {k: list(v) if isinstance(v, tuple) else v for k, v in p.fixed.items()},
                "variants": p.variants,
                "labels": p.labels,
            }
            for p in plan.programs
        ],
        "num_devices": plan.num_devices,
    }


def _finished(run_dir: str) -> bool:
    from lamella.agents.driver import _finished_log

    return _finished_log(run_dir)


def _check_resume(out_dir: str, record: Mapping[str, Any]) -> int | None:
    """Refuse to resume a different sweep; return the stored ``num_devices``."""
    path = os.path.join(out_dir, SWEEP_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Nothing to resume: no {SWEEP_FILE} in {out_dir!r}.")
    with open(path, encoding="utf-8") as handle:
        stored = json.load(handle)
    differing = [key for key in ("algorithm", "config", "grid", "seeds") if stored.get(key) != record[key]]
    if "algorithm" in differing:
        differing = ["algorithm"]  # its config and grid differ with it
    if not differing and stored.get("programs") != record["programs"]:
        differing.append("programs")  # the same grid split otherwise (another version's tracing)
    if record["num_devices"] is not None and stored.get("num_devices") != record["num_devices"]:
        differing.append("num_devices")  # none given: the stored count (each program checks it)
    if differing:
        raise ConfigError(
            f"Cannot resume the sweep in {out_dir!r}, which differs from this command in its "
            f"{', '.join(_difference(key, stored.get(key), record[key]) for key in differing)}; resume "
            "with the command that started it, or pick another --out."
        )
    return stored.get("num_devices")


def _difference(key: str, there: Any, here: Any) -> str:
    """``config (num_envs=8 there, 4 here)``: one setting of a stored sweep against this command's."""
    if key == "programs":
        return "programs (the grid splits into other programs)"
    if key == "config" and isinstance(there, dict):
        names = [name for name in {**there, **here} if there.get(name) != here.get(name)]

        def value(config: dict[str, Any], name: str) -> str:
            return _text(config[name]) if name in config else "(absent)"  # another algorithm's field

        shown = "; ".join(
            f"{name}={value(there, name)} there, {value(here, name)} here" for name in names[:3]
        )
        return f"config ({shown}{'; ...' if len(names) > 3 else ''})"
    if key == "grid" and isinstance(there, dict):
        there, here = (
            " ".join(f"{k}={','.join(_text(v) for v in vs)}" for k, vs in g.items()) for g in (there, here)
        )
    return (
        f"{key} ({there!r} there, {here!r} here)"
        if key == "algorithm"
        else f"{key} ({there} there, {here} here)"
    )


def run_sweep(
    plan: SweepPlan,
    out_dir: str | os.PathLike[str],
    *,
    ray_address: str | None = None,
    ray_module: Any = None,
    chunk_iterations: int | None = None,
    compile_mode: str | None = None,
    progress: bool = True,
    plot: bool = False,
    log: Callable[[str], None] | None = None,
    resume: bool = False,
) -> SweepResult:
    """Train every program of ``plan`` into ``out_dir/<program>/`` and write ``out_dir/sweep.json``.

    Args:
        plan: from :func:`plan_sweep`.
        out_dir: the sweep's folder; must not hold a sweep or a run already.
        ray_address: run the programs as Ray tasks on this cluster (:func:`connect_ray`; the
            workers need lamella and the algorithm's package installed); None runs them one
            after the other in this process.
        ray_module: an already connected ``ray`` (from :func:`connect_ray`), instead of ``ray_address``.
        chunk_iterations, compile_mode: as for :func:`lamella.agents.driver.run_experiment`.
        progress: a progress display per program (local runs only).
        plot: each program's ``learning_curve.png``.
        log: called with a line per finished program (default: nothing).
        resume: continue the sweep in ``out_dir`` (the same plan; a different one is refused):
            a finished program is not trained again (nothing compiles), a stopped one resumes
            from its newest checkpoint (on Ray: starts over), a missing one starts.

    Each program splits its batch over ``plan.num_devices`` devices (on Ray, a task holds that
    many GPUs); ``sweep.json`` records the count and each program's ``config.json`` its layout.

    Returns:
        A :class:`SweepResult`.
    """
    out_dir = os.fspath(out_dir)
    record = _plan_record(plan)
    if resume:
        record["num_devices"] = _check_resume(out_dir, record)
    else:
        if os.path.exists(os.path.join(out_dir, SWEEP_FILE)) or os.path.exists(
            os.path.join(out_dir, "metrics.json")
        ):
            raise FileExistsError(
                f"{out_dir!r} already holds a sweep or a run; continue it with --resume or pick another --out."
            )
        for program in plan.programs:
            if os.path.exists(os.path.join(out_dir, program.name)):
                raise FileExistsError(f"{os.path.join(out_dir, program.name)!r} exists; pick another --out.")
    ray = ray_module
    if ray is None and ray_address is not None:
        ray = connect_ray(ray_address)
    os.makedirs(out_dir, exist_ok=True)
    record["ray"] = ray_address if ray is not None else None
    atomic_write_text(os.path.join(out_dir, SWEEP_FILE), json.dumps(record, indent=1) + "\n")
    options = {
        "chunk_iterations": chunk_iterations,
        "compile_mode": compile_mode,
        "plot": plot,
        "num_devices": record["num_devices"],
    }
    start = time.perf_counter()
    summaries: list[dict[str, Any]] = []
    local = plan.programs
    if ray is not None:
        # Resumed on Ray: finished programs are read here (nothing trains); the others start over there.
        local = [p for p in plan.programs if resume and _finished(os.path.join(out_dir, p.name))]
    for program in local:
        run_dir = os.path.join(out_dir, program.name)
        started = resume and os.path.isfile(os.path.join(run_dir, "config.json"))
        kept = started and _finished(run_dir)  # read back, nothing trains
        payload = _payload(plan, program, {**options, "progress": progress, "resume": started})
        summary = _run_program(payload, run_dir)
        summaries.append(summary)
        if log is not None and kept:
            log(f"  {program.name}: finished earlier, kept ({len(program.labels)} config(s))")
        elif log is not None:
            log(f"  {program.name}: {len(program.labels)} config(s) in {summary['seconds']:.1f} s")
    if ray is not None:
        remote = [p for p in plan.programs if p not in local]
        for program in remote:
            shutil.rmtree(os.path.join(out_dir, program.name), ignore_errors=True)
        gpus = record["num_devices"] or 1  # a task holds the devices its program splits over
        resources = {"num_gpus": gpus} if ray.cluster_resources().get("GPU", 0) >= 1 else {"num_cpus": 1}
        task = ray.remote(**resources)(_remote_program)
        pending = {task.remote(_payload(plan, p, options)): p for p in remote}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            program = pending.pop(done[0])
            try:
                summary, files = ray.get(done[0])
            except Exception as error:
                # Ray's error carries the worker's exception as ``cause``; its text is the remote
                # traceback. A config the worker refuses (its devices, ...) is one line, a bug keeps it.
                cause = getattr(error, "cause", None)
                if isinstance(cause, ConfigError):
                    raise ConfigError(f"Program {program.name} failed on the Ray cluster: {cause}") from None
                raise
            _write_files(os.path.join(out_dir, program.name), files)
            summaries.append(summary)
            if log is not None:
                log(
                    f"  {program.name}: {len(program.labels)} config(s) in {summary['seconds']:.1f} s "
                    f"on {summary['host']} ({summary['device']})"
                )
    summaries.sort(key=lambda s: [p.name for p in plan.programs].index(s["name"]))
    scores: dict[str, list[float]] = {}
    for summary in summaries:
        scores.update(summary["scores"])
    record["programs_run"] = summaries
    record["wall_seconds"] = round(time.perf_counter() - start, 3)
    atomic_write_text(os.path.join(out_dir, SWEEP_FILE), json.dumps(record, indent=1) + "\n")
    return SweepResult(out_dir, plan, summaries, scores)
