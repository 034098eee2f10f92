"""Two continuous-action economic games from Pax: Cournot competition and an open-access fishery.

Both have ``n`` players, each choosing one non-negative number per step (a quantity, an
effort), and a time limit; they follow the multi-agent contract with continuous actions of
shape ``(n, 1)``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs._inputs import bool_setting, check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput

__all__ = [
    "CournotGame",
    "CournotParams",
    "CournotState",
    "Fishery",
    "FisheryParams",
    "FisheryState",
]


def _players(value: Any, name: str) -> int:
    return integer_setting(value, "num_players", name, minimum=2)


def _steps(value: Any, name: str) -> int:
    return integer_setting(value, "num_inner_steps", name, minimum=1)


def _quantities(action: Any, num_players: int, high: float) -> jax.Array:
    """Actions ``(n, 1)`` as float32 ``(n,)`` clipped into ``[0, high]`` (Pax clips at 0 only)."""
    action = jnp.asarray(action, jnp.float32).reshape(num_players)
    return jnp.clip(action, 0.0, high)


def _bound(value: Any, name: str) -> float:
    if not np.isfinite(value) or float(value) <= 0:
        raise ValueError(f"{name}: max_action must be a finite number > 0, got {value!r}.")
    return float(value)


def _bar_chart(values: jax.Array, high: Any, colors: Any, size: int = 128) -> jax.Array:
    """One vertical bar per value, scaled by ``high``, uint8 ``(size, size, 3)``."""
    frame = rendering.canvas(size, size, (255, 255, 255))
    count = values.shape[0]
    width = size / count
    for i in range(count):
        height = jnp.clip(values[i] / jnp.maximum(high, 1e-6), 0.0, 1.0) * (size - 8)
        frame = rendering.fill_rect(
            frame, i * width + 2, size - 4 - height, (i + 1) * width - 2, size - 4, colors[i % len(colors)]
        )
    return frame


_PALETTE = [(214, 39, 40), (31, 119, 180), (44, 160, 44), (255, 127, 14), (148, 103, 189), (140, 86, 75)]


# Cournot ---------------------------------------------------------------------------------------


class CournotState(struct.PyTreeNode):
    """State of :class:`CournotGame`.

    Attributes:
        last_quantities: float32 ``(n,)``, the previous round's quantities (zeros before it).
        price: float32 ``()``, the previous round's price (``a`` before it: nothing produced).
        time: int32 ``()``, rounds played.
    """

    last_quantities: jax.Array
    price: jax.Array
    time: jax.Array


class CournotParams(struct.PyTreeNode):
    """Parameters of :class:`CournotGame`: inverse demand ``p = a - b * sum(q)``.

    Attributes:
        a: float, demand intercept (100 in Pax's configs).
        b: float, demand slope (1).
        marginal_cost: float, cost per unit produced (10).
        num_inner_steps: int, rounds per episode (1: Pax's one-shot game).
    """

    a: float = 100.0
    b: float = struct.field(default=1.0, above=0.0)
    marginal_cost: float = 10.0
    num_inner_steps: int = struct.field(default=1, bounds=(1, None))


class CournotGame(Environment[CournotState, CournotParams]):
    """Cournot competition: ``n`` firms choose quantities; the market price falls with the total.

    Pax's ``CournotGame`` rules: price ``p = a - b * sum_j q_j`` (linear, not floored at 0, as
    in Pax) and profit ``r_i = (p - marginal_cost) * q_i``. The symmetric Nash equilibrium is
    ``q_i = (a - c) / ((n + 1) b)`` (:meth:`nash_quantity`, :meth:`nash_reward`).

    Agents: ``n`` (leading agent axis). Action: float32 ``(n, 1)``, each firm's quantity in
    ``[0, max_action]`` (values outside are clipped; Pax clips at 0 only). The default bound,
    100, is ``a / b`` with Pax's values: a firm producing more alone drives the price below 0.

    Observation: float32 ``(n, n + 1)``, the same for every firm: the previous round's
    quantities then its price; before the first round, zero quantities and their price ``a``.

    Reward: float32 ``(n,)``, each firm's profit. Terminated: never. Truncated: bool ``(n,)``,
    all True once ``num_inner_steps`` rounds were played (after 1 round by default).

    Global state (:meth:`global_state`): float32 ``(n + 2,)``, firm 0's observation then
    ``time / num_inner_steps``.

    Pax's quirks (``pax_quirks=True``): the episode is truncated one round late (Pax tests the
    round counter *before* the round, so its one-shot game runs two rounds) and the first
    observation is uniform noise in ``[0, 1)`` instead of zeros.
    """

    #: The agents do not form one team (multi-agent contract: a runner refuses a team reward here).
    cooperative = False

    def __init__(
        self,
        num_players: int = 2,
        num_inner_steps: int = 1,
        max_action: float = 100.0,
        pax_quirks: bool = False,
    ):
        self.num_agents = _players(num_players, "CournotGame")  # type: ignore[misc]
        self._num_inner_steps = _steps(num_inner_steps, "CournotGame")
        self.max_action = _bound(max_action, "CournotGame")
        self.pax_quirks = bool_setting(pax_quirks, "pax_quirks", type(self).__name__)

    @property
    def default_params(self) -> CournotParams:
        return CournotParams(num_inner_steps=self._num_inner_steps)

    def observation_space(self, params: CournotParams | None = None) -> spaces.Box:
        """Quantities in ``[0, max_action]``, the price in ``[a - b n max_action, a]`` (from ``params``)."""
        params = self.default_params if params is None else params
        n, a, b = self.num_agents, float(params.a), float(params.b)
        low = np.r_[np.zeros(n), min(a - b * n * self.max_action, 0.0)]
        high = np.r_[np.full(n, self.max_action), max(a, 1.0)]
        return spaces.Box(np.broadcast_to(low, (n, n + 1)), np.broadcast_to(high, (n, n + 1)), (n, n + 1))

    def action_space(self, params: CournotParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, self.max_action, (self.num_agents, 1), jnp.float32)

    def global_state_space(self, params: CournotParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(n + 2,)``."""
        row = self.observation_space(params)
        return spaces.Box(np.r_[row.low[0], 0.0], np.r_[row.high[0], 1.0], (self.num_agents + 2,))

    @staticmethod
    def nash_quantity(params: CournotParams, num_players: int = 2) -> Any:
        """Each firm's quantity in the symmetric Nash equilibrium, ``(a - c) / ((n + 1) b)``."""
        return (params.a - params.marginal_cost) / ((num_players + 1) * params.b)

    @staticmethod
    def nash_reward(params: CournotParams, num_players: int = 2) -> Any:
        """Each firm's profit in the symmetric Nash equilibrium."""
        q = CournotGame.nash_quantity(params, num_players)
        return (params.a - params.b * num_players * q - params.marginal_cost) * q

    def observation_of(self, state: CournotState, params: CournotParams | None = None) -> jax.Array:
        check_one_state(self, state, "observation_of")
        row = jnp.concatenate([state.last_quantities, state.price[None]])
        return jnp.broadcast_to(row, (self.num_agents, self.num_agents + 1)).astype(jnp.float32)

    def global_state(self, state: CournotState, params: CournotParams | None = None) -> jax.Array:
        check_one_state(self, state, "global_state")
        params = self.default_params if params is None else params
        fraction = jnp.clip(state.time / jnp.asarray(params.num_inner_steps, jnp.float32), 0.0, 1.0)
        return jnp.concatenate([self.observation_of(state)[0], fraction[None]]).astype(jnp.float32)

    def reset_env(self, key: jax.Array, params: CournotParams) -> tuple[jax.Array, CournotState]:
        n = self.num_agents
        if self.pax_quirks:
            noise = fast_random.uniform(key, (n + 1,))
            state = CournotState(noise[:n], noise[n], jnp.zeros((), jnp.int32))
        else:
            price = jnp.asarray(params.a, jnp.float32)  # nothing produced yet
            state = CournotState(jnp.zeros((n,), jnp.float32), price, jnp.zeros((), jnp.int32))
        return self.observation_of(state), state

    def step_env(self, key: jax.Array, state: CournotState, action: Any, params: CournotParams) -> StepOutput:
        n = self.num_agents
        q = _quantities(action, n, self.max_action)
        price = jnp.asarray(params.a, jnp.float32) - params.b * jnp.sum(q)
        reward = (price - params.marginal_cost) * q
        time = state.time + 1
        limit = time > params.num_inner_steps if self.pax_quirks else time >= params.num_inner_steps
        state = CournotState(q, price.astype(jnp.float32), time)
        return (
            self.observation_of(state),
            state,
            reward.astype(jnp.float32),
            jnp.zeros((n,), jnp.bool_),
            jnp.broadcast_to(limit, (n,)),
            {},
        )

    def render(self, state: CournotState, params: CournotParams | None = None) -> jax.Array:
        """The firms' last quantities as bars, uint8 ``(128, 128, 3)``, scaled by the zero-price total ``a / b``."""
        check_one_state(self, state, "render")
        params = self.default_params if params is None else params
        return _bar_chart(state.last_quantities, params.a / params.b, _PALETTE)


