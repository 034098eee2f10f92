"""Networks: MLP, MinAtar-sized CNN and flat-row view CNN torsos, GRU/LSTM cores that reset at episode starts.

All modules are ``flax.linen`` modules; their parameters are plain pytrees
(``{"params": {...}}``) that optax, evosax and flashbax handle directly.

Recurrent cores take ``(carry, (x, reset))`` with a leading time axis on ``x``
``(T, batch, features)`` and ``reset`` ``(T, batch)``, and zero the carry of a
batch entry *before* processing step ``t`` where ``reset[t]`` is True (the first
step of a new episode). A rollout that crosses an episode boundary therefore
computes exactly what two separate episodes would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents import _unroll

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "PLAIN_KERNEL_GRADIENT_SINCE",
    "Dense",
    "MinAtarCNN",
    "RecurrentCore",
    "ViewCNN",
    "activation_by_name",
    "orthogonal",
    "plain_wide_kernel_gradient",
    "zero_carry",
]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,
    "silu": jax.nn.silu,
    "elu": jax.nn.elu,
}


def activation_by_name(name: str) -> Callable[[jax.Array], jax.Array]:
    """The activation function called ``name`` (one of :data:`ACTIVATIONS`)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}.")
    return ACTIVATIONS[name]


def orthogonal(scale: float = 1.0) -> Callable[..., jax.Array]:
    """A flax initializer: ``scale`` times a random orthogonal matrix (last axis = columns).

    The same distribution as ``flax.linen.initializers.orthogonal`` (the Q of the QR
    decomposition of a standard normal matrix, with the signs that make R's diagonal
    positive), computed by Gram-Schmidt with re-orthogonalisation in plain JAX operations
    instead of LAPACK. jaxlib 0.10.2's batched CPU QR kernel (what ``vmap`` over seeds turns
    the LAPACK call into) can deadlock on a machine with two cores: it blocks pool threads
    while waiting for work queued behind them on the same pool.
    """

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer needs at least 2 dimensions, got shape {shape}.")
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        tall = rows >= cols
        m, k = (rows, cols) if tall else (cols, rows)
        a = jax.random.normal(key, (m, k), jnp.float32)

        def column(j: jax.Array, q: jax.Array) -> jax.Array:
            v = jax.lax.dynamic_index_in_dim(a, j, axis=1, keepdims=False)
            for _ in range(2):  # classical Gram-Schmidt twice: orthogonal to float32 precision
                v = v - q @ (q.T @ v)
            return jax.lax.dynamic_update_index_in_dim(q, v / jnp.linalg.norm(v), j, axis=1)

        q = jax.lax.fori_loop(0, k, column, jnp.zeros((m, k), jnp.float32))
        q = q if tall else q.T
        return (scale * q).reshape(shape).astype(dtype)

    return init


class Dense(nn.Module):
    """``flax.linen.Dense``'s layer (the same parameters ``kernel`` ``(in, features)`` and
    ``bias``, the same initialisers and names, so parameters and checkpoints are
    interchangeable, and the same values and gradients), with a gradient XLA's CPU backend
    computes faster.

    * The input's leading axes are folded into one: XLA's CPU backend differentiated a dense
      layer over a 3-D input ``(batch, agents, F)`` with a transposed copy of the output
      gradient (a quarter of IPPO's update time on MPE simple_spread).
    * The kernel gradient ``x^T g`` is taken from a materialised ``x^T``: with jax 0.10, XLA's
      CPU dot runs ``(in, batch) @ (batch, out)`` about 2.5 times faster than the ``(batch,
      in)^T @ (batch, out)`` it picks otherwise (IPPO's update on MPE: about 20% less time).
      From jax 0.12 on the CPU the plain product is the faster one, and is used
      (:func:`plain_wide_kernel_gradient`). A layer with fewer outputs than inputs (a policy
      head, a value) transposes the gradient instead, ``(g^T x)^T``, with every jax: the copy of
      the narrower operand is the cheaper one (IPPO's update on LBF and MPE: 7 to 10% less time
      again).

    Reverse-mode derivatives of any order work (a ``jax.custom_vjp``); forward mode
    (``jax.jvp``, ``jax.jacfwd``) does not: use ``flax.linen.Dense`` for that.

    Attributes:
        features: output width.
        kernel_init: initialiser of the kernel (``nn.Dense``'s default: LeCun normal).
        bias_init: initialiser of the bias (zeros).
    """

    features: int
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(x)[-1], self.features), jnp.float32)
        bias = self.param("bias", self.bias_init, (self.features,), jnp.float32)
        x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias)
        lead = x.shape[:-1]
        out = _dense(x.reshape((-1, x.shape[-1])), kernel, bias)
        return out.reshape((*lead, self.features))


