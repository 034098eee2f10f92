"""A dense layer's products on the CPU, alone: which XLA back end computes each form faster.

    python benchmarks/dense_kernel_gradient.py [--rows 2048] [--width 64] [--loop 200] [--rounds 9]

IPPO's update (``marl_ippo_throughput.py``'s config) spends most of its time in the (64, 64) hidden
layers' products, and most of that in their kernel gradients, ``x^T g`` for ``x`` and ``g`` of
``(rows, width)``: a product whose contracted axis is long (2,048 rows) and whose output is small.
This times, for one such layer, each way of writing its kernel gradient, and the forward product
``x @ W`` beside them (the same multiply-adds), under XLA's CPU defaults and with YNNPACK's fusions
off for the program (``xla_cpu_experimental_ynn_fusion_type=""``, XLA's Eigen products):

* ``plain``: ``dot_general`` contracting the rows (what ``jax.grad`` of ``x @ W`` writes);
* ``copy``: from a materialised ``x^T`` (an ``optimization_barrier`` keeps XLA from folding the
  transpose back into the product; lamella-agents' ``networks.Dense`` on jax before 0.12);
* ``gtx``: ``(g^T x)^T`` from a materialised ``g^T``;
* ``two plain``: the kernel gradients of two such layers (IPPO's actor and critic), two products;
* ``two-as-one``: the same as one product of twice the width (operands already side by side, so
  the concatenation a network would need is not counted), of which the two diagonal blocks are
  kept;
* ``forward``: ``x @ W`` with ``W`` of ``(width, width)``.

Each form runs ``--loop`` times in one compiled ``lax.scan`` (each iteration's ``x`` depends on
the last product, so nothing is hoisted); the variants are called in turn, ``--rounds`` rounds,
wall clock (``_interleave.time_interleaved``); printed: the median time of one product (of both for the two ``two`` rows), and
whether a YNNPACK fusion or XLA's own dot (Eigen) computes it in the compiled program.
Checks the forms agree with ``plain`` to float rounding.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from _interleave import time_interleaved
from jax import lax

YNN_OFF = {"xla_cpu_experimental_ynn_fusion_type": ""}


def plain(x: jax.Array, g: jax.Array) -> jax.Array:
    return lax.dot_general(x, g, (((0,), (0,)), ((), ())))


def copy(x: jax.Array, g: jax.Array) -> jax.Array:
    return lax.optimization_barrier(x.T) @ g


def gtx(x: jax.Array, g: jax.Array) -> jax.Array:
    return (lax.optimization_barrier(g.T) @ x).T


def forward(x: jax.Array, g: jax.Array) -> jax.Array:
    return x @ g[: x.shape[1]]


def two_plain(x: jax.Array, g: jax.Array) -> jax.Array:
    """Two layers' kernel gradients, each its own product of separate ``(rows, width)`` operands."""
    return jnp.concatenate([plain(x, g), plain(g, x)])


def two_as_one(x: jax.Array, g: jax.Array) -> jax.Array:
    """The same two kernel gradients as one product of twice the width, its diagonal blocks kept."""
    width = x.shape[1] // 2
    both = plain(x, g)
    return jnp.concatenate([both[:width, :width], both[width:, width:]])


def looped(form: Callable[[jax.Array, jax.Array], jax.Array], loop: int) -> Callable[..., jax.Array]:
    def body(carry: tuple[jax.Array, ...], _: None) -> tuple[tuple[jax.Array, ...], None]:
        x, g, total = carry
        product = form(x, g)
        return (x + 1e-9 * product[0, 0], g, total + jnp.sum(product)), None

    def run(x: jax.Array, g: jax.Array) -> jax.Array:
        (_, _, total), _ = lax.scan(body, (x, g, jnp.zeros(())), None, length=loop)
        return total

    return run


def backend_of(compiled: jax.stages.Compiled) -> str:
    """What computes the product in ``compiled``: a YNNPACK fusion or XLA's own dot (Eigen)."""
    text = compiled.as_text()
    return "YNNPACK" if "ynn_fusion" in text else "Eigen"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048, help="minibatch rows (IPPO's: 2,048)")
    parser.add_argument("--width", type=int, default=64, help="the layer's width")
    parser.add_argument("--loop", type=int, default=200, help="products per call")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rows, width = args.rows, args.width
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPU(s); jax {jax.__version__}")
    print(f"kernel gradient of a ({rows}, {width}) x ({width}, {width}) layer; {args.loop} products per call")

    keys = jax.random.split(jax.random.key(0), 4)
    x, g = (jax.random.normal(k, (rows, width)) for k in keys[:2])
    x2, g2 = (jax.random.normal(k, (rows, 2 * width)) for k in keys[2:])
    forms = {"plain": (plain, x, g), "copy": (copy, x, g), "gtx": (gtx, x, g), "forward": (forward, x, g)}
    forms |= {"two plain": (two_plain, x, g), "two-as-one": (two_as_one, x2, g2)}
    for name in ("copy", "gtx"):
        error = float(jnp.max(jnp.abs(forms[name][0](x, g) - plain(x, g))))
        assert error < 1e-3, f"{name} differs from plain by {error}"
    width_x, width_g = x2[:, :width], g2[:, :width]
    assert float(jnp.max(jnp.abs(two_as_one(x2, g2)[:width] - plain(width_x, width_g)))) < 1e-3

    sides: dict[str, tuple[Callable[..., jax.Array], tuple[jax.Array, jax.Array]]] = {}
    backends: dict[str, str] = {}
    for name, (form, a, b) in forms.items():
        for option, options in (("default", {}), ("YNNPACK off", YNN_OFF)):
            compiled = jax.jit(looped(form, args.loop)).lower(a, b).compile(compiler_options=options)
            sides[f"{name}/{option}"] = (lambda operands, compiled=compiled: compiled(*operands), (a, b))
            backends[f"{name}/{option}"] = backend_of(compiled)
    rate, _, _ = time_interleaved(sides, (), args.loop, args.rounds)  # products per second

    print(f"{'form':12s} {'XLA defaults (us)':>20s} {'YNNPACK off (us)':>20s}")
    for name in forms:
        cells = []
        for option in ("default", "YNNPACK off"):
            cells.append(f"{1e6 / rate[f'{name}/{option}']:8.1f} {backends[f'{name}/{option}']:>8s}")
        print(f"{name:12s} {cells[0]:>20s}   {cells[1]:>20s}")


if __name__ == "__main__":
    main()
