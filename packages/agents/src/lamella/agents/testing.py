"""Test kit: a tiny runner for drivers, loggers and checkpoints, and learning curves in one compile.

:func:`learning_curves` trains a runner for several seeds and evaluates it after every iteration
inside the same compiled program: what a learning test needs, at the cost of one compile.

:func:`make_bandit_runner` builds a :class:`~lamella.agents.runner.Runner` whose "policy" is a
parameter vector pulled towards a target by a deterministic update plus seeded noise. It
compiles in well under a second, its state holds the pieces a real runner state has (a
parameter pytree, an int32 iteration counter and a typed PRNG key), and its returns rise over
training, so a learning curve, a checkpoint round trip or a resumed run can be checked
exactly. It is registered nowhere by default; tests add it with
:func:`lamella.agents.config.register_algorithm`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, NamedTuple

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from lamella.agents.runner import Runner

__all__ = [
    "BanditConfig",
    "BanditState",
    "assert_threshold",
    "count_compile_ahead",
    "device_child",
    "device_trainer",
    "error_text",
    "flat_run_log",
    "free_port",
    "host_children",
    "learning_curves",
    "make_bandit_runner",
    "max_abs",
    "max_abs_diff",
    "scan_unrolls",
    "sub_jaxprs",
    "uniform_policy",
]


@dataclasses.dataclass(frozen=True)
class BanditConfig:
    """Config of the bandit runner.

    Attributes:
        env_id: a name for the run log (no environment is built).
        total_timesteps: budget; ``num_iterations = total_timesteps // (num_envs * num_steps)``.
        eval_episodes: returns per evaluation.
        num_envs, num_steps: "env steps" per iteration is their product.
        learning_rate: fraction of the distance to the target closed per iteration.
        noise_scale: standard deviation of the noise added to the parameters each iteration.
        param_shape: shape of the parameter array.
        target: the optimum every parameter moves towards.
        greedy_eval: evaluate without noise on the returns.
        label: free text, stored in the config (tests string fields).
    """

    env_id: str = "Bandit-v0"
    total_timesteps: int = 640
    eval_episodes: int = 4
    num_envs: int = 4
    num_steps: int = 8
    learning_rate: float = 0.2
    noise_scale: float = 0.05
    param_shape: tuple[int, ...] = (3,)
    target: float = 1.0
    greedy_eval: bool = True
    label: str = "bandit"


class BanditState(NamedTuple):
    """State of the bandit runner.

    Attributes:
        params: ``{"mean": float32 param_shape}``.
        iteration: int32 ``()``, iterations done.
        key: typed PRNG key ``()``.
    """

    params: dict[str, jax.Array]
    iteration: jax.Array
    key: jax.Array


def make_bandit_runner(config: BanditConfig) -> Runner:
    """A :class:`Runner` for ``config`` (see the module docstring)."""
    steps_per_iteration = config.num_envs * config.num_steps

    def value(mean: jax.Array) -> jax.Array:
        return -jnp.mean(jnp.square(mean - config.target))

    def init(key: jax.Array) -> BanditState:
        key, init_key = jax.random.split(key)
        mean = jax.random.normal(init_key, config.param_shape, jnp.float32)
        return BanditState({"mean": mean}, jnp.zeros((), jnp.int32), key)

    def step(state: BanditState) -> tuple[BanditState, dict[str, jax.Array]]:
        key, noise_key = jax.random.split(state.key)
        mean = state.params["mean"]
        noise = config.noise_scale * jax.random.normal(noise_key, mean.shape, mean.dtype)
        mean = mean + config.learning_rate * (config.target - mean) + noise
        metrics = {"episode_return": value(mean), "loss": -value(mean)}
        return BanditState({"mean": mean}, state.iteration + 1, key), metrics

    def evaluate(state: BanditState, key: jax.Array) -> dict[str, jax.Array]:
        returns = jnp.full((config.eval_episodes,), value(state.params["mean"]), jnp.float32)
        if not config.greedy_eval:
            returns = returns + 0.01 * jax.random.normal(key, returns.shape)
        else:
            returns = returns + 1e-3 * jax.random.uniform(key, returns.shape)
        return {"episode_return": returns, "episode_length": jnp.full((config.eval_episodes,), 10, jnp.int32)}

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        steps_per_iteration=steps_per_iteration,
        num_iterations=config.total_timesteps // steps_per_iteration,
    )


def learning_curves(runner: Runner, num_seeds: int = 2, metric: str = "episode_return") -> jax.Array:
    """Greedy evaluations after every iteration, float32 ``(num_seeds, num_iterations)``.

    The seeds are ``jax.random.split(jax.random.key(0), num_seeds)``, trained side by side in
    one ``jit(vmap(...))``; after each iteration ``runner.evaluate`` runs with the key
    ``fold_in(seed_key, iteration)`` and the mean of ``metric`` over its episodes is kept, so the
    whole learning curve of every seed costs one compile.
    """

    def train(key: jax.Array) -> tuple[Any, jax.Array]:
        state = runner.init(key)

        def body(state: Any, _: None) -> tuple[Any, jax.Array]:
            state, _metrics = runner.step(state)
            evaluation = runner.evaluate(state, jax.random.fold_in(key, state.iteration))
            return state, evaluation[metric].mean()

        return jax.lax.scan(body, state, None, length=runner.num_iterations)

    _, curves = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), num_seeds))
    return curves


def assert_threshold(values: Any, threshold: float, what: str, at_least: bool = True) -> None:
    """Assert every seed's value is ``>= threshold`` (or ``<=`` with ``at_least=False``).

    The failure message names the test's statistic, every seed's value, the threshold and the
    worst seed's margin (negative: by how much it missed), so a near miss reads as one. A
    passing check prints the same line (``pytest -rP`` shows it).
    """

    values = np.asarray(values, np.float64).reshape(-1)
    margins = values - threshold if at_least else threshold - values
    sign = ">=" if at_least else "<="
    report = (
        f"{what}: per seed {np.round(values, 3).tolist()}, threshold {sign} {threshold}; "
        f"worst margin {margins.min():+.4g} (seed {int(np.argmin(margins))})"
    )
    print(report)  # shown with pytest -rP: the measured figures of a passing run
    if not np.all(margins >= 0):
        raise AssertionError(report)


def _once_per_session(base: Any, name: str, compute: Any) -> dict[str, Any]:
    """``compute(out_path)``'s answer (``{"returncode", "stderr", "result"}``), computed by the first
    pytest-xdist worker to ask (a file lock) and read back by the others."""
    base = pathlib.Path(base)
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    result = shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            result.write_text(json.dumps(compute(shared / f"{name}.out")), encoding="utf-8")
    answer: dict[str, Any] = json.loads(result.read_text(encoding="utf-8"))
    assert answer["returncode"] == 0 and answer["result"] is not None, answer["stderr"]
    return answer


def _cpu_child_env(num_devices: int, **extra: str) -> dict[str, str]:
    """The environment of a child process with ``num_devices`` simulated CPU devices (the
    parent's other ``XLA_FLAGS`` kept)."""
    kept = [
        flag
        for flag in os.environ.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    return dict(
        os.environ,
        XLA_FLAGS=" ".join([*kept, f"--xla_force_host_platform_device_count={num_devices}"]),
        JAX_PLATFORMS="cpu",
        **extra,
    )


def _last_json(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    answer = {"returncode": returncode, "stderr": stderr[-4000:], "result": None}
    if returncode == 0 and lines:
        answer["result"] = json.loads(lines[-1])
    return answer


def device_child(script: str, base: Any, num_devices: int = 4, timeout: float = 900) -> dict[str, Any]:
    """Run ``python script OUT_DIR`` on ``num_devices`` simulated CPU devices, once per test
    session, and return the JSON object it printed last.

    A process gets several CPU devices only from ``XLA_FLAGS`` set before jax starts, so the
    many-device checks of a package run in one child process that computes and prints, and the
    tests assert on what it printed. ``base``: pytest's ``tmp_path_factory.getbasetemp()``.
    Under pytest-xdist the workers' base directories share a parent: the first worker to ask
    runs the child (a file lock) and the others read its result, so the child runs once however
    the tests are spread over workers.

    A child that runs past ``timeout`` seconds fails like one that crashed, with a message that
    says so, and the other workers read that failure instead of starting the child again (a
    second run would find the first one's output in its folder and fail for that instead).

    Raises:
        AssertionError: the child failed (its last lines of stderr in the message).
    """

    def compute(out: pathlib.Path) -> dict[str, Any]:
        try:
            done = subprocess.run(
                [sys.executable, script, str(out)],
                env=_cpu_child_env(num_devices),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as error:
            stderr = error.stderr.decode() if isinstance(error.stderr, bytes) else (error.stderr or "")
            return {
                "returncode": None,
                "stderr": f"{stderr[-3000:]}\n{script} ran past its timeout of {timeout:.0f} s and was "
                "stopped: on a loaded machine run fewer tests at once (pytest -n) or pass a longer "
                "timeout to device_child.",
                "result": None,
            }
        return _last_json(done.returncode, done.stdout, done.stderr)

    return _once_per_session(base, f"{pathlib.Path(script).stem}.{num_devices}", compute)["result"]


def free_port() -> int:
    """A TCP port of 127.0.0.1 free a moment ago (for a coordinator the test starts next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def host_children(
    script: str, base: Any, num_processes: int = 2, devices_per_process: int = 2, timeout: float = 300
) -> list[dict[str, Any]]:
    """Run ``python script OUT_DIR`` as ``num_processes`` processes of one many-host run on
    127.0.0.1 (:mod:`lamella.agents.hosts`; a free port, ``LAMELLA_COORDINATOR_ADDRESS``,
    ``LAMELLA_NUM_PROCESSES`` and ``LAMELLA_PROCESS_ID`` set for each), each with
    ``devices_per_process`` simulated CPU devices, once per test session as
    :func:`device_child`; return the JSON object each printed last, in process order.

    Every process is killed if it is still running when the first of them fails, when
    ``timeout`` seconds have passed, or on any error here: none outlives this call.

    Raises:
        AssertionError: a process failed or timed out (the last lines of its stderr).
    """

    def compute(out: pathlib.Path) -> dict[str, Any]:
        address = f"127.0.0.1:{free_port()}"
        logs = [tempfile.TemporaryFile(mode="w+") for _ in range(2 * num_processes)]
        children = []
        try:
            for index in range(num_processes):
                env = _cpu_child_env(
                    devices_per_process,
                    LAMELLA_COORDINATOR_ADDRESS=address,
                    LAMELLA_NUM_PROCESSES=str(num_processes),
                    LAMELLA_PROCESS_ID=str(index),
                )
                children.append(
                    subprocess.Popen(
                        [sys.executable, script, str(out)],
                        env=env,
                        stdout=logs[2 * index],
                        stderr=logs[2 * index + 1],
                        text=True,
                    )
                )
            deadline = time.monotonic() + timeout
            # A process that fails leaves the others waiting on it in a collective: stop them all.
            while any(child.poll() is None for child in children) and time.monotonic() < deadline:
                if any(child.poll() not in (None, 0) for child in children):
                    break
                time.sleep(0.2)
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                child.wait()
        answers = []
        for index, child in enumerate(children):
            stdout, stderr = logs[2 * index], logs[2 * index + 1]
            stdout.seek(0)
            stderr.seek(0)
            answers.append(_last_json(child.returncode, stdout.read(), stderr.read()))
        for log in logs:
            log.close()
        failed = [i for i, a in enumerate(answers) if a["returncode"] != 0 or a["result"] is None]
        return {
            "returncode": 1 if failed else 0,
            "stderr": "\n".join(
                f"process {i} (exit {answers[i]['returncode']}): {answers[i]['stderr']}" for i in failed
            ),
            "result": [a["result"] for a in answers],
        }

    name = f"{pathlib.Path(script).stem}.{num_processes}x{devices_per_process}"
    results: list[dict[str, Any]] = _once_per_session(base, name, compute)["result"]
    return results


def flat_run_log(path: str | os.PathLike[str]) -> dict[str, list[float]]:
    """``{"seed_0/step_1/train_loss": [...], ...}``: every number of a run's ``metrics.json``,
    keyed by run, evaluation step and metric (what a device child compares between layouts);
    a sweep's keys start with the variant's algorithm name (``ppo[learning_rate=0.001]/seed_0/...``)."""
    with open(path, encoding="utf-8") as handle:
        log = json.load(handle)
    out: dict[str, list[float]] = {}
    for env in log.values():
        for task in env.values():
            for algorithm, runs in task.items():
                prefix = f"{algorithm}/" if len(task) > 1 else ""
                for run, steps in runs.items():
                    for step, metrics in steps.items():
                        for name, value in metrics.items():
                            out[f"{prefix}{run}/{step}/{name}"] = np.ravel(np.asarray(value, float)).tolist()
    return out


def device_trainer(out_dir: str, chunk_iterations: int = 2) -> Any:
    """``train(config, num_devices, name)``: one quiet seed of ``config`` through the driver on
    ``num_devices`` devices, in ``out_dir/name`` (what every many-device test child compares)."""
    from lamella.agents import driver

    def train(config: Any, num_devices: int, name: str) -> Any:
        return driver.run_experiment(
            config,
            seeds=1,
            out_dir=os.path.join(out_dir, name),
            chunk_iterations=chunk_iterations,
            num_devices=num_devices,
            progress=False,
            plot=False,
        )

    return train


def error_text(call: Any) -> str:
    """``"ConfigError: ..."`` (any exception's type and message) that ``call()`` raised, or
    ``"no error"``: a device child reports its bad-input cases to the parent, which asserts."""
    try:
        call()
    except Exception as error:  # reported to the parent, which fails the test with it
        return f"{type(error).__name__}: {error}"
    return "no error"


def count_compile_ahead() -> list[int]:
    """Count the driver's ahead-of-time compiles from now on: ``driver.compile_ahead`` is
    wrapped to append to the returned list, so a test sees whether bad input was refused before
    anything compiled (the list is still empty)."""
    from lamella.agents import driver

    compiled: list[int] = []
    real = driver.compile_ahead

    def counting(*args: Any, **kwargs: Any) -> Any:
        compiled.append(1)
        return real(*args, **kwargs)

    driver.compile_ahead = counting
    return compiled


def _float_leaves(tree: Any) -> list[np.ndarray]:
    return [
        np.asarray(x, np.float64)
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.result_type(x), jnp.floating)
    ]


def max_abs(tree: Any) -> float:
    """The largest magnitude among the float leaves of ``tree`` (0 without any): the scale a
    device child compares a difference of states against."""
    return max((float(np.max(np.abs(x), initial=0.0)) for x in _float_leaves(tree)), default=0.0)


def max_abs_diff(one: Any, other: Any) -> float:
    """The largest difference between the float leaves of two pytrees of one structure (a
    state trained on one device and on several; integer counters are left out)."""
    pairs = zip(_float_leaves(one), _float_leaves(other), strict=True)
    return max((float(np.max(np.abs(a - b), initial=0.0)) for a, b in pairs), default=0.0)


def uniform_policy(params: Any) -> Any:
    """``params`` with every leaf of the network's action head zeroed (a module named ``head``, or
    flax's automatic ``ActionHead_<i>``): the same network acting uniformly at random over its
    discrete actions, the baseline a learning test beats on the same levels or episodes.

    Raises:
        ValueError: no leaf of ``params`` lies under such a module (the baseline would be the
            trained policy itself).
    """

    def is_head(path: Any) -> bool:
        return any(
            isinstance(entry, jax.tree_util.DictKey)
            and (entry.key == "head" or str(entry.key).startswith("ActionHead_"))
            for entry in path
        )

    paths = [path for path, _ in jax.tree_util.tree_leaves_with_path(params)]
    if not any(is_head(path) for path in paths):
        raise ValueError("uniform_policy: no parameter under a module named 'head' or 'ActionHead_<i>'.")
    return jax.tree_util.tree_map_with_path(lambda path, x: jnp.zeros_like(x) if is_head(path) else x, params)


def scan_unrolls(fn: Any, *args: Any) -> list[int]:
    """The ``unroll`` of every ``lax.scan`` in ``fn(*args)``'s jaxpr, nested jaxprs included, in
    the order they are traced: what a test of a backend-dependent unroll checks."""
    found: list[int] = []

    def visit(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "scan":
                found.append(int(eqn.params["unroll"]))
            for sub in sub_jaxprs(eqn.params):
                visit(sub)

    visit(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def sub_jaxprs(params: dict[str, Any]) -> list[Any]:
    """The jaxprs nested in an equation's ``params`` (a loop's body, a ``cond``'s branches, a
    ``pjit``'s or ``custom_vjp``'s function), open: what a walk over a whole program descends
    into. (``jax.extend.core.jaxprs_in_params`` does this from jax 0.8 on; lamella-agents supports
    jax 0.7.)"""
    found: list[Any] = []

    def collect(value: Any) -> None:
        if isinstance(value, jax.extend.core.ClosedJaxpr):
            found.append(value.jaxpr)
        elif isinstance(value, jax.extend.core.Jaxpr):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                collect(item)

    for value in params.values():
        collect(value)
    return found
