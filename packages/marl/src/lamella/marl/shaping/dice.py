"""Sample-based LOLA with the DiCE estimator on the finite iterated matrix games, and its naive baseline.

Both players of lamella-envs' :class:`~lamella.envs.multi_agent.IteratedMatrixGame` (the
prisoner's dilemma by default: ``IteratedPrisonersDilemma-v0``) hold a **tabular memory-one
policy**: five logits ``theta`` in the order of :mod:`lamella.marl.shaping.strategies`
(start, CC, CD, DC, DD, each joint state from the player's own side), ``sigmoid(theta)`` the
probability of cooperating (action 0). Each agent of a run is one of

* ``"naive"``: the naive sample-based learner, gradient ascent on its own DiCE objective (a policy
  gradient of its discounted return, estimated from a batch of sampled episodes);
* ``"lola"``: LOLA with DiCE (Foerster et al., 2018, "DiCE: The Infinitely Differentiable Monte
  Carlo Estimator"): it anticipates one naive step of its co-player, ``theta_o' = theta_o +
  lookahead_lr * grad_o J_o(theta, theta_o)`` (estimated on sampled episodes, the estimate
  differentiable in the learner's own ``theta`` through DiCE), samples new episodes against
  ``theta_o'`` and ascends its own DiCE objective there, the gradient taken through ``theta_o'``;
* a fixed memory-one strategy by name (``tit_for_tat``, ``all_d``, ...
  :data:`~lamella.marl.shaping.strategies.STRATEGIES`), never updated.

**The DiCE objective** of player ``i`` on a batch of ``B`` episodes of ``T`` rounds is

    J_i = mean_b sum_t gamma^t r_i[t] * MB(sum_{k<=t} (log pi_0[k] + log pi_1[k]))
        + mean_b sum_t gamma^t (1 - MB(log pi_0[t] + log pi_1[t])) * baseline_i[t]

with ``MB(x) = exp(x - stop_gradient(x))`` (value 1; its derivatives are the score-function
terms of every order) and ``log pi_j[k]`` player ``j``'s log-probability of its action in round
``k``. The baseline is the leave-one-out batch mean of the return-to-go ``sum_{k>=t} gamma^(k-t)
r_i[k]`` of the episodes in the same state at round ``t`` (the time step's leave-one-out mean
where a state has no other episode). It is the baseline term of Mao et al.'s DiCE baseline; it
depends only on the other episodes, so the first-order gradient keeps its expectation, and it needs
no value network.

Each learner's own step goes through an optax optimiser (Adam by default); the look-ahead step
is plain gradient ascent, as in the DiCE paper's LOLA. One runner iteration is one simultaneous
update of every learner: a shared batch at the current policies (the naive learners' gradients
and the look-ahead steps) and one more batch per LOLA agent at ``(theta, theta_o')``.

From Python::

    import jax
    from lamella.agents.runner import make_train
    from lamella.marl.shaping.dice import DiceConfig, make_dice_runner

    runner = make_dice_runner(DiceConfig(agents=("lola", "lola"), total_timesteps=2_000_000))
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
    metrics["reward"][-1]  # each agent's mean reward per round at the last update

From the command line: ``lamella train lola --preset lola_v_lola`` (and ``nl_v_nl``,
``lola_v_nl``, ``lola_v_tft``; ``key=value`` overrides any field of :class:`DiceConfig`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

import lamella.envs
from lamella.agents.config import ConfigError, check_config_type, unused_settings_of
from lamella.agents.devices import DeviceAxis, block_index, runner_sharding
from lamella.agents.fixed import make_scripted_agent
from lamella.agents.runner import Runner, episode_frames, hashed_keys
from lamella.envs import random as fast_random
from lamella.envs.multi_agent.matrix_game import IteratedMatrixGame
from lamella.marl.shaping import watchers
from lamella.marl.shaping.exact import swap_roles
from lamella.marl.shaping.runner import _check_agents_not_text
from lamella.marl.shaping.strategies import STRATEGIES, strategy

__all__ = [
    "LEARNERS",
    "DiceConfig",
    "DiceRunnerState",
    "dice_objective",
    "magic_box",
    "make_dice_runner",
    "make_sampler",
]

#: The learning ``agents`` entries: ``"lola"`` (DiCE-LOLA) and ``"naive"`` (the naive learner).
LEARNERS = ("lola", "naive")
POLICY_SIZE = 5  # start, CC, CD, DC, DD
# Observation index (CC=0, CD=1, DC=2, DD=3, START=4) -> policy index (start=0, CC=1, ...).
_OBS_TO_POLICY = np.array([1, 2, 3, 4, 0])
# Policy index -> observation index (the watchers' order).
_POLICY_TO_OBS = np.array([1, 2, 3, 4, 0])
#: Logit magnitude of a deterministic fixed strategy (as :mod:`~lamella.marl.shaping.exact`).
FIXED_LOGIT = 20.0
_OPTIMIZERS = ("adam", "sgd")


def magic_box(x: jax.Array) -> jax.Array:
    """DiCE's ``MB(x) = exp(x - stop_gradient(x))``: 1 in value, ``MB(x) * dx`` as its derivative."""
    return jnp.exp(x - jax.lax.stop_gradient(x))


