"""PPO on CartPole-v1: lamella against a PureJaxRL-style reference, side by side in one process.

    python benchmarks/ppo_cartpole.py [--reps 3] [--seeds64-steps 100000]

The reference is a PureJaxRL-style PPO written for this benchmark (rejax needs gymnax<1.0, which
conflicts with the gymnax 1.x installed here): gymnax 1.x CartPole-v1 with auto-reset, a key
split per env per step, separate 64-64 tanh actor and critic, GAE on the done flag, clipped
objective, clipped value loss, entropy bonus, minibatch advantage normalisation, global-norm
clipping, Adam with linear annealing. Both sides use the same hyper-parameters
(``lamella.agents.PRESETS["ppo"]["CartPole-v1"]``).

Figures (BENCHMARKS.md protocol: interleaved timed calls A B A B ..., medians, ratios):

* env steps/s: one compiled call that trains one seed for the whole budget.
* wall time to return 475, compile included: jit caches cleared, then compile a chunk of
  ``--chunk`` iterations and the evaluation, and alternate chunk / greedy evaluation (16
  episodes, mean undiscounted return, 500-step cap, the same protocol on both sides) until the
  mean reaches 475. Per seed; both sides see the same seeds.
* seeds/s: one compiled call that trains 64 seeds (vmapped) for ``--seeds64-steps`` steps each
  (initialised one seed at a time: see ``many_seeds_train``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax

import lamella.agents
from lamella.agents import PRESETS, PPOConfig, make_ppo_runner
from lamella.agents.driver import compile_ahead, compile_options, compile_runner

TARGET = 475.0
EVAL_EPISODES = 16


class Side(NamedTuple):
    init: Callable[[jax.Array], Any]
    step: Callable[[Any], tuple[Any, dict[str, jax.Array]]]
    evaluate: Callable[[Any, jax.Array], jax.Array]  # (state, key) -> returns (EVAL_EPISODES,)
    num_iterations: int
    # (key, chunk) -> (initial state, compiled chunk of iterations, compiled evaluation): how a
    # user of the side's library trains with periodic evaluation.
    prepare: Callable[
        [jax.Array, int], tuple[Any, Callable[[Any], Any], Callable[[Any, jax.Array], jax.Array]]
    ]


# ------------------------------------------------------------------------------------------
# Reference: PureJaxRL-style PPO on gymnax 1.x.


class ReferenceActorCritic(nn.Module):
    num_actions: int

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        orth = nn.initializers.orthogonal
        actor = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(x))
        actor = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(actor))
        logits = nn.Dense(self.num_actions, kernel_init=orth(0.01))(actor)
        critic = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(x))
        critic = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(critic))
        return logits, nn.Dense(1, kernel_init=orth(1.0))(critic)[..., 0]


def make_reference(config: PPOConfig, lamella_xla_options: bool = False) -> Side:
    env, env_params = gymnax.make("CartPole-v1")
    network = ReferenceActorCritic(env.action_space(env_params).n)
    num_envs, num_steps = config.num_envs, config.num_steps
    num_iterations = config.total_timesteps // (num_envs * num_steps)
    minibatch_size = num_envs * num_steps // config.num_minibatches
    schedule = optax.linear_schedule(
        config.learning_rate, 0.0, num_iterations * config.num_epochs * config.num_minibatches
    )
    tx = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(schedule, eps=1e-5))

    def init(key):
        key, key_net, key_env = jax.random.split(key, 3)
        params = network.init(key_net, jnp.zeros((1, 4)))
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(key_env, num_envs), env_params
        )
        episode = (jnp.zeros(num_envs), jnp.zeros(num_envs))  # running return, last finished return
        return (params, tx.init(params), env_state, obs, episode, key)

    def step(runner_state):
        params, opt_state, env_state, obs, episode, key = runner_state

        def env_step(carry, _):
            env_state, obs, episode, key = carry
            key, key_act, key_step = jax.random.split(key, 3)
            logits, value = network.apply(params, obs)
            action = jax.random.categorical(key_act, logits)
            log_prob = jax.nn.log_softmax(logits)[jnp.arange(num_envs), action]
            obs_next, env_state, reward, terminated, truncated, _ = jax.vmap(
                env.step, in_axes=(0, 0, 0, None)
            )(jax.random.split(key_step, num_envs), env_state, action, env_params)
            done = jnp.logical_or(terminated, truncated)
            running = episode[0] + reward
            episode = (running * (1 - done), jnp.where(done, running, episode[1]))
            transition = (obs, action, log_prob, value, reward, done, episode[1])
            return (env_state, obs_next, episode, key), transition

        (env_state, obs, episode, key), traj = jax.lax.scan(
            env_step, (env_state, obs, episode, key), None, num_steps
        )
        t_obs, t_action, t_log_prob, t_value, t_reward, t_done, t_returns = traj
        _, last_value = network.apply(params, obs)

        def gae_step(carry, transition):
            gae, next_value = carry
            done, value, reward = transition
            delta = reward + config.gamma * next_value * (1 - done) - value
            gae = delta + config.gamma * config.gae_lambda * (1 - done) * gae
            return (gae, value), gae

        _, advantages = jax.lax.scan(
            gae_step, (jnp.zeros_like(last_value), last_value), (t_done, t_value, t_reward), reverse=True
        )
        targets = advantages + t_value

        def loss_fn(params, batch):
            obs, action, old_log_prob, old_value, advantage, target = batch
            logits, value = network.apply(params, obs)
            log_p = jax.nn.log_softmax(logits)
            log_prob = log_p[jnp.arange(obs.shape[0]), action]
            value_clipped = old_value + jnp.clip(value - old_value, -config.clip_eps, config.clip_eps)
            value_loss = (
                0.5 * jnp.maximum(jnp.square(value - target), jnp.square(value_clipped - target)).mean()
            )
            ratio = jnp.exp(log_prob - old_log_prob)
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            actor_loss = -jnp.minimum(
                ratio * advantage, jnp.clip(ratio, 1 - config.clip_eps, 1 + config.clip_eps) * advantage
            ).mean()
            entropy = -(jnp.exp(log_p) * log_p).sum(-1).mean()
            return actor_loss + config.vf_coef * value_loss - config.ent_coef * entropy

        def epoch(carry, _):
            params, opt_state, key = carry
            key, key_perm = jax.random.split(key)
            batch = (t_obs, t_action, t_log_prob, t_value, advantages, targets)
            batch = jax.tree.map(lambda x: x.reshape((num_envs * num_steps, *x.shape[2:])), batch)
            perm = jax.random.permutation(key_perm, num_envs * num_steps)
            batch = jax.tree.map(
                lambda x: x[perm].reshape((config.num_minibatches, minibatch_size, *x.shape[1:])), batch
            )

            def minibatch(carry, mb):
                params, opt_state = carry
                loss, grads = jax.value_and_grad(loss_fn)(params, mb)
                updates, opt_state = tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), loss

            (params, opt_state), losses = jax.lax.scan(minibatch, (params, opt_state), batch)
            return (params, opt_state, key), losses

        (params, opt_state, key), losses = jax.lax.scan(
            epoch, (params, opt_state, key), None, config.num_epochs
        )
        metrics = {"loss": losses.mean(), "episode_return": t_returns[-1].mean()}
        return (params, opt_state, env_state, obs, episode, key), metrics

    def evaluate(runner_state, key):
        params = runner_state[0]
        key_reset, key_loop = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(key_reset, EVAL_EPISODES), env_params
        )

        def cond(carry):
            return ~jnp.all(carry[3]) & (carry[4] < 500)

        def body(carry):
            obs, env_state, returns, finished, t, key = carry
            key, key_step = jax.random.split(key)
            logits, _ = network.apply(params, obs)
            obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(key_step, EVAL_EPISODES), env_state, jnp.argmax(logits, -1), env_params
            )
            returns = returns + jnp.where(finished, 0.0, reward)
            return obs, env_state, returns, finished | terminated | truncated, t + 1, key

        carry = (obs, env_state, jnp.zeros(EVAL_EPISODES), jnp.zeros(EVAL_EPISODES, bool), 0, key_loop)
        return jax.lax.while_loop(cond, body, carry)[2]

    def prepare(key, chunk):
        # lamella_xla_options: the XLA options lamella's driver compiles one seed with (a check
        # of how much of lamella's lead is compiler options rather than program size).
        options = (
            {name: compile_options(name) for name in ("init", "chunk", "evaluate")}
            if lamella_xla_options
            else {}
        )
        state = jax.jit(init, compiler_options=options.get("init"))(key)
        run_chunk = jax.jit(
            lambda s: jax.lax.scan(lambda c, _: step(c), s, None, chunk)[0],
            compiler_options=options.get("chunk"),
        )
        evaluate_jit = jax.jit(evaluate, compiler_options=options.get("evaluate"))
        return state, run_chunk.lower(state).compile(), evaluate_jit.lower(state, key).compile()

    return Side(init, step, evaluate, num_iterations, prepare)


def make_lamella(config: PPOConfig) -> Side:
    runner = make_ppo_runner(config)

    def prepare(key, chunk):
        # What lamella's training driver (``lamella train``) does for one seed: compile the
        # three programs ahead (XLA compiling while Python traces), then call them.
        compiled = compile_runner(runner)
        keys, length = key[None], jnp.asarray(chunk, jnp.int32)
        compile_ahead(compiled, keys)
        state = compiled.init(keys)
        return (
            state,
            lambda s: compiled.chunk(s, length)[0],
            lambda s, k: compiled.evaluate(s, k[None])["episode_return"][0],
        )

    return Side(
        runner.init,
        runner.step,
        lambda state, key: runner.evaluate(state, key)["episode_return"],
        runner.num_iterations,
        prepare,
    )


# ------------------------------------------------------------------------------------------
# Measurements.


def checksum(tree: Any) -> float:
    return float(
        sum(
            jnp.sum(jnp.asarray(x, jnp.float32))
            for x in jax.tree.leaves(tree)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.number)
        )
    )


def full_train(side: Side) -> Callable[[jax.Array], Any]:
    def train(key):
        state = side.init(key)
        return jax.lax.scan(lambda s, _: side.step(s), state, None, side.num_iterations)

    return train


def many_seeds_train(side: Side) -> Callable[[jax.Array], Any]:
    """``train`` for a batch of keys: training vmapped, initialisation one seed at a time.

    The reference initialises with flax's orthogonal initializer, whose LAPACK QR, batched by
    ``vmap``, deadlocks jaxlib 0.10.2's CPU thread pool on 2 cores; ``lax.map`` keeps each QR
    unbatched (lamella's initializer needs no LAPACK, and is treated the same way here).
    """

    def train(keys):
        states = jax.lax.map(side.init, keys)
        run = lambda state: jax.lax.scan(lambda s, _: side.step(s), state, None, side.num_iterations)  # noqa: E731
        return jax.vmap(run)(states)

    return train


def time_to_target(side: Side, seed: int, chunk: int) -> tuple[float, float, int, float]:
    """(wall seconds incl. compile, compile seconds, iterations, final eval return)."""
    jax.clear_caches()
    start = time.perf_counter()
    key = jax.random.key(seed)
    state, run_chunk, evaluate = side.prepare(key, chunk)
    jax.block_until_ready(state)
    compile_seconds = time.perf_counter() - start
    iterations, mean_return = 0, 0.0
    eval_key = jax.random.key(10_000 + seed)
    while iterations < side.num_iterations:
        state = run_chunk(state)
        iterations += chunk
        mean_return = float(evaluate(state, eval_key).mean())
        if mean_return >= TARGET:
            break
    return time.perf_counter() - start, compile_seconds, iterations, mean_return


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions of each timing")
    parser.add_argument("--seeds", type=int, default=3, help="seeds for the time-to-475 measurement")
    parser.add_argument("--chunk", type=int, default=4, help="iterations between evaluations")
    parser.add_argument("--seeds64-steps", type=int, default=51_200, help="steps per seed for seeds/s")
    args = parser.parse_args()

    config = PRESETS["ppo"]["CartPole-v1"]
    # Pay the process's one-time compiler start-up before anything is timed.
    jax.jit(lambda x: jnp.tanh(x) @ x).lower(jnp.ones((4, 4))).compile()
    sides = {"lamella": make_lamella(config), "reference": make_reference(config)}
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores ({platform.processor() or 'cpu'}), "
        f"jax {jax.__version__} on {jax.devices()[0].platform}, flax {__import__('flax').__version__}, "
        f"optax {optax.__version__}, gymnax 1.x, lamella-agents {lamella.agents.__version__}"
    )
    print(
        f"config: {config.num_envs} envs x {config.num_steps} steps, {config.num_epochs} epochs x "
        f"{config.num_minibatches} minibatches, lr {config.learning_rate} annealed, "
        f"entropy {config.ent_coef}, "
        f"{config.total_timesteps} steps budget\n"
    )

    # Env steps/s while training one seed for the whole budget.
    steps = {}
    compiled = {}
    key = jax.random.key(0)
    for name, side in sides.items():
        start = time.perf_counter()
        compiled[name] = jax.jit(full_train(side)).lower(key).compile()
        print(f"{name}: full-train compile {time.perf_counter() - start:.1f} s")
        checksum(compiled[name](key))
    times: dict[str, list[float]] = {name: [] for name in sides}
    for rep in range(args.reps):
        for name in sides:
            start = time.perf_counter()
            out = compiled[name](jax.random.key(rep))
            jax.block_until_ready(out)
            times[name].append(time.perf_counter() - start)
            checksum(out)
    for name, side in sides.items():
        steps[name] = (
            side.num_iterations * config.num_envs * config.num_steps / statistics.median(times[name])
        )

    # Wall time to 475, compile included; also the reference compiled with lamella's XLA options.
    target_sides = {**sides, "reference, lamella's XLA options": make_reference(config, True)}
    to_target: dict[str, list[tuple[float, float, int, float]]] = {name: [] for name in target_sides}
    for seed in range(args.seeds):
        for name, side in target_sides.items():
            to_target[name].append(time_to_target(side, seed, args.chunk))

    # Report what is measured so far before the (long) 64-seed part.
    print(
        f"\nenv steps/s (1 seed, training): lamella {steps['lamella']:.3g}, reference {steps['reference']:.3g}"
    )
    for name, rows in to_target.items():
        print(f"{name} to 475 (wall s, compile s, iterations, final eval return): {rows}", flush=True)

    # Seeds/s with 64 seeds at once.
    small = dataclasses.replace(config, total_timesteps=args.seeds64_steps)
    small_sides = {"lamella": make_lamella(small), "reference": make_reference(small)}
    keys = jax.random.split(jax.random.key(1), 64)
    seeds_compiled = {
        name: jax.jit(many_seeds_train(side)).lower(keys).compile() for name, side in small_sides.items()
    }
    seeds_times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(max(1, args.reps - 1)):
        for name in small_sides:
            start = time.perf_counter()
            out = seeds_compiled[name](keys)
            jax.block_until_ready(out)
            seeds_times[name].append(time.perf_counter() - start)
            checksum(out)

    print("\n| measure | lamella | reference | lamella / reference |")
    print("| --- | --- | --- | --- |")
    print(
        f"| env steps/s (1 seed, training) | {steps['lamella']:.3g} | {steps['reference']:.3g} | {steps['lamella'] / steps['reference']:.2f} |"
    )
    wall = {name: statistics.median(r[0] for r in rows) for name, rows in to_target.items()}
    comp = {name: statistics.median(r[1] for r in rows) for name, rows in to_target.items()}
    print(
        f"| wall time to 475 incl. compile, median of {args.seeds} seeds (s) | {wall['lamella']:.1f} | {wall['reference']:.1f} | {wall['lamella'] / wall['reference']:.2f} |"
    )
    print(
        f"| of which compile (s) | {comp['lamella']:.1f} | {comp['reference']:.1f} | {comp['lamella'] / comp['reference']:.2f} |"
    )
    same = "reference, lamella's XLA options"
    print(
        f"| wall time to 475, reference compiled with lamella's XLA options (s) | {wall['lamella']:.1f} | {wall[same]:.1f} | {wall['lamella'] / wall[same]:.2f} |"
    )
    sps = {name: 64 / statistics.median(t) for name, t in seeds_times.items()}
    print(
        f"| seeds/s, 64 seeds x {args.seeds64_steps} steps | {sps['lamella']:.2f} | {sps['reference']:.2f} | {sps['lamella'] / sps['reference']:.2f} |"
    )
    print("\nper seed (wall s, compile s, iterations, final eval return):")
    for name, rows in to_target.items():
        print(f"  {name}: " + "; ".join(f"({w:.1f}, {c:.1f}, {i}, {r:.0f})" for w, c, i, r in rows))


if __name__ == "__main__":
    main()