@jax.custom_vjp
def _dense(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    return x @ kernel + bias


def _dense_forward(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> tuple[jax.Array, Any]:
    return x @ kernel + bias, (x, kernel)


def _dense_backward(residuals: Any, grad: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    x, kernel = residuals
    inputs, features = kernel.shape
    # XLA's CPU dot takes (in, batch) @ (batch, out) far faster than (batch, in)^T @ (batch, out),
    # so one operand is transposed into a materialised copy first (the barrier keeps XLA from
    # folding the transpose back into the product): the narrower one. For a narrow output (a
    # policy head, a value) that is the gradient, and (out, batch) @ (batch, in) is transposed
    # back; a copy of x would cost more than the product (IPPO's value layer: 7 times more).
    if features < inputs:
        # The second barrier keeps XLA from rewriting (g^T x)^T into the slow x^T g.
        kernel_grad = jax.lax.optimization_barrier(jax.lax.optimization_barrier(grad.T) @ x).T
    elif plain_wide_kernel_gradient():
        kernel_grad = x.T @ grad
    else:
        kernel_grad = jax.lax.optimization_barrier(x.T) @ grad
    return grad @ kernel.T, kernel_grad, grad.sum(0)


# From this jax release on, XLA's CPU backend runs a wide layer's kernel gradient x^T g faster as
# the plain product than from a materialised x^T: lamella-marl's IPPO 1.28x (LBF) and 1.15x (MPE
# simple_spread) with jax 0.12.0.1. With 0.11.2 it was 1.20x on LBF but 0.97x on MPE, with 0.10.2
# 0.81x on LBF, so older releases keep the copy (lamella-marl's docs/speed-ippo.md).
PLAIN_KERNEL_GRADIENT_SINCE = (0, 12)


def plain_wide_kernel_gradient() -> bool:
    """Whether :class:`Dense` takes a wide layer's kernel gradient as the plain ``x^T g`` (on the
    CPU from jax ``PLAIN_KERNEL_GRADIENT_SINCE``, 0.12, on) rather than from a materialised ``x^T``
    (older jax, and GPUs and TPUs, where only the latter was measured). Read at trace time."""
    major, minor = re.match(r"(\d+)\.(\d+)", jax.__version__).groups()  # type: ignore[union-attr]
    return jax.default_backend() == "cpu" and (int(major), int(minor)) >= PLAIN_KERNEL_GRADIENT_SINCE


_dense.defvjp(_dense_forward, _dense_backward)


class MLP(nn.Module):
    """Dense layers with an activation after each (orthogonal init, gain sqrt(2)).

    Attributes:
        hidden_sizes: width of each layer.
        activation: name of the activation (see :data:`ACTIVATIONS`).
        fast_gradient: use :class:`Dense` (the same parameters and values, a faster gradient
            on the CPU, float sums in another order) instead of ``flax.linen.Dense``.
    """

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    fast_gradient: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_by_name(self.activation)
        layer = Dense if self.fast_gradient else nn.Dense
        for i, size in enumerate(self.hidden_sizes):
            x = act(layer(size, kernel_init=orthogonal(np.sqrt(2)), name=f"Dense_{i}")(x))
        return x


class MinAtarCNN(nn.Module):
    """The MinAtar network: one 3x3 convolution, then a dense layer.

    Input ``(..., height, width, channels)`` (10 x 10 x C for MinAtar); leading
    axes are kept.

    Attributes:
        features: convolution channels (16 in the MinAtar paper).
        hidden_size: width of the dense layer (128).
    """

    features: int = 16
    hidden_size: int = 128

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch_shape = x.shape[:-3]
        x = x.reshape((-1, *x.shape[-3:])).astype(jnp.float32)
        x = jax.nn.relu(nn.Conv(self.features, (3, 3), padding="VALID")(x))
        x = x.reshape((x.shape[0], -1))
        x = jax.nn.relu(nn.Dense(self.hidden_size, kernel_init=orthogonal(np.sqrt(2)))(x))
        return x.reshape((*batch_shape, self.hidden_size))


class ViewCNN(nn.Module):
    """A CNN on an image view stored inside a flat observation row, joined by the row's other values.

    One convolution of ``features`` channels with a ``kernel_size`` kernel (stride 1, ``SAME``
    padding: the view's height and width are kept; orthogonal kernel with gain sqrt(2), zero
    bias), a ReLU, the result flattened and followed by the row's values before and after the
    view. This is the torso of Pax's IPD-in-the-Matrix agents (its ``CNN_ipditm``: 16 channels,
    3 x 3, the inventory concatenated after the flattened convolution).

    Input float ``(..., D)``: ``x[..., view_start : view_start + H * W * C]`` is the view
    ``(H, W, C)`` flattened in row-major (C) order, the rest of the row is other values (an
    inventory, ...). Output float32 ``(..., H * W * features + D - H * W * C)``: the
    convolution's ``(H, W, features)`` flattened row-major, then ``x[..., :view_start]``, then
    ``x[..., view_start + H * W * C:]``. Leading axes are kept.

    Attributes:
        view_shape: ``(H, W, C)`` of the view.
        view_start: where the view starts in the row.
        features: convolution channels (Pax: 16).
        kernel_size: convolution kernel (Pax: 3 x 3).
    """

    view_shape: tuple[int, int, int]
    view_start: int = 0
    features: int = 16
    kernel_size: tuple[int, int] = (3, 3)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x, jnp.float32)
        size = int(np.prod(self.view_shape))
        end = self.view_start + size
        if len(self.view_shape) != 3 or x.shape[-1] < end:
            raise ValueError(
                f"ViewCNN: a view of shape {tuple(self.view_shape)} (H, W, C) from index {self.view_start} "
                f"does not fit in rows of {x.shape[-1]} values."
            )
        batch_shape = x.shape[:-1]
        rows = x.reshape((-1, x.shape[-1]))
        view = rows[:, self.view_start : end].reshape((-1, *self.view_shape))
        conv = nn.Conv(
            self.features,
            tuple(self.kernel_size),
            padding="SAME",
            kernel_init=orthogonal(np.sqrt(2)),
        )
        y = jax.nn.relu(conv(view)).reshape((rows.shape[0], -1))
        y = jnp.concatenate([y, rows[:, : self.view_start], rows[:, end:]], -1)
        return y.reshape((*batch_shape, y.shape[-1]))


def zero_carry(cell: str, batch_size: int, hidden_size: int) -> Any:
    """The all-zero carry of a ``cell`` (``"gru"``: an array, ``"lstm"``: a (c, h) pair)."""
    zeros = jnp.zeros((batch_size, hidden_size), jnp.float32)
    if cell == "gru":
        return zeros
    if cell == "lstm":
        return (zeros, zeros)
    raise ValueError(f"Unknown recurrent cell {cell!r}; choose 'gru' or 'lstm'.")


class _ResetStep(nn.Module):
    cell: str
    hidden_size: int

    @nn.compact
    def __call__(self, carry: Any, inputs: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
        x, reset = inputs
        carry = jax.tree.map(lambda c: jnp.where(reset[:, None], jnp.zeros_like(c), c), carry)
        if self.cell == "gru":
            core: nn.RNNCellBase = nn.GRUCell(self.hidden_size, recurrent_kernel_init=orthogonal())
        else:
            core = nn.OptimizedLSTMCell(self.hidden_size, recurrent_kernel_init=orthogonal())
        carry, y = core(carry, x)
        return carry, y


class RecurrentCore(nn.Module):
    """A GRU or LSTM core over a sequence, resetting its carry where an episode starts.

    ``__call__(carry, (x, reset)) -> (carry, y)`` with ``x`` float32
    ``(T, batch, features)``, ``reset`` bool ``(T, batch)``, ``y`` float32
    ``(T, batch, hidden_size)``. The carry is zeroed where ``reset[t]`` before
    step ``t`` is processed. One step is a sequence of length 1.

    Attributes:
        cell: ``"gru"`` or ``"lstm"``.
        hidden_size: width of the carry.
    """

    cell: str = "gru"
    hidden_size: int = 128

    def setup(self) -> None:
        if self.cell not in ("gru", "lstm"):
            raise ValueError(f"Unknown recurrent cell {self.cell!r}; choose 'gru' or 'lstm'.")
        scan = nn.scan(
            _ResetStep,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=0,
            out_axes=0,
            unroll=_unroll.recurrent_unroll(),  # rolled on the CPU (see lamella.agents._unroll)
        )
        self.step = scan(self.cell, self.hidden_size)

    def __call__(self, carry: Any, inputs: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
        x, reset = inputs
        if x.ndim != 3 or reset.shape != x.shape[:2]:
            raise ValueError(
                f"RecurrentCore expects x of shape (time, batch, features) and reset of shape "
                f"(time, batch); got x {x.shape} and reset {reset.shape}."
            )
        return self.step(carry, (x, reset.astype(bool)))

    def initialize_carry(self, batch_size: int) -> Any:
        return zero_carry(self.cell, batch_size, self.hidden_size)
