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
so many small ones, as in the rollout, sum to more than the untraced time).
"""

from __future__ import annotations

import argparse
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

import lamella.envs
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

    @jax.jit
    def rollouts(train_state, start, key):
        def body(state, key):
            # As the runner acts: the feed-forward update computes the critic's values itself.
            policy = actor_critic_policy(actor_critic, train_state.params, record_value=False)
            state, batch = rollout.collect(state, policy, key, params)
            return state, jnp.sum(batch.reward) + jnp.sum(batch.log_prob)

        return jax.lax.scan(body, start, jax.random.split(key, CALLS))[1]

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
    for plane in profile.planes:
        for line in plane.lines:
            if "XLAEigen" not in line.name:  # XLA's CPU worker threads
                continue
            for event in line.events:
                if event.name.startswith("ThunkExecutor"):
                    continue
                total[event.name] += event.duration_ns
                count[event.name] += 1
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


if __name__ == "__main__":
    main()
