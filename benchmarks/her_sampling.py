"""HER sampling throughput: lamella-buffers (JAX, on device) against xpag's host HER (NumPy).

Both sides hold the same experience: ``--buffer-size`` transitions of a Fetch-like
goal-conditioned task (observation 25, goals 3, action 4; episodes of 50 steps,
truncated), stored by ``--num-envs`` envs stepping in lockstep. Both sample
``batch`` transitions uniformly, relabel with the "future" strategy with
probability 0.8 (HER's k = 4, xpag's default), recompute the sparse reward
``-(|achieved - desired| > 0.05)`` and build the agent inputs (observation
concatenated with the goal). Every output is consumed in a checksum.

* xpag: ``DefaultEpisodicBuffer`` + ``samplers.HER`` (NumPy on the host), one
  ``buffer.sample(batch)`` per call, as its training loop does.
* lamella fused: ``K`` samples inside one compiled call (``lax.fori_loop``), as in
  a training loop that never leaves JAX.
* lamella per call: one jitted ``sample`` per batch from Python (dispatch included).

Calls are interleaved (xpag, fused, per call, xpag, ...) and each timed call does
about a second of work; the table gives medians and ratios. xpag is a
benchmark-only dependency; install it in its own venv with this package::

    python -m venv /tmp/xpagvenv
    /tmp/xpagvenv/bin/pip install xpag flashbax==0.1.3 -e packages/buffers
    JAX_PLATFORMS=cpu /tmp/xpagvenv/bin/python benchmarks/her_sampling.py
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np

import lamella.buffers as lb

OBS_DIM, GOAL_DIM, ACTION_DIM, EPISODE = 25, 3, 4, 50
THRESHOLD = 0.05


def make_chunk(rng: np.random.Generator, num_envs: int) -> dict[str, np.ndarray]:
    """One episode of EPISODE steps for every env (float32, leading axes (num_envs, EPISODE))."""
    start = rng.uniform(-0.15, 0.15, (num_envs, 1, GOAL_DIM))
    moves = rng.normal(0, 0.01, (num_envs, EPISODE + 1, GOAL_DIM)).cumsum(1)
    achieved = (start + moves).astype(np.float32)  # achieved goal at times 0..EPISODE
    desired = np.broadcast_to(
        rng.uniform(-0.15, 0.15, (num_envs, 1, GOAL_DIM)), (num_envs, EPISODE, GOAL_DIM)
    ).astype(np.float32)
    observation = rng.normal(size=(num_envs, EPISODE + 1, OBS_DIM)).astype(np.float32)
    observation[..., :GOAL_DIM] = achieved
    reward = -(np.linalg.norm(achieved[:, 1:] - desired, axis=-1) > THRESHOLD).astype(np.float32)
    truncated = np.zeros((num_envs, EPISODE), bool)
    truncated[:, -1] = True
    return {
        "observation": observation[:, :-1],
        "achieved_goal": achieved[:, :-1],
        "desired_goal": desired,
        "next_observation": observation[:, 1:],
        "next_achieved_goal": achieved[:, 1:],
        "action": rng.uniform(-1, 1, (num_envs, EPISODE, ACTION_DIM)).astype(np.float32),
        "reward": reward,
        "terminated": np.zeros((num_envs, EPISODE), bool),
        "truncated": truncated,
        "is_success": reward == 0,
    }


# lamella ----------------------------------------------------------------------------------


def lamella_transition(chunk: dict[str, np.ndarray]) -> lb.Transition:
    obs = {
        "observation": chunk["observation"],
        "achieved_goal": chunk["achieved_goal"],
        "desired_goal": chunk["desired_goal"],
    }
    next_obs = {
        "observation": chunk["next_observation"],
        "achieved_goal": chunk["next_achieved_goal"],
        "desired_goal": chunk["desired_goal"],
    }
    return jax.tree.map(
        jnp.asarray,
        lb.Transition(
            obs=obs,
            action=chunk["action"],
            reward=chunk["reward"],
            terminated=chunk["terminated"],
            truncated=chunk["truncated"],
            next_obs=next_obs,
            extras={"is_success": chunk["is_success"]},
        ),
    )


def compute_reward(achieved_goal: jax.Array, desired_goal: jax.Array) -> jax.Array:
    return -(jnp.linalg.norm(achieved_goal - desired_goal) > THRESHOLD).astype(jnp.float32)


def lamella_agent_batch(sample: lb.HerSample) -> dict[str, jax.Array]:
    """What an agent receives, as xpag builds it: observation and goal concatenated."""
    tr = sample.transition
    return {
        "observation": jnp.concatenate([tr.obs["observation"], tr.obs["desired_goal"]], axis=1),
        "next_observation": jnp.concatenate([tr.next_obs["observation"], tr.obs["desired_goal"]], axis=1),
        "action": tr.action,
        "reward": tr.reward,
        "terminated": tr.terminated,
        "truncated": tr.truncated,
        "is_success": tr.extras["is_success"],
        "next_achieved_goal": tr.next_obs["achieved_goal"],
    }


def checksum(batch: dict[str, jax.Array]) -> jax.Array:
    return sum(jnp.sum(x.astype(jnp.float32)) for x in batch.values())


# xpag -------------------------------------------------------------------------------------


def xpag_compute_reward(achieved_goal, desired_goal, action, next_observation):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > THRESHOLD).astype(np.float32)


def xpag_steps(chunk: dict[str, np.ndarray]):
    """The per-step dicts xpag's training loop inserts (2-D arrays: (num_envs, dim))."""
    col = lambda x: x[..., None].astype(np.float32)  # noqa: E731
    for t in range(EPISODE):
        yield (
            {
                "observation": {
                    "observation": chunk["observation"][:, t],
                    "achieved_goal": chunk["achieved_goal"][:, t],
                    "desired_goal": chunk["desired_goal"][:, t],
                },
                "action": chunk["action"][:, t],
                "reward": col(chunk["reward"][:, t]),
                "terminated": col(chunk["terminated"][:, t]),
                "truncated": col(chunk["truncated"][:, t]),
                "next_observation": {
                    "observation": chunk["next_observation"][:, t],
                    "achieved_goal": chunk["next_achieved_goal"][:, t],
                    "desired_goal": chunk["desired_goal"][:, t],
                },
                "is_success": col(chunk["is_success"][:, t]),
            },
            np.logical_or(chunk["terminated"][:, t], chunk["truncated"][:, t]),
        )


