"""lamella SAC against rejax SAC on Pendulum-v1: wall time to a greedy return of -200, and updates/s.

Run it in an environment that has rejax (which needs ``gymnax<1.0``, so not lamella's own)::

    python -m venv /tmp/rejaxvenv && /tmp/rejaxvenv/bin/pip install rejax "gymnax<1.0" flashbax evosax msgpack matplotlib
    /tmp/rejaxvenv/bin/pip install --no-deps -e packages/envs -e packages/agents -e packages/buffers
    /tmp/rejaxvenv/bin/python benchmarks/sac_pendulum.py --seeds 3

Protocol (identical for both sides, one process, interleaved lamella / rejax per seed):

* matched hyper-parameters: one env, one gradient step per env step, batch 256, (64, 64) ReLU
  actor and twin critics, Adam 1e-3 for actor, critics and temperature, gamma 0.99, Polyak rate
  0.01 every step, target entropy -1, initial temperature 1, 1000 uniform-random steps before the
  first update, replay of 20 000 transitions;
* training runs in compiled chunks of 1000 env steps (each side's own compiled loop: lamella's
  ``runner.step``, rejax's ``train`` continued from its train state, its in-loop evaluation
  replaced by a no-op); after each chunk, outside the clock, the greedy policy plays 10 episodes
  and the run stops at the first chunk whose mean return is >= -200 (or after ``--max-steps``);
* time to -200 is the sum of the chunk execution times (compile reported separately, measured
  once per side); updates/s is gradient steps / execution time over the chunks after the
  random warm-up.

Differences we could not remove: rejax bootstraps nothing at Pendulum's time limit (gymnax's
old ``done`` folds truncation into termination), lamella bootstraps from the final observation;
rejax bounds the actor's log-std to [-10, 2], lamella to [-5, 2].
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

CHUNK = 1000
THRESHOLD = -200.0


class Side(NamedTuple):
    init: Callable[[jax.Array], Any]  # key -> state
    chunk: Callable[[Any], Any]  # state -> state after CHUNK env steps
    evaluate: Callable[[Any, jax.Array], Any]  # (state, key) -> mean greedy return
    lower_chunk: Callable[[Any], Any]  # state -> jax.stages.Lowered of the chunk


HYPER = dict(hidden=(64, 64), lr=1e-3, gamma=0.99, tau=0.01, batch=256, warmup=1000, buffer=20_000)


def make_lamella(seed: int):
    from lamella.agents.driver import compile_runner
    from lamella.agents.offpolicy import SACTrainConfig, make_offpolicy_runner

    config = SACTrainConfig(
        env_id="Pendulum-v1",
        total_timesteps=CHUNK,
        rollout_steps=CHUNK,
        hidden_sizes=HYPER["hidden"],
        actor_learning_rate=HYPER["lr"],
        critic_learning_rate=HYPER["lr"],
        alpha_learning_rate=HYPER["lr"],
        gamma=HYPER["gamma"],
        tau=HYPER["tau"],
        batch_size=HYPER["batch"],
        learning_starts=HYPER["warmup"],
        buffer_size=HYPER["buffer"],
        eval_episodes=10,
    )
    # The functions lamella's training driver (``lamella train sac``) runs, for one seed.
    compiled = compile_runner(make_offpolicy_runner(config), num_seeds=1)
    one = jnp.asarray(1, jnp.int32)
    return Side(
        init=lambda key: compiled.init(key[None]),
        chunk=lambda state: compiled.chunk(state, one)[0],
        evaluate=lambda state, key: compiled.evaluate(state, key[None])["episode_return"].mean(),
        lower_chunk=lambda state: compiled.chunk.lower(state, one),
    )


def make_rejax():
    from rejax import SAC
    from rejax.evaluate import evaluate as rejax_evaluate

    algo = SAC.create(
        env="Pendulum-v1",
        total_timesteps=CHUNK,
        eval_freq=CHUNK,
        skip_initial_evaluation=True,
        num_envs=1,
        learning_rate=HYPER["lr"],
        gamma=HYPER["gamma"],
        polyak=1.0 - HYPER["tau"],
        batch_size=HYPER["batch"],
        fill_buffer=HYPER["warmup"],
        buffer_size=HYPER["buffer"],
        num_epochs=1,
        agent_kwargs={"hidden_layer_sizes": HYPER["hidden"], "activation": "relu"},
    )
    algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))
    chunk = jax.jit(lambda ts: algo.train(train_state=ts)[0])

    def evaluate(ts, key):
        act = algo.make_act(ts)
        _, returns = rejax_evaluate(act, key, algo.env, algo.env_params, 10, 200)
        return returns.mean()

    return Side(jax.jit(algo.init_state), chunk, jax.jit(evaluate), chunk.lower)


def checksum(state) -> float:
    return float(
        sum(
            jnp.sum(jnp.asarray(x, jnp.float32))
            for x in jax.tree.leaves(state)
            if jnp.issubdtype(x.dtype, jnp.number)
        )
    )


def run_to_threshold(side, seed: int, max_steps: int) -> dict:
    init, chunk, evaluate, _ = side
    state = init(jax.random.key(seed))
    jax.block_until_ready(state)
    seconds, steps, learn_seconds, learn_updates, returns = 0.0, 0, 0.0, 0, []
    while steps < max_steps:
        start = time.perf_counter()
        state = chunk(state)
        jax.block_until_ready(state)
        elapsed = time.perf_counter() - start
        seconds += elapsed
        steps += CHUNK
        if steps > HYPER["warmup"]:
            learn_seconds += elapsed
            learn_updates += steps - max(HYPER["warmup"], steps - CHUNK)
        returns.append(float(evaluate(state, jax.random.fold_in(jax.random.key(seed), steps))))
        if returns[-1] >= THRESHOLD:
            break
    checksum(state)
    return {
        "seconds": seconds if returns[-1] >= THRESHOLD else float("nan"),
        "steps": steps if returns[-1] >= THRESHOLD else -1,
        "updates_per_s": learn_updates / learn_seconds if learn_seconds else float("nan"),
        "returns": returns,
    }


def compile_seconds(side, seed: int) -> float:
    state = side.init(jax.random.key(seed))
    start = time.perf_counter()
    side.lower_chunk(state).compile()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=20_000)
    args = parser.parse_args()
    sides = {"lamella": make_lamella(0), "rejax": make_rejax()}
    compile_s = {name: compile_seconds(side, 0) for name, side in sides.items()}
    # Warm both (the jit caches hold the compiled chunk from here on).
    for side in sides.values():
        s = side[0](jax.random.key(99))
        jax.block_until_ready(side[1](s))
    results = {name: [] for name in sides}
    for seed in range(args.seeds):
        for name, side in sides.items():  # interleaved: lamella, rejax, lamella, rejax, ...
            out = run_to_threshold(side, seed, args.max_steps)
            results[name].append(out)
            print(
                f"seed {seed} {name:8s} steps to -200 {out['steps']:6d}  time {out['seconds']:7.2f} s  "
                f"updates/s {out['updates_per_s']:8.0f}  returns {[round(r) for r in out['returns']]}",
                flush=True,
            )

    from importlib.metadata import version

    import flax
    import rejax  # noqa: F401

    print()
    print(
        f"machine: {platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores; "
        f"jax {jax.__version__} ({jax.default_backend()}), flax {flax.__version__}, rejax {version('rejax')}, "
        f"gymnax {version('gymnax')}"
    )
    print("| | lamella SAC | rejax SAC | lamella / rejax |")
    print("|---|---|---|---|")
    med = {n: float(np.nanmedian([r["seconds"] for r in rs])) for n, rs in results.items()}
    steps = {
        n: float(np.nanmedian([r["steps"] if r["steps"] > 0 else np.nan for r in rs]))
        for n, rs in results.items()
    }
    ups = {n: float(np.nanmedian([r["updates_per_s"] for r in rs])) for n, rs in results.items()}
    reached = {n: sum(r["steps"] > 0 for r in rs) for n, rs in results.items()}
    print(
        f"| median wall time to -200 (s, excl. compile) | {med['lamella']:.1f} | {med['rejax']:.1f} | {med['lamella'] / med['rejax']:.2f} |"
    )
    total = {n: med[n] + compile_s[n] for n in med}
    print(
        f"| ... including compile (s) | {total['lamella']:.1f} | {total['rejax']:.1f} | {total['lamella'] / total['rejax']:.2f} |"
    )
    print(
        f"| median env steps to -200 | {steps['lamella']:.0f} | {steps['rejax']:.0f} | {steps['lamella'] / steps['rejax']:.2f} |"
    )
    print(
        f"| median updates/s | {ups['lamella']:.0f} | {ups['rejax']:.0f} | {ups['lamella'] / ups['rejax']:.2f} |"
    )
    print(
        f"| compile of one chunk (s) | {compile_s['lamella']:.1f} | {compile_s['rejax']:.1f} | {compile_s['lamella'] / compile_s['rejax']:.2f} |"
    )
    print(
        f"seeds: {args.seeds}; reached -200 within {args.max_steps} steps: lamella {reached['lamella']}, rejax {reached['rejax']} (medians over those)."
    )


if __name__ == "__main__":
    main()
