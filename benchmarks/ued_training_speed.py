"""DR / PLR / ACCEL training speed: lamella against minimax and JaxUED on minimax's maze configs.

    hatch run bench:python benchmarks/ued_training_speed.py \
        --peers-python /tmp/uedpeers/bin/python --jaxued-examples /path/to/jaxued/examples \
        [--algorithms dr plr accel] [--updates 4] [--repeats 5] [--warmup 1] [--min-fill 0.01]

The peers run from their own code in their own virtual environment (they pin jax 0.4.31; see
"Peers" below), each as a worker process this script starts and asks for one timed call per
round, in turn with lamella's side (A B C A B C ..., ../shared/BENCHMARKS.md). Figures are
training updates (iterations) per second: medians over ``--repeats`` calls of ``--updates``
updates each, after one call that compiles (reported separately) and ``--warmup`` untimed
rounds (JaxUED's first timed PLR call once took 6x its later ones, probably a second compilation:
its train state starts with Python ints).

The config is minimax's maze config of each algorithm (``config/configs/maze/{dr,plr,accel}.json``
at v0.2.0), set on every side: AMaze 13x13, 32 envs x 256 steps, 250-step episodes, 5 PPO epochs
of one minibatch, its LSTM-256 student, its learning rates, discounts, entropy, MaxMC, rank
prioritisation with temperature .3, buffer 4000, Robust PLR (gradient steps on replayed levels
only); DR and PLR 60 walls drawn with replacement, ACCEL empty start levels and 20 edits. One
change on every side: the buffer's minimum fill is ``--min-fill`` (0.01: 40 levels) instead of 0.5,
so that the timed updates are the steady mix of new and replayed levels (with 0.5, the first 63
PLR updates only add levels and take no gradient step). Each side keeps its state from one call
to the next, so its buffer fills as in training.

What one update is differs by library for ACCEL (the PLR and DR iterations are the same):
lamella and JaxUED make a mutation an update of its own (one rollout, no gradient step); minimax
mutates inside its replay update (two rollouts).

* lamella: ``make_ued_runner(PRESETS[alg]["AMaze-13x13-v0"])``; one call =
  ``jit(scan(runner.step, updates))``, its metrics consumed in a checksum, the state returned.
* minimax (minimax-lib 0.2.0): ``ExperimentRunner`` built from the config json as its
  ``train.py`` builds it, test-env evaluation off; one call = ``updates`` calls of its jitted
  ``ExperimentRunner.step`` (one update each, as its training loop calls it), then a block on
  the state.
* JaxUED (``examples/maze_dr.py``, ``examples/maze_plr.py`` from github.com/DramaCow/jaxued at
  commit 0f8f128, run as ``__main__`` with its command-line flags): its training loop calls
  ``train_and_eval_step`` (a ``scan`` of ``--eval_freq`` updates, then an evaluation) and logs
  each result with ``wandb.log``. The worker replaces ``wandb`` by a stub whose ``log`` reports
  the wall time since its last return and then waits for the next turn; ``eval_freq`` = updates
  per call, its evaluation cut to one episode on SixteenRooms (JaxUED's own timer stops before
  the asynchronous call has finished, so its logged ``sps`` is not used). The timed interval
  includes that evaluation and its host-side logging (renders of the level batches).

Peers (one venv, jax 0.4.31):
``uv venv -p 3.11 /tmp/uedpeers && VIRTUAL_ENV=/tmp/uedpeers uv pip install minimax-lib==0.2.0
jax==0.4.31 jaxlib==0.4.31 flax==0.8.5 chex==0.1.86 optax==0.2.3 distrax==0.1.5 jaxued==0.0.1
"orbax-checkpoint<0.7" "numpy<2"``, and a clone of DramaCow/jaxued for its examples. A peer whose
python or examples are not given is left out, and the script says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

ALGORITHMS = ("dr", "plr", "accel")

# minimax's maze config values that differ by algorithm (dr.json, plr.json, accel.json, v0.2.0).
SETTINGS: dict[str, dict[str, Any]] = {
    "dr": {"lr": 1e-4, "gamma": 0.995, "ent": 1e-3, "n_walls": 60},
    "plr": {"lr": 3e-4, "gamma": 0.999, "ent": 0.0, "n_walls": 60, "replay": 0.5, "staleness": 0.3},
    "accel": {
        "lr": 3e-4,
        "gamma": 0.999,
        "ent": 0.0,
        "n_walls": 0,
        "replay": 0.8,
        "staleness": 0.5,
        "edits": 20,
    },
}
NUM_ENVS, NUM_STEPS = 32, 256


# lamella --------------------------------------------------------------------------------------


class LamellaSide:
    def __init__(self, algorithm: str, updates: int, min_fill: float):
        import dataclasses

        import jax.numpy as jnp

        from lamella.ued import make_ued_runner
        from lamella.ued.presets import PRESETS

        config = PRESETS[algorithm]["AMaze-13x13-v0"]
        s = SETTINGS[algorithm]
        checks = {
            "num_envs": NUM_ENVS,
            "num_steps": NUM_STEPS,
            "learning_rate": s["lr"],
            "gamma": s["gamma"],
            "ent_coef": s["ent"],
            "n_walls": s["n_walls"],
        }
        if algorithm != "dr":
            checks.update(replay_prob=s["replay"], staleness_coef=s["staleness"])
            config = dataclasses.replace(config, min_fill_ratio=min_fill)
        if algorithm == "accel":
            checks["num_edits"] = s["edits"]
        wrong = {k: (getattr(config, k), v) for k, v in checks.items() if getattr(config, k) != v}
        if wrong:
            raise RuntimeError(f"lamella's preset no longer matches minimax's config: {wrong}")
        runner = make_ued_runner(config)

        @jax.jit
        def call(state: Any) -> tuple[Any, jax.Array]:
            def body(state: Any, _: Any) -> Any:
                state, metrics = runner.step(state)
                check = sum(jnp.sum(jnp.asarray(m, jnp.float32)) for m in jax.tree.leaves(metrics))
                return state, check

            state, check = jax.lax.scan(body, state, None, updates)
            return state, jnp.sum(check)

        self.call, self.updates = call, updates
        self.state = jax.jit(runner.init)(jax.random.key(0))
        start = time.perf_counter()
        self.state, check = call(self.state)
        jax.block_until_ready((self.state, check))
        self.compile_s = time.perf_counter() - start
        self.jax_version = jax.__version__

    def time_call(self) -> tuple[float, int, int]:
        start = time.perf_counter()
        self.state, check = self.call(self.state)
        jax.block_until_ready((self.state, check))
        return time.perf_counter() - start, self.updates, self.updates

    def close(self) -> None:
        pass


# minimax (worker) -----------------------------------------------------------------------------


def minimax_worker(algorithm: str, updates: int, min_fill: float) -> None:
    jax.tree_map = getattr(jax, "tree_map", jax.tree_util.tree_map)  # type: ignore[attr-defined]
    import importlib.resources

    from minimax.arguments import parser
    from minimax.runners import ExperimentRunner

    config_file = importlib.resources.files("minimax") / "config" / "configs" / "maze" / f"{algorithm}.json"
    values = {k: v[0] for k, v in json.loads(config_file.read_text())["args"].items()}
    if algorithm != "dr":
        values["plr_min_fill_ratio"] = min_fill
    s = SETTINGS[algorithm]
    checks = {
        "n_parallel": NUM_ENVS,
        "n_rollout_steps": NUM_STEPS,
        "lr": s["lr"],
        "discount": s["gamma"],
        "student_entropy_coef": s["ent"],
        "maze_n_walls": s["n_walls"],
    }
    if algorithm != "dr":
        checks.update(plr_replay_prob=s["replay"], plr_staleness_coef=s["staleness"])
    if algorithm == "accel":
        checks["plr_n_mutations"] = s["edits"]
    wrong = {k: (values.get(k), v) for k, v in checks.items() if values.get(k) != v}
    if wrong:
        raise RuntimeError(f"minimax's {algorithm}.json differs from this benchmark's settings: {wrong}")
    sys.argv = ["train"] + [
        f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()
    ]
    args = parser.parse_args()
    xp = ExperimentRunner(
        train_runner=args.train_runner,
        env_name=args.env_name,
        agent_rl_algo=args.agent_rl_algo,
        student_model_name=args.student_model_name,
        teacher_model_name=args.teacher_model_name,
        train_runner_kwargs=args.train_runner_args,
        env_kwargs=args.env_args,
        ued_env_kwargs=args.ued_env_args,
        student_rl_kwargs=args.student_rl_args,
        teacher_rl_kwargs=args.teacher_rl_args,
        student_model_kwargs=args.student_model_args,
        teacher_model_kwargs=args.teacher_model_args,
        eval_kwargs=args.eval_args,
        eval_env_kwargs=args.eval_env_args,
        n_devices=1,
    )
    xp.eval_runner = None  # training only (the test-env evaluation is off, as on the other sides)
    state = tuple(xp.runner.reset(jax.random.PRNGKey(0)))

    def call(state: tuple[Any, ...]) -> tuple[Any, ...]:
        for _ in range(updates):
            stats, _, *rest = xp.step(state, False)
            state = tuple(rest)
        jax.block_until_ready((state, stats))
        return state

    start = time.perf_counter()
    state = call(state)
    print(json.dumps({"compile_s": time.perf_counter() - start, "jax": jax.__version__}), flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        state = call(state)
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


# JaxUED (worker) ------------------------------------------------------------------------------


def jaxued_worker(algorithm: str, updates: int, min_fill: float, examples: str) -> None:
    import runpy
    import types

    jax.tree_map = getattr(jax, "tree_map", jax.tree_util.tree_map)  # type: ignore[attr-defined]
    clock = {"last": time.perf_counter(), "first": True}

    def log(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        seconds = time.perf_counter() - clock["last"]
        if clock["first"]:
            print(json.dumps({"compile_s": seconds, "jax": jax.__version__}), flush=True)
            clock["first"] = False
        else:
            print(json.dumps({"seconds": seconds, "count": int(data["num_updates"])}), flush=True)
        if not sys.stdin.readline():  # wait for the next turn; end at end of input
            os._exit(0)
        clock["last"] = time.perf_counter()

    class Run:
        name = "bench"

    stub = types.ModuleType("wandb")
    stub.config = None  # type: ignore[attr-defined]

    def init(config: Any = None, **kwargs: Any) -> Run:
        stub.config = config  # type: ignore[attr-defined]
        return Run()

    stub.init = init  # type: ignore[attr-defined]
    stub.log = log  # type: ignore[attr-defined]
    stub.define_metric = lambda *a, **k: None  # type: ignore[attr-defined]
    stub.Image = stub.Video = lambda *a, **k: None  # type: ignore[attr-defined]
    stub.login = lambda *a, **k: None  # type: ignore[attr-defined]
    sys.modules["wandb"] = stub

    s = SETTINGS[algorithm]
    script = "maze_dr.py" if algorithm == "dr" else "maze_plr.py"
    flags = [
        f"--eval_freq={updates}",
        f"--num_updates={updates * 1000}",
        "--eval_num_attempts=1",
        "--eval_levels",
        "SixteenRooms",
        "--checkpoint_save_interval=0",
        f"--num_train_envs={NUM_ENVS}",
        f"--num_steps={NUM_STEPS}",
        "--epoch_ppo=5",
        "--num_minibatches=1",
        f"--lr={s['lr']}",
        f"--gamma={s['gamma']}",
        "--gae_lambda=0.98",
        f"--entropy_coeff={s['ent']}",
        f"--n_walls={s['n_walls']}",
    ]
    if algorithm != "dr":
        flags += [
            "--score_function=MaxMC",
            "--no-exploratory_grad_updates",
            "--level_buffer_capacity=4000",
            f"--replay_prob={s['replay']}",
            f"--staleness_coeff={s['staleness']}",
            "--temperature=0.3",
            "--prioritization=rank",
            f"--minimum_fill_ratio={min_fill}",
        ]
    if algorithm == "accel":
        flags += ["--use_accel", f"--num_edits={s['edits']}"]
    sys.argv = [script, *flags]
    sys.path.insert(0, examples)
    runpy.run_path(os.path.join(examples, script), run_name="__main__")


class WorkerSide:
    def __init__(
        self, python: str, peer: str, algorithm: str, updates: int, min_fill: float, extra: list[str]
    ):
        command = [python, __file__, "--worker", peer, "--algorithms", algorithm, "--updates", str(updates)]
        command += ["--min-fill", str(min_fill), *extra]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"},
        )
        ready = self._read()
        self.compile_s, self.jax_version = ready["compile_s"], ready["jax"]
        self.count: int | None = None  # the peer's own update counter (JaxUED reports it)
        self.updates = updates

    def _read(self) -> dict[str, Any]:
        while True:
            line = self.process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError("a peer worker exited early (see its stderr above)")
            if line.startswith("{"):
                return json.loads(line)

    def time_call(self) -> tuple[float, int, int]:
        self.process.stdin.write("go\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        answer = self._read()
        if "count" in answer:
            if self.count is not None and answer["count"] - self.count != self.updates:
                raise RuntimeError(f"the peer ran {answer['count'] - self.count} updates, not {self.updates}")
            self.count = answer["count"]
        return float(answer["seconds"]), self.updates, self.updates

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=60)


# main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--updates", type=int, default=4, help="updates per timed call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds after the compile call")
    parser.add_argument("--min-fill", type=float, default=0.01)
    parser.add_argument("--peers-python", default=None, help="python of the venv with minimax and JaxUED")
    parser.add_argument("--jaxued-examples", default=None, help="examples/ of a DramaCow/jaxued clone")
    parser.add_argument("--worker", choices=("minimax", "jaxued"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.updates < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("--updates and --repeats must be >= 1, --warmup >= 0")
    if not 0 < args.min_fill <= 1:
        parser.error("--min-fill must be in (0, 1] (0 would replay from an empty buffer)")
    if args.worker == "minimax":
        minimax_worker(args.algorithms[0], args.updates, args.min_fill)
        return
    if args.worker == "jaxued":
        jaxued_worker(args.algorithms[0], args.updates, args.min_fill, args.jaxued_examples)
        return

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({platform.processor() or 'cpu'}), "
        f"lamella jax {jax.__version__}, load average {os.getloadavg()[0]:.1f}"
    )
    if args.peers_python is None:
        print("minimax and JaxUED left out: no --peers-python")
    elif args.jaxued_examples is None:
        print("JaxUED left out: no --jaxued-examples")
    rows = []
    for algorithm in args.algorithms:
        sides: dict[str, Any] = {"lamella": LamellaSide(algorithm, args.updates, args.min_fill)}
        if args.peers_python is not None:
            sides["minimax"] = WorkerSide(
                args.peers_python, "minimax", algorithm, args.updates, args.min_fill, []
            )
            if args.jaxued_examples is not None:
                extra = ["--jaxued-examples", args.jaxued_examples]
                sides["JaxUED"] = WorkerSide(
                    args.peers_python, "jaxued", algorithm, args.updates, args.min_fill, extra
                )
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.warmup):
            for side in sides.values():
                side.time_call()
        for _ in range(args.repeats):
            for name, side in sides.items():
                seconds, _, _ = side.time_call()
                times[name].append(seconds)
        for side in sides.values():
            side.close()
        rate = {name: args.updates / statistics.median(t) for name, t in times.items()}
        # Total updates over total time: PLR / ACCEL calls mix cheap new-level updates (no
        # gradient step) and replay updates, so the mean rate is steadier than the median.
        mean = {name: args.updates * len(t) / sum(t) for name, t in times.items()}
        for name, side in sides.items():
            ratio = "" if name == "lamella" else f"{rate['lamella'] / rate[name]:.1f}x"
            mean_ratio = "" if name == "lamella" else f"{mean['lamella'] / mean[name]:.1f}x"
            rows.append(
                (algorithm, name, side.jax_version, side.compile_s, rate[name], ratio, mean[name], mean_ratio)
            )
            print(
                f"  {algorithm} {name}: " + " ".join(f"{t:.2f}" for t in times[name]) + " s per call",
                flush=True,
            )
    print()
    print(
        "| algorithm | library | jax | compile s | updates/s (median) | lamella / it | updates/s (mean) "
        "| lamella / it |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for algorithm, name, version, compile_s, r, ratio, m, mean_ratio in rows:
        print(
            f"| {algorithm} | {name} | {version} | {compile_s:.0f} | {r:.3g} | {ratio} | {m:.3g} | {mean_ratio} |"
        )


if __name__ == "__main__":
    main()