# Fishery ---------------------------------------------------------------------------------------


class FisheryState(struct.PyTreeNode):
    """State of :class:`Fishery`.

    Attributes:
        stock: float32 ``()``, the fish stock.
        last_efforts: float32 ``(n,)``, the previous step's efforts (zeros before it).
        time: int32 ``()``, steps taken.
    """

    stock: jax.Array
    last_efforts: jax.Array
    time: jax.Array


class FisheryParams(struct.PyTreeNode):
    """Parameters of :class:`Fishery` (Perman et al.'s open-access fishery; Pax's config values).

    Attributes:
        g: float, natural growth rate (0.15).
        e: float, harvest efficiency per unit of effort and stock (0.009).
        P: float, price of a unit of fish (200).
        w: float, cost per unit of effort (0.9).
        s_0: float, initial stock (0.5).
        s_max: float, carrying capacity (1.0).
        num_inner_steps: int, steps per episode (300).
    """

    g: float = struct.field(default=0.15, bounds=(0.0, 1.0))
    e: float = 0.009
    P: float = 200.0
    w: float = 0.9
    s_0: float = struct.field(default=0.5, bounds=(0.0, None))
    s_max: float = struct.field(default=1.0, above=0.0)
    num_inner_steps: int = struct.field(default=300, bounds=(1, None))


