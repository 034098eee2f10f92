"""Evolved meta-agents on the infinite matrix game (M-FOS with evolution strategies).

The meta-agent is a small network that reads ``[own policy, other's policy]``
(10 cooperation probabilities: the two memory-one policies just played) and
returns its next memory-one policy (five logits) at every outer step. Its
co-player is a learner from :mod:`lamella.marl.shaping.exact` (a naive learner
by default) that takes one exact-gradient step against the meta-agent's policy
per outer step. An outer episode is ``num_outer_steps`` such steps; a member's
fitness is the meta-agent's mean per-step exact value over the episode,
averaged over ``num_envs`` games against ``num_opps`` freshly drawn opponents.

An evosax strategy searches over the network's parameters, one generation per
runner iteration: ``ask`` a population, play every member's games (the
population, the opponents and the games are vmapped axes, and the opponents'
learning steps run inside the same compiled program), ``tell`` the negated
fitness (evosax minimises). Distribution-based strategies (``Open_ES``,
``CMA_ES``, ``PGPE``, ``SNES``, ...) are built by
:func:`lamella.agents.es.make_strategy`; population-based ones
(``SimpleGA``, ...) start from a population drawn around the initial network.

    import jax
    from lamella.agents.runner import make_train
    from lamella.marl.shaping.evolution import MetaESConfig, make_meta_es_runner

    runner = make_meta_es_runner(MetaESConfig(strategy="Open_ES", total_timesteps=2_000_000))
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from evosax.algorithms import algorithms as _EVOSAX_ALGORITHMS
from evosax.algorithms import distribution_based_algorithms as _DISTRIBUTION_BASED
from evosax.core.fitness_shaping import weights_fitness_shaping_fn as _weights_shaping
from flax import struct

import lamella.envs
from lamella.agents.config import check_config_type, check_numbers, is_swept, unused_settings_of
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.es import FITNESS_SHAPING, ESConfig, construct_strategy, make_strategy
from lamella.agents.fixed import make_scripted_agent
from lamella.agents.networks import MLP, activation_by_name
from lamella.agents.runner import Runner, episode_frames
from lamella.envs.multi_agent.infinite_matrix_game import InfiniteMatrixGame
from lamella.envs.multi_agent.matrix_game import check_payoff
from lamella.marl.shaping.exact import (
    POLICY_SIZE,
    ExactGame,
    ExactLearner,
    exact_values,
    make_lola_learner,
    make_naive_learner,
)

__all__ = [
    "OPPONENTS",
    "MetaESConfig",
    "MetaESState",
    "MetaPolicy",
    "Search",
    "make_meta_es_runner",
    "make_meta_fitness",
    "make_search",
    "search_names",
]

OBS_SIZE = 2 * POLICY_SIZE
#: Learners the meta-agent can face, by name: ``name -> (lr -> ExactLearner)``.
OPPONENTS: dict[str, Callable[[float], ExactLearner]] = {
    "naive": lambda lr: make_naive_learner(lr),
    "lola": lambda lr: make_lola_learner(lr),
}


def takes_optimizer(strategy: str) -> bool:
    """Whether :func:`make_search` gives the evosax strategy ``strategy`` an Adam optimiser (whose
    step size is the configs' ``learning_rate`` / ``es_learning_rate``): the distribution-based
    strategies whose constructor takes one (``Open_ES``, ``PGPE``, ``SNES``, ...), not ``CMA_ES``
    or the genetic algorithms."""
    name = _resolve(strategy)
    return (
        name in _DISTRIBUTION_BASED
        and "optimizer" in inspect.signature(_EVOSAX_ALGORITHMS[name].__init__).parameters
    )


def unread_learning_rate(config: Any, field: str) -> dict[str, str]:
    """``{field: message}`` when ``config``'s ``strategy`` takes no optimiser, so its ES step size
    ``field`` is never read (for a config's ``unused_settings()``; an unknown strategy: ``{}``,
    :func:`make_search` names the choices)."""
    try:
        if takes_optimizer(config.strategy):
            return {}
    except ValueError:
        return {}
    return unused_settings_of(
        config,
        {field: "is the Adam step size of the strategies that take an optimiser (Open_ES, PGPE, SNES, ...)"},
        f"evosax {_resolve(config.strategy)} takes no optimiser",
        "pick a strategy that takes one (e.g. strategy=Open_ES)",
    )


def search_names() -> list[str]:
    """Every evosax strategy name :func:`make_search` accepts (distribution- and population-based)."""
    return sorted(_EVOSAX_ALGORITHMS)


def _resolve(name: str) -> str:
    def canonical(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    found = {canonical(n): n for n in _EVOSAX_ALGORITHMS}.get(canonical(name))
    if found is None:
        raise ValueError(f"Unknown evosax strategy {name!r}; choose one of {search_names()}.")
    return found


@dataclasses.dataclass(frozen=True)
class MetaESConfig:
    """An evolved meta-agent against exact-gradient learners on the infinite matrix game.

    Attributes:
        env_id: ``"InfiniteMatrixGame-v0"`` (its payoff and discount are the defaults of
            ``payoff`` and ``gamma``).
        total_timesteps: budget in outer steps, counted as
            ``population_size * num_envs * num_outer_steps`` per generation.
        eval_episodes: outer episodes (one fresh opponent each) per evaluation of the
            strategy's centre.
        strategy: an evosax strategy name (:func:`search_names`): ``"Open_ES"``,
            ``"CMA_ES"``, ``"PGPE"``, ``"SimpleGA"``, ...
        population_size: members per generation (even for the antithetic ``Open_ES`` / ``PGPE``).
        num_opps: opponents per member per generation, each drawn afresh (``theta ~ N(0, 1)``).
        num_envs: games per member; each opponent plays ``num_envs // num_opps`` of them
            and learns from their mean gradient, so ``num_opps`` must divide ``num_envs``.
        num_outer_steps: outer steps (opponent updates) per outer episode.
        sigma_init: initial search scale (a distribution's std, a GA's mutation std).
        learning_rate: Adam step size of strategies that take an optimiser (Open_ES, PGPE, ...;
            :func:`takes_optimizer`); the others (CMA_ES, SimpleGA, ...) never read it (set on the
            command line for them, it is refused).
        fitness_shaping: ``"default"`` (the strategy's own: centred ranks for Open_ES and
            PGPE, recombination weights for CMA_ES, raw fitness for SimpleGA),
            ``"centered_rank"``, ``"standardize"``, ``"normalize"`` or ``"identity"``.
        hidden_sizes: MLP widths of the meta-agent.
        activation: activation name.
        opponent: ``"naive"`` or ``"lola"`` (:data:`OPPONENTS`).
        opponent_lr: the opponent's learning rate (on the unnormalised return, as in M-FOS).
        payoff: ``payoff[a_meta, a_opp] = (r_meta, r_opp)`` as 8 numbers in the order
            CC, CD, DC, DD (``payoff=-1,-1,-3,0,0,-3,-2,-2`` on the command line), or any
            array of shape ``(2, 2, 2)``; ``None``: the env's.
        gamma: discount of the infinite game; ``None``: the env's (0.96).
    """

    env_id: str = "InfiniteMatrixGame-v0"
    total_timesteps: int = 12_800_000
    eval_episodes: int = 16
    strategy: str = "Open_ES"
    population_size: int = 64
    num_opps: int = 4
    num_envs: int = 4
    num_outer_steps: int = 100
    sigma_init: float = 0.1
    learning_rate: float = 0.05
    fitness_shaping: str = "default"
    hidden_sizes: tuple[int, ...] = (16,)
    activation: str = "tanh"
    opponent: str = "naive"
    opponent_lr: float = 1.0
    payoff: tuple[float, ...] | None = None
    gamma: float | None = None

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting and how to fix it (a number out of its
        range, NaN or of the wrong type is lamella-agents' ``check_numbers``' ``ConfigError``, a
        ``ValueError``)."""
        check_numbers(self)
        _resolve(self.strategy)
        check_sigma_init(self.sigma_init, "MetaESConfig.sigma_init")
        for name in ("population_size", "num_opps", "num_envs", "num_outer_steps", "eval_episodes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"MetaESConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.num_envs % self.num_opps:
            raise ValueError(
                f"MetaESConfig: num_opps ({self.num_opps}) must divide num_envs ({self.num_envs}): each "
                f"opponent plays num_envs // num_opps games. Set num_envs to a multiple of num_opps "
                f"(e.g. num_envs={self.num_opps * max(1, round(self.num_envs / self.num_opps))})."
            )
        if self.fitness_shaping != "default" and self.fitness_shaping not in FITNESS_SHAPING:
            raise ValueError(
                f"MetaESConfig.fitness_shaping must be 'default' or one of {sorted(FITNESS_SHAPING)}, "
                f"got {self.fitness_shaping!r}."
            )
        if self.opponent not in OPPONENTS:
            raise ValueError(
                f"MetaESConfig.opponent must be one of {sorted(OPPONENTS)}, got {self.opponent!r}."
            )
        if self.payoff is not None:
            _payoff_array(self.payoff)
        if self.gamma is not None and not 0.0 <= float(self.gamma) < 1.0:
            raise ValueError(f"MetaESConfig.gamma must be in [0, 1), got {self.gamma}.")
        activation_by_name(self.activation)

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: ``learning_rate`` for a strategy that takes no
        optimiser (``lamella train mfos_es strategy=CMA_ES learning_rate=0.2`` is refused)."""
        return unread_learning_rate(self, "learning_rate")


class MetaPolicy(nn.Module):
    """``[own policy, other's policy]`` ``(..., 10)`` -> next policy's logits ``(..., 5)``."""

    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation)(obs.astype(jnp.float32))
        return nn.Dense(POLICY_SIZE)(x)


class Search(NamedTuple):
    """One evosax strategy behind one interface (fitness: higher is better).

    Attributes:
        init: ``init(key, params) -> state``, the search centred on ``params``.
        ask: ``ask(key, state) -> (population, state)``, a pytree with a leading population axis.
        tell: ``tell(key, population, fitness, state) -> (state, metrics)``.
        center: ``center(state) -> params``: the distribution's mean, or a GA's best member.
        strategy: the evosax strategy object; ``es_params``: its params.
    """

    init: Callable[[jax.Array, Any], Any]
    ask: Callable[[jax.Array, Any], tuple[Any, Any]]
    tell: Callable[[jax.Array, Any, jax.Array, Any], tuple[Any, dict[str, jax.Array]]]
    center: Callable[[Any], Any]
    strategy: Any
    es_params: Any


def check_sigma_init(sigma_init: Any, name: str = "sigma_init") -> None:
    """Raise ``ValueError`` unless ``sigma_init`` is a finite number > 0: a search scale of 0 draws
    every member at the centre (the search never moves) and a negative one is no scale. A traced
    value (a sweep's) is not checked."""
    if is_swept(sigma_init):
        return
    number = float(sigma_init)
    if not np.isfinite(number) or number <= 0:
        raise ValueError(
            f"{name} must be a finite number > 0 (the search's initial scale: a standard deviation), "
            f"got {number:g}; e.g. {name.rpartition('.')[2]}=0.1."
        )


def make_search(
    strategy: str,
    population_size: int,
    solution: Any,
    sigma_init: float = 0.1,
    learning_rate: float = 0.05,
    fitness_shaping: str = "default",
) -> Search:
    """A :class:`Search` over pytrees like ``solution`` with any evosax strategy.

    Distribution-based strategies come from :func:`lamella.agents.es.make_strategy`
    (the same settings as lamella-agents' ES); population-based ones (``SimpleGA``,
    ...) get a constant mutation scale ``sigma_init`` and an initial population
    drawn around ``solution``. ``learning_rate`` is the Adam step size of the strategies that take
    an optimiser (:func:`takes_optimizer`); the others do not read it.

    Raises:
        ValueError: an unknown strategy, a population size it rejects (odd for
            the antithetic ``Open_ES`` and ``PGPE``), or a fitness shaping that
            would replace a strategy's recombination weights (CMA_ES, SNES, ...),
            with the fix; a ``sigma_init`` that is not a finite number > 0.
    """
    name = _resolve(strategy)
    if int(population_size) < 1:
        raise ValueError(f"population_size must be >= 1, got {population_size}.")
    check_sigma_init(sigma_init)
    if fitness_shaping != "default" and fitness_shaping not in FITNESS_SHAPING:
        raise ValueError(
            f"fitness_shaping must be 'default' or one of {sorted(FITNESS_SHAPING)}, got {fitness_shaping!r}."
        )
    own_shaping = inspect.signature(_EVOSAX_ALGORITHMS[name].__init__).parameters.get("fitness_shaping_fn")
    if fitness_shaping != "default" and own_shaping is not None and own_shaping.default is _weights_shaping:
        raise ValueError(
            f"evosax {name} turns fitness into its recombination weights itself; another shaping "
            f"({fitness_shaping!r}) replaces them and the search diverges. Use fitness_shaping='default'."
        )
    if name in _DISTRIBUTION_BASED:
        config = ESConfig(
            strategy=name,
            population_size=int(population_size),
            sigma_init=sigma_init,
            learning_rate=learning_rate,
            fitness_shaping=fitness_shaping,
        )
        evo, es_params = make_strategy(config, solution)

        def init(key: jax.Array, params: Any) -> Any:
            return evo.init(key, params, es_params)

        center = evo.get_mean
    else:
        cls = _EVOSAX_ALGORITHMS[name]
        accepted = inspect.signature(cls.__init__).parameters
        kwargs: dict[str, Any] = {}
        if "std_schedule" in accepted:
            kwargs["std_schedule"] = optax.constant_schedule(sigma_init)
        if fitness_shaping != "default":
            kwargs["fitness_shaping_fn"] = FITNESS_SHAPING[fitness_shaping]
        evo = construct_strategy(
            name,
            population_size,
            lambda: cls(population_size=int(population_size), solution=solution, **kwargs),
        )
        es_params = evo.default_params

        def init(key: jax.Array, params: Any) -> Any:
            flat = evo._ravel_solution(params)
            noise = jax.random.normal(key, (int(population_size), flat.shape[0]), flat.dtype)
            population = jax.vmap(evo._unravel_solution)(flat + sigma_init * noise)
            # Unevaluated members rank last; the first generation's parents are all of them.
            fitness = jnp.full((int(population_size),), jnp.inf, jnp.float32)
            return evo.init(key, population, fitness, es_params)

        center = evo.get_best_solution

    def ask(key: jax.Array, state: Any) -> tuple[Any, Any]:
        return evo.ask(key, state, es_params)

    def tell(key: jax.Array, population: Any, fitness: jax.Array, state: Any) -> tuple[Any, dict[str, Any]]:
        return evo.tell(key, population, -fitness, state, es_params)

    return Search(init, ask, tell, center, evo, es_params)


def _payoff_array(payoff: Any, where: str = "MetaESConfig.payoff") -> Any:
    values = np.asarray(payoff, np.float32)
    # Eight numbers in the order CC, CD, DC, DD (each (r_meta, r_opp)), flat or (4, 2).
    if values.shape in ((8,), (4, 2)):
        values = values.reshape(2, 2, 2)
    return check_payoff(values, where)


def _game(config: MetaESConfig) -> ExactGame:
    with jax.ensure_compile_time_eval():
        env, env_params = lamella.envs.make(config.env_id, autoreset=False)
    if not isinstance(env.unwrapped, InfiniteMatrixGame):
        raise ValueError(
            f"MetaESConfig.env_id must name an InfiniteMatrixGame (e.g. 'InfiniteMatrixGame-v0'); "
            f"{config.env_id!r} is a {type(env.unwrapped).__name__}. The evolved meta-agents on finite games "
            "use the multi-agent RL runner."
        )
    gamma = env_params.gamma if config.gamma is None else config.gamma
    # Concrete arrays even when the runner is built inside a trace (lamella eval report draws
    # checkpoints' episodes so): the GIF's game reads the discount back with float() and the
    # payoff (an override too) with numpy.
    with jax.ensure_compile_time_eval():
        payoff = env_params.payoff if config.payoff is None else _payoff_array(config.payoff)
        return ExactGame.make(payoff, float(gamma))


def make_meta_fitness(
    config: MetaESConfig, network: MetaPolicy | None = None
) -> Callable[[Any, jax.Array], dict[str, jax.Array]]:
    """``fitness(params, key) -> metrics`` of one member: its outer episodes against fresh opponents.

    Each of ``num_opps`` opponents starts at ``theta ~ N(0, 1)`` and plays
    ``num_envs // num_opps`` games; each game starts from a random previous
    meta-policy (logits ``N(0, 1)``), against which every opponent takes one
    warm-up step (as M-FOS's reset does). Then, each outer step, the network
    maps every game's observation to a policy, both policies' exact values are
    recorded, the opponent steps on the mean gradient of its games, and the
    next observation is ``[meta policy, opponent policy]`` just played.

    Returns:
        ``meta_return`` / ``opponent_return``: float32 ``()``, the mean per-step
        values over the episode and all games; ``final_meta`` /
        ``final_opponent``: the same at the last outer step;
        ``opponent_policy``: float32 ``(num_opps, 5)``, the opponents' final
        cooperation probabilities.
    """
    config.validate()
    game = _game(config)
    opponent_game = game.swapped()
    net = network if network is not None else MetaPolicy(tuple(config.hidden_sizes), config.activation)
    learner = OPPONENTS[config.opponent](config.opponent_lr)
    num_opps, per_opp = config.num_opps, config.num_envs // config.num_opps

    def opponent_step(theta: jax.Array, meta_logits: jax.Array) -> jax.Array:
        # One opponent against its games: the mean of its per-game steps is its step on the mean gradient.
        return jax.vmap(learner.update, in_axes=(None, 0, None))(theta, meta_logits, opponent_game).mean(0)

    def fitness(params: Any, key: jax.Array) -> dict[str, jax.Array]:
        key_opp, key_meta = jax.random.split(key)
        theta = jax.vmap(learner.init)(jax.random.split(key_opp, num_opps))  # (num_opps, 5)
        previous = jax.random.normal(key_meta, (num_opps, per_opp, POLICY_SIZE))
        obs = jnp.concatenate(
            [jax.nn.sigmoid(previous), jnp.broadcast_to(jax.nn.sigmoid(theta)[:, None], previous.shape)], -1
        )
        theta = jax.vmap(opponent_step)(theta, previous)

        def outer_step(
            carry: tuple[jax.Array, jax.Array], _: None
        ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
            theta, obs = carry
            logits: jax.Array = net.apply(params, obs)  # type: ignore[assignment]  # (num_opps, per_opp, 5)
            values = jax.vmap(jax.vmap(exact_values, in_axes=(0, None, None)), in_axes=(0, 0, None))(
                logits, theta, game
            )
            new_theta = jax.vmap(opponent_step)(theta, logits)
            opp_policy = jnp.broadcast_to(jax.nn.sigmoid(theta)[:, None], logits.shape)
            obs = jnp.concatenate([jax.nn.sigmoid(logits), opp_policy], -1)
            return (new_theta, obs), values.mean((0, 1))

        (theta, _), values = jax.lax.scan(outer_step, (theta, obs), None, length=config.num_outer_steps)
        return {
            "meta_return": values[:, 0].mean(),
            "opponent_return": values[:, 1].mean(),
            "final_meta": values[-1, 0],
            "final_opponent": values[-1, 1],
            "opponent_policy": jax.nn.sigmoid(theta),
        }

    return fitness


class MetaESState(struct.PyTreeNode):
    """Runner state: the search's state, the RNG key and the generation counter (int32 ``()``)."""

    search_state: Any
    key: jax.Array
    iteration: jax.Array


def make_meta_es_runner(config: MetaESConfig) -> Runner:
    """A :class:`~lamella.agents.runner.Runner`: one ES generation per iteration.

    Step metrics (float32 scalars): ``episode_return`` (the population's mean
    fitness, the meta-agent's mean per-step value), ``max_return``,
    ``opponent_return`` (the opponents' mean per-step value), ``loss``
    (``-episode_return``). ``evaluate(state, key)`` plays the strategy's centre
    against ``eval_episodes`` fresh opponents (one game each) and returns
    ``episode_return`` and ``opponent_return`` per episode, float32 ``(eval_episodes,)``.

    The runner splits its population over devices (``Runner.sharding``, the driver's
    ``num_devices``), as lamella-agents' ES does: every device asks the strategy for the whole
    population (same key, same state, same members), plays the games of its block of
    ``population_size / num_devices`` members and gathers every member's results, so every
    device tells the strategy the same fitness and keeps the same search state.
    """
    check_config_type(config, MetaESConfig, "make_meta_es_runner", algorithm="mfos_es")
    return _meta_es_runner(config, DeviceAxis())


def _meta_es_runner(config: MetaESConfig, devices: DeviceAxis) -> Runner:
    """The meta-ES runner for one device's block of the population (all of it on one device)."""
    config.validate()
    devices.local(config.population_size, "population_size")
    network = MetaPolicy(tuple(config.hidden_sizes), config.activation)
    # The search only reads the parameters' shapes from its template: zeros of the traced
    # shapes, without running the network's initialisers op by op (seconds of compiles).
    shapes = jax.eval_shape(network.init, jax.random.key(0), jnp.zeros((OBS_SIZE,), jnp.float32))
    solution = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    search = make_search(
        config.strategy,
        config.population_size,
        solution,
        config.sigma_init,
        config.learning_rate,
        config.fitness_shaping,
    )
    fitness = make_meta_fitness(config, network)
    eval_fitness = make_meta_fitness(dataclasses.replace(config, num_opps=1, num_envs=1), network)
    steps_per_iteration = config.population_size * config.num_envs * config.num_outer_steps
    num_iterations = config.total_timesteps // steps_per_iteration
    if num_iterations < 1:
        raise ValueError(
            f"MetaESConfig.total_timesteps ({config.total_timesteps}) is less than one generation "
            f"(population_size * num_envs * num_outer_steps = {steps_per_iteration}); raise it."
        )

    def init(key: jax.Array) -> MetaESState:
        key, key_net, key_search = jax.random.split(key, 3)
        params = network.init(key_net, jnp.zeros((OBS_SIZE,), jnp.float32))
        return MetaESState(search.init(key_search, params), key, jnp.zeros((), jnp.int32))

    def step(state: MetaESState) -> tuple[MetaESState, dict[str, jax.Array]]:
        key, key_ask, key_play, key_tell = jax.random.split(state.key, 4)
        population, search_state = search.ask(key_ask, state.search_state)
        # Every member meets the same opponents (common random numbers); each device plays its
        # block of members, then holds every member's results.
        results = devices.gather(jax.vmap(fitness, in_axes=(0, None))(devices.take(population), key_play))
        returns = results["meta_return"]
        search_state, _ = search.tell(key_tell, population, returns, search_state)
        metrics = {
            "episode_return": returns.mean(),
            "max_return": returns.max(),
            "opponent_return": results["opponent_return"].mean(),
            "loss": -returns.mean(),
        }
        return MetaESState(search_state, key, state.iteration + 1), metrics

    def evaluate(state: MetaESState, key: jax.Array) -> dict[str, jax.Array]:
        params = search.center(state.search_state)
        keys = jax.random.split(key, config.eval_episodes)
        results = jax.vmap(eval_fitness, in_axes=(None, 0))(params, keys)
        return {"episode_return": results["meta_return"], "opponent_return": results["opponent_return"]}

    # The GIF's outer episode: the centre against one fresh opponent in the meta-game M-FOS-RL
    # plays, which steps as one game of the fitness does (imported here: mfos imports this module).
    from lamella.marl.shaping.mfos import LearningOpponentGame

    game = _game(config)
    meta_game = LearningOpponentGame(
        OPPONENTS[config.opponent](config.opponent_lr), game.payoff, float(game.gamma), config.num_outer_steps
    )

    def render_episode(state: MetaESState, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        params = search.center(state.search_state)

        def act(obs: jax.Array) -> jax.Array:
            logits: jax.Array = network.apply(params, obs)  # type: ignore[assignment]
            return jax.nn.sigmoid(logits)  # the next policy's cooperation probabilities

        policy = make_scripted_agent(act, batched=True)
        return episode_frames(
            policy, (), meta_game, meta_game.default_params, key, config.num_outer_steps, ()
        )

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        render_episode=render_episode,
        steps_per_iteration=steps_per_iteration,
        num_iterations=num_iterations,
        # Nothing in the state has a population axis: the members are drawn afresh each step.
        sharding=runner_sharding(
            devices,
            "population_size",
            config.population_size,
            lambda axis: _meta_es_runner(config, axis),
            lambda state: None,
        ),
    )
