"""lamella PPO against brax.training's PPO on a Brax body at the same budget: greedy return and wall time.

Run it in the hatch env of lamella-agents' tests (it has brax 0.14.2 beside lamella)::

    hatch -e hatch-test.py3.11-agents run python benchmarks/brax_ppo.py --steps 200000 --seeds 1

Protocol (one process, the two sides alternated per seed):

* the same Brax env object (``inverted_pendulum`` on the spring backend by default; ``--env``,
  ``--backend``), 1000-step episodes, the same env-step budget per seed;
* matched settings: 16 envs, 1024 env steps per update (lamella: 64 steps x 16 envs;
  brax.training: unroll 16 x batch 16 x 4 minibatches), 8 epochs of 4 minibatches, Adam 1e-3,
  gamma 0.97, GAE lambda 0.95, clip 0.2, gradient norm 0.5, no entropy bonus, observation normalisation,
  (32, 32) networks, tanh-squashed Gaussian, bootstrapping at time limits (brax:
  ``bootstrap_on_timeout=True``);
* the return is each side's own greedy evaluation after training (lamella: 16 episodes;
  brax.training: 16 eval envs, ``deterministic_eval=True``);
* wall time is the whole call, compile included (brax.training compiles inside ``train``), and
  lamella's compile is reported apart too.

Differences we could not remove: brax.training normalises observations with its own running
statistics and reward scaling 1; lamella also normalises rewards by the return's running std
(its preset); brax's minibatches are cut from its unrolls differently.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import platform
import time

import jax
import numpy as np


def lamella_side(env_id: str, steps: int, seed: int) -> tuple[float, float, float]:
    from lamella.agents import PRESETS, make_ppo_runner, make_train
    from lamella.agents.ppo import PPOConfig

    preset = PRESETS["ppo"].get(env_id) or PRESETS["ppo"]["brax:inverted_pendulum@spring"]
    config: PPOConfig = dataclasses.replace(preset, env_id=env_id, total_timesteps=steps, eval_episodes=16)
    start = time.perf_counter()
    runner = make_ppo_runner(config)

    def run(key: jax.Array) -> jax.Array:
        state, _ = make_train(runner)(key)
        return runner.evaluate(state, jax.random.fold_in(key, 1))["episode_return"].mean()

    compiled = jax.jit(run).lower(jax.random.key(seed)).compile()
    compile_time = time.perf_counter() - start
    value = float(compiled(jax.random.key(seed)))
    return value, time.perf_counter() - start, compile_time


def _shim_removed_jax_apis() -> None:
    """brax.training 0.14.2's PPO calls ``jax.device_put_replicated``, which jax 0.10 removed
    (it raises AttributeError there): the same thing, a leading device axis, for it to call."""
    try:
        jax.device_put_replicated  # noqa: B018
    except AttributeError:

        def device_put_replicated(tree, devices):  # type: ignore[no-untyped-def]
            return jax.tree.map(lambda x: jax.device_put(jax.numpy.stack([x] * len(devices))), tree)

        jax.device_put_replicated = device_put_replicated  # type: ignore[attr-defined]


def brax_side(name: str, backend: str, steps: int, seed: int) -> tuple[float, float]:
    _shim_removed_jax_apis()
    from brax import envs
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo

    start = time.perf_counter()
    env = envs.get_environment(name, backend=backend)
    networks = functools.partial(
        ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=(32, 32), value_hidden_layer_sizes=(32, 32)
    )
    _, _, metrics = ppo.train(
        environment=env,
        num_timesteps=steps,
        episode_length=1000,
        num_envs=16,
        unroll_length=16,
        batch_size=16,
        num_minibatches=4,
        num_updates_per_batch=8,
        learning_rate=1e-3,
        entropy_cost=0.0,
        discounting=0.97,
        gae_lambda=0.95,
        clipping_epsilon=0.2,
        max_grad_norm=0.5,
        normalize_observations=True,
        bootstrap_on_timeout=True,
        network_factory=networks,
        num_evals=2,
        num_eval_envs=16,
        deterministic_eval=True,
        seed=seed,
    )
    return float(metrics["eval/episode_reward"]), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="inverted_pendulum")
    parser.add_argument("--backend", default="spring")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    import brax

    env_id = f"brax:{args.env}@{args.backend}"
    print(
        f"{platform.processor() or platform.machine()}, jax {jax.__version__}, brax {brax.__version__}, {env_id}"
    )
    rows = []
    for seed in range(args.seeds):
        ours, ours_wall, ours_compile = lamella_side(env_id, args.steps, seed)
        print(f"seed {seed}: lamella done ({ours:.1f}, {ours_wall:.1f} s)", flush=True)
        theirs, theirs_wall = brax_side(args.env, args.backend, args.steps, seed)
        rows.append((ours, ours_wall, ours_compile, theirs, theirs_wall))
        print(
            f"seed {seed}: lamella return {ours:7.1f} wall {ours_wall:6.1f} s (compile {ours_compile:5.1f} s) | "
            f"brax.training return {theirs:7.1f} wall {theirs_wall:6.1f} s",
            flush=True,
        )
    table = np.asarray(rows)
    print(
        f"median over {args.seeds} seeds, {args.steps} steps: lamella {np.median(table[:, 0]):.1f} in "
        f"{np.median(table[:, 1]):.1f} s; brax.training {np.median(table[:, 3]):.1f} in "
        f"{np.median(table[:, 4]):.1f} s; wall ratio lamella/brax {np.median(table[:, 1] / table[:, 4]):.2f}"
    )


if __name__ == "__main__":
    main()
