"""Learning of lamella-marl's IPPO and MAPPO on the issue's three tasks, with IQM and CIs from lamella-eval.

    hatch run bench:python benchmarks/marl_learning.py --task lbf --steps 409600 --seeds 3
    hatch run bench:python benchmarks/marl_learning.py --task all --steps 204800 --seeds 3
    # a longer run, one seed per process, each pinned to its own core (here seed 2 on core 1)
    taskset -c 1 hatch run bench:python benchmarks/marl_learning.py --task rware --steps 20480000 --seeds 1 --first-seed 2

Tasks (issue 15's learning targets):

| task | algorithm | env | target |
| --- | --- | --- | --- |
| lbf | IPPO | Foraging-8x8-2p-2f-coop-v3 | team return >= 0.9 (Mava ~1.0; random 0.003) |
| rware | MAPPO | rware-tiny-2ag-v2 | >= 10 deliveries per 500-step episode (Mava ~16 at 20M steps) |
| mpe | MAPPO | MPE-simple_spread-v3 | clearly above random (-27.0 per agent-episode) |
| smax | MAPPO | SMAX-3s5z-v0 | win rate above random (JaxMARL trains 10M steps, Mava 20M) |

Every task trains Mava's defaults (``IPPOConfig()`` / ``MAPPOConfig()``: 16 envs x 128 steps, 4
epochs, 2 minibatches, lr 2.5e-4, MLP (128, 128), agent ids, shared parameters, team reward) for
``--steps`` env steps per seed, all seeds (``--first-seed`` onwards) in one vmapped program
through the training driver (run log in ``--out/<task>-seed<first>-<time>``). The score of a
seed is its final evaluation (32 sampled episodes): the team return (sum over agents; RWARE:
deliveries) and the mean per-agent return. lamella-eval aggregates the seeds: IQM and mean with
95% stratified-bootstrap CIs (2000 reps). The random baseline is measured on the same evaluation
loop (uniform legal actions, 256 episodes). Wall time includes compilation. On SMAX the runner
also logs each evaluation episode's ``won`` (``MAPPOConfig(eval_info=("won",))``: the env's
``info["won"]`` on the episode's last step); a seed's win rate is its mean over the 32 episodes,
aggregated like the returns, and the random baseline's win rate comes from the same
``info["won"]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np

import lamella.envs
from lamella.agents.driver import run_experiment
from lamella.agents.protocol import Agent
from lamella.agents.runner import evaluate_agent, step_limit
from lamella.eval import final_scores, interval_estimates, read_run_logs
from lamella.marl import IPPOConfig, MAPPOConfig, MultiAgentObservation

TASKS = {
    "lbf": (IPPOConfig, "Foraging-8x8-2p-2f-coop-v3", "team return >= 0.9", ()),
    "rware": (MAPPOConfig, "rware-tiny-2ag-v2", ">= 10 deliveries per episode", ()),
    "mpe": (MAPPOConfig, "MPE-simple_spread-v3", "per-agent return above random (-27.0)", ()),
    "smax": (MAPPOConfig, "SMAX-3s5z-v0", "win rate above random", ("won",)),
}


def random_baseline(
    env_id: str, final_info: tuple[str, ...] = (), episodes: int = 256
) -> tuple[float, float, float]:
    """Mean team return, mean per-agent return and win rate (the mean of ``info["won"]`` on the
    episodes' last steps when ``final_info`` names it, else NaN) of uniformly random legal actions."""
    env, params = lamella.envs.make(env_id, autoreset=False)
    observed = MultiAgentObservation(env)

    def policy(key, train_state, obs, memory, eval=False):
        logits = jnp.where(obs["action_mask"], 0.0, -jnp.inf)
        return jax.random.categorical(key, logits), train_state, memory

    agent = Agent(lambda key, *a: ((), ()), policy, lambda *a: (*a[1:], {}), lambda m, eval=False: ())
    out = jax.jit(
        lambda key: evaluate_agent(
            agent,
            (),
            observed,
            params,
            key,
            episodes,
            step_limit(0, params),
            (),
            greedy=False,
            per_agent=True,
            final_info=final_info,
        )
    )(jax.random.key(123))
    won = float(out["won"].mean()) if "won" in final_info else float("nan")
    return float(out["episode_return"].mean()), float(out["agent_return"].mean()), won


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", choices=(*TASKS, "all"), default="all")
    parser.add_argument("--steps", type=int, default=409_600, help="env steps per seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seeds first..first+seeds-1 (one process per seed: a core each)",
    )
    parser.add_argument("--out", default="runs/marl_learning")
    args = parser.parse_args()
    tasks = list(TASKS) if args.task == "all" else [args.task]
    print(
        f"# {platform.machine()}, {os.cpu_count()} CPU cores, jax {jax.__version__}, "
        f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, {args.steps:,} env steps per seed"
    )
    header = (
        "| task | algorithm | env steps per seed | wall s | team return IQM [95% CI] | team return per seed "
        "| per-agent return IQM [95% CI] | win rate IQM [95% CI] | win rate per seed "
        "| random team / per agent / win rate | target |"
    )
    rows = [header, "|" + " --- |" * 12]
    for name in tasks:
        config_cls, env_id, target, eval_info = TASKS[name]
        config = config_cls(env_id=env_id, total_timesteps=args.steps, eval_info=eval_info)
        out_dir = os.path.join(args.out, f"{name}-seed{args.first_seed}-{int(time.time())}")
        start = time.perf_counter()
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        run_experiment(config, seeds=seeds, out_dir=out_dir, progress=False, plot=False)
        wall = time.perf_counter() - start
        runs = read_run_logs([out_dir])
        team = final_scores(runs, "mean_episode_return")
        agents = [k for k in runs[0].evaluations[-1].metrics if k.startswith("return_agent_")]
        per_agent = np.mean([final_scores(runs, k).values[config.algorithm] for k in agents], axis=0)
        metrics = [team.values, {config.algorithm: per_agent}]
        if eval_info:
            won = final_scores(runs, "won")  # a seed's score: its mean over the evaluation episodes
            metrics.append(won.values)
        cells = []
        for values in metrics:
            est = interval_estimates(values, ("iqm",), reps=2000, key=0)
            p, lo, hi = (float(d[config.algorithm][0]) for d in (est.point, est.lower, est.upper))
            cells.append(f"{p:.3g} [{lo:.3g}, {hi:.3g}]")
        seeds = ", ".join(f"{v:.3g}" for v in team.values[config.algorithm][:, 0])
        won_seeds = ", ".join(f"{v:.3g}" for v in won.values[config.algorithm][:, 0]) if eval_info else "-"
        won_cell = cells[2] if eval_info else "-"
        random_team, random_agent, random_won = random_baseline(env_id, eval_info)
        rows.append(
            f"| {env_id} | {config.algorithm} | {args.steps:,} | {wall:.0f} | {cells[0]} | {seeds} | {cells[1]} "
            f"| {won_cell} | {won_seeds} | {random_team:.3g} / {random_agent:.3g} / {random_won:.3g} | {target} |"
        )
        print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