class Fishery(Environment[FisheryState, FisheryParams]):
    """An open-access fishery: ``n`` fishers choose efforts; the stock grows logistically.

    Pax's ``Fishery`` rules, per step with stock ``s`` and total effort ``E = sum_i e_i``:
    growth ``G = g s (1 - s / s_max)``, harvest ``H = min(e E s, s + G)``, next stock
    ``s + G - H``; fisher ``i`` earns ``P H e_i / E - w e_i`` (0 for everyone when ``E = 0``).
    The open-access steady state is ``s* = w / (P e s_max)`` (:meth:`steady_stock`).

    Agents: ``n`` (leading agent axis). Action: float32 ``(n, 1)``, each fisher's effort in
    ``[0, max_action]`` (values outside are clipped; Pax clips at 0 only). The default bound,
    100, is close to ``1 / e`` with Pax's values, the effort that harvests the whole stock.

    Observation: float32 ``(n, n + 2)``: the previous step's efforts, the stock, then the
    fisher's own index ``i`` (so one shared network can tell fishers apart), as in Pax.

    Reward: float32 ``(n,)``. Terminated: never. Truncated: bool ``(n,)``, all True after
    ``num_inner_steps`` (300) steps. The growth rate ``g`` must be at most 1 for the stock to
    stay within ``s_max`` (the observation space's bound).

    Info: ``harvest`` (``H``), ``total_effort`` (``E``), ``growth`` (``G``) and ``cost``
    (``w E``), float32 ``(n,)`` each (the same value for every fisher).

    Global state (:meth:`global_state`): float32 ``(n + 2,)``: the efforts, the stock and
    ``time / num_inner_steps``.

    Pax's quirk (``pax_quirks=True``): the first observation's efforts are uniform noise in
    ``[0, 1)`` instead of zeros.
    """

    #: The agents do not form one team (multi-agent contract: a runner refuses a team reward here).
    cooperative = False

    def __init__(
        self,
        num_players: int = 2,
        num_inner_steps: int = 300,
        max_action: float = 100.0,
        pax_quirks: bool = False,
    ):
        self.num_agents = _players(num_players, "Fishery")  # type: ignore[misc]
        self._num_inner_steps = _steps(num_inner_steps, "Fishery")
        self.max_action = _bound(max_action, "Fishery")
        self.pax_quirks = bool_setting(pax_quirks, "pax_quirks", type(self).__name__)

    @property
    def default_params(self) -> FisheryParams:
        return FisheryParams(num_inner_steps=self._num_inner_steps)

    def observation_space(self, params: FisheryParams | None = None) -> spaces.Box:
        """Efforts in ``[0, max_action]``, the stock in ``[0, max(s_0, s_max)]`` (logistic growth
        with ``g <= 1`` never takes it past ``s_max``), the index in ``[0, n - 1]``."""
        params = self.default_params if params is None else params
        n = self.num_agents
        high = np.r_[np.full(n, self.max_action), max(float(params.s_0), float(params.s_max)), n - 1]
        return spaces.Box(0.0, np.broadcast_to(high, (n, n + 2)), (n, n + 2), jnp.float32)

    def action_space(self, params: FisheryParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, self.max_action, (self.num_agents, 1), jnp.float32)

    def global_state_space(self, params: FisheryParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(n + 2,)``."""
        high = self.observation_space(params).high[0].copy()
        high[-1] = 1.0
        return spaces.Box(0.0, high, (self.num_agents + 2,), jnp.float32)

    @staticmethod
    def steady_stock(params: FisheryParams) -> Any:
        """The open-access steady-state stock ``w / (P e s_max)`` (0.5 with the defaults)."""
        return params.w / (params.P * params.e * params.s_max)

    def observation_of(self, state: FisheryState, params: FisheryParams | None = None) -> jax.Array:
        check_one_state(self, state, "observation_of")
        n = self.num_agents
        shared = jnp.concatenate([state.last_efforts, state.stock[None]])
        return jnp.concatenate(
            [jnp.broadcast_to(shared, (n, n + 1)), jnp.arange(n, dtype=jnp.float32)[:, None]], -1
        ).astype(jnp.float32)

    def global_state(self, state: FisheryState, params: FisheryParams | None = None) -> jax.Array:
        check_one_state(self, state, "global_state")
        params = self.default_params if params is None else params
        fraction = jnp.clip(state.time / jnp.asarray(params.num_inner_steps, jnp.float32), 0.0, 1.0)
        return jnp.concatenate([state.last_efforts, state.stock[None], fraction[None]]).astype(jnp.float32)

    def reset_env(self, key: jax.Array, params: FisheryParams) -> tuple[jax.Array, FisheryState]:
        n = self.num_agents
        efforts = fast_random.uniform(key, (n,)) if self.pax_quirks else jnp.zeros((n,), jnp.float32)
        state = FisheryState(jnp.asarray(params.s_0, jnp.float32), efforts, jnp.zeros((), jnp.int32))
        return self.observation_of(state), state

    def step_env(self, key: jax.Array, state: FisheryState, action: Any, params: FisheryParams) -> StepOutput:
        n = self.num_agents
        effort = _quantities(action, n, self.max_action)
        total = jnp.sum(effort)
        s = state.stock
        growth = params.g * s * (1.0 - s / params.s_max)
        grown = s + growth
        harvest = jnp.minimum(total * s * params.e, grown)
        share = effort / jnp.where(total != 0, total, 1.0)
        reward = jnp.where(total != 0, params.P * share * harvest - params.w * effort, 0.0)
        time = state.time + 1
        state = FisheryState((grown - harvest).astype(jnp.float32), effort, time)
        info = {
            name: jnp.broadcast_to(jnp.asarray(value, jnp.float32), (n,))
            for name, value in (
                ("harvest", harvest),
                ("total_effort", total),
                ("growth", growth),
                ("cost", params.w * total),
            )
        }
        return (
            self.observation_of(state),
            state,
            reward.astype(jnp.float32),
            jnp.zeros((n,), jnp.bool_),
            jnp.broadcast_to(time >= params.num_inner_steps, (n,)),
            info,
        )

    def render(self, state: FisheryState, params: FisheryParams | None = None) -> jax.Array:
        """The stock (blue, left) and each fisher's last effort, uint8 ``(128, 128, 3)``."""
        check_one_state(self, state, "render")
        params = self.default_params if params is None else params
        stock = state.stock / jnp.asarray(params.s_max, jnp.float32)
        # Efforts are shown against the effort that would harvest the whole stock, 1 / e.
        scaled = state.last_efforts * jnp.asarray(params.e, jnp.float32)
        return _bar_chart(jnp.concatenate([stock[None], scaled]), 1.0, [(31, 119, 180), *_PALETTE[:1] * 8])
