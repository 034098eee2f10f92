"""Where lamella-marl's IPPO spends its time: the rollout against the PPO update, and the update's
(or the rollout's) most expensive compiled operations.

    python benchmarks/marl_ippo_profile.py [--env ID] [--ops 25] [--part update|rollout]

The config is ``marl_ippo_throughput.py``'s (16 envs x 128 steps, 4 epochs, 2 minibatches, (64, 64)
tanh, shared parameters, no agent ids, team reward). One call runs 16 rollouts (or 16 updates of
one fixed rollout) in one compiled program; medians of 5 calls in CPU time of the process. With
``--ops N`` one call of ``--part`` runs under ``jax.profiler`` and the N operations (XLA thunks)
with the most time are listed, read back with ``jax.profiler.ProfileData``, each with the source
operation XLA recorded for it (nested events, such as a ``while`` loop, include their bodies; the
sum of all operations, loops left out, is printed too: tracing adds a little to every operation,
so many small ones, as in the rollout, sum to more than the untraced time). Then how many of XLA's
worker threads run an operation over the call's wall time (all, some, none), and the operations
that run while every other thread is idle, the longest first.

``--rollout-unroll 1,2,4,8`` times the rollout alone instead, its step loop traced once per value
(``lax.scan``'s ``unroll``; the CPU default is 1), the variants called in turn (wall clock,
``--rounds`` rounds of 16 rollouts a call), and prints each one's median and the checksums (one
float from every call's rewards and log-probabilities: equal when the variants agree).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import os
import re
import statistics
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from _interleave import time_interleaved

import lamella.envs
from lamella.agents import rollout as rollout_module
from lamella.agents.rollout import actor_critic_policy, make_rollout
from lamella.envs import wrappers
from lamella.marl import IPPOConfig
from lamella.marl.observation import MultiAgentObservation, num_actions_of
from lamella.marl.ppo import Trajectory, make_multi_agent_ppo

CALLS = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MPE-simple_spread-v3")
    parser.add_argument("--ops", type=int, default=25, help="operations to list (0: no profile)")
    parser.add_argument("--part", choices=("update", "rollout"), default="update", help="what to profile")
    parser.add_argument(
        "--rollout-unroll", default="", help="comma-separated unroll factors: time the rollout with each"
    )
    parser.add_argument("--rounds", type=int, default=9, help="rounds of --rollout-unroll's timing")
    args = parser.parse_args()
    config = IPPOConfig(
        env_id=args.env,
        total_timesteps=CALLS * 16 * 128,
        num_envs=16,
        num_steps=128,
        num_epochs=4,
        num_minibatches=2,
        learning_rate=2.5e-4,
        anneal_lr=False,
        hidden_sizes=(64, 64),
        activation="tanh",
        agent_id=False,
        share_parameters=True,
        team_reward=True,
    )
    env, params = lamella.envs.make(args.env, autoreset=False)
    agent, actor_critic = make_multi_agent_ppo(config, env.num_agents, num_actions_of(env, params))
    train_env = wrappers.EpisodeStatistics(wrappers.AutoReset(MultiAgentObservation(env)))
    rollout = make_rollout(train_env, 128, 16, info_keys=("returned_episode", "returned_episode_returns"))
    key = jax.random.key(0)
    start = rollout.init(key, params)
    train_state, _ = agent.init(key, start.obs)
    _, transitions = rollout.collect(
        start, actor_critic_policy(actor_critic, train_state.params), key, params
    )

    def make_rollouts(rollout):
        @jax.jit
        def rollouts(train_state, start, key):
            def body(state, key):
                # As the runner acts: the feed-forward update computes the critic's values itself.
                policy = actor_critic_policy(actor_critic, train_state.params, record_value=False)
                state, batch = rollout.collect(state, policy, key, params)
                return state, jnp.sum(batch.reward) + jnp.sum(batch.log_prob)

            return jax.lax.scan(body, start, jax.random.split(key, CALLS))[1]

        return rollouts

    rollouts = make_rollouts(rollout)
    if args.rollout_unroll:
        time_unrolled(args, train_env, make_rollouts, train_state, start, key)
        return

    @jax.jit
    def updates(train_state, transitions, key):
        def body(train_state, key):
            train_state, _, metrics = agent.update(Trajectory(transitions, key, ()), train_state, ())
            return train_state, metrics["loss"]

        return jax.lax.scan(body, train_state, jax.random.split(key, CALLS))

    def timed(fn, *inputs):
        jax.block_until_ready(fn(*inputs))
        times = []
        for _ in range(5):
            begin = time.process_time()
            jax.block_until_ready(fn(*inputs))
            times.append(time.process_time() - begin)
        return statistics.median(times) / CALLS

    rollout_s, update_s = (
        timed(rollouts, train_state, start, key),
        timed(updates, train_state, transitions, key),
    )
    print(f"IPPO on {args.env}, 16 envs x 128 steps, CPU time per iteration (jax {jax.__version__}):")
    print(
        f"  rollout {rollout_s * 1e3:.1f} ms, update {update_s * 1e3:.1f} ms ({update_s / (rollout_s + update_s):.0%})"
    )
    if args.ops <= 0:
        return
    part = {
        "update": (updates, (train_state, transitions, key)),
        "rollout": (rollouts, (train_state, start, key)),
    }
    fn, inputs = part[args.part]
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        jax.block_until_ready(fn(*inputs))
        jax.profiler.stop_trace()
        path = sorted(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True))[-1]
        profile = jax.profiler.ProfileData.from_file(path)
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    threads = []  # per worker thread: its operations' (start, end, name), loops left out
    for plane in profile.planes:
        for line in plane.lines:
            if "XLAEigen" not in line.name:  # XLA's CPU worker threads
                continue
            spans = []
            for event in line.events:
                if event.name.startswith("ThunkExecutor"):
                    continue
                total[event.name] += event.duration_ns
                count[event.name] += 1
                if not event.name.startswith(NOT_WORK):
                    spans.append((event.start_ns, event.start_ns + event.duration_ns, event.name))
            threads.append(sorted(spans))
    leaves = sum(ns for name, ns in total.items() if not name.startswith("while"))
    print(
        f"  the {args.part}'s {args.ops} costliest operations (ms per iteration, runs per iteration; "
        f"all operations but loops: {leaves / 1e6 / CALLS:.2f} ms):"
    )
    # What each operation computes: the source op name XLA kept in its metadata.
    hlo = fn.lower(*inputs).compile().as_text()
    source = dict(re.findall(r'%([\w.-]+) = .*?op_name="([^"]*)"', hlo))
    for name, ns in total.most_common(args.ops):
        where = source.get(name, "").replace("jit(updates)/", "").replace("jit(rollouts)/", "")
        where = re.sub(r"(while/body/closed_call/)+", "", where).replace("MultiAgentActorCriticNet", "net")
        print(f"    {ns / 1e6 / CALLS:7.2f}  {count[name] / CALLS:5.1f}  {name:<28} {where[-90:]}")
    print_occupancy(threads, source, args.ops)


# Events that are not an operation's own work: loops and conditionals (their bodies are listed),
# an operation's end marker, the thread pool's bookkeeping and waits.
NOT_WORK = ("while", "cond", "end:", "ThreadpoolListener", "SlinkyThreadPool")


def print_occupancy(threads: list[list[tuple[int, int, str]]], source: dict[str, str], top: int) -> None:
    """How many worker threads run an operation over the part's wall time, and which operations
    run while the others are idle (with two threads: the time one core waits)."""
    edges = sorted(
        (time, step, index)
        for index, spans in enumerate(threads)
        for begin, end, _ in spans
        for time, step in ((begin, 1), (end, -1))
    )
    if not edges:
        return
    busy = [0] * len(threads)
    span = edges[-1][0] - edges[0][0]
    by_count: collections.Counter[int] = collections.Counter()
    alone: collections.Counter[str] = collections.Counter()
    last = edges[0][0]
    for time_ns, step, index in edges:
        running = [i for i, b in enumerate(busy) if b]
        by_count[len(running)] += time_ns - last
        if len(running) == 1 and len(threads) > 1:
            spans = threads[running[0]]
            at = bisect.bisect_right(spans, (last, float("inf"), "")) - 1
            alone[spans[at][2] if at >= 0 else "?"] += time_ns - last
        busy[index] += step
        last = time_ns
    shares = ", ".join(f"{k} busy {by_count[k] / span:.0%}" for k in range(len(threads) + 1))
    print(
        f"  wall time {span / 1e6 / CALLS:.2f} ms per iteration over {len(threads)} worker threads: {shares}"
    )
    print(f"  operations running alone (ms of wall time per iteration), the {top} longest:")
    for name, ns in alone.most_common(top):
        where = re.sub(r"(while/body/closed_call/)+", "", source.get(name, ""))
        where = (
            where.replace("jit(updates)/", "")
            .replace("jit(rollouts)/", "")
            .replace("MultiAgentActorCriticNet", "net")
        )
        print(f"    {ns / 1e6 / CALLS:7.3f}  {name:<28} {where[-90:]}")


def time_unrolled(args, train_env, make_rollouts, train_state, start, key) -> None:
    """The rollout's wall-clock time with its step loop unrolled each ``--rollout-unroll`` way."""
    sides, first_call = {}, {}
    for unroll in (int(u) for u in args.rollout_unroll.split(",")):
        # The rollout reads loop_unroll when it is traced: each variant is traced (and compiled)
        # here, before the next value is set.
        rollout_module.loop_unroll = lambda length, unroll=unroll: unroll
        rollout = make_rollout(train_env, 128, 16, info_keys=("returned_episode", "returned_episode_returns"))
        name = f"unroll {unroll}"
        sides[name] = (make_rollouts(rollout), train_state)
        begin = time.perf_counter()
        jax.block_until_ready(sides[name][0](train_state, start, key))
        first_call[name] = time.perf_counter() - begin
    inputs = (start, key)
    rate, _, _ = time_interleaved(sides, inputs, CALLS, args.rounds)
    print(f"IPPO's rollout on {args.env}, 16 envs x 128 steps, wall clock (jax {jax.__version__}):")
    first = next(iter(sides))
    for name, (fn, state) in sides.items():
        checksum = float(jnp.sum(fn(state, *inputs)))
        print(
            f"  {name}: {1e3 / rate[name]:.2f} ms a rollout, {rate[name] / rate[first]:.3f}x {first}, "
            f"first call {first_call[name]:.1f} s, checksum {checksum:.6f}"
        )


if __name__ == "__main__":
    main()
