"""IPPO on MaBrax (JaxMARL's Brax bodies split into agents): lamella-marl against JaxMARL's own
MaBrax IPPO baseline, same env, same settings, same env-step budget: greedy return and time.

    python benchmarks/marl_mabrax_vs_jaxmarl.py --jaxmarl-src DIR [--env ant_4x2] [--backend spring]
        [--steps 998400] [--seeds 2] [--num-envs 64] [--eval-episodes 16] [--first-seed 0] [--algo ippo|mappo]
        [--lamella-only]

``--algo mappo`` trains lamella-marl's MAPPO instead (the same settings, the critic on the env's
global state: the adapter's ``global_state``, Brax's whole observation of the body); JaxMARL
has no MaBrax MAPPO, so its side stays its IPPO baseline. ``--lamella-only`` skips JaxMARL's side.

``DIR`` is a checkout of FLAIROx/JaxMARL: its ``baselines/IPPO/ippo_ff_mabrax.py`` and its config
``baselines/IPPO/config/ippo_ff_mabrax.yaml`` are loaded from there, unmodified (a stub ``wandb``
module takes its per-update log). It needs an environment with lamella-marl, jaxmarl 0.2.0, brax
0.14.2, distrax and hydra-core (the marl README gives the commands).

Protocol (one process, the two sides alternated per seed):

* the same env: JaxMARL's MaBrax body (``jaxmarl.make(env, backend=...)``; Brax's spring backend by
  default, the cheapest on CPU), lamella training on it through lamella-envs' JaxMARL adapter
  (``from_jaxmarl``), JaxMARL's baseline through ``jaxmarl.make`` as it runs it;
* the same settings: JaxMARL's ``ippo_ff_mabrax.yaml`` (Adam 1e-3 annealed linearly, 64 envs x
  300 steps per update, 4 epochs, 4 minibatches, gamma 0.99, GAE lambda 0.95, clip 0.2, entropy
  2e-6, value 4.5, gradient norm 0.5, (64, 64) tanh actor and critic, one network shared by the
  agents, no agent ids) with ``--steps`` and ``--num-envs`` put in, and lamella's
  :class:`~lamella.marl.IPPOConfig` derived from it (:func:`lamella_config`): each agent trains on
  its own reward (every MaBrax agent is paid the body's reward), Gaussian actions with a learned
  state-independent log std starting at 0, clipped to the action bounds
  (``continuous_action="clip"``; JaxMARL hands the raw sample to Brax, which clips it);
* the score of a seed is one evaluation for both sides, by the same function on the same env
  (:func:`lamella.agents.runner.evaluate_agent`, ``--eval-episodes`` episodes of up to 1000 steps
  from fresh resets): each side's policy mean, clipped to the bounds, and the body's return (one
  agent's, as every agent gets it). A uniformly random policy is scored the same way;
* time: each side's ``train`` is compiled ahead (compile time apart), then one call trains the
  whole budget; wall and process CPU seconds of that call.

Differences we could not remove: at Brax's 1000-step limit lamella bootstraps from the final
observation (the adapter keeps truncation apart), JaxMARL's baseline treats it as the end of the
episode; lamella decays the learning rate once per update, JaxMARL per minibatch step; the two
initialise their networks differently (the same shapes).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import sys
import time
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents import make_train
from lamella.agents.protocol import Agent
from lamella.agents.runner import evaluate_agent
from lamella.envs.adapters.jaxmarl import from_jaxmarl
from lamella.marl import IPPOConfig, MAPPOConfig, MultiAgentObservation, make_ippo_runner, make_mappo_runner

MAX_EVAL_STEPS = 1000


def load_jaxmarl_mabrax(source: Path) -> tuple[types.ModuleType, dict[str, Any]]:
    """JaxMARL's ``ippo_ff_mabrax.py`` module and its config (the yaml beside it, read by
    OmegaConf as JaxMARL's hydra entry point reads it) as a dict."""
    from omegaconf import OmegaConf

    wandb = types.ModuleType("wandb")
    wandb.log = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    wandb.init = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    sys.modules.setdefault("wandb", wandb)
    folder = source / "baselines" / "IPPO"
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo_ff_mabrax", folder / "ippo_ff_mabrax.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = OmegaConf.to_container(OmegaConf.load(folder / "config" / "ippo_ff_mabrax.yaml"))
    assert isinstance(config, dict)
    return module, config