# harness ----------------------------------------------------------------------------------


def median_time(fn, rounds_times: list[float]) -> None:
    start = time.perf_counter()
    fn()
    rounds_times.append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffer-size", type=int, default=1_000_000, help="transitions stored")
    parser.add_argument("--num-envs", type=int, default=100)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0, help="work per timed call")
    args = parser.parse_args()

    from xpag.buffers import DefaultEpisodicBuffer
    from xpag.samplers import HER

    num_envs = args.num_envs
    steps_per_env = args.buffer_size // num_envs
    if steps_per_env % EPISODE:
        raise SystemExit(f"--buffer-size / --num-envs must be a multiple of {EPISODE}")
    rng = np.random.default_rng(0)
    np.random.seed(0)  # xpag samples with the global NumPy generator

    xpag_buffer = DefaultEpisodicBuffer(
        max_episode_steps=EPISODE, buffer_size=args.buffer_size, sampler=HER(xpag_compute_reward, "future")
    )
    buffer = lb.make_episode_buffer(
        num_envs=num_envs, max_length_time_axis=steps_per_env, sample_batch_size=1
    )
    add = jax.jit(buffer.add, donate_argnums=0)
    state = None
    fill_start = time.perf_counter()
    for _ in range(steps_per_env // EPISODE):
        chunk = make_chunk(rng, num_envs)
        transition = lamella_transition(chunk)
        if state is None:
            state = buffer.init(jax.tree.map(lambda x: x[0, 0], transition))
        state = add(state, transition)
        for step, done in xpag_steps(chunk):
            xpag_buffer.insert(step)
            if done.max():
                xpag_buffer.store_done(done)
    jax.block_until_ready(state)
    fill_seconds = time.perf_counter() - fill_start

    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    print(
        f"machine: {os.cpu_count()} cores, {cpu}; jax {jax.__version__} ({jax.default_backend()}), "
        f"flashbax {version('flashbax')}, xpag {version('xpag')}, numpy {np.__version__}, "
        f"lamella-buffers {lb.__version__}"
    )
    print(
        f"buffer: {args.buffer_size} transitions ({num_envs} envs x {steps_per_env} steps; "
        f"episodes of {EPISODE}); filled both in {fill_seconds:.1f} s; strategy future, p = 0.8"
    )
    rows = []
    for batch in args.batch_sizes:
        sampler = lb.make_her_sampler(buffer, compute_reward, "future", 0.8, batch_size=batch)

        @jax.jit
        def per_call(state, key, i):
            return checksum(lamella_agent_batch(sampler(state, jax.random.fold_in(key, i))))

        def xpag_once() -> float:
            out = xpag_buffer.sample(batch)
            return float(sum(np.sum(v, dtype=np.float64) for v in out.values()))

        # Calibrate xpag's calls per timed round to about args.seconds, then match lamella to it.
        start = time.perf_counter()
        xpag_calls = 0
        while time.perf_counter() - start < 0.2:
            xpag_once()
            xpag_calls += 1
        xpag_k = max(1, int(xpag_calls * args.seconds / (time.perf_counter() - start)))

        compile_start = time.perf_counter()
        jax.block_until_ready(per_call(state, jax.random.key(0), np.int32(0)))
        compile_per_call = time.perf_counter() - compile_start
        start = time.perf_counter()
        for i in range(20):
            jax.block_until_ready(per_call(state, jax.random.key(0), np.int32(i)))
        lamella_k = max(1, int(20 * args.seconds / (time.perf_counter() - start)))

        @jax.jit
        def fused(state, key):
            def body(i, total):
                return total + checksum(lamella_agent_batch(sampler(state, jax.random.fold_in(key, i))))

            return jax.lax.fori_loop(0, lamella_k, body, jnp.zeros((), jnp.float32))

        compile_start = time.perf_counter()
        jax.block_until_ready(fused(state, jax.random.key(0)))
        compile_fused = time.perf_counter() - compile_start

        times = {"xpag": [], "fused": [], "per_call": []}
        sink = 0.0
        for r in range(args.rounds):
            key = jax.random.key(r + 1)

            def run_xpag():
                nonlocal sink
                for _ in range(xpag_k):
                    sink += xpag_once()

            def run_fused():
                nonlocal sink
                sink += float(fused(state, key))

            def run_per_call():
                # One dispatch per batch, as a host loop would do; results are summed after the clock.
                outputs.extend(per_call(state, key, np.int32(i)) for i in range(lamella_k))
                jax.block_until_ready(outputs)

            outputs: list[jax.Array] = []

            median_time(run_xpag, times["xpag"])
            median_time(run_fused, times["fused"])
            median_time(run_per_call, times["per_call"])
            sink += float(sum(float(x) for x in outputs))
        rates = {
            "xpag": xpag_k * batch / statistics.median(times["xpag"]),
            "fused": lamella_k * batch / statistics.median(times["fused"]),
            "per_call": lamella_k * batch / statistics.median(times["per_call"]),
        }
        # Same job on both sides: success rate of the relabelled batches should agree.
        success_lamella = float(
            np.mean(
                [(sampler(state, jax.random.key(99 + i)).transition.reward == 0).mean() for i in range(8)]
            )
        )
        success_xpag = float(np.mean([(xpag_buffer.sample(batch)["reward"] == 0).mean() for _ in range(8)]))
        rows.append((batch, rates, compile_fused, compile_per_call, success_lamella, success_xpag))
        print(f"(batch {batch} done; checksum {sink:.3e})", flush=True)

    print()
    print(
        "| batch | xpag (NumPy, host) samples/s | lamella fused samples/s | ratio | "
        "lamella per call samples/s | ratio | lamella compile fused / per call | success rate lamella / xpag |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for batch, rates, c_fused, c_call, s_lam, s_xpag in rows:
        print(
            f"| {batch} | {rates['xpag']:.3g} | {rates['fused']:.3g} | {rates['fused'] / rates['xpag']:.1f}x | "
            f"{rates['per_call']:.3g} | {rates['per_call'] / rates['xpag']:.1f}x | "
            f"{c_fused:.2f} s / {c_call:.2f} s | {s_lam:.3f} / {s_xpag:.3f} |"
        )


if __name__ == "__main__":
    main()
