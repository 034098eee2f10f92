"""HER + SAC (or TD3) on a Brax body: lamella-envs' ``brax-goal:reacher@spring``, against a
uniformly random policy on the same evaluation.

Seeds train side by side in one compiled program; after every iteration the greedy policy plays
``--eval-episodes`` episodes inside the same program. Reported per evaluation: success (the
fingertip touched the goal on some step: what the off-policy loop's evaluation counts) and steps
at the goal (of the episode's 50; ``50 + return`` of the sparse -1/0 reward, when success does not
end the episode). A learning measurement for the gcrl README, not a speed benchmark.

    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_brax_reacher.py --seeds 3 --steps 40000
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import lamella.envs
from lamella.gcrl import SACTrainConfig, TD3TrainConfig, make_offpolicy_runner

ENV_ID = "brax-goal:reacher@spring"


def random_policy(env, params, episodes: int, key: jax.Array) -> tuple[float, float]:
    """Success rate and mean steps at the goal of uniformly random actions."""

    def episode(key):
        obs, state = env.reset(key, params)

        def body(carry, step_key):
            state, done, touched, at_goal = carry
            action = jax.random.uniform(step_key, (2,), minval=-1.0, maxval=1.0)
            _, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
            live = ~done
            touched = touched | (live & info["is_success"])
            at_goal = at_goal + jnp.where(live, reward + 1.0, 0.0)
            return (state, done | terminated | truncated, touched, at_goal), None

        steps = int(params.max_steps_in_episode)
        init = (state, jnp.zeros((), bool), jnp.zeros((), bool), jnp.zeros((), jnp.float32))
        (_, _, touched, at_goal), _ = jax.lax.scan(body, init, jax.random.split(key, steps))
        return touched, at_goal

    touched, at_goal = jax.jit(jax.vmap(episode))(jax.random.split(key, episodes))
    return float(np.mean(touched)), float(np.mean(at_goal))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=("sac", "td3"), default="sac")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40_000, help="env steps per seed")
    parser.add_argument("--threshold", type=float, default=0.02, help="success radius (m)")
    parser.add_argument("--terminate-on-success", action="store_true")
    parser.add_argument("--no-her", action="store_true")
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--random-only", action="store_true", help="only the random policy's figures")
    args = parser.parse_args()

    env, params = lamella.envs.make(
        ENV_ID,
        autoreset=False,
        distance_threshold=args.threshold,
        terminate_on_success=args.terminate_on_success,
    )
    print(params)
    touched, at_goal = random_policy(env, params, 256, jax.random.key(123))
    print(f"random policy (256 episodes): success {touched:.3f}, steps at the goal {at_goal:.2f}")
    if args.random_only:
        return

    settings = dict(
        env_id=ENV_ID,
        her=not args.no_her,
        hidden_sizes=(64, 64),
        num_envs=4,
        updates_per_step=2,
        batch_size=256,
        learning_starts=1000,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        gamma=0.98,
        tau=0.05,
        total_timesteps=args.steps,
        rollout_steps=args.steps // 40,  # 10 evaluations
        buffer_size=args.steps,
        eval_episodes=args.eval_episodes,
    )
    config = (
        SACTrainConfig(**settings, alpha_learning_rate=1e-3)
        if args.algo == "sac"
        else TD3TrainConfig(**settings)
    )
    runner = make_offpolicy_runner(config, env=env, env_params=params)

    def train(key):
        state = runner.init(key)

        def body(state, _):
            state, _metrics = runner.step(state)
            evaluation = runner.evaluate(state, jax.random.fold_in(key, state.iteration))
            return state, (evaluation["success"].mean(), evaluation["episode_return"].mean())

        return jax.lax.scan(body, state, None, length=runner.num_iterations)[1]

    start_cpu, start_wall = time.process_time(), time.time()
    success, returns = jax.device_get(
        jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), args.seeds))
    )
    steps = (np.arange(runner.num_iterations) + 1) * config.num_envs * config.rollout_steps
    print(f"{args.algo} {'without' if args.no_her else 'with'} HER, env steps {steps.tolist()}")
    print("success per seed:\n", np.round(success, 2))
    if not args.terminate_on_success:
        print("steps at the goal per seed:\n", np.round(params.max_steps_in_episode + returns, 1))
    print(f"{time.process_time() - start_cpu:.0f} s CPU, {time.time() - start_wall:.0f} s wall")


if __name__ == "__main__":
    main()
