"""Meta-learning on the finite iterated games: a shaper evolved across its co-player's learning.

Pax's ``evo`` runner with inner and outer episodes (Good Shepherd, Shaper, M-FOS-ES on the finite
iterated games, on CoinGame and on IPD-in-the-Matrix), built from lamella's pieces:

* **Inner episode**: ``num_inner_steps`` rounds of the iterated game on ``num_envs`` envs. It is one
  iteration of :func:`lamella.marl.shaping.runner.make_shaping_runner`: the meta-agent acts, the
  co-player (lamella-agents' PPO, ``num_opponents`` independent instances; feed-forward, or with
  a GRU core when ``co_player_recurrent``: Pax's ``PPO_memory``) acts, then each co-player takes
  its PPO update on the episode it just played.
* **Outer episode**: ``num_outer_steps`` inner episodes, the co-player's whole learning run. The
  co-players start afresh (new network, new optimiser) at every outer episode; the meta-agent's
  recurrent state (``meta_recurrent=True``, Shaper) is **not** reset between inner episodes, so it
  can read how its co-player is learning. Its parameters do not change within an outer episode.
  A recurrent co-player's GRU state is the opposite: it starts from zeros at the first round of
  every inner episode and runs through that episode's rounds (Pax's ``PPO_memory`` zeroes it in
  its ``update``, which the ``evo`` runner calls at the end of every inner episode, and at each
  outer episode's ``init``); here the env's inner episode ends, so the next round is a reset step
  of the rollout, where lamella-agents' recurrent PPO acts from fresh memory.
* **Meta-training**: an evosax strategy (:func:`lamella.marl.shaping.evolution.make_search`:
  ``Open_ES``, ``CMA_ES``, ``PGPE``, ``SimpleGA``, ...) over the meta-agent's parameters, one
  generation per runner iteration. A member's fitness is the meta-agent's mean reward per round
  over its outer episode; every member meets the same co-player seeds (common random numbers).
  The population, the envs and the co-players' learning all run in one compiled program.

**Roles: self-play and n-player games** (Pax's ``EvoRunnerNRoles``). ``meta_roles=k`` puts the
meta-agent in the first ``k`` of the game's ``n`` seats (one set of parameters, each seat its own
memory); the other ``n - k`` seats are PPO co-players, each its own learner. ``k = n`` is
self-play: the meta-agent against copies of itself, nothing else learning. On the two-player games
``meta_roles=2`` is self-play; on the n-player tensor game (``IteratedTensorGame-v0``,
``num_players``) one meta-agent meets several learners (``meta_roles=1``) or several copies of
it meet the rest (Pax's ``multiplayer_ipd/3pl_2shap_ipd``: two shapers, one PPO learner). The
fitness is the meta-agent's mean reward over its seats; the ``co_player_*`` metrics are the
other seats' means (in self-play: the copies' in seats ``1..n-1``).

**Annealed self-play** (Pax's ``self_play_anneal``). ``self_play_anneal=True`` draws the
meta-agent's seat count anew every generation instead: each of the ``n`` seats plays the
meta-agent with probability ``p = generation / num_iterations`` (0 at the first generation, near 1
at the last), at least one seat (``max(1, Binomial(n, p))``), the rest PPO co-players. The count
is data in the compiled program: the runner holds one outer episode per count ``1..n``, traced
once, and ``lax.switch`` plays the drawn one, so a run is one program whatever counts it draws.
The ``meta_seats`` metric logs each generation's count; ``evaluate`` plays the meta-agent in seat
0 against ``n - 1`` learners.

The meta-agent is lamella-agents' actor-critic network (:func:`lamella.agents.ppo.make_actor_critic`:
an MLP torso, or on IPD-in-the-Matrix with ``meta_torso="cnn"`` Pax's CNN on the view, with a GRU
core when ``meta_recurrent``); only its policy head acts. A feed-forward
meta-agent on the IPD's one-hot observation is a memory-one strategy (Good Shepherd's PPO agent);
a recurrent one is Shaper's ``PPO_memory``.

::

    import jax
    from lamella.agents.runner import make_train
    from lamella.marl.shaping.meta import MetaConfig, make_meta_runner

    runner = make_meta_runner(MetaConfig(total_timesteps=2_000_000))
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import lamella.envs
from lamella.agents.config import ConfigError, check_config_type, check_numbers, unused_settings_of
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.ppo import PPOConfig, make_actor_critic
from lamella.agents.ppo_update import RECURRENT_UPDATES, PPOSettings
from lamella.agents.protocol import Agent
from lamella.agents.runner import Runner
from lamella.envs import spaces
from lamella.marl.shaping import watchers
from lamella.marl.shaping.evolution import MetaESState, check_sigma_init, make_search, unread_learning_rate
from lamella.marl.shaping.observations import flatten_agent_observations, view_layout
from lamella.marl.shaping.runner import (
    LEARNER,
    TORSOS,
    ShapingConfig,
    ViewLayout,
    make_shaping_runner,
)

__all__ = ["MetaConfig", "draw_meta_seats", "make_meta_agent", "make_meta_runner", "make_outer_episode"]


@dataclasses.dataclass(frozen=True)
class MetaConfig(PPOSettings):
    """A meta-agent evolved against PPO co-players that learn over inner episodes of a finite game.

    The co-players' PPO settings are lamella-agents' :class:`~lamella.agents.ppo_update.PPOSettings`,
    which this config extends (re-declaring a field only to change its default); the rest are the
    meta-game's and the search's. The defaults are the setup the outcome test checks
    (``tests/test_shaping_meta.py``), run for 200 generations: 20-round inner episodes, 48 of them
    per outer episode, two tabular PPO co-players (no hidden layer: a linear policy on the one-hot
    state; Adam 0.2), a feed-forward tabular meta-agent (a memory-one strategy) searched by CMA-ES
    with 16 members.

    Attributes:
        env_id: a two-player iterated matrix game (``IteratedPrisonersDilemma-v0``, ...),
            ``CoinGame-v0``, ``IPDInTheMatrix-v0`` / ``IMPInTheMatrix-v0``, or the n-player
            ``IteratedTensorGame-v0``; the meta-agent is player 0 (and the next ``meta_roles - 1``
            players). On CoinGame the ``cooperation`` metrics are own-coin shares (of the coins a
            player took, the fraction of its own colour); in the Matrix they are cooperate-coin
            shares (of the coins a player held at its paying interactions, the red = cooperate
            fraction: Pax's ``ipditm`` ratio). The Matrix's dict observation reaches every
            agent as one flat row (:mod:`lamella.marl.shaping.observations`).
        total_timesteps: budget in env steps, counted as ``population_size * num_envs *
            num_inner_steps * num_outer_steps`` per generation.
        eval_episodes: outer episodes (fresh co-players each) per evaluation of the strategy's
            centre.
        eval_max_steps: must stay 0: an evaluation plays whole outer episodes.
        num_inner_steps: rounds per inner episode (Pax's ``num_inner_steps``).
        num_outer_steps: inner episodes per outer episode: the co-player's updates (Pax's
            ``num_outer_steps``).
        num_envs: games per member; each co-player plays ``num_envs // num_opponents`` of them.
        num_steps: the co-player's rollout per update: one inner episode. 0 (the default) means
            ``num_inner_steps``; another value is refused.
        num_opponents: independent co-players per member (Pax's ``num_opps``).
        strategy: an evosax strategy name (``"Open_ES"``, ``"CMA_ES"``, ``"PGPE"``, ``"SimpleGA"``, ...).
        population_size: members per generation (even for the antithetic ``Open_ES`` / ``PGPE``).
        sigma_init: initial search scale.
        es_learning_rate: Adam step size of the strategies that take one (``Open_ES``, ``PGPE``,
            ...; refused unless at its default for the others, ``CMA_ES``, ``SimpleGA``, ...).
        fitness_shaping: ``"default"`` or one of :data:`lamella.agents.es.FITNESS_SHAPING`.
        meta_hidden_sizes: MLP widths of the meta-agent's torso (``()``: logits linear in the
            observation, a memory-one strategy on the IPD's one-hot).
        meta_recurrent: a GRU core whose state persists across the inner episodes (Shaper);
            ``False``: a feed-forward policy (Good Shepherd).
        meta_rnn_hidden_size: width of that core (refused unless at its default without
            ``meta_recurrent``, as are the three ``co_player_*`` settings below without
            ``co_player_recurrent``: a feed-forward network never reads them).
        activation: activation of the meta-agent and of the co-players.
        hidden_sizes: the co-players' MLP widths.
        co_player_recurrent: co-players with a GRU core after their MLP torso (Pax's
            ``PPO_memory``: lamella-agents' recurrent PPO); its state starts from zeros at every
            inner episode. Its minibatches split a co-player's ``num_envs // num_opponents``
            envs (whole inner episodes), so ``num_minibatches`` must divide that.
        co_player_rnn_hidden_size: width of that GRU (Pax's ``hidden_size``, 16).
        co_player_recurrent_update: how a recurrent co-player updates (lamella-agents'
            ``PPOConfig.recurrent_update``): ``"bptt"`` (the default), minibatches of whole inner
            episodes with gradients through their rounds (``num_minibatches`` must divide
            ``num_envs // num_opponents``); ``"stored_memory"``, what Pax's ``PPO_memory`` does:
            minibatches of shuffled rounds, each recomputed from the GRU state stored when it
            acted, no gradient through time (``num_minibatches`` must divide ``num_envs //
            num_opponents * num_inner_steps``). Cheaper (its update about 1.5x on Pax's CoinGame
            setup), and the update is most of a recurrent co-player's cost.
        co_player_post_core_layers: a recurrent co-player's actor and critic each have a dense
            layer of ``hidden_sizes[-1]`` units (``co_player_rnn_hidden_size`` if empty) after the
            GRU (the default); ``False``: its policy and value heads read the GRU's output, as
            Pax's ``PPO_memory`` network (a 16-unit layer, the GRU, the heads).
        torso: the co-players' torso, ``"mlp"`` or ``"cnn"`` (IPD-in-the-Matrix only: Pax's
            ``ipditm`` CNN on the view, the inventory joined after it; then ``hidden_sizes``, or
            the GRU when ``co_player_recurrent``; see :class:`~lamella.marl.shaping.runner.ShapingConfig`).
        meta_torso: the meta-agent's torso, the same choice (then ``meta_hidden_sizes``, or its
            GRU when ``meta_recurrent``).
        meta_roles: the seats the meta-agent plays (players ``0 .. meta_roles - 1``, one set of
            parameters); the rest are PPO co-players. The game's player count is self-play.
        self_play_anneal: draw the meta-agent's seat count every generation (Pax's
            ``self_play_anneal``): each seat is the meta-agent's with probability ``generation /
            num_iterations``, at least one (:func:`draw_meta_seats`); ``meta_roles`` must then stay
            1, the seat count of ``evaluate``.
        num_players: the player count of an n-player game (``IteratedTensorGame-v0``); 0 keeps
            the env's default (3 for the tensor game).
        num_epochs, num_minibatches, learning_rate, anneal_lr, gamma, gae_lambda, clip_eps,
            clip_value, vf_coef, ent_coef, max_grad_norm, normalize_advantages: the co-players'
            PPO settings (:class:`~lamella.agents.ppo_update.PPOSettings`); each co-player
            updates once per inner episode, on its ``num_envs // num_opponents * num_inner_steps``
            steps (``anneal_lr`` decays its step size over its outer episode).
    """

    env_id: str = "IteratedPrisonersDilemma-v0"
    total_timesteps: int = 200 * 16 * 4 * 20 * 48  # 200 generations
    eval_episodes: int = 8
    num_envs: int = 4
    num_steps: int = 0
    num_minibatches: int = 2
    learning_rate: float = 0.2
    anneal_lr: bool = False
    gamma: float = 0.96
    num_inner_steps: int = 20
    num_outer_steps: int = 48
    num_opponents: int = 2
    strategy: str = "CMA_ES"
    population_size: int = 16
    sigma_init: float = 0.5
    es_learning_rate: float = 0.1
    fitness_shaping: str = "default"
    meta_hidden_sizes: tuple[int, ...] = ()
    meta_recurrent: bool = False
    meta_rnn_hidden_size: int = 16
    activation: str = "tanh"
    hidden_sizes: tuple[int, ...] = ()
    co_player_recurrent: bool = False
    co_player_rnn_hidden_size: int = 16
    co_player_recurrent_update: str = "bptt"
    co_player_post_core_layers: bool = True
    torso: str = "mlp"
    meta_torso: str = "mlp"
    meta_roles: int = 1
    num_players: int = 0
    self_play_anneal: bool = False

    #: The algorithm's name in messages (``lamella train meta_es``).
    algorithm = "meta_es"
    #: ``evaluate`` plays outer episodes as training does, the meta-agent sampling its actions
    #: (the run summary says so).
    eval_greedy = False

    @property
    def steps_per_iteration(self) -> int:
        """Env steps of one generation."""
        return self.population_size * self.num_envs * self.num_inner_steps * self.num_outer_steps

    @property
    def num_iterations(self) -> int:
        """Generations for ``total_timesteps``."""
        return self.total_timesteps // self.steps_per_iteration

    def co_player_config(self) -> ShapingConfig:
        """The settings of one outer episode as the shaping runner's: one iteration per inner episode."""
        ppo = {field.name: getattr(self, field.name) for field in dataclasses.fields(PPOSettings)}
        return ShapingConfig(
            **{
                **ppo,
                "agents": (LEARNER, LEARNER),  # player 0 is replaced by the meta-agent
                "num_opponents": self.num_opponents,
                "num_inner_steps": self.num_inner_steps,
                "total_timesteps": self.num_outer_steps * self.num_envs * self.num_inner_steps,
                "eval_episodes": self.num_opponents,
                "num_steps": self.num_inner_steps,
                "hidden_sizes": tuple(self.hidden_sizes),
                "activation": self.activation,
                "recurrent": self.co_player_recurrent,
                "cell": "gru",
                "rnn_hidden_size": self.co_player_rnn_hidden_size,
                "recurrent_update": self.co_player_recurrent_update,
                "post_core_layers": self.co_player_post_core_layers,
                "torso": self.torso,
            }
        )

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` naming the first bad setting and the fix."""
        name = type(self).__name__
        # Types, NaN, discounts, step sizes and layer sizes (lamella-agents' rules by field name).
        check_numbers(self)
        try:
            check_sigma_init(self.sigma_init, f"{name}.sigma_init")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        for field in (
            "num_inner_steps",
            "num_outer_steps",
            "num_envs",
            "num_opponents",
            "population_size",
            "eval_episodes",
            "meta_rnn_hidden_size",
            "co_player_rnn_hidden_size",
            "num_epochs",
            "num_minibatches",
            "meta_roles",
        ):
            if int(getattr(self, field)) < 1:
                raise ConfigError(f"{name}.{field} must be >= 1, got {getattr(self, field)}.")
        if int(self.num_players) < 0:
            raise ConfigError(
                f"{name}.num_players must be >= 0 (0: the env's default), got {self.num_players}."
            )
        for field in ("torso", "meta_torso"):
            if getattr(self, field) not in TORSOS:
                raise ConfigError(f"{name}.{field} must be one of {TORSOS}, got {getattr(self, field)!r}.")
        if self.num_steps not in (0, self.num_inner_steps):
            raise ConfigError(
                f"{name}.num_steps ({self.num_steps}): a co-player updates once per inner episode, on "
                f"num_inner_steps ({self.num_inner_steps}) rounds; leave num_steps at 0 or set "
                "num_inner_steps instead."
            )
        if self.eval_max_steps:
            raise ConfigError(
                f"{name}.eval_max_steps ({self.eval_max_steps}): an evaluation plays whole outer episodes "
                "(num_outer_steps * num_inner_steps rounds); leave it at 0."
            )
        if self.num_envs % self.num_opponents:
            raise ConfigError(
                f"{name}: num_opponents ({self.num_opponents}) must divide num_envs ({self.num_envs}): each "
                f"co-player plays num_envs // num_opponents games. Set num_envs="
                f"{-(-self.num_envs // self.num_opponents) * self.num_opponents} or a num_opponents that "
                f"divides {self.num_envs}."
            )
        if self.co_player_recurrent_update not in RECURRENT_UPDATES:
            raise ConfigError(
                f"{name}.co_player_recurrent_update must be one of {RECURRENT_UPDATES}, got "
                f"{self.co_player_recurrent_update!r}."
            )
        envs_per_co_player = self.num_envs // self.num_opponents
        # A BPTT co-player's minibatches are whole inner episodes; otherwise rounds.
        sequences = self.co_player_recurrent and self.co_player_recurrent_update == "bptt"
        if sequences and envs_per_co_player % self.num_minibatches:
            divisors = [d for d in range(1, envs_per_co_player + 1) if envs_per_co_player % d == 0]
            raise ConfigError(
                f"{name}: a recurrent co-player (co_player_recurrent=True) splits its minibatches over its "
                f"num_envs // num_opponents = {envs_per_co_player} envs (whole inner episodes), which "
                f"num_minibatches ({self.num_minibatches}) must divide. Set num_minibatches to one of "
                f"{divisors}, or num_envs to a multiple of num_minibatches * num_opponents "
                f"({self.num_minibatches * self.num_opponents}), or co_player_recurrent_update='stored_memory' "
                "(minibatches of rounds)."
            )
        if not sequences and (envs_per_co_player * self.num_inner_steps) % self.num_minibatches:
            raise ConfigError(
                f"{name}: a co-player learns on num_envs // num_opponents * num_inner_steps = "
                f"{envs_per_co_player * self.num_inner_steps} steps per inner episode, which num_minibatches "
                f"({self.num_minibatches}) must divide; change num_minibatches, num_envs or num_inner_steps."
            )
        if self.self_play_anneal and self.meta_roles != 1:
            raise ConfigError(
                f"{name}.meta_roles ({self.meta_roles}) with self_play_anneal=True: the seat count is "
                "drawn anew every generation; leave meta_roles at 1 (the evaluation's: the meta-agent "
                "in seat 0 against learners) or set self_play_anneal=False for a fixed count."
            )
        if self.num_iterations < 1:
            raise ConfigError(
                f"{name}.total_timesteps ({self.total_timesteps}) is less than one generation "
                f"(population_size * num_envs * num_inner_steps * num_outer_steps = "
                f"{self.steps_per_iteration}); raise it."
            )

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: ``meta_rnn_hidden_size`` without ``meta_recurrent``,
        the co-players' recurrent settings without ``co_player_recurrent`` and ``es_learning_rate``
        for a strategy that takes no optimiser (``lamella train meta_es`` refuses such a field set
        on the command line; a preset's value is no error)."""
        unused: dict[str, str] = {}
        if not self.meta_recurrent:
            unused |= unused_settings_of(
                self,
                {"meta_rnn_hidden_size": "is the width of the meta-agent's GRU core"},
                "meta_recurrent=False makes the meta-agent a feed-forward network",
                "set meta_recurrent=True for a recurrent meta-agent (Shaper)",
            )
        if not self.co_player_recurrent:
            unused |= unused_settings_of(
                self,
                {
                    "co_player_rnn_hidden_size": "is the width of the co-players' GRU core",
                    "co_player_recurrent_update": "is how a recurrent co-player is updated",
                    "co_player_post_core_layers": "shapes the co-players' layers after the GRU core",
                },
                "co_player_recurrent=False makes the co-players feed-forward networks",
                "set co_player_recurrent=True for recurrent co-players (Pax's PPO_memory)",
            )
        return unused | unread_learning_rate(self, "es_learning_rate")


def make_meta_agent(
    config: MetaConfig, action_space: spaces.Discrete, view: ViewLayout | None = None
) -> tuple[Agent, Callable[..., Any]]:
    """The meta-agent as a lamella :class:`~lamella.agents.protocol.Agent`, and its network's ``init``.

    ``view`` (``(start, (H, W, C))``, :func:`~lamella.marl.shaping.observations.view_layout`) is
    where the image view is in the flat observation row; ``config.meta_torso="cnn"`` needs it.
    Its train state is the network's parameters (what the search evolves); ``update`` changes
    nothing; ``reset_memory`` returns the memory unchanged, so the runner's reset at the end of an
    inner episode keeps the recurrent state (it starts fresh only from ``init``, at each outer
    episode).
    """
    if config.meta_torso == "cnn" and view is None:
        raise ConfigError(
            "MetaConfig.meta_torso='cnn': make_meta_agent needs the image view's place in the flat "
            "observation row (view=(start, (H, W, C)), from lamella.marl.shaping.observations.view_layout)."
        )
    cnn = config.meta_torso == "cnn" and view is not None
    actor_critic = make_actor_critic(
        PPOConfig(
            torso="view_cnn" if cnn else "mlp",
            view_start=view[0] if cnn and view is not None else 0,
            view_shape=view[1] if cnn and view is not None else (),
            hidden_sizes=tuple(config.meta_hidden_sizes),
            activation=config.activation,
            recurrent=config.meta_recurrent,
            rnn_hidden_size=config.meta_rnn_hidden_size,
        ),
        action_space,
    )

    def init(key: jax.Array, obs_example: jax.Array) -> tuple[Any, Any]:
        params = actor_critic.init(key, jnp.zeros((1, *obs_example.shape[1:]), jnp.float32))
        return params, actor_critic.initial_memory(obs_example.shape[0])

    def policy(
        key: jax.Array, params: Any, obs: jax.Array, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, Any, Any]:
        keep = jnp.zeros(obs.shape[:1], bool)
        memory, dist, _ = actor_critic.step(params, memory, jnp.asarray(obs, jnp.float32), keep)
        raw = dist.mode() if eval else dist.sample(key)
        return dist.to_action(raw), params, memory

    agent = Agent(
        init=init,
        policy=policy,
        update=lambda trajectory, params, memory: (params, memory, {}),
        reset_memory=lambda memory, eval=False: memory,
    )
    return agent, actor_critic.init


def _cooperation(metrics: dict[str, jax.Array]) -> jax.Array:
    """Each agent's expected cooperation rate over an inner episode, ``(n,)``: its P(C) in each
    state weighted by its visits to that state."""
    return sum(metrics[f"cooperation_{state}"] * metrics[f"visits_{state}"] for state in watchers.STATE_NAMES)  # type: ignore[return-value]


def _game_and_meta_agent(
    config: MetaConfig, env: Any = None, env_params: Any = None
) -> tuple[Any, Any, Agent, Callable[[jax.Array], Any]]:
    """``(env, env_params, meta_agent, init_params)`` after checking the env is a two-player
    iterated matrix game, CoinGame or IPD-in-the-Matrix (``config.env_id``'s, unless ``env`` is
    given: a bare env, its inner episodes already ``num_inner_steps`` long)."""
    config.validate()
    if env is None:
        with jax.ensure_compile_time_eval():
            player_count = {"num_players": config.num_players} if config.num_players else {}
            try:
                env, env_params = lamella.envs.make(
                    config.env_id, autoreset=False, num_inner_steps=config.num_inner_steps, **player_count
                )
            except (KeyError, TypeError, ValueError) as error:
                message = str(error.args[0]) if error.args else str(error)
                if player_count:
                    message += (
                        f" (MetaConfig.num_players={config.num_players}: only an n-player game such as "
                        "'IteratedTensorGame-v0' takes it; leave it at 0 for the two-player games.)"
                    )
                raise ConfigError(message) from None
    else:
        lamella.envs.check_env_object(env, env_params, "make_meta_runner")
        if env_params is None:
            env_params = env.default_params
    action_space = env.action_space(env_params)
    flat = isinstance(env.observation_space(env_params), spaces.Dict)
    if flat:
        env = flatten_agent_observations(env, env_params)
    observation_space = env.observation_space(env_params)
    matrix_game = not flat and tuple(observation_space.shape) == (2, len(watchers.STATE_NAMES))
    players = len(action_space.nvec) if isinstance(action_space, spaces.MultiDiscrete) else 0
    tensor_game = (
        not flat
        and not matrix_game
        and players >= 2
        and all(int(n) == 2 for n in action_space.nvec)
        and tuple(observation_space.shape) == (players, 2**players + 1)
    )
    if not (
        isinstance(action_space, spaces.MultiDiscrete)
        and len(observation_space.shape) == 2
        and (
            tensor_game
            or (
                players == 2
                and (matrix_game or _game_info(env, env_params) in ("coin_game", "in_the_matrix"))
            )
        )
    ):
        raise ConfigError(
            f"MetaConfig.env_id must name a two-player iterated matrix game (observations (2, 5), "
            f"e.g. 'IteratedPrisonersDilemma-v0'), CoinGame ('CoinGame-v0'), IPD-in-the-Matrix "
            f"('IPDInTheMatrix-v0') or the n-player 'IteratedTensorGame-v0'; {config.env_id!r} has "
            f"observations {_describe_observations(env, env_params)}."
        )
    if config.meta_roles > players:
        raise ConfigError(
            f"MetaConfig.meta_roles ({config.meta_roles}) is more than {config.env_id}'s {players} players; "
            f"set meta_roles to 1..{players} ({players}: self-play, the meta-agent in every seat)"
            + (", or num_players to a larger game." if tensor_game else ".")
        )
    view = (
        view_layout(env, env_params, f"MetaConfig.meta_torso='cnn' (env {config.env_id})")
        if config.meta_torso == "cnn"
        else None
    )
    if config.torso == "cnn":  # the co-players' (make_shaping_runner checks it too, later)
        view_layout(env, env_params, f"MetaConfig.torso='cnn' (env {config.env_id})")
    meta_agent, network_init = make_meta_agent(config, spaces.Discrete(int(action_space.nvec[0])), view)

    def init_params(key: jax.Array) -> Any:
        return network_init(key, jnp.zeros((1, *observation_space.shape[1:]), jnp.float32))

    return env, env_params, meta_agent, init_params


def _game_info(env: Any, env_params: Any) -> str:
    """``"coin_game"`` when the env reports CoinGame's coin counts in its ``info``,
    ``"in_the_matrix"`` when it reports IPD-in-the-Matrix's interactions and held coins, else
    ``""`` (from shapes: nothing runs)."""

    def probe_info(key: jax.Array) -> dict[str, Any]:
        _, state = env.reset(key, env_params)
        return env.step(key, state, jnp.zeros((int(env.num_agents),), jnp.int32), env_params)[5]

    info = jax.eval_shape(probe_info, jax.random.key(0))
    if "own_coins" in info and "other_coins" in info:
        return "coin_game"
    if all(name in info for name in watchers.IN_THE_MATRIX_INFO):
        return "in_the_matrix"
    return ""


def _describe_observations(env: Any, env_params: Any) -> str:
    space = env.observation_space(env_params)
    inner = getattr(env, "env", None)
    if inner is not None and isinstance(inner.observation_space(env_params), spaces.Dict):
        space = inner.observation_space(env_params)
    return repr(space) if isinstance(space, spaces.Dict) else str(tuple(space.shape))


def _inner_game(
    config: MetaConfig, env: Any = None, env_params: Any = None
) -> tuple[Runner, Callable[[Any, jax.Array], Any], Callable[[jax.Array], Any], int]:
    """``(inner, start, init_params, num_players)``: the shaping runner of an outer episode's
    inner episodes (the meta-agent fixed in its seats, PPO co-players in the others),
    ``start(params, key)``, the inner runner's state where an outer episode starts (the
    meta-agent's ``params`` in its seats), fresh meta-agent parameters, and the game's seats."""
    env, env_params, meta_agent, init_params = _game_and_meta_agent(config, env, env_params)
    num_players, roles = int(env.num_agents), config.meta_roles
    inner = make_shaping_runner(
        config.co_player_config(),
        env,
        env_params,
        agents=[meta_agent] * roles + [LEARNER] * (num_players - roles),
        require_learner=roles < num_players,
    )

    def start(params: Any, key: jax.Array) -> Any:
        state = inner.init(key)
        # Seat 0 has one instance; every other seat num_opponents (the same parameters each).
        seats = tuple(
            jax.tree.map(
                lambda x, copies=(1 if i == 0 else config.num_opponents): jnp.stack([x] * copies), params
            )
            for i in range(roles)
        )
        return state.replace(train_states=(*seats, *state.train_states[roles:]))

    return inner, start, init_params, num_players


def make_outer_episode(
    config: MetaConfig, env: Any = None, env_params: Any = None
) -> tuple[Callable[[Any, jax.Array], dict[str, jax.Array]], Callable[[jax.Array], Any]]:
    """``(outer_episode, init_params)``.

    ``outer_episode(params, key) -> metrics``: the meta-agent with ``params`` against fresh
    co-players over ``num_outer_steps`` inner episodes. Metrics, float32: ``meta_return`` and
    ``co_player_return`` (mean reward per round over the outer episode), ``meta_cooperation`` and
    ``co_player_cooperation`` (mean cooperation rates), ``co_player_cooperation_per_episode``
    ``(num_outer_steps,)`` and ``co_player_return_per_episode`` ``(num_outer_steps,)`` (each inner
    episode's), ``co_player_first_minibatch_kl`` ``(num_outer_steps,)`` (each update's
    ``first_minibatch_kl``, the co-players' mean: the policy its first minibatch recomputes against
    the one the co-player acted with, 0 up to float error). ``init_params(key)``: fresh
    meta-agent parameters.
    """
    inner, start, init_params, num_players = _inner_game(config, env, env_params)
    return _outer_episode(config, inner, start, num_players), init_params


def _outer_episode(
    config: MetaConfig, inner: Runner, start: Callable[[Any, jax.Array], Any], num_players: int
) -> Callable[[Any, jax.Array], dict[str, jax.Array]]:
    """:func:`make_outer_episode`'s ``outer_episode`` on the inner game of :func:`_inner_game`."""
    roles = config.meta_roles
    # The co-players' seats; in self-play the meta-agent's copies after seat 0.
    others = slice(roles, num_players) if roles < num_players else slice(1, num_players)

    def outer_episode(params: Any, key: jax.Array) -> dict[str, jax.Array]:
        state = start(params, key)
        _, metrics = jax.lax.scan(lambda s, _: inner.step(s), state, None, length=config.num_outer_steps)
        reward = metrics["reward"]  # (K, n): mean reward per round of each inner episode
        # (K, n): expected P(C) on a matrix game, the own-coin share on CoinGame (Pax's "coop"),
        # the cooperate-coin share of the inventories at interactions on IPD-in-the-Matrix (Pax's
        # ipditm "ratio"), the fraction of cooperating rounds on a tensor game.
        if "cooperation_CC" in metrics:
            cooperation = jax.vmap(_cooperation)(metrics)
        elif "own_coin_share" in metrics:
            cooperation = metrics["own_coin_share"]
        elif "cooperation_rate" in metrics:
            cooperation = metrics["cooperation_rate"]
        else:
            cooperation = metrics["cooperate_coin_share"]
        learners = range(roles, num_players)
        kl = (
            jnp.stack([metrics[f"learner_{i}_first_minibatch_kl"] for i in learners]).mean(0)
            if roles < num_players
            else jnp.zeros((config.num_outer_steps,), jnp.float32)
        )
        return {
            "meta_return": reward[:, :roles].mean(),
            "co_player_return": reward[:, others].mean(),
            "meta_cooperation": cooperation[:, :roles].mean(),
            "co_player_cooperation": cooperation[:, others].mean(),
            "co_player_cooperation_per_episode": cooperation[:, others].mean(1),
            "co_player_return_per_episode": reward[:, others].mean(1),
            "co_player_first_minibatch_kl": kl,
        }

    return outer_episode


def draw_meta_seats(
    key: jax.Array, generation: jax.typing.ArrayLike, num_generations: int, num_players: int
) -> jax.Array:
    """The meta-agent's seat count for one generation of annealed self-play, int32 ``()``.

    Each of the ``num_players`` seats plays the meta-agent with probability ``generation /
    num_generations`` (Pax's ``self_play_prob``: 0 at generation 0, ``(G - 1) / G`` at the last),
    independently; the count is at least 1: ``max(1, Binomial(num_players, p))``.
    """
    probability = jnp.asarray(generation, jnp.float32) / num_generations
    meta_seats = jax.random.bernoulli(key, probability, (num_players,))
    return jnp.maximum(meta_seats.sum(dtype=jnp.int32), 1)


def _outer_episode_by_seats(
    config: MetaConfig, env: Any = None, env_params: Any = None
) -> tuple[Callable[[Any, jax.Array, jax.Array], dict[str, jax.Array]], int]:
    """``(outer_episode(params, key, meta_seats), num_players)``: the outer episode of
    :func:`make_outer_episode` with the meta-agent in the first ``meta_seats`` seats, an int32
    scalar from 1 to the game's player count. One outer episode per count, chosen by
    ``lax.switch``: traced once each, and only the drawn one runs (under a ``vmap`` whose seat count
    is batched, e.g. over seeds, every one runs and the drawn one's results are kept)."""
    env, env_params, _, _ = _game_and_meta_agent(config, env, env_params)
    num_players = int(env.num_agents)
    episodes = [
        make_outer_episode(
            dataclasses.replace(config, meta_roles=seats, self_play_anneal=False), env, env_params
        )[0]
        for seats in range(1, num_players + 1)
    ]

    def outer_episode(params: Any, key: jax.Array, meta_seats: jax.Array) -> dict[str, jax.Array]:
        return jax.lax.switch(meta_seats - 1, episodes, params, key)

    return outer_episode, num_players


def make_meta_runner(config: MetaConfig, env: Any = None, env_params: Any = None) -> Runner:
    """A :class:`~lamella.agents.runner.Runner`: one generation of the search per iteration.

    Step metrics (float32 scalars, population means): ``episode_return`` (the meta-agent's mean
    reward per round, the fitness), ``max_return`` (the best member's), ``co_player_return``,
    ``meta_cooperation``, ``co_player_cooperation`` (mean cooperation rates over the outer
    episode), ``co_player_cooperation_first`` / ``_last`` (in its first and last inner episode),
    ``co_player_update_kl`` (the largest ``|co_player_first_minibatch_kl|`` over the members and
    inner episodes: 0 up to float error when each co-player's update recomputes the policy it
    acted with, memory included), ``loss`` (``-episode_return``). ``evaluate(state, key)`` plays
    the strategy's centre for ``eval_episodes`` outer episodes (fresh co-players each) and
    returns ``episode_return``, ``co_player_return``, ``co_player_cooperation_first`` and
    ``co_player_cooperation_last``, each float32 ``(eval_episodes,)``. With
    ``config.self_play_anneal`` the step metrics add ``meta_seats`` (float32: the generation's
    drawn seat count, :func:`draw_meta_seats`); the fitness is the meta-agent's mean over its seats
    and the ``co_player_*`` metrics the other seats' (in a generation that draws every seat: the
    copies' in seats ``1..n-1``).

    The runner splits its population over devices (``Runner.sharding``, the driver's
    ``num_devices``), as :func:`lamella.marl.shaping.evolution.make_meta_es_runner` does: the
    search's ``ask`` and ``tell`` replicated, each device plays the outer episodes of its block
    of ``population_size / num_devices`` members, and every member's results are gathered.

    ``env`` (with ``env_params``, default its own) replaces ``config.env_id``'s env: a bare
    two-player env of a kind the runner takes (an iterated matrix game, CoinGame or the Matrix,
    possibly wrapped, e.g. in :class:`~lamella.marl.shaping.observations.TheftMemory`) whose
    inner episodes are already ``num_inner_steps`` long; ``config.env_id`` then only names the
    task in the run log.
    """
    check_config_type(config, MetaConfig, "make_meta_runner", algorithm="meta_es")
    return _meta_runner(config, DeviceAxis(), env, env_params)


def _meta_runner(config: MetaConfig, devices: DeviceAxis, env: Any = None, env_params: Any = None) -> Runner:
    """The meta runner for one device's block of the population (all of it on one device)."""
    _, _, _, init_params = _game_and_meta_agent(config, env, env_params)
    devices.local(config.population_size, "population_size")
    try:
        search = make_search(
            config.strategy,
            config.population_size,
            # A template of the parameters' shapes (nothing runs; the search starts from init's).
            jax.tree.map(
                lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(init_params, jax.random.key(0))
            ),
            config.sigma_init,
            config.es_learning_rate,
            config.fitness_shaping,
        )
    except ValueError as error:
        raise ConfigError(f"MetaConfig: {error}") from None
    inner, start, _, seats = _inner_game(config, env, env_params)
    outer_episode = _outer_episode(config, inner, start, seats)
    if config.self_play_anneal:
        annealed_episode, num_players = _outer_episode_by_seats(config, env, env_params)

    def summary(results: dict[str, jax.Array]) -> dict[str, jax.Array]:
        per_episode = results["co_player_cooperation_per_episode"]
        return {
            "episode_return": results["meta_return"],
            "co_player_return": results["co_player_return"],
            "meta_cooperation": results["meta_cooperation"],
            "co_player_cooperation": results["co_player_cooperation"],
            "co_player_cooperation_first": per_episode[..., 0],
            "co_player_cooperation_last": per_episode[..., -1],
            "co_player_update_kl": jnp.abs(results["co_player_first_minibatch_kl"]).max(-1),
        }

    def init(key: jax.Array) -> MetaESState:
        key, key_net, key_search = jax.random.split(key, 3)
        return MetaESState(search.init(key_search, init_params(key_net)), key, jnp.zeros((), jnp.int32))

    def step(state: MetaESState) -> tuple[MetaESState, dict[str, jax.Array]]:
        seat_metrics: dict[str, jax.Array] = {}
        if config.self_play_anneal:
            key, key_ask, key_play, key_tell, key_seats = jax.random.split(state.key, 5)
            meta_seats = draw_meta_seats(key_seats, state.iteration, config.num_iterations, num_players)
            seat_metrics["meta_seats"] = meta_seats.astype(jnp.float32)
        else:  # the fixed seats' keys as before self_play_anneal existed
            key, key_ask, key_play, key_tell = jax.random.split(state.key, 4)
        population, search_state = search.ask(key_ask, state.search_state)
        # Every member meets the same co-player seeds (common random numbers); each device plays
        # its block of members, then holds every member's results. The seat count is the same for
        # every member (unbatched here), so lax.switch runs one outer episode.
        if config.self_play_anneal:
            played = jax.vmap(annealed_episode, in_axes=(0, None, None))(
                devices.take(population), key_play, meta_seats
            )
        else:
            played = jax.vmap(outer_episode, in_axes=(0, None))(devices.take(population), key_play)
        results = summary(devices.gather(played))
        returns = results["episode_return"]
        search_state, _ = search.tell(key_tell, population, returns, search_state)
        metrics = {name: value.mean() for name, value in results.items()}
        metrics["co_player_update_kl"] = results["co_player_update_kl"].max()
        metrics["max_return"] = returns.max()
        metrics["loss"] = -metrics["episode_return"]
        metrics.update(seat_metrics)
        return MetaESState(search_state, key, state.iteration + 1), metrics

    def evaluate(state: MetaESState, key: jax.Array) -> dict[str, jax.Array]:
        params = search.center(state.search_state)
        keys = jax.random.split(key, config.eval_episodes)
        results = summary(jax.vmap(outer_episode, in_axes=(None, 0))(params, keys))
        return {
            name: results[name]
            for name in (
                "episode_return",
                "co_player_return",
                "co_player_cooperation_first",
                "co_player_cooperation_last",
            )
        }

    def render_episode(state: MetaESState, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        # The last inner episode of an outer episode of the strategy's centre (the co-players
        # after num_outer_steps - 1 updates: what co_player_cooperation_last measures).
        key_start, key_draw = jax.random.split(key)
        inner_state = start(search.center(state.search_state), key_start)
        inner_state, _ = jax.lax.scan(
            lambda s, _: (inner.step(s)[0], None), inner_state, None, length=config.num_outer_steps - 1
        )
        assert inner.render_episode is not None  # the shaping runner draws its episodes
        return inner.render_episode(inner_state, key_draw)

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        render_episode=render_episode,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
        # Nothing in the state has a population axis: the members are drawn afresh each step.
        sharding=runner_sharding(
            devices,
            "population_size",
            config.population_size,
            lambda axis: _meta_runner(config, axis, env, env_params),
            lambda state: None,
        ),
    )
