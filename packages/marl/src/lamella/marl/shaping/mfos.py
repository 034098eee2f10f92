"""M-FOS with reinforcement learning: a meta-agent trained by PPO to shape a learning co-player.

Model-free opponent shaping (Lu et al., 2022) on the infinite matrix game, in Pax's ``rl`` runner
setup (its ``ipd/inf_mfos_v_nl`` experiment): at every outer step the meta-agent reads the two
memory-one policies just played and outputs its next policy; its co-player, an exact-gradient
learner from :mod:`lamella.marl.shaping.exact` (a naive learner by default), takes one gradient
step against that policy. An outer episode is ``num_outer_steps`` such steps, the co-player's
whole learning run from a fresh start. The meta-agent's reward at each step is its exact value of
the policy pair; across outer episodes it learns, by PPO, which policies make its co-player learn
what profits it.

The co-player's learning is a part of the environment here: :class:`LearningOpponentGame` is a
single-agent lamella env whose state holds the co-player's logits and whose ``step`` takes its
update, so lamella-agents' PPO runner (:func:`lamella.agents.ppo.make_ppo_runner`) trains the
meta-agent on it unchanged, with the co-players' updates inside the same compiled program as the
rollout and the PPO update.

The ES variant (the same meta-policy, searched by an evosax strategy instead of PPO) is
:mod:`lamella.marl.shaping.evolution` (``lamella train mfos_es``).

::

    import jax
    from lamella.agents.runner import make_train
    from lamella.marl.shaping.mfos import MFOSConfig, make_mfos_runner

    runner = make_mfos_runner(MFOSConfig(total_timesteps=64 * 50 * 4))
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
    runner.evaluate(state, jax.random.key(1))["opponent_return"]  # the co-players' mean per-step value
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

import lamella.envs
from lamella.agents.config import ConfigError, check_config_type
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.ppo import PPOConfig, make_ppo, make_ppo_runner
from lamella.agents.runner import Runner, episode_frames
from lamella.envs import spaces
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.infinite_matrix_game import (
    InfiniteMatrixGame,
    InfiniteMatrixGameParams,
    InfiniteMatrixGameState,
)
from lamella.marl.shaping.evolution import OPPONENTS, _payoff_array
from lamella.marl.shaping.exact import POLICY_SIZE, ExactGame, ExactLearner, exact_values

__all__ = ["LearningOpponentGame", "LearningOpponentState", "MFOSConfig", "make_mfos_runner"]

#: Probabilities are clipped to ``[EPS, 1 - EPS]`` before they become the logits the co-player
#: differentiates against (a deterministic action is a logit of about +-13.8).
EPS = 1e-6


class LearningOpponentState(struct.PyTreeNode):
    """State of :class:`LearningOpponentGame`.

    Attributes:
        theta: float32 ``(5,)``, the co-player's logits (start, CC, CD, DC, DD from its side).
        time: int32 ``()``, outer steps taken in this episode.
        played: float32 ``(2, 5)``, the pair of policies just played (the observation: the
            meta-agent's, then the co-player's cooperation probabilities), for ``render``.
    """

    theta: jax.Array
    time: jax.Array
    played: jax.Array


class LearningOpponentGame(Environment[LearningOpponentState, InfiniteMatrixGameParams]):
    """The infinite matrix game against a co-player that learns: the meta-game M-FOS plays.

    Agents: 1 (the meta-agent, player 0 of the matrix game).

    Observation: float32 ``(10,)``, ``[own policy, co-player's policy]``: the cooperation
    probabilities (start, CC, CD, DC, DD, each from its owner's side) of the pair just played.
    After reset: a random previous policy of the meta-agent (logits ``N(0, 1)``) and the
    co-player's initial policy.

    Action: Box(0, 1, ``(5,)``), float32: the meta-agent's next memory-one policy (cooperation
    probabilities), clipped to ``[1e-6, 1 - 1e-6]``. A tanh-squashed Gaussian into this box is a
    Gaussian over the policy's logits (``sigmoid(2u) = (tanh(u) + 1) / 2``), Pax's ``Hyper`` agent.

    Reward: float32 ``()``, the meta-agent's exact normalised value of the pair
    (:func:`lamella.marl.shaping.exact.exact_values`; CC forever is -1 in the prisoner's dilemma).

    Step: the values of the pair, then the co-player's ``learner.update`` against the meta-agent's
    policy (its logits, ``game`` from its side). ``info["opponent_reward"]``: the co-player's
    value, float32 ``()``.

    Reset: the co-player starts from ``learner.init`` and takes one warm-up update against the
    random previous policy, as M-FOS's reset does (and :func:`~lamella.marl.shaping.evolution.make_meta_fitness`).

    Truncated: after ``params.num_steps`` outer steps. Terminated: never.

    Params: :class:`~lamella.envs.multi_agent.infinite_matrix_game.InfiniteMatrixGameParams`
    (payoff, discount, outer steps per episode).

    Args:
        learner: the co-player (:func:`~lamella.marl.shaping.exact.make_naive_learner`, LOLA, a
            fixed strategy, ...).
        payoff, gamma, num_steps: the default params (Pax's IPD, 0.96, 100).
    """

    num_agents = 1
    stochastic_step = False
    cheap_done = True

    def __init__(self, learner: ExactLearner, payoff: Any = None, gamma: float = 0.96, num_steps: int = 100):
        self._learner = learner
        # The infinite game checks the payoff, the discount and the episode length.
        self._game = InfiniteMatrixGame(payoff, gamma, num_steps)

    @property
    def default_params(self) -> InfiniteMatrixGameParams:
        return self._game.default_params

    @staticmethod
    def _games(params: InfiniteMatrixGameParams) -> tuple[ExactGame, ExactGame]:
        game = ExactGame(jnp.asarray(params.payoff, jnp.float32), jnp.asarray(params.gamma, jnp.float32))
        return game, game.swapped()

    def reset_env(
        self, key: jax.Array, params: InfiniteMatrixGameParams
    ) -> tuple[jax.Array, LearningOpponentState]:
        key_opp, key_meta = jax.random.split(key)
        _, opponent_game = self._games(params)
        theta = self._learner.init(key_opp)
        previous = jax.random.normal(key_meta, (POLICY_SIZE,), jnp.float32)
        obs = jnp.concatenate([jax.nn.sigmoid(previous), jax.nn.sigmoid(theta)])
        theta = self._learner.update(theta, previous, opponent_game)
        return obs, LearningOpponentState(theta, jnp.zeros((), jnp.int32), obs.reshape((2, POLICY_SIZE)))

    def step_env(
        self, key: jax.Array, state: LearningOpponentState, action: Any, params: InfiniteMatrixGameParams
    ) -> StepOutput:
        game, opponent_game = self._games(params)
        policy = jnp.clip(jnp.asarray(action, jnp.float32), EPS, 1 - EPS)
        logits = jnp.log(policy) - jnp.log1p(-policy)
        values = exact_values(logits, state.theta, game)
        obs = jnp.concatenate([policy, jax.nn.sigmoid(state.theta)])
        theta = self._learner.update(state.theta, logits, opponent_game)
        time = state.time + 1
        truncated = time >= params.num_steps
        info = {"opponent_reward": values[1]}
        state = LearningOpponentState(theta, time, obs.reshape((2, POLICY_SIZE)))
        return obs, state, values[0], jnp.zeros((), bool), truncated, info

    def observation_space(self, params: InfiniteMatrixGameParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2 * POLICY_SIZE,), jnp.float32)

    def action_space(self, params: InfiniteMatrixGameParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (POLICY_SIZE,), jnp.float32)

    def render(
        self, state: LearningOpponentState, params: InfiniteMatrixGameParams | None = None
    ) -> jax.Array:
        """The pair just played as the infinite game draws it (``InfiniteMatrixGame.render``):
        the meta-agent's cooperation probabilities (blue, top), the co-player's (red, bottom)
        and the outer episode's progress, uint8 ``(140, 130, 3)``."""
        drawn = InfiniteMatrixGameState(state.played, jnp.zeros((2,), jnp.float32), state.time)
        return self._game.render(drawn, self.default_params if params is None else params)


@dataclasses.dataclass(frozen=True)
class MFOSConfig(PPOConfig):
    """M-FOS (RL) against an exact-gradient learner on the infinite matrix game.

    The meta-agent is lamella-agents' PPO (every :class:`~lamella.agents.ppo.PPOConfig` setting
    applies; the defaults below change only what this problem needs): one rollout is one whole
    outer episode of every env (``num_steps`` = ``num_outer_steps``), as in Pax's ``rl`` runner.
    The defaults are the setup the outcome test checks (``tests/test_shaping_mfos.py``), at 4x
    its budget: 32 envs of 50 outer steps, 400 updates (Pax's ``ipd/inf_mfos_v_nl``: 4,000 envs of
    100 outer steps, Adam 4e-3, 4 epochs of 1 minibatch, GAE lambda 0.99, a 256-unit torso).

    Attributes:
        env_id: an :class:`~lamella.envs.multi_agent.infinite_matrix_game.InfiniteMatrixGame` id
            (its payoff and discount are the game's unless ``payoff`` / ``game_gamma`` are set).
        num_outer_steps: the co-player's updates per outer episode (Pax's ``num_outer_steps``).
        opponent: the co-player, ``"naive"`` or ``"lola"``
            (:data:`~lamella.marl.shaping.evolution.OPPONENTS`).
        opponent_lr: its learning rate (Pax's naive ``lr: 1.0``).
        payoff: eight numbers CC, CD, DC, DD (each ``(r_meta, r_co_player)``), or ``None``.
        game_gamma: the infinite game's discount, or ``None`` for the env's (0.96). ``gamma`` is
            PPO's discount over outer steps.
    """

    env_id: str = "InfiniteMatrixGame-v0"
    total_timesteps: int = 400 * 32 * 50
    eval_episodes: int = 32
    num_envs: int = 32
    num_steps: int = 50
    num_epochs: int = 4
    num_minibatches: int = 2
    learning_rate: float = 1e-2
    anneal_lr: bool = False
    gamma: float = 0.96
    gae_lambda: float = 0.99
    ent_coef: float = 0.0
    hidden_sizes: tuple[int, ...] = (32, 32)
    num_outer_steps: int = 50
    opponent: str = "naive"
    opponent_lr: float = 1.0
    payoff: tuple[float, ...] | None = None
    game_gamma: float | None = None

    #: The algorithm's name in messages (``lamella train mfos_rl``).
    algorithm = "mfos_rl"

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` naming the first bad setting and the fix."""
        super().validate()
        name = type(self).__name__
        if int(self.num_outer_steps) < 1:
            raise ConfigError(f"{name}.num_outer_steps must be >= 1, got {self.num_outer_steps}.")
        if self.opponent not in OPPONENTS:
            raise ConfigError(f"{name}.opponent must be one of {sorted(OPPONENTS)}, got {self.opponent!r}.")
        if self.payoff is not None:
            try:
                _payoff_array(self.payoff, f"{name}.payoff")
            except ValueError as error:
                raise ConfigError(str(error)) from None
        if self.game_gamma is not None and not 0.0 <= float(self.game_gamma) < 1.0:
            raise ConfigError(f"{name}.game_gamma must be in [0, 1), got {self.game_gamma}.")


def make_learning_opponent_game(config: MFOSConfig) -> tuple[LearningOpponentGame, InfiniteMatrixGameParams]:
    """The meta-game of ``config``: its env and params (payoff and discount from the env id unless set)."""
    config.validate()
    with jax.ensure_compile_time_eval():
        try:
            env, env_params = lamella.envs.make(config.env_id, autoreset=False)
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(str(error.args[0]) if error.args else str(error)) from None
        if not isinstance(env.unwrapped, InfiniteMatrixGame):
            raise ConfigError(
                f"MFOSConfig.env_id must name an InfiniteMatrixGame (e.g. 'InfiniteMatrixGame-v0'); "
                f"{config.env_id!r} is a {type(env.unwrapped).__name__}. M-FOS on the finite games is the "
                "meta runner (lamella train meta_es)."
            )
        payoff = (
            env_params.payoff if config.payoff is None else _payoff_array(config.payoff, "MFOSConfig.payoff")
        )
        gamma = float(env_params.gamma if config.game_gamma is None else config.game_gamma)
    game = LearningOpponentGame(
        OPPONENTS[config.opponent](config.opponent_lr), jnp.asarray(payoff), gamma, config.num_outer_steps
    )
    return game, game.default_params


def make_mfos_runner(config: MFOSConfig) -> Runner:
    """A :class:`~lamella.agents.runner.Runner`: one PPO update of the meta-agent per iteration.

    Step metrics: PPO's (``episode_return`` is the meta-agent's summed reward over an outer
    episode, ``loss``, ...) and ``meta_return``, float32 ``()``: the same per outer step.
    ``evaluate(state, key)`` plays the meta-agent's greedy policy against ``eval_episodes`` fresh
    co-players for one outer episode each and returns ``episode_return`` and ``opponent_return``,
    float32 ``(eval_episodes,)``: each side's mean exact value per outer step (per round of the
    game; above -1 is better than mutual cooperation in the prisoner's dilemma).

    The runner splits its envs over devices as PPO's does (``Runner.sharding``, the driver's
    ``num_devices``): each device steps ``num_envs / num_devices`` meta-games, co-players
    included, and PPO's update averages over the devices.
    """
    check_config_type(config, MFOSConfig, "make_mfos_runner", algorithm="mfos_rl")
    return _mfos_runner(config, DeviceAxis())


def _mfos_runner(config: MFOSConfig, devices: DeviceAxis) -> Runner:
    """M-FOS-RL's runner for one device's block of ``config.num_envs`` (all of them on one device)."""
    config.validate()
    if config.num_steps % config.num_outer_steps and config.num_outer_steps % config.num_steps:
        raise ConfigError(
            f"MFOSConfig: num_steps ({config.num_steps}) and num_outer_steps ({config.num_outer_steps}) "
            "should divide one another (a rollout is whole outer episodes, or an outer episode whole "
            f"rollouts); set num_steps={config.num_outer_steps}."
        )
    env, env_params = make_learning_opponent_game(config)
    # PPO's runner for this device's envs (its step's metrics are reduced over the devices).
    ppo_runner = make_ppo_runner(config, env, env_params)
    ppo_sharding = ppo_runner.sharding
    if devices.sharded:
        ppo_runner = ppo_sharding.make(devices)
    agent = make_ppo(config, env.observation_space(env_params), env.action_space(env_params)).agent
    length = config.num_outer_steps

    def step(state: Any) -> tuple[Any, dict[str, jax.Array]]:
        state, metrics = ppo_runner.step(state)
        return state, {**metrics, "meta_return": metrics["episode_return"] / length}

    def evaluate(state: Any, key: jax.Array) -> dict[str, jax.Array]:
        key_reset, key_play = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(key_reset, config.eval_episodes), env_params
        )
        memory = agent.reset_memory(state.memory, eval=True)

        def outer_step(carry: Any, key: jax.Array) -> tuple[Any, jax.Array]:
            obs, env_state, memory = carry
            action, _, memory = agent.policy(key, state.train_state, obs, memory, eval=True)
            obs, env_state, reward, _, _, info = jax.vmap(env.step, in_axes=(None, 0, 0, None))(
                key, env_state, action, env_params
            )
            return (obs, env_state, memory), jnp.stack([reward, info["opponent_reward"]], -1)

        _, values = jax.lax.scan(outer_step, (obs, env_state, memory), jax.random.split(key_play, length))
        mean = values.mean(0)  # (eval_episodes, 2)
        return {"episode_return": mean[:, 0], "opponent_return": mean[:, 1]}

    def render_episode(state: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        # One outer episode of the greedy meta-agent against a fresh co-player.
        memory = jax.tree.map(lambda x: x[:1], agent.reset_memory(state.memory, eval=True))
        return episode_frames(agent, state.train_state, env, env_params, key, length, memory, greedy=True)

    return ppo_runner._replace(
        step=step,
        evaluate=evaluate,
        render_episode=render_episode,
        record_step=None,
        sharding=runner_sharding(
            devices,
            "num_envs",
            config.num_envs,
            lambda axis: _mfos_runner(config, axis),
            ppo_sharding.state_axes,
        ),
    )