def lamella_config(jm: dict[str, Any], eval_episodes: int, algo: str = "ippo") -> IPPOConfig:
    """lamella's IPPO (or MAPPO: ``algo="mappo"``) with JaxMARL's MaBrax IPPO settings ``jm``."""
    return (MAPPOConfig if algo == "mappo" else IPPOConfig)(
        env_id="(from_jaxmarl)",
        total_timesteps=int(jm["TOTAL_TIMESTEPS"]),
        num_envs=int(jm["NUM_ENVS"]),
        num_steps=int(jm["NUM_STEPS"]),
        num_epochs=int(jm["UPDATE_EPOCHS"]),
        num_minibatches=int(jm["NUM_MINIBATCHES"]),
        learning_rate=float(jm["LR"]),
        anneal_lr=bool(jm["ANNEAL_LR"]),
        gamma=float(jm["GAMMA"]),
        gae_lambda=float(jm["GAE_LAMBDA"]),
        clip_eps=float(jm["CLIP_EPS"]),
        ent_coef=float(jm["ENT_COEF"]),
        vf_coef=float(jm["VF_COEF"]),
        max_grad_norm=float(jm["MAX_GRAD_NORM"]),
        activation=str(jm["ACTIVATION"]),
        hidden_sizes=(64, 64),  # JaxMARL's fixed width
        share_parameters=True,
        agent_id=False,
        team_reward=False,  # every agent is paid the body's reward already
        continuous_action="clip",
        log_std_init=0.0,
        eval_greedy=True,
        eval_episodes=eval_episodes,
        eval_max_steps=MAX_EVAL_STEPS,
    )


def policy_agent(act: Any) -> Agent:
    """An :class:`Agent` whose policy is ``act(key, obs) -> actions`` (no parameters, no memory)."""

    def policy(key: Any, train_state: Any, obs: Any, memory: Any, eval: bool = False) -> Any:
        return act(key, obs["obs"]), train_state, memory

    return Agent(lambda key, *a: ((), ()), policy, lambda *a: (*a[1:], {}), lambda m, eval=False: ())


def score(env: Any, params: Any, act: Any, episodes: int, key: Any) -> jax.Array:
    """The body's return of ``episodes`` episodes of ``act``'s actions (one agent's return: every
    agent is paid the same); jit it."""
    out = evaluate_agent(
        policy_agent(act),
        (),
        MultiAgentObservation(env),
        params,
        key,
        episodes,
        MAX_EVAL_STEPS,
        (),
        greedy=True,
        per_agent=True,
    )
    return out["agent_return"][:, 0]


