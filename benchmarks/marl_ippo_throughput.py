"""IPPO training throughput: lamella-marl against JaxMARL's IPPO baseline, side by side, same env.

    python benchmarks/marl_ippo_throughput.py --jaxmarl-src DIR [--env ID] [--updates 16] [--repeats 5] [--clock wall|process]
        [--num-envs 16] [--profile DIR] [--lamella-options JSON] [--kernel-gradient plain|copy]

``DIR`` is a checkout of FLAIROx/JaxMARL (its ``baselines/IPPO/ippo_ff_mpe.py`` is loaded from
there, unmodified, and run as JaxMARL runs it). JaxMARL pins nothing lamella cannot share, so both
run in one interpreter; it needs its own virtual environment only because lamella's do not install
it (see the marl README for the exact commands).

Protocol (../shared/BENCHMARKS.md):

* The same env on both sides: lamella's Level-Based Foraging (``Foraging-8x8-2p-2f-coop-v3``,
  JaxMARL has no LBF) or MPE (``--env MPE-simple_spread-v3``, lamella's port of mpe2), handed to JaxMARL's ``make_train`` through a small adapter to JaxMARL's
  ``MultiAgentEnv`` interface (dict observations, actions, rewards and dones; JaxMARL's own
  ``step`` auto-resets, its ``MPELogWrapper`` logs returns) in place of ``jaxmarl.make``. Both
  sides train on the team reward (the agents' rewards summed).
* The same config: 16 envs (``--num-envs``) x 128 steps, 4 epochs, 2 minibatches (of 2,048 agent-steps each on
  both sides), lr 2.5e-4 without annealing, clip 0.2, entropy 0.01, value 0.5, grad norm 0.5,
  actor and critic MLPs of (64, 64) tanh (JaxMARL's fixed width), parameters shared by the
  agents, no agent ids (JaxMARL adds none). lamella also applies LBF's action masks (JaxMARL's
  MPE baseline has none; the adapter's illegal actions are NONE as in the env).
* One call = one seed's ``train(key)`` of ``--updates`` iterations, jitted; every output
  (final parameters, optimiser and env states, all metrics) is consumed in a checksum.
  JaxMARL's per-update ``io_callback`` to ``wandb.log`` is part of its program and stays (a stub
  ``wandb`` module whose ``log`` does nothing).
* Timed calls interleaved (lamella, JaxMARL, lamella, ...), medians, compile (first call)
  reported separately. ``--clock process`` times the calls in CPU time of the process (all its
  threads), steadier than wall time on a machine shared with other jobs.
* ``--profile DIR``: after timing, one more call of each side runs under ``jax.profiler``; every
  event on the device's timelines and the compiled HLO go to ``DIR/<env>_<num envs>_<side>.json.gz``
  (how the GPU figures in lamella-marl's docs/speed-ippo.md were taken apart: kernels, the gaps between them, the
  loops they ran in).
* ``--lamella-options JSON``: a third side, lamella's same program compiled with these XLA
  ``compiler_options`` (e.g. ``'{"xla_cpu_experimental_ynn_fusion_type": ""}'``), timed in the
  same rounds (how the per-program option figures under jax 0.11 in lamella-marl's
  docs/speed-ippo.md were taken).
* ``--kernel-gradient plain|copy``: a third side, lamella's same program with a wide dense
  layer's kernel gradient forced to the plain ``x^T g`` or to the product from a materialised
  ``x^T`` (``lamella.agents.networks.plain_wide_kernel_gradient`` picks one by jax release and
  back end; which is faster also depends on the CPU, so a host can check the pick by forcing the
  other). The side is traced with the choice forced; the library is not changed.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from _interleave import time_interleaved

import lamella.agents.networks
import lamella.envs
from lamella.agents import make_train
from lamella.marl import IPPOConfig, make_ippo_runner

ENV_ID = "Foraging-8x8-2p-2f-coop-v3"
NUM_ENVS, NUM_STEPS = 16, 128


def checksum(tree: Any) -> jax.Array:
    """One float from every leaf of ``tree`` (keys as their data), so nothing is dead code."""
    total = jnp.zeros((), jnp.float32)
    for leaf in jax.tree.leaves(tree):
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        total = total + jnp.sum(leaf.astype(jnp.float32))
    return total


def make_jaxmarl_adapter(env_id: str) -> Any:
    """lamella's bare env behind JaxMARL's ``MultiAgentEnv`` interface."""
    from jaxmarl.environments import spaces as jm_spaces
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv

    env, params = lamella.envs.make(env_id, autoreset=False)
    obs_space, num_actions = env.observation_space(params), int(env.action_space(params).nvec[0])

    class LamellaEnv(MultiAgentEnv):
        def __init__(self) -> None:
            super().__init__(num_agents=env.num_agents)
            low, high = float(obs_space.low.min()), float(obs_space.high.max())
            self.observation_spaces = {a: jm_spaces.Box(low, high, obs_space.shape[1:]) for a in self.agents}
            self.action_spaces = {a: jm_spaces.Discrete(num_actions) for a in self.agents}

        def _dicts(self, obs: jax.Array) -> dict[str, jax.Array]:
            return {a: obs[i] for i, a in enumerate(self.agents)}

        def reset(self, key: jax.Array) -> tuple[dict[str, jax.Array], Any]:
            obs, state = env.reset_env(key, params)
            return self._dicts(obs), state

        def get_obs(self, state: Any) -> dict[str, jax.Array]:
            return self._dicts(env.get_obs(state, params))

        def step_env(self, key: jax.Array, state: Any, actions: dict[str, jax.Array]) -> tuple[Any, ...]:
            # JaxMARL hands each agent its action with a unit axis.
            action = jnp.stack([jnp.reshape(actions[a], ()) for a in self.agents]).astype(jnp.int32)
            obs, state, reward, terminated, truncated, _ = env.step_env(key, state, action, params)
            done = terminated | truncated
            team = jnp.sum(reward)
            rewards = {a: team for a in self.agents}
            dones = {a: done[i] for i, a in enumerate(self.agents)}
            dones["__all__"] = jnp.all(done)
            return self._dicts(obs), state, rewards, dones, {}

    return LamellaEnv()


def load_jaxmarl_ippo(source: Path) -> types.ModuleType:
    """JaxMARL's ``baselines/IPPO/ippo_ff_mpe.py``, with ``jaxmarl.make`` giving the adapter."""
    wandb = types.ModuleType("wandb")
    wandb.log = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    wandb.init = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    sys.modules.setdefault("wandb", wandb)
    path = source / "baselines" / "IPPO" / "ippo_ff_mpe.py"
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo_ff", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.jaxmarl = types.SimpleNamespace(make=lambda name, **kwargs: make_jaxmarl_adapter(name))
    return module


