"""IPPO on a GPU: what unrolling the rollout's and GAE's loops, the sparse reset's branch and packing
the rollout's per-step outputs are worth, each lamella variant side by side with JaxMARL's IPPO in
one process.

    JAX_PLATFORMS=cuda,cpu python benchmarks/marl_ippo_gpu_loops.py --jaxmarl-src DIR \\
        [--env ID] [--num-envs 1024] [--updates 8] [--repeats 5] [--unroll 1,8] [--flip-reset] [--flip-pack] \\
        [--recurrent-unroll 1,8]

The config, the JaxMARL side and the timing are ``marl_ippo_throughput.py``'s. lamella's IPPO is
traced once per ``--unroll`` value with ``lamella.agents._unroll.ACCELERATOR_UNROLL`` set to it
(the steps a rollout's and GAE's ``lax.scan`` run per loop iteration on an accelerator; 1 is a
rolled loop), and with ``--flip-reset`` once more per value with the env's
``sparse_reset_on_accelerators`` flipped (the batch's resets in a branch taken when some env is
done, or computed for every env and selected), and with ``--flip-pack`` once more per variant with
``lamella.agents._unroll.PACK_OUTPUTS`` flipped (a rollout step's outputs written as one array, or
one stacked buffer per leaf). ``--recurrent-unroll 1,8`` trains recurrent IPPO instead (Mava's
``rec_ippo`` network: a GRU of 128 between (128,) MLPs; minibatches of whole 128-step sequences,
back-propagated through time) once per value of ``lamella.agents._unroll.RECURRENT_UNROLL`` (the
steps per loop iteration of the GRU's scans on an accelerator) and of ``--unroll``; JaxMARL's
feed-forward IPPO stays beside it as the clock's reference. On the CPU lamella never unrolls and
always branches, so there only the packing tells variants apart. Printed: each side's env steps/s and its
ratio to JaxMARL (the medians' ratio, and the median and range of the per-round ratios); the
variants' checksums (one float from all outputs), equal but for float rounding.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path

import jax
import marl_ippo_throughput as throughput
from _interleave import time_interleaved

import lamella.envs
from lamella.agents import _unroll, make_train
from lamella.marl import make_ippo_runner, make_rec_ippo_runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jaxmarl-src", type=Path, required=True, help="a checkout of FLAIROx/JaxMARL")
    parser.add_argument("--env", default=throughput.ENV_ID)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--updates", type=int, default=8, help="PPO iterations per timed call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--unroll", default="1,8", help="comma-separated ACCELERATOR_UNROLL values")
    parser.add_argument("--flip-reset", action="store_true", help="also flip sparse_reset_on_accelerators")
    parser.add_argument(
        "--flip-pack", action="store_true", help="also flip lamella.agents._unroll.PACK_OUTPUTS"
    )
    parser.add_argument(
        "--recurrent-unroll",
        default="",
        help="comma-separated RECURRENT_UNROLL values: train rec_ippo with each (default: feed-forward IPPO)",
    )
    args = parser.parse_args()
    trains = throughput.make_sides(args.jaxmarl_src, args.env, args.num_envs, args.updates)
    recurrent = (
        [int(value) for value in args.recurrent_unroll.split(",")] if args.recurrent_unroll else [None]
    )
    make_runner = make_ippo_runner if recurrent == [None] else make_rec_ippo_runner
    config = throughput.ippo_config(args.env, args.num_envs, args.updates)
    env_class = type(lamella.envs.make(args.env, autoreset=False)[0].unwrapped)
    shipped = env_class.sparse_reset_on_accelerators
    packed = _unroll.PACK_OUTPUTS
    key = jax.random.key(0)
    sides = {"jaxmarl": trains["jaxmarl"]}
    for unroll, recurrent_unroll in itertools.product(
        (int(value) for value in args.unroll.split(",")), recurrent
    ):
        for flipped, pack_flipped in itertools.product(
            (False, True) if args.flip_reset else (False,), (False, True) if args.flip_pack else (False,)
        ):
            _unroll.ACCELERATOR_UNROLL = unroll
            if recurrent_unroll is not None:
                _unroll.RECURRENT_UNROLL = recurrent_unroll
            env_class.sparse_reset_on_accelerators = shipped != flipped
            _unroll.PACK_OUTPUTS = packed != pack_flipped
            name = (
                f"unroll {unroll}"
                + (f", GRU unroll {recurrent_unroll}" if recurrent_unroll is not None else "")
                + (", reset flipped" if flipped else "")
                + (", pack flipped" if pack_flipped else "")
            )
            # Traced (and compiled) now, while the settings above hold (a new runner, so a new
            # network module: a module keeps the scan it was first traced with).
            train = jax.jit(lambda key: throughput.checksum(make_train(make_runner(config))(key)))
            begin = time.perf_counter()
            value = float(train(key))
            print(f"{name}: first call {time.perf_counter() - begin:.1f} s, checksum {value!r}", flush=True)
            sides[name] = train
    rate, _, times = time_interleaved(
        {name: (lambda _, key, fn=fn: fn(key), None) for name, fn in sides.items()},
        (key,),
        work=args.updates * args.num_envs * throughput.NUM_STEPS,
        repeats=args.repeats,
    )
    print(
        f"{'rec_ippo' if recurrent != [None] else 'IPPO'} on {args.env}, {args.num_envs} envs x {throughput.NUM_STEPS} steps, {args.updates} updates per "
        f"call, wall clock; {jax.devices()[0].device_kind}, jax {jax.__version__}; "
        f"{env_class.__name__}.sparse_reset_on_accelerators shipped as {shipped}, PACK_OUTPUTS as {packed}"
    )
    for name in sides:
        ratios = [a / b for a, b in zip(times["jaxmarl"], times[name], strict=True)]
        print(
            f"  {name:<36} {rate[name]:10.3g} env steps/s, / jaxmarl {rate[name] / rate['jaxmarl']:.2f} "
            f"(per round: median {statistics.median(ratios):.2f}, {min(ratios):.2f} to {max(ratios):.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