@dataclasses.dataclass(frozen=True)
class DiceConfig:
    """The settings of :func:`make_dice_runner`; the defaults are DiCE-LOLA vs DiCE-LOLA on Pax's IPD.

    Attributes:
        env_id: a registered iterated two-player matrix game (``IteratedPrisonersDilemma-v0``,
            ``IteratedMatrixGame-v0``, ...).
        agents: two entries, ``"lola"``, ``"naive"`` or a fixed memory-one strategy name.
        num_inner_steps: rounds per episode (0: the env's default, 100 for the IPD); at the
            default 50 the discount 0.96 leaves 13% of the weight beyond the episode.
        total_timesteps: env steps of training, counted as ``batch_size * rounds`` per sampled
            batch (one shared batch per update, plus one per LOLA agent).
        eval_episodes: episodes per evaluation (the policies sample, as in training).
        batch_size: episodes per sampled batch.
        gamma: discount of the DiCE objective.
        learning_rate: the optax optimiser's step size for each learner's own update.
        optimizer: ``"adam"`` or ``"sgd"``.
        lookahead_lr: step size of the co-player's anticipated naive step (LOLA only: set on the
            command line without a ``"lola"`` agent, it is refused).
        init_scale: initial logits ``N(0, init_scale^2)``; 0 starts every learner at
            ``P(cooperate) = 0.5`` in every state.
        baseline: subtract the leave-one-out state baseline (see the module docs).
    """

    env_id: str = "IteratedPrisonersDilemma-v0"
    agents: tuple[str, ...] = ("lola", "lola")
    num_inner_steps: int = 50
    total_timesteps: int = 7_680_000
    eval_episodes: int = 16
    batch_size: int = 256
    gamma: float = 0.96
    learning_rate: float = 0.2
    optimizer: str = "adam"
    lookahead_lr: float = 1.0
    init_scale: float = 0.0
    baseline: bool = True

    #: The algorithm's name in messages (``lamella train lola``).
    algorithm = "lola"
    #: ``evaluate`` samples both policies, as training does (the run summary says so).
    eval_greedy = False

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` naming the first bad setting and its fix."""
        name = type(self).__name__
        _check_agents_not_text(self.agents, f"{name}.agents")
        for index, entry in enumerate(self.agents):
            if not isinstance(entry, str):
                raise ConfigError(
                    f"{name}.agents[{index}] is {entry!r} ({type(entry).__name__}); each entry is 'lola', "
                    f"'naive' or a strategy name: {', '.join(sorted(STRATEGIES))}."
                )
        if len(self.agents) != 2:
            raise ConfigError(
                f"{name}.agents must name two agents (the iterated matrix games have two players), "
                f"got {len(self.agents)}: {self.agents!r}; e.g. agents=lola,naive."
            )
        for entry in self.agents:
            if entry not in LEARNERS and _strategy_key(entry) not in STRATEGIES:
                raise ConfigError(
                    f"{name}.agents: unknown entry {entry!r}; each entry is 'lola', 'naive' or a fixed "
                    f"memory-one strategy: {', '.join(sorted(STRATEGIES))}."
                )
        if not any(entry in LEARNERS for entry in self.agents):
            raise ConfigError(
                f"{name}.agents={','.join(self.agents)}: every agent is a fixed strategy, so nothing would "
                "learn; make at least one 'lola' or 'naive' (e.g. agents=lola,tit_for_tat)."
            )
        for field in ("batch_size", "eval_episodes"):
            if int(getattr(self, field)) < 1:
                raise ConfigError(f"{name}.{field} must be >= 1, got {getattr(self, field)}.")
        if int(self.batch_size) < 2 and self.baseline:
            raise ConfigError(
                f"{name}: the leave-one-out baseline needs batch_size >= 2, got {self.batch_size}; "
                "raise batch_size or set baseline=False."
            )
        if self.num_inner_steps < 0:
            raise ConfigError(
                f"{name}.num_inner_steps must be >= 0 (0: the env's default), got {self.num_inner_steps}."
            )
        for field in ("learning_rate", "lookahead_lr", "init_scale"):
            value = getattr(self, field)
            if isinstance(value, (int, float)) and (not np.isfinite(value) or value < 0):
                raise ConfigError(f"{name}.{field} must be a finite number >= 0, got {value}.")
        if isinstance(self.gamma, (int, float)) and not 0.0 <= float(self.gamma) <= 1.0:
            raise ConfigError(f"{name}.gamma must be in [0, 1], got {self.gamma}.")
        if self.optimizer not in _OPTIMIZERS:
            raise ConfigError(f"{name}.optimizer must be one of {_OPTIMIZERS}, got {self.optimizer!r}.")

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: ``lookahead_lr`` without a ``"lola"`` agent (``lamella
        train lola --preset nl_v_nl lookahead_lr=5`` is refused)."""
        if self.num_lola:
            return {}
        return unused_settings_of(
            self,
            {"lookahead_lr": "is the step size of a LOLA agent's look-ahead"},
            f"no agent of agents={','.join(self.agents)} is 'lola'",
            f"make one a LOLA agent (e.g. agents=lola,{self.agents[1]})",
        )

    @property
    def num_lola(self) -> int:
        return sum(entry == "lola" for entry in self.agents)

    def batches_per_iteration(self) -> int:
        """Sampled batches per update: the shared one, plus one per LOLA agent."""
        return 1 + self.num_lola


def _strategy_key(entry: str) -> str:
    return entry.lower().replace("-", "_")


class DiceRunnerState(struct.PyTreeNode):
    """Everything one run carries between updates (arrays only).

    Attributes:
        logits: float32 ``(2, 5)``, both players' policy logits (start, CC, CD, DC, DD).
        opt_states: one optax state per player (a fixed player's is the optimiser's state too,
            never used, so the two entries share one structure).
        key: the RNG key.
        iteration: int32 ``()``, updates done.
    """

    logits: jax.Array
    opt_states: tuple[Any, Any]
    key: jax.Array
    iteration: jax.Array


class Batch(struct.PyTreeNode):
    """A sampled batch of episodes, time-major.

    Attributes:
        state: int32 ``(T, B, 2)``, each player's policy index (start, CC, CD, DC, DD) before
            each round.
        action: int32 ``(T, B, 2)``, 0 = cooperate, 1 = defect.
        reward: float32 ``(T, B, 2)``.
        obs: float32 ``(T, B, 2, 5)``, the one-hot observations the actions were taken on.
    """

    state: jax.Array
    action: jax.Array
    reward: jax.Array
    obs: jax.Array


def _log_prob(logits: jax.Array, state: jax.Array, action: jax.Array) -> jax.Array:
    chosen = logits[state]
    return jnp.where(action == 0, jax.nn.log_sigmoid(chosen), jax.nn.log_sigmoid(-chosen))


def _baseline(returns: jax.Array, state: jax.Array, devices: DeviceAxis) -> jax.Array:
    # Leave-one-out mean return-to-go of the other episodes in the same state at the same round
    # (the round's leave-one-out mean where no other episode shares the state). (T, B) -> (T, B).
    # The other episodes are every device's: the sums and counts pool the devices' blocks.
    batch = returns.shape[1] * devices.size
    onehot = jax.nn.one_hot(state, POLICY_SIZE, dtype=returns.dtype)  # (T, B, 5)
    sums = devices.sum(jnp.einsum("tbk,tb->tk", onehot, returns))
    counts = devices.sum(onehot.sum(1))  # (T, 5)
    same_sum = jnp.take_along_axis(sums, state, axis=1) - returns
    same_count = jnp.take_along_axis(counts, state, axis=1) - 1.0
    round_mean = (devices.sum(returns.sum(1, keepdims=True)) - returns) / max(batch - 1, 1)
    return jnp.where(same_count > 0, same_sum / jnp.maximum(same_count, 1.0), round_mean)


def dice_objective(
    logits_self: jax.Array,
    logits_other: jax.Array,
    batch: Batch,
    player: int,
    gamma: float | jax.Array,
    baseline: bool = True,
    devices: DeviceAxis | None = None,
) -> jax.Array:
    """Player ``player``'s DiCE objective (float32 ``()``), differentiable to any order in both logits.

    ``logits_self`` are player ``player``'s logits and ``logits_other`` the other player's;
    ``batch`` was sampled with (any) policies; only its states, actions and rewards are read.
    See the module docs for the formula.

    With ``devices`` split, ``batch`` is this device's block of the episodes: the baseline pools
    every device's episodes, and the result is the mean over this block, so its mean over the
    devices (equal blocks), and its gradient's, is the whole batch's.
    """
    devices = DeviceAxis() if devices is None else devices
    other = 1 - player
    log_p = _log_prob(logits_self, batch.state[..., player], batch.action[..., player]) + _log_prob(
        logits_other, batch.state[..., other], batch.action[..., other]
    )  # (T, B)
    rounds = batch.reward.shape[0]
    discount = jnp.asarray(gamma, jnp.float32) ** jnp.arange(rounds, dtype=jnp.float32)[:, None]
    reward = batch.reward[..., player]
    objective = (magic_box(jnp.cumsum(log_p, axis=0)) * discount * reward).sum(0).mean()
    if baseline:
        # Return-to-go G[t] = r[t] + gamma G[t+1], backwards (dividing the discounted rewards'
        # reversed cumulative sum by gamma^t was 0 / 0 once gamma^t underflowed: NaN objectives
        # for a small gamma over many rounds, gamma = 0 from the second round).
        to_go = _returns_to_go(reward, jnp.asarray(gamma, jnp.float32))
        values = jax.lax.stop_gradient(_baseline(to_go, batch.state[..., player], devices))
        objective = objective + ((1.0 - magic_box(log_p)) * discount * values).sum(0).mean()
    return objective


def _returns_to_go(reward: jax.Array, gamma: jax.Array) -> jax.Array:
    """``G[t] = sum_{k>=t} gamma^(k-t) reward[k]`` along the first (time) axis."""

    def back(later: jax.Array, r: jax.Array) -> tuple[jax.Array, jax.Array]:
        now = r + gamma * later
        return now, now

    return jax.lax.scan(back, jnp.zeros_like(reward[0]), reward, reverse=True)[1]


def _fixed_logits(entry: str) -> np.ndarray:
    probs = np.asarray(strategy(_strategy_key(entry)), np.float64)
    with np.errstate(divide="ignore"):
        logits = np.log(probs) - np.log1p(-probs)
    return np.clip(logits, -FIXED_LOGIT, FIXED_LOGIT).astype(np.float32)


def _play_round(logits: jax.Array, obs: jax.Array, uniform: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Both tabular policies' actions in a batch of envs: ``(state, action)``, int32 ``(E, 2)``
    (each player's policy index, start, CC, CD, DC, DD, and 0 cooperate / 1 defect) from
    ``logits`` ``(2, 5)``, the one-hot observations ``(E, 2, 5)`` and uniforms ``(E, 2)``."""
    state = jnp.asarray(_OBS_TO_POLICY)[jnp.argmax(obs, axis=-1)]
    cooperate = jax.nn.sigmoid(logits[jnp.arange(2), state])
    return state, (uniform >= cooperate).astype(jnp.int32)


def make_sampler(
    env: Any, env_params: Any, rounds: int, devices: DeviceAxis | None = None
) -> Callable[..., Batch]:
    """``sample(key, logits, episodes, payoff=None) -> Batch``: episodes of two tabular policies.

    ``logits`` is float ``(2, 5)`` (each player's start, CC, CD, DC, DD logits; sampling takes no
    gradient); ``env`` an iterated matrix game made with ``autoreset=False``, ``env_params`` its
    params with ``num_inner_steps >= rounds``; ``payoff`` (``(2, 2, 2)``, may be traced) replaces
    the params' payoff. With ``devices`` split, ``episodes`` is this device's block of a batch of
    ``episodes * devices.size``, drawn exactly as one device draws that block of the whole batch.
    """
    devices = DeviceAxis() if devices is None else devices

    def block_keys(key: jax.Array, first: int, episodes: int) -> jax.Array:
        # This device's block of the episodes' keys, hashed_keys(key, (first + whole batch,))[first:].
        if not devices.sharded:
            return hashed_keys(key, (first + episodes,))[first:]
        total = first + episodes * devices.size
        return hashed_keys(key, (total,), block=(0, first + devices.start(episodes), episodes))

    def uniforms(key: jax.Array, episodes: int) -> jax.Array:
        # This device's block of the (episodes, 2) uniforms one device draws for the whole batch.
        if not devices.sharded:
            return fast_random.uniform(key, (episodes, 2), vector=True)
        shape = (episodes * devices.size, 2)
        return fast_random.uniform(key, index=block_index(shape, 0, devices.start(episodes), episodes))

    def sample(key: jax.Array, logits: jax.Array, episodes: int, payoff: jax.Array | None = None) -> Batch:
        """``episodes`` episodes of both players' policies (no gradient flows through sampling)."""
        logits = jax.lax.stop_gradient(logits)
        params = env_params if payoff is None else env_params.replace(payoff=payoff)
        key_reset, key_rounds = jax.random.split(key)
        # Hashed keys and uniforms (lamella.envs.random) instead of Threefry splits in the loop:
        # the same statistics at a fraction of the compile time.
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(block_keys(key_reset, 0, episodes), params)

        def one_round(
            carry: tuple[jax.Array, Any], key: jax.Array
        ) -> tuple[tuple[jax.Array, Any], tuple[jax.Array, ...]]:
            obs, env_state = carry
            # One key for the actions, then one per episode for the env steps (a device: key 0
            # and its block's; the hash draws each key from its position alone).
            if devices.sharded:
                key_actions, key_steps = hashed_keys(key, (1,))[0], block_keys(key, 1, episodes)
            else:
                keys = hashed_keys(key, (episodes + 1,))
                key_actions, key_steps = keys[0], keys[1:]
            state, action = _play_round(logits, obs, uniforms(key_actions, episodes))
            next_obs, env_state, reward, _, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                key_steps, env_state, action, params
            )
            return (next_obs, env_state), (state, action, reward.astype(jnp.float32), obs)

        _, (state, action, reward, seen) = jax.lax.scan(
            one_round, (obs, env_state), hashed_keys(key_rounds, (rounds,))
        )
        return Batch(state=state, action=action, reward=reward, obs=seen)

    return sample


def make_dice_runner(config: DiceConfig) -> Runner:
    """A :class:`~lamella.agents.runner.Runner`: one simultaneous update of both players per iteration.

    Step metrics: ``episode_return`` (player 0's mean undiscounted episode return in the shared
    batch), ``return`` and ``reward`` (each player's mean episode return and mean reward per
    round, ``(2,)``), ``loss`` (minus player 0's DiCE objective), and the watchers
    ``cooperation_<state>`` (each player's policy, ``P(cooperate)`` per state) and
    ``visits_<state>`` (state frequencies in the shared batch), each ``(2,)``.
    ``evaluate(state, key)`` samples ``eval_episodes`` fresh episodes: ``episode_return`` (player
    0's, ``(eval_episodes,)``) and ``return`` (``(eval_episodes, 2)``).

    The runner splits its sampled episodes over devices (``Runner.sharding``, the driver's
    ``num_devices``): each device samples ``batch_size / num_devices`` episodes of every batch.
    The DiCE gradients (and the look-ahead step's) are means over the episodes, so each device
    averages its block's over the devices (the baseline pools every device's episodes); the
    logits and optimiser states, updated from the averaged gradients, stay replicated.

    Raises:
        ConfigError: a bad setting, an env that is not an iterated two-player matrix game, or a
            budget below one update (each with the fix).
    """
    check_config_type(config, DiceConfig, "make_dice_runner", algorithm="lola")
    return _dice_runner(config, DeviceAxis())


def _dice_runner(config: DiceConfig, devices: DeviceAxis) -> Runner:
    """DiCE's runner for one device's block of every batch's ``config.batch_size`` episodes (all
    of them on one device)."""
    config.validate()
    with jax.ensure_compile_time_eval():
        env, env_params = lamella.envs.make(config.env_id, autoreset=False)
    if not isinstance(env.unwrapped, IteratedMatrixGame):
        raise ConfigError(
            f"DiceConfig.env_id must name an iterated two-player matrix game (e.g. "
            f"'IteratedPrisonersDilemma-v0'); {config.env_id!r} is a {type(env.unwrapped).__name__}. "
            "LOLA on the infinite game is lamella.marl.shaping.exact.make_lola_learner."
        )
    rounds = int(config.num_inner_steps) or int(env_params.num_inner_steps)
    env_params = env_params.replace(num_inner_steps=rounds)
    batch_size, eval_episodes = int(config.batch_size), int(config.eval_episodes)
    steps_per_iteration = config.batches_per_iteration() * batch_size * rounds
    num_iterations = int(config.total_timesteps) // steps_per_iteration
    if num_iterations < 1:
        raise ConfigError(
            f"DiceConfig.total_timesteps ({config.total_timesteps}) is less than one update "
            f"({config.batches_per_iteration()} batches * batch_size {batch_size} * {rounds} rounds = "
            f"{steps_per_iteration} env steps); raise it."
        )
    kinds = tuple(entry if entry in LEARNERS else "fixed" for entry in config.agents)
    fixed = [
        _fixed_logits(entry) if kind == "fixed" else np.zeros(POLICY_SIZE, np.float32)
        for entry, kind in zip(config.agents, kinds, strict=True)
    ]
    is_fixed = jnp.asarray([kind == "fixed" for kind in kinds])
    fixed_logits = jnp.asarray(np.stack(fixed))
    optimizer = (optax.adam if config.optimizer == "adam" else optax.sgd)(config.learning_rate)
    gamma, lookahead_lr = config.gamma, config.lookahead_lr
    episodes = devices.local(batch_size, "DiceConfig.batch_size")  # this device's block

    sample = make_sampler(env, env_params, rounds, devices)
    # Every learner computes from its own side, as player 0: player 1 sees the payoff with the
    # roles swapped and a batch with the player axis reversed. The two sides of a symmetric pair
    # (LOLA vs LOLA, NL vs NL) are then one vmapped computation, compiled once.
    payoffs = jnp.stack([env_params.payoff, swap_roles(env_params.payoff)])

    def flip(batch: Batch) -> Batch:
        return jax.tree.map(lambda x: x[:, :, ::-1], batch)

    def objective(own: jax.Array, other: jax.Array, batch: Batch) -> jax.Array:
        return dice_objective(own, other, batch, 0, gamma, config.baseline, devices)

    def naive_gradient(
        own: jax.Array, other: jax.Array, batch: Batch, payoff: jax.Array, key: jax.Array
    ) -> jax.Array:
        return devices.mean(jax.grad(objective)(own, other, batch))

    def lola_gradient(
        own: jax.Array, other: jax.Array, batch: Batch, payoff: jax.Array, key: jax.Array
    ) -> jax.Array:
        def after_lookahead(own: jax.Array) -> jax.Array:
            # The co-player's anticipated naive step on the shared batch (from its side), a
            # function of `own` through DiCE; then a fresh batch against the stepped co-player.
            # The co-player's gradient is every device's mean, so other_next is replicated.
            other_next = other + lookahead_lr * devices.mean(jax.grad(objective)(other, own, flip(batch)))
            fresh = sample(key, jnp.stack([own, other_next]), episodes, payoff)
            return objective(own, other_next, fresh)

        return devices.mean(jax.grad(after_lookahead)(own))

    gradients = {"naive": naive_gradient, "lola": lola_gradient}

    def init(key: jax.Array) -> DiceRunnerState:
        key, key_init = jax.random.split(key)
        drawn = config.init_scale * jax.random.normal(key_init, (2, POLICY_SIZE), jnp.float32)
        logits = jnp.where(is_fixed[:, None], fixed_logits, drawn)
        opt_states = (optimizer.init(logits[0]), optimizer.init(logits[1]))
        return DiceRunnerState(logits, opt_states, key, jnp.zeros((), jnp.int32))

    def step(state: DiceRunnerState) -> tuple[DiceRunnerState, dict[str, jax.Array]]:
        key, key_shared, key_lola = jax.random.split(state.key, 3)
        logits = state.logits
        batch = sample(key_shared, logits, episodes)
        sides = (batch, flip(batch))
        keys = jax.random.split(key_lola, 2)
        if kinds[0] == kinds[1] and kinds[0] != "fixed":
            stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), *sides)
            grads = jax.vmap(gradients[kinds[0]])(logits, logits[::-1], stacked, payoffs, keys)
        else:
            grads = jnp.stack(
                [
                    jnp.zeros(POLICY_SIZE, jnp.float32)
                    if kind == "fixed"
                    else gradients[kind](logits[i], logits[1 - i], sides[i], payoffs[i], keys[i])
                    for i, kind in enumerate(kinds)
                ]
            )
        new_logits, opt_states = [], []
        for player, kind in enumerate(kinds):
            if kind == "fixed":
                new_logits.append(logits[player])
                opt_states.append(state.opt_states[player])
                continue
            updates, opt_state = optimizer.update(-grads[player], state.opt_states[player], logits[player])
            new_logits.append(optax.apply_updates(logits[player], updates))
            opt_states.append(opt_state)
        # Means over the episodes: every device's block's, averaged over the devices.
        episode, reward, loss, visits = devices.mean(
            (
                batch.reward.sum(0).mean(0),  # (2,)
                batch.reward.mean((0, 1)),
                -objective(logits[0], logits[1], batch),
                watchers.state_visits(batch.obs),
            )
        )
        cooperation = jax.nn.sigmoid(logits)[:, _POLICY_TO_OBS]  # (2, 5) in observation order
        metrics = {
            "episode_return": episode[0],
            "return": episode,
            "reward": reward,
            "loss": loss,
            **watchers.matrix_game_metrics(cooperation, visits),
        }
        new_state = DiceRunnerState(
            jnp.stack(new_logits), (opt_states[0], opt_states[1]), key, state.iteration + 1
        )
        return new_state, metrics

    whole_sample = make_sampler(env, env_params, rounds)  # evaluation: every episode on one device

    def evaluate(state: DiceRunnerState, key: jax.Array) -> dict[str, jax.Array]:
        batch = whole_sample(key, state.logits, eval_episodes)
        returns = batch.reward.sum(0)  # (E, 2)
        return {"episode_return": returns[:, 0], "return": returns}

    def render_episode(state: DiceRunnerState, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        # One episode of both policies, sampled as evaluate's are.
        policy = make_scripted_agent(
            lambda key, obs: _play_round(state.logits, obs, jax.random.uniform(key, (obs.shape[0], 2)))[1],
            batched=True,
            stochastic=True,
        )
        return episode_frames(policy, (), env, env_params, key, rounds, ())

    per_agent = ("return", "reward", *watchers.metric_names(True, False))
    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        render_episode=render_episode,
        steps_per_iteration=steps_per_iteration,
        num_iterations=num_iterations,
        metric_axes={name: ("agent",) for name in per_agent},
        # Every leaf of the state (logits, optimiser states, key) is replicated: the episodes
        # are sampled afresh every iteration.
        sharding=runner_sharding(
            devices, "batch_size", batch_size, lambda axis: _dice_runner(config, axis), lambda state: None
        ),
    )