def ippo_config(env_id: str, num_envs: int, updates: int) -> IPPOConfig:
    """lamella's side of the config (the module docs): ``updates`` iterations of ``num_envs`` envs."""
    total = updates * num_envs * NUM_STEPS
    return IPPOConfig(
        env_id=env_id,
        total_timesteps=total,
        num_envs=num_envs,
        num_steps=NUM_STEPS,
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


def make_sides(
    jaxmarl_src: Path,
    env_id: str,
    num_envs: int,
    updates: int,
    lamella_options: dict[str, Any] | None = None,
    kernel_gradient: str | None = None,
) -> dict[str, Any]:
    """``{"lamella": train, "jaxmarl": train}``: each ``train(key)`` a jitted call of ``updates`` PPO
    iterations on ``env_id`` with ``num_envs`` envs, returning a checksum of all its outputs.
    ``lamella_options``: also ``"lamella*"``, lamella's program compiled with these options.
    ``kernel_gradient`` (``"plain"`` or ``"copy"``): also ``"lamella+"``, lamella's program traced
    with that kernel gradient forced."""
    total = updates * num_envs * NUM_STEPS
    config = ippo_config(env_id, num_envs, updates)

    def lamella(key: jax.Array) -> jax.Array:
        return checksum(make_train(make_ippo_runner(config))(key))

    sides = {"lamella": jax.jit(lamella)}
    if lamella_options:
        sides["lamella*"] = jax.jit(lamella, compiler_options=lamella_options)
    if kernel_gradient is not None:
        sides["lamella+"] = jax.jit(forced_kernel_gradient(lamella, kernel_gradient == "plain"))

    jaxmarl_ippo = load_jaxmarl_ippo(jaxmarl_src)
    jaxmarl_config = {
        "LR": 2.5e-4,
        "NUM_ENVS": num_envs,
        "NUM_STEPS": NUM_STEPS,
        "TOTAL_TIMESTEPS": total,
        "UPDATE_EPOCHS": 4,
        "NUM_MINIBATCHES": 2,
        "GAMMA": 0.99,
        "GAE_LAMBDA": 0.95,
        "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01,
        "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5,
        "ACTIVATION": "tanh",
        "ENV_NAME": env_id,
        "ENV_KWARGS": {},
        "ANNEAL_LR": False,
    }
    jaxmarl_train = jax.jit(lambda key: checksum(jaxmarl_ippo.make_train(dict(jaxmarl_config))(key)))

    return {**sides, "jaxmarl": jaxmarl_train}


def forced_kernel_gradient(fn: Any, plain: bool) -> Any:
    """``fn`` with ``lamella.agents.networks.plain_wide_kernel_gradient()`` answering ``plain``
    while ``fn`` runs: jitted, that is while it is traced, which is when the choice is read."""
    networks = lamella.agents.networks

    def forced(*args: Any) -> Any:
        chosen = networks.plain_wide_kernel_gradient
        networks.plain_wide_kernel_gradient = lambda: plain
        try:
            return fn(*args)
        finally:
            networks.plain_wide_kernel_gradient = chosen

    return forced


def profile_call(fn: Any, key: jax.Array, path: Path) -> None:
    """Trace one call of ``fn(key)`` under ``jax.profiler`` and write what the device ran to ``path``.

    Written (gzipped JSON): every event on the device's timelines (GPU streams; on the CPU, XLA's
    worker threads) as ``[line, name, start_ns, duration_ns, hlo_op]``, and the compiled program's
    HLO text (its ``op_name`` metadata says which source operation each kernel computes). Printed:
    the kernels' count, their summed time and the span from the first start to the last end.
    """
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        jax.block_until_ready(fn(key))
        jax.profiler.stop_trace()
        xplane = sorted(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True))[-1]
        profile = jax.profiler.ProfileData.from_file(xplane)
    events = []
    for plane in profile.planes:
        on_device = plane.name.startswith("/device:")
        for line in plane.lines:
            if not (on_device or "XLAEigen" in line.name):
                continue
            for event in line.events:
                stats = dict(event.stats)
                hlo_op = str(stats.get("hlo_op", ""))
                events.append(
                    [f"{plane.name}/{line.name}", event.name, event.start_ns, event.duration_ns, hlo_op]
                )
    kernels = [e for e in events if "Stream" in e[0] or "XLAEigen" in e[0]]
    span = (max(e[2] + e[3] for e in kernels) - min(e[2] for e in kernels)) / 1e6 if kernels else 0.0
    busy = sum(e[3] for e in kernels) / 1e6
    print(
        f"  profile {path.name}: {len(kernels)} kernel events, {busy:.1f} ms busy over a {span:.1f} ms span"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    hlo = fn.lower(key).compile().as_text()
    with gzip.open(path, "wt") as file:
        json.dump({"events": events, "hlo": hlo}, file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jaxmarl-src", type=Path, required=True, help="a checkout of FLAIROx/JaxMARL")
    parser.add_argument("--updates", type=int, default=16, help="PPO iterations per timed call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--env", default=ENV_ID, help="a lamella multi-agent env id with discrete actions")
    parser.add_argument("--clock", choices=("wall", "process"), default="wall")
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="parallel envs on both sides")
    parser.add_argument(
        "--profile",
        type=Path,
        help="after timing, trace one call of each side and write its device events here",
    )
    parser.add_argument(
        "--lamella-options",
        type=json.loads,
        help="JSON dict of XLA compiler options: adds lamella's program compiled with them as a third side",
    )
    parser.add_argument(
        "--kernel-gradient",
        choices=("plain", "copy"),
        help="adds lamella's program with a wide layer's kernel gradient taken this way as a third side",
    )
    args = parser.parse_args()
    env_id, num_envs = args.env, args.num_envs
    total = args.updates * num_envs * NUM_STEPS
    trains = make_sides(
        args.jaxmarl_src, env_id, num_envs, args.updates, args.lamella_options, args.kernel_gradient
    )
    rate, compile_s, times = time_interleaved(
        {name: (lambda _, key, fn=fn: fn(key), None) for name, fn in trains.items()},
        (jax.random.key(0),),
        work=total,
        repeats=args.repeats,
        clock=time.process_time if args.clock == "process" else time.perf_counter,
    )
    print(
        f"IPPO training on {env_id}: {num_envs} envs x {NUM_STEPS} steps, {args.updates} updates per call, "
        f"{args.clock} clock"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU(s), device {jax.devices()[0].device_kind}; "
        f"jax {jax.__version__}, "
        f"jaxmarl {importlib.metadata.version('jaxmarl')}, flax {importlib.metadata.version('flax')}"
    )
    print(f"{'side':<8} {'env steps/s':>12} {'first call (s)':>15}")
    for name in trains:
        print(f"{name:<8} {rate[name]:>12.3g} {compile_s[name]:>15.1f}")
    if args.lamella_options:
        print(f"lamella*: lamella compiled with {args.lamella_options}")
    if args.kernel_gradient:
        print(
            f"lamella+: lamella with the {args.kernel_gradient} kernel gradient (this jax's own choice: "
            f"{'plain' if lamella.agents.networks.plain_wide_kernel_gradient() else 'copy'})"
        )
    for name in (n for n in trains if n != "jaxmarl"):
        ratios = [a / b for a, b in zip(times["jaxmarl"], times[name], strict=True)]
        print(
            f"{name} / jaxmarl env steps/s: {rate[name] / rate['jaxmarl']:.2f} "
            f"(paired per round: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, max {max(ratios):.2f})"
        )
    if args.profile is not None:
        for name, fn in trains.items():
            profile_call(fn, jax.random.key(0), args.profile / f"{env_id}_{num_envs}_{name}.json.gz")


if __name__ == "__main__":
    main()