def cell(value: Any) -> str:
    """A table cell: floats with one decimal."""
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def timed(fn: Any, *args: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jaxmarl-src", type=Path, required=True, help="a checkout of FLAIROx/JaxMARL")
    parser.add_argument("--env", default="ant_4x2", help="a JaxMARL MaBrax id")
    parser.add_argument("--backend", default="spring", help="Brax backend (JaxMARL's default: positional)")
    parser.add_argument(
        "--steps", type=int, default=998_400, help="env steps per seed (52 updates of 64 x 300)"
    )
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--num-envs", type=int, default=None, help="parallel envs (JaxMARL's config: 64)")
    parser.add_argument("--eval-episodes", type=int, default=16)
    parser.add_argument("--algo", choices=("ippo", "mappo"), default="ippo", help="lamella's side")
    parser.add_argument("--lamella-only", action="store_true", help="skip JaxMARL's side")
    args = parser.parse_args()

    module, jm = load_jaxmarl_mabrax(args.jaxmarl_src)
    jm.update(TOTAL_TIMESTEPS=args.steps, ENV_NAME=args.env, ENV_KWARGS={"backend": args.backend})
    if args.num_envs is not None:
        jm["NUM_ENVS"] = args.num_envs
    config = lamella_config(jm, args.eval_episodes, args.algo)
    env = from_jaxmarl(args.env, backend=args.backend)
    params = env.default_params
    runner = (make_mappo_runner if args.algo == "mappo" else make_ippo_runner)(config, env=env)
    assert runner.steps_per_iteration == jm["NUM_ENVS"] * jm["NUM_STEPS"]
    updates = args.steps // runner.steps_per_iteration
    print(
        f"lamella {args.algo.upper()}"
        f"{'' if args.lamella_only else ' and JaxMARL IPPO'} on {args.env}@{args.backend}: {jm['NUM_ENVS']} envs x {jm['NUM_STEPS']} steps, {updates} updates "
        f"({updates * runner.steps_per_iteration:,} env steps) per seed, {args.seeds} seeds\n"
        f"machine: {platform.machine()}, {os.cpu_count()} CPU(s), device {jax.devices()[0].platform}; "
        f"jax {jax.__version__}, jaxmarl {importlib.metadata.version('jaxmarl')}, "
        f"brax {importlib.metadata.version('brax')}, mujoco {importlib.metadata.version('mujoco')}",
        flush=True,
    )
    low, high = (
        jnp.asarray(b, jnp.float32) for b in (env.action_space(params).low, env.action_space(params).high)
    )
    eval_key = jax.random.key(12345)

    def uniform(key: Any, obs: Any) -> Any:
        return jax.random.uniform(key, (*obs.shape[:-1], low.shape[-1]), minval=low[0], maxval=high[0])

    def still(key: Any, obs: Any) -> Any:
        return jnp.zeros((*obs.shape[:-1], low.shape[-1]), jnp.float32)

    random_returns = jax.jit(lambda k: score(env, params, uniform, 64, k))(eval_key)
    still_returns = jax.jit(lambda k: score(env, params, still, 64, k))(eval_key)
    print(
        f"uniformly random actions (64 episodes): mean return {random_returns.mean():.1f}; "
        f"zero actions: {still_returns.mean():.1f}",
        flush=True,
    )

    lamella_train = jax.jit(make_train(runner))
    lamella_eval = jax.jit(runner.evaluate)
    network = None
    rows: list[tuple[Any, ...]] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        key = jax.random.key(seed)
        start = time.perf_counter()
        compiled = lamella_train.lower(key).compile()
        lamella_compile = time.perf_counter() - start
        (state, metrics), wall, cpu = timed(compiled, key)
        lamella_returns = np.asarray(lamella_eval(state, eval_key)["return"])[:, 0]
        # The mean return of the training episodes that ended in the last update (agent 0's).
        train_return = float(metrics["return"][-1, 0])
        rows.append(
            ("lamella", seed, float(lamella_returns.mean()), train_return, wall, cpu, lamella_compile)
        )
        print("| " + " | ".join(cell(v) for v in rows[-1]) + " |", flush=True)
        if args.lamella_only:
            continue

        init_key, train_key = jax.random.split(jax.random.PRNGKey(seed))
        train = module.make_train(dict(jm), init_key)
        if network is None:
            network = module.ActorCritic(low.shape[-1], activation=jm["ACTIVATION"])
        start = time.perf_counter()
        compiled = jax.jit(train).lower(train_key).compile()
        jm_compile = time.perf_counter() - start
        out, wall, cpu = timed(compiled, train_key)
        jm_params = out["runner_state"][0].params

        def mean_action(key: Any, obs: Any, jm_params: Any = jm_params) -> Any:
            pi, _ = network.apply(jm_params, obs)
            return jnp.clip(pi.mean(), low[0], high[0])

        jm_returns = jax.jit(lambda k: score(env, params, mean_action, args.eval_episodes, k))(eval_key)
        # JaxMARL's own training metric: its LogWrapper's returned_episode_returns (each env's
        # last finished episode), averaged over the last update's steps and actors.
        train_return = float(np.asarray(out["metrics"]["returned_episode_returns"])[-1])
        rows.append(("jaxmarl", seed, float(jm_returns.mean()), train_return, wall, cpu, jm_compile))
        print("| " + " | ".join(cell(v) for v in rows[-1]) + " |", flush=True)

    print(
        "\n| side | seed | greedy return | training return, last update | train wall s | train CPU s | compile s |"
        "\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    for row in rows:
        print("| " + " | ".join(cell(v) for v in row) + " |")
    means = {}
    for side in ("lamella", *(() if args.lamella_only else ("jaxmarl",))):
        mine = np.array([r[2:6] for r in rows if r[0] == side], np.float64)
        means[side] = mine.mean(axis=0)
        print(
            f"{side}: mean greedy return {means[side][0]:.1f}, mean training return {means[side][1]:.1f}, "
            f"mean train wall {means[side][2]:.1f} s, CPU {means[side][3]:.1f} s"
        )
    if "jaxmarl" in means:
        ratio = means["jaxmarl"][2:] / means["lamella"][2:]
        print(f"lamella / JaxMARL env steps per second of training: wall {ratio[0]:.2f}, CPU {ratio[1]:.2f}")
    print(f"uniformly random actions: {random_returns.mean():.1f}; zero actions: {still_returns.mean():.1f}")


if __name__ == "__main__":
    main()
