"""lamella PPO / SAC / ES against brax.training's own ``ppo.train`` / ``sac.train`` / ``es.train``
on a Brax body at the same budget: greedy return and wall time.

Run it in the hatch env of lamella-agents' tests (it has brax 0.14.2 beside lamella)::

    hatch -e hatch-test.py3.11-agents run python benchmarks/brax_training.py --algo ppo --steps 200000 --seeds 1
    hatch -e hatch-test.py3.11-agents run python benchmarks/brax_training.py --algo sac \
        --env halfcheetah --steps 50000 --seeds 1
    hatch -e hatch-test.py3.11-agents run python benchmarks/brax_training.py --algo es \
        --env halfcheetah --steps 3200000 --seeds 2

Protocol (one process, the two sides alternated per seed):

* the same Brax env (``inverted_pendulum`` on the spring backend by default; ``--env``,
  ``--backend``), 1000-step episodes, the same env-step budget per seed;
* one lamella config per run (lamella's preset for ``brax:<env>@<backend>`` where one exists,
  else :data:`MATCHED`'s settings; ``--set key=value`` overrides fields), and brax.training's
  arguments derived from that config (:func:`brax_ppo_kwargs`, :func:`brax_sac_kwargs`), so both
  sides run the same settings by construction;
* the return is each side's own greedy evaluation after training (lamella: 16 episodes;
  brax.training: 16 eval envs, ``deterministic_eval=True``, one evaluation at the end);
* wall time is the whole call, compile included (brax.training compiles inside ``train``), and
  lamella's compile is reported apart too. lamella compiles with the XLA options that
  ``lamella train`` uses for one seed (``--compile optimized``: XLA's defaults). Process CPU
  time is reported too (the machine is shared; wall time drifts with the load).

Differences we could not remove: PPO: lamella's ``normalize_rewards`` (the return's running std)
has no brax.training counterpart (brax: a fixed ``reward_scaling``, 1 here), lamella's value
loss is clipped where ``clip_value`` is set, brax cuts minibatches from its unrolls
differently. SAC: both normalise observations and scale rewards as the config says
(``normalize_observations``, ``reward_scaling``; lamella clips normalised observations to
[-10, 10], brax.training does not clip); brax.training prefills its replay buffer with its initial policy, lamella with uniform random
actions; at a time limit lamella bootstraps from the final observation, brax.training drops the
transition from the critic loss; lamella's ``critic_norm="layer"`` (both Brax SAC presets': LayerNorm
before every hidden activation of the critics) has no brax.training counterpart, whose critics
stay plain MLPs (the script says so when it runs). ES: brax.training's ES is OpenAI's (antithetic pairs, Adam on
the fitness-weighted noise), which is evosax's ``Open_ES`` with Adam, so the matched lamella
config uses that strategy (:data:`MATCHED`; brax's ``population_size`` counts pairs, lamella's
members); brax.training's members sample their actions from a tanh-normal whose scale the
network outputs, lamella's play the tanh of the mean, and brax.training counts only the steps
before an episode ends against the budget (lamella counts whole ``max_episode_steps``
episodes), the same on bodies that never terminate (halfcheetah).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import platform
import resource
import time
from typing import Any

import jax
import numpy as np

#: Settings for bodies without a lamella preset: the ``brax:halfcheetah@spring`` presets' (PPO: a
#: CPU-sized cut of brax.training's own halfcheetah settings; SAC: brax.training's SAC choices,
#: observation normalisation, reward scaling, one Adam rate, target entropy -0.5 x action size,
#: half a gradient step per env step, a fresh actor's std 0.69, cut to a CPU budget). The earlier
#: SAC rows of lamella-agents' README ran ``--set num_envs=8 normalize_observations=False
#: reward_scaling=1.0 log_std_bounds=-5,2``.
MATCHED: dict[str, dict[str, Any]] = {algo: dict(preset="brax:halfcheetah@spring") for algo in ("ppo", "sac")}
#: ES on every body (brax.training's ES is OpenAI-ES only: the body's ES preset, where it has one,
#: runs with these settings on both sides): brax.training's algorithm (evosax's ``Open_ES``,
#: antithetic pairs, Adam, centered ranks), 64 members of one 1000-step episode each per
#: generation, sigma 0.1 (brax.training's default), Adam 0.01 (OpenAI's paper; brax.training's
#: default 1e-3 moves the weights by at most 0.05 in the 50 generations of a 3.2e6-step run),
#: observation normalisation, lamella's default (16,) tanh policy.
MATCHED["es"] = dict(
    strategy="Open_ES",
    population_size=64,
    num_rollouts=1,
    max_episode_steps=1000,
    sigma_init=0.1,
    learning_rate=0.01,
    fitness_shaping="centered_rank",
    normalize_observations=True,
)


def lamella_config(algo: str, env_id: str, steps: int, overrides: dict[str, Any]) -> Any:
    """The lamella config both sides run: the preset for ``env_id`` or :data:`MATCHED` (ES: the
    preset, if any, with :data:`MATCHED`'s settings), then ``overrides``."""
    if algo == "ppo":
        from lamella.agents import PRESETS
        from lamella.agents.ppo import PPOConfig as config_class
    elif algo == "es":
        from lamella.agents import PRESETS
        from lamella.agents.es import ESConfig as config_class
    else:
        from lamella.agents.offpolicy.configs import SACTrainConfig as config_class
        from lamella.agents.offpolicy.presets import PRESETS
    matched = dict(MATCHED[algo])
    fallback = PRESETS[algo].get(matched.pop("preset", None)) or config_class()
    preset = PRESETS[algo].get(env_id)
    if algo == "es":
        preset = dataclasses.replace(preset or fallback, **matched)
    elif preset is None:
        preset = dataclasses.replace(fallback, **matched)
    fields = dict(env_id=env_id, total_timesteps=steps, eval_episodes=16)
    if algo == "sac":
        fields["buffer_size"] = steps  # brax.training's default: the whole run fits
    return dataclasses.replace(preset, **fields, **overrides)


def brax_ppo_kwargs(config: Any) -> dict[str, Any]:
    """brax.training ``ppo.train`` arguments for lamella's PPO ``config``.

    lamella collects ``num_steps`` steps of ``num_envs`` envs per update and cuts them into
    ``num_minibatches``; brax.training collects ``batch_size * num_minibatches`` unrolls of
    ``unroll_length`` steps. With ``batch_size = num_envs`` and ``unroll_length = num_steps //
    num_minibatches`` both take the same env steps per update and the same minibatch size.
    """
    from brax.training.agents.ppo import networks as ppo_networks
    from flax import linen

    if config.num_steps % config.num_minibatches:
        raise SystemExit("brax.training needs num_steps to be a multiple of num_minibatches here.")
    return dict(
        num_envs=config.num_envs,
        batch_size=config.num_envs,
        num_minibatches=config.num_minibatches,
        unroll_length=config.num_steps // config.num_minibatches,
        num_updates_per_batch=config.num_epochs,
        learning_rate=config.learning_rate,
        entropy_cost=config.ent_coef,
        discounting=config.gamma,
        gae_lambda=config.gae_lambda,
        clipping_epsilon=config.clip_eps,
        max_grad_norm=config.max_grad_norm,
        normalize_observations=config.normalize_observations,
        reward_scaling=1.0,
        network_factory=lambda *a, **k: ppo_networks.make_ppo_networks(
            *a,
            **k,
            policy_hidden_layer_sizes=config.hidden_sizes,
            value_hidden_layer_sizes=config.hidden_sizes,
            activation=getattr(linen, config.activation),
        ),
    )


def brax_sac_kwargs(config: Any) -> dict[str, Any]:
    """brax.training ``sac.train`` arguments for lamella's SAC ``config`` (one learning rate:
    the actor's; brax's target entropy is fixed at ``-0.5 * action_size``).

    brax.training takes ``num_envs`` env steps then ``grad_updates_per_step`` gradient steps
    per training step, as lamella's loop takes a vector step of ``num_envs`` envs then
    ``updates_per_step`` gradient steps; both count the warm-up (``min_replay_size``,
    ``learning_starts``) in ``num_timesteps``.
    """
    from brax.training.agents.sac import networks as sac_networks
    from flax import linen

    rates = {config.actor_learning_rate, config.critic_learning_rate, config.alpha_learning_rate}
    if len(rates) > 1 or config.init_alpha != 1.0 or config.num_critics != 2:
        raise SystemExit(
            "brax.training's SAC has one learning rate for actor, critic and temperature, alpha "
            "starting at 1 and two critics: set equal learning rates, init_alpha=1.0, num_critics=2."
        )
    if config.critic_norm is not None:
        print(
            f"lamella's critics: critic_norm={config.critic_norm!r}; brax.training's SAC has no such "
            "option, its critics stay plain MLPs (--set critic_norm=None runs lamella without it).",
            flush=True,
        )
    if config.target_entropy_scale != 0.5:
        raise SystemExit(
            "brax.training's SAC fixes the target entropy at -0.5 * action_size: --set target_entropy_scale=0.5."
        )
    return dict(
        num_envs=config.num_envs,
        grad_updates_per_step=config.updates_per_step,
        batch_size=config.batch_size,
        min_replay_size=config.learning_starts,
        max_replay_size=config.buffer_size,
        discounting=config.gamma,
        learning_rate=config.actor_learning_rate,
        tau=config.tau,
        normalize_observations=config.normalize_observations,
        reward_scaling=config.reward_scaling,
        network_factory=lambda *a, **k: sac_networks.make_sac_networks(
            *a, **k, hidden_layer_sizes=config.hidden_sizes, activation=getattr(linen, config.activation)
        ),
    )


def brax_es_kwargs(config: Any) -> dict[str, Any]:
    """brax.training ``es.train`` arguments for lamella's ES ``config``: OpenAI-ES, which lamella
    runs as evosax's ``Open_ES`` (``population_size`` members in antithetic pairs: brax.training's
    ``population_size`` counts the pairs), Adam at ``learning_rate``, ``sigma_init`` as the
    perturbation's std, one episode per member."""
    from brax.training.agents.es import networks as es_networks
    from brax.training.agents.es.train import FitnessShaping
    from evosax.algorithms import Open_ES
    from flax import linen

    from lamella.agents.es import make_strategy

    # evosax's Open_ES shapes by centered ranks by default ("default").
    shaping = {
        "centered_rank": FitnessShaping.CENTERED_RANK,
        "default": FitnessShaping.CENTERED_RANK,
        "identity": FitnessShaping.ORIGINAL,
    }
    # The strategy lamella builds for the config (its own name resolution and checks).
    if not isinstance(make_strategy(config, np.zeros(1, np.float32))[0], Open_ES):
        raise SystemExit(f"brax.training's ES is OpenAI-ES: --set strategy=Open_ES (got {config.strategy}).")
    if config.num_rollouts != 1 or config.weight_decay or config.fitness_shaping not in shaping:
        raise SystemExit(
            "brax.training's ES plays one episode per member, has no fitness weight decay and shapes "
            "the fitness by centered ranks or not at all: --set num_rollouts=1 weight_decay=0 "
            "fitness_shaping=centered_rank (or identity)."
        )
    return dict(
        population_size=config.population_size // 2,
        learning_rate=config.learning_rate,
        perturbation_std=config.sigma_init,
        fitness_shaping=shaping[config.fitness_shaping],
        normalize_observations=config.normalize_observations,
        network_factory=lambda *a, **k: es_networks.make_es_networks(
            *a, **k, hidden_layer_sizes=config.hidden_sizes, activation=getattr(linen, config.activation)
        ),
    )


def lamella_side(algo: str, config: Any, seed: int, compile_mode: str) -> tuple[float, float, float, float]:
    """(greedy return, wall s, compile s, process CPU s) of one lamella run, compiled with the
    XLA options ``lamella train`` gives a one-seed chunk in ``compile_mode`` (``"auto"``: its
    default; ``"optimized"``: XLA's defaults)."""
    from lamella.agents import make_ppo_runner, make_train
    from lamella.agents.driver import compile_options
    from lamella.agents.es import make_es_runner
    from lamella.agents.offpolicy.loop import make_offpolicy_runner

    cpu, start = time.process_time(), time.perf_counter()
    runner = {"ppo": make_ppo_runner, "sac": make_offpolicy_runner, "es": make_es_runner}[algo](config)

    def run(key: jax.Array) -> jax.Array:
        state, _ = make_train(runner)(key)
        return runner.evaluate(state, jax.random.fold_in(key, 1))["episode_return"].mean()

    options = compile_options("chunk", 1, compile_mode)
    compiled = jax.jit(run, compiler_options=options).lower(jax.random.key(seed)).compile()
    compile_time = time.perf_counter() - start
    value = float(compiled(jax.random.key(seed)))
    return value, time.perf_counter() - start, compile_time, time.process_time() - cpu


def _shim_removed_jax_apis() -> None:
    """brax.training 0.14.2 calls ``jax.device_put_replicated``, which jax 0.10 removed (it
    raises AttributeError there): the same thing, a leading device axis, for it to call."""
    try:
        jax.device_put_replicated  # noqa: B018
    except AttributeError:

        def device_put_replicated(tree, devices):  # type: ignore[no-untyped-def]
            return jax.tree.map(lambda x: jax.device_put(jax.numpy.stack([x] * len(devices))), tree)

        jax.device_put_replicated = device_put_replicated  # type: ignore[attr-defined]


def brax_side(algo: str, name: str, backend: str, config: Any, seed: int) -> tuple[float, float, float]:
    """(greedy return, wall s, process CPU s) of one brax.training run."""
    _shim_removed_jax_apis()
    from brax import envs

    if algo == "ppo":
        from brax.training.agents.ppo import train as trainer

        kwargs = brax_ppo_kwargs(config)
    elif algo == "es":
        from brax.training.agents.es import train as trainer

        kwargs = brax_es_kwargs(config)
    else:
        from brax.training.agents.sac import train as trainer

        kwargs = brax_sac_kwargs(config)
    cpu, start = time.process_time(), time.perf_counter()
    env = envs.get_environment(name, backend=backend)
    if algo == "ppo":
        # Bootstrap at time limits where the env marks them (``info["time_out"]``: Brax's
        # inverted pendulum); elsewhere brax.training's GAE stops at the truncation instead.
        kwargs["bootstrap_on_timeout"] = "time_out" in jax.eval_shape(env.reset, jax.random.key(0)).info
    _, _, metrics = trainer.train(
        environment=env,
        num_timesteps=config.total_timesteps,
        episode_length=1000,
        num_evals=1,
        num_eval_envs=config.eval_episodes,
        deterministic_eval=True,
        seed=seed,
        **kwargs,
    )
    return float(metrics["eval/episode_reward"]), time.perf_counter() - start, time.process_time() - cpu


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("ppo", "sac", "es"), default="ppo")
    parser.add_argument("--env", default="inverted_pendulum")
    parser.add_argument("--backend", default="spring")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed, first-seed + 1, ...")
    parser.add_argument(
        "--compile",
        choices=("auto", "optimized"),
        default="auto",
        help="lamella's XLA options: auto (lamella train's default for one seed) or optimized (XLA's defaults)",
    )
    parser.add_argument("--only", choices=("lamella", "brax"), help="run one side only")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides (both sides)"
    )
    args = parser.parse_args()
    import brax

    env_id = f"brax:{args.env}@{args.backend}"
    config = lamella_config(args.algo, env_id, args.steps, _parse_overrides(args.set))
    print(
        f"{platform.processor() or platform.machine()}, {len(jax.devices())} {jax.default_backend()} device(s), "
        f"jax {jax.__version__}, brax {brax.__version__}, {args.algo} on {env_id}, load "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n{config}",
        flush=True,
    )
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        ours = theirs = (float("nan"),) * 4
        if args.only != "brax":
            ours = lamella_side(args.algo, config, seed, args.compile)
            print(
                f"seed {seed}: lamella return {ours[0]:7.1f} wall {ours[1]:6.1f} s (compile {ours[2]:5.1f} s) "
                f"cpu {ours[3]:6.1f} s",
                flush=True,
            )
        if args.only != "lamella":
            theirs = (*brax_side(args.algo, args.env, args.backend, config, seed), float("nan"))
            print(
                f"seed {seed}: brax.training return {theirs[0]:7.1f} wall {theirs[1]:6.1f} s cpu {theirs[2]:6.1f} s",
                flush=True,
            )
        rows.append((ours[0], ours[1], ours[3], theirs[0], theirs[1], theirs[2]))
    table = np.asarray(rows)
    med = np.median(table, axis=0)
    print(
        f"median over {args.seeds} seed(s), {args.steps} steps: lamella {med[0]:.1f} in {med[1]:.1f} s "
        f"(cpu {med[2]:.1f} s); brax.training {med[3]:.1f} in {med[4]:.1f} s (cpu {med[5]:.1f} s); "
        f"wall ratio lamella/brax {np.median(table[:, 1] / table[:, 4]):.2f}, "
        f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
