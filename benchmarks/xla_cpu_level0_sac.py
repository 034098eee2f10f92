"""XLA's CPU code at optimisation level 0 computes NaN gradients for SAC: why the driver compiles
only ``init`` at level 0 (lamella-agents README, "Speed"; ``driver.compile_options``).

SAC on Pendulum-v1 (the preset, one env step per runner step, learning from env step 1000),
``jit(vmap(runner.step))`` over ``--seeds`` seeds. The warm-up steps run at level 1; from then
on every step runs twice from the same state, once compiled at level 0 and once at level 1,
and the level-0 result is kept. The script prints, per update, whether each side's new state
is finite, and whether the two compiled programs' optimised HLO are the same text (they are:
the level changes only the machine code). Measured 2026-12-05 (2-core AMD EPYC, jax 0.10.2 and
0.12.0.1): the level-0 program's actor parameters were NaN after the second update, the
level-1 program's finite; the NaN enters in the gradient of the critics' value with respect to
the action (the forward values and losses of both sides agree to the last digits). The same on a
2-core Intel Xeon with AVX-512 (jax 0.10.2, 2026-12-05): ten non-finite leaves after env step
1001 with one seed and with four, and ``--check-init`` finite where the defaults are (at most
7.9e-7 apart).

``--check-init`` compares every built-in single-agent runner's ``init`` compiled as the
driver compiles it (level 0, the older emitters where the installed XLA has them) with XLA's
defaults: both finite where the defaults are, and how far apart.

    hatch run bench:python benchmarks/xla_cpu_level0_sac.py [--seeds 1] [--updates 5] [--check-init]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.algorithms import load_algorithm
from lamella.agents.driver import compile_options

LEVEL = {0: {"xla_backend_optimization_level": 0}, 1: {"xla_backend_optimization_level": 1}}


def non_finite(tree) -> list[str]:
    return [
        jax.tree_util.keystr(path)
        for path, x in jax.tree_util.tree_leaves_with_path(tree)
        if jnp.issubdtype(x.dtype, jnp.floating) and not np.isfinite(np.asarray(x)).all()
    ]


def sac_steps(seeds: int, updates: int) -> None:
    sac = load_algorithm("sac")
    config = sac.config_class(env_id="Pendulum-v1", rollout_steps=1, learning_starts=1000)
    runner = sac.make_runner(config)
    state = jax.jit(jax.vmap(runner.init))(jax.random.split(jax.random.key(0), seeds))
    warm = jax.jit(jax.vmap(runner.step), compiler_options=LEVEL[1])
    for _ in range(config.learning_starts - 1):  # env steps 1..999 (no update yet)
        state, _ = warm(state)
    lowered = jax.jit(jax.vmap(runner.step)).lower(state)
    step = {level: lowered.compile(compiler_options=LEVEL[level]) for level in (0, 1)}
    print(
        f"jax {jax.__version__}, {seeds} seed(s); the two programs' optimised HLO the same text:",
        step[0].as_text() == step[1].as_text(),
    )
    for update in range(updates + 1):
        out = {level: step[level](state) for level in (0, 1)}
        bad = {level: non_finite(out[level]) for level in (0, 1)}
        loss = {level: float(np.mean(out[level][1]["actor_loss"])) for level in (0, 1)}
        print(
            f"env step {config.learning_starts + update}: actor loss level 0 {loss[0]:.6f}, level 1 "
            f"{loss[1]:.6f}; non-finite leaves of the new state: level 0 {len(bad[0])}, level 1 {len(bad[1])}"
        )
        if bad[0] or bad[1]:
            print("  level 0:", bad[0][:4], "\n  level 1:", bad[1][:4])
            break
        state = out[0][0]


def check_init() -> None:
    cases = [
        ("ppo", "CartPole-v1"),
        ("ppo", "Pendulum-v1"),
        ("dqn", "CartPole-v1"),
        ("sac", "Pendulum-v1"),
        ("td3", "Pendulum-v1"),
        ("ddpg", "Pendulum-v1"),
        ("tqc", "Pendulum-v1"),
        ("es", "CartPole-v1"),
    ]
    for name, env_id in cases:
        algorithm = load_algorithm(name)
        runner = algorithm.make_runner(algorithm.config_class(env_id=env_id))
        for seeds in (1, 4):
            keys = jax.random.split(jax.random.key(3), seeds)
            driver_init, default_init = (
                jax.jit(jax.vmap(runner.init), compiler_options=options)(keys)
                for options in (compile_options("init", seeds), None)
            )
            diff, finite_where_default_is = 0.0, True
            for a, b in zip(jax.tree.leaves(driver_init), jax.tree.leaves(default_init)):
                if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
                    a, b = jax.random.key_data(a), jax.random.key_data(b)
                a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
                finite_where_default_is &= bool(np.array_equal(np.isfinite(a), np.isfinite(b)))
                both = np.isfinite(a) & np.isfinite(b)
                if both.any():
                    diff = max(diff, float(np.max(np.abs(a[both] - b[both]))))
            print(
                f"init {name} {env_id}, {seeds} seed(s): non-finite where the defaults' are: "
                f"{finite_where_default_is}; largest difference {diff:.3g}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--check-init", action="store_true")
    args = parser.parse_args()
    sac_steps(args.seeds, args.updates)
    if args.check_init:
        check_init()


if __name__ == "__main__":
    main()
