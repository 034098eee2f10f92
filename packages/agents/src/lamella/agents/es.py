"""Evolution strategies on policy parameters, through evosax.

Any distribution-based evosax strategy works by name (``"Open_ES"``,
``"CMA_ES"``, ``"SNES"``, ``"PGPE"``, ``"xNES"``, ...; spelling is forgiving:
``"OpenES"``, ``"cma-es"`` and ``"snes"`` are found too). One iteration is one
generation: ``ask`` for a population of policy parameters, play
``num_rollouts`` greedy episodes with each member (one ``jax.vmap`` over the
population's parameters), ``tell`` the strategy the returns. evosax minimises,
so it is told the negated returns; fitness shaping (centred ranks,
standardisation, ...) is evosax's, chosen by name.

    runner = make_es_runner(ESConfig(env_id="CartPole-v1", strategy="SNES"))
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

import lamella.envs
from lamella.agents.config import (
    ConfigError,
    check_config_type,
    check_numbers,
    check_single_agent,
    is_swept,
    unused_settings_of,
)
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.distributions import ActionHead, check_action_space
from lamella.agents.networks import MLP, activation_by_name
from lamella.agents.protocol import Agent
from lamella.agents.runner import Runner, episode_frames, eval_max_steps, evaluate_agent, step_limit
from lamella.envs import spaces
from lamella.envs.wrappers import RunningMeanStd

__all__ = [
    "FITNESS_SHAPING",
    "ESConfig",
    "ESRunnerState",
    "ESTrainState",
    "PolicyNetwork",
    "construct_strategy",
    "make_es",
    "make_es_runner",
    "make_strategy",
    "strategy_names",
]

# Each fitness shaping's function in evosax.core.fitness_shaping.
_SHAPING_FUNCTIONS = {
    "centered_rank": "centered_rank_fitness_shaping_fn",
    "standardize": "standardize_fitness_shaping_fn",
    "normalize": "normalize_fitness_shaping_fn",
    "identity": "identity_fitness_shaping_fn",
}


class _FitnessShapings(Mapping[str, Any]):
    """``{name: evosax fitness-shaping function}``, looked up in evosax at first use (see
    :func:`_evosax`)."""

    def __getitem__(self, name: str) -> Any:
        return getattr(_evosax()[2], _SHAPING_FUNCTIONS[name])

    def __iter__(self) -> Iterator[str]:
        return iter(_SHAPING_FUNCTIONS)

    def __len__(self) -> int:
        return len(_SHAPING_FUNCTIONS)


#: The fitness shapings ``ESConfig.fitness_shaping`` names, ``{name: evosax function}``.
FITNESS_SHAPING: Mapping[str, Any] = _FitnessShapings()


def _evosax() -> tuple[Any, Any, Any]:
    """evosax's ``(algorithms, distribution-based algorithms, fitness_shaping module)``.

    Imported at first use: evosax computes arrays when imported, which starts JAX's back ends,
    and a process must join a many-host run (:mod:`lamella.agents.hosts`) before that, so
    importing lamella.agents must not.
    """
    from evosax.algorithms import algorithms, distribution_based_algorithms
    from evosax.core import fitness_shaping

    return algorithms, distribution_based_algorithms, fitness_shaping


def strategy_names() -> list[str]:
    """The evosax strategies :func:`make_strategy` accepts (distribution-based ones)."""
    return sorted(_evosax()[1])


def _canonical(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _resolve(name: str) -> str:
    algorithms, distribution_based, _ = _evosax()
    by_canonical = {_canonical(n): n for n in distribution_based}
    found = by_canonical.get(_canonical(name))
    if found is not None:
        return found
    if _canonical(name) in {_canonical(n) for n in algorithms}:
        raise ValueError(
            f"evosax strategy {name!r} is population-based (its init takes a population); lamella's ES "
            f"runner drives distribution-based strategies: {strategy_names()}."
        )
    raise ValueError(f"Unknown evosax strategy {name!r}; choose one of {strategy_names()}.")


@dataclasses.dataclass(frozen=True)
class ESConfig:
    """Settings of an evolution strategy on a feed-forward policy.

    Attributes:
        env_id: registered environment id.
        total_timesteps: budget in env steps, counted as the most a generation
            can use (``population_size * num_rollouts * max_episode_steps``).
        eval_episodes: episodes of each greedy evaluation of the strategy's mean.
        eval_max_steps: step cap of an evaluation (0: the env's limit, else 1000).
        strategy: an evosax strategy name (see :func:`strategy_names`).
        population_size: members per generation (even for antithetic strategies).
        num_rollouts: episodes per member per generation (fitness = mean return).
        sigma_init: initial standard deviation of the search distribution (> 0).
        learning_rate: Adam step size, for strategies that take an optimiser
            (Open_ES, PGPE, SNES, ...; set on the command line for another, it is refused).
        fitness_shaping: ``"default"`` (the strategy's own), ``"centered_rank"``,
            ``"standardize"``, ``"normalize"`` or ``"identity"``.
        weight_decay: L2 penalty on parameters added to the fitness (0: none).
        max_episode_steps: step cap of a fitness episode (0: the env's limit, else 1000).
        hidden_sizes: MLP widths of the policy.
        activation: activation name.
        continuous_action: ``"tanh"`` or ``"clip"`` for Box actions (the mean is played).
        normalize_observations: the policies see observations standardised by running
            statistics (mean and variance) of every observation the population acted on, as
            ARS and OpenAI's ES do; a generation's members share the statistics of the
            generations before it, and the strategy's mean is evaluated with them.
    """

    env_id: str = "CartPole-v1"
    total_timesteps: int = 1_600_000
    eval_episodes: int = 16
    eval_max_steps: int = 0
    strategy: str = "SNES"
    population_size: int = 32
    num_rollouts: int = 2
    sigma_init: float = 0.1
    learning_rate: float = 0.05
    fitness_shaping: str = "default"
    weight_decay: float = 0.0
    max_episode_steps: int = 0
    hidden_sizes: tuple[int, ...] = (16,)
    activation: str = "tanh"
    continuous_action: str = "tanh"
    normalize_observations: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        _resolve(self.strategy)
        check_numbers(self)
        for name in ("population_size", "num_rollouts", "eval_episodes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ESConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if int(self.max_episode_steps) < 0:  # was the env's limit, as 0 is
            raise ConfigError(
                f"ESConfig.max_episode_steps must be >= 0 (a step cap: 0 for the env's own limit, else a "
                f"positive number of steps), got {self.max_episode_steps}."
            )
        # 0 searches nothing (every member is the mean); a traced value is a sweep's, checked plain first.
        if not is_swept(self.sigma_init) and not 0.0 < float(self.sigma_init) < math.inf:
            raise ConfigError(
                f"ESConfig.sigma_init must be > 0 and finite (the search distribution's initial standard "
                f"deviation), got {float(self.sigma_init):g}; e.g. sigma_init=0.1."
            )
        if int(self.population_size) < 2:
            # One member has nothing to be ranked against: CMA-ES's state turns NaN, the others
            # follow the one sample's noise.
            raise ConfigError(
                f"ESConfig.population_size must be >= 2 (a strategy weighs its members against each "
                f"other), got {self.population_size}; e.g. population_size=32."
            )
        if self.fitness_shaping != "default" and self.fitness_shaping not in FITNESS_SHAPING:
            raise ValueError(
                f"ESConfig.fitness_shaping must be 'default' or one of {sorted(FITNESS_SHAPING)}, "
                f"got {self.fitness_shaping!r}."
            )
        activation_by_name(self.activation)

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: ``learning_rate`` with a strategy that takes no
        optimiser (CMA-ES, ...). ``lamella train`` refuses such a field set on the command line
        (:func:`~lamella.agents.config.check_unused_settings`)."""
        try:
            if _takes_optimizer(self.strategy):
                return {}
        except ValueError:  # an unknown strategy: validate names it
            return {}
        takes = ", ".join(name for name in strategy_names() if _takes_optimizer(name))
        return unused_settings_of(
            self,
            {"learning_rate": "is the step size of a strategy's Adam optimiser"},
            f"evosax {_resolve(self.strategy)} takes no optimiser",
            f"pick a strategy that takes one ({takes})",
        )


def _takes_optimizer(strategy: str) -> bool:
    """Whether the evosax strategy named ``strategy`` steps with an optimiser (``learning_rate``)."""
    return "optimizer" in inspect.signature(_evosax()[0][_resolve(strategy)].__init__).parameters


class PolicyNetwork(nn.Module):
    """MLP torso and an action head; ``__call__(obs) -> distribution``."""

    hidden_sizes: tuple[int, ...]
    activation: str
    action_space: Any
    squash: str = "tanh"

    @nn.compact
    def __call__(self, obs: jax.Array) -> Any:
        x = MLP(self.hidden_sizes, self.activation)(obs.astype(jnp.float32))
        return ActionHead(self.action_space, self.squash)(x)


def construct_strategy(name: str, population_size: int, build: Callable[[], Any]) -> Any:
    """``build()``, an evosax strategy's construction, with evosax's ``AssertionError`` on the
    population size (antithetic strategies need an even one) re-raised as a
    :class:`~lamella.agents.config.ConfigError` naming the fix."""
    try:
        return build()
    except AssertionError as error:
        hint = (
            f"use an even population_size (e.g. {population_size + 1})"
            if "even" in str(error).lower()
            else "choose a population_size the strategy accepts"
        )
        raise ConfigError(
            f"evosax {name} rejects population_size={population_size} ({error}); {hint}."
        ) from error


def make_strategy(config: ESConfig, solution: Any) -> tuple[Any, Any]:
    """The evosax strategy and its params for ``config``, searching over pytrees like ``solution``."""
    config.validate()
    algorithms, _, shaping_module = _evosax()
    cls = algorithms[_resolve(config.strategy)]
    accepted = inspect.signature(cls.__init__).parameters
    kwargs: dict[str, Any] = {}
    if _takes_optimizer(config.strategy):
        kwargs["optimizer"] = optax.adam(config.learning_rate)
    if "std_schedule" in accepted:
        kwargs["std_schedule"] = optax.constant_schedule(config.sigma_init)
    if config.fitness_shaping != "default" or config.weight_decay > 0:
        shaping = (
            FITNESS_SHAPING[config.fitness_shaping]
            if config.fitness_shaping != "default"
            else accepted["fitness_shaping_fn"].default
        )
        if config.weight_decay > 0:
            shaping = shaping_module.add_weight_decay(shaping, config.weight_decay)
        kwargs["fitness_shaping_fn"] = shaping
    strategy = construct_strategy(
        config.strategy,
        config.population_size,
        lambda: cls(population_size=config.population_size, solution=solution, **kwargs),
    )
    es_params = strategy.default_params
    if any(f.name == "std_init" for f in dataclasses.fields(es_params)):
        es_params = es_params.replace(std_init=config.sigma_init)
    return strategy, es_params


class ESTrainState(struct.PyTreeNode):
    """The strategy's state (search distribution, optimiser, best so far) and, with
    ``normalize_observations``, the running observation statistics (None without, so that
    checkpoints of runs without it keep their layout)."""

    es_state: Any
    obs_stats: RunningMeanStd | None = None


class ESRunnerState(struct.PyTreeNode):
    train_state: ESTrainState
    key: jax.Array
    iteration: jax.Array  # int32 ()


def make_es(
    config: ESConfig, observation_space: spaces.Space, action_space: spaces.Space
) -> tuple[Agent, Agent, Any, Any]:
    """ES as Agents: ``(agent, member_agent, strategy, es_params)``.

    ``agent`` acts with the strategy's mean and its ``update`` takes
    ``(population, returns, key)`` (returns: float32 ``(population_size,)``,
    higher is better) and tells the strategy; with ``normalize_observations`` it takes
    ``(population, returns, key, (observation_sum, observation_sum_sq, count))`` and also adds
    those observations to its statistics. ``member_agent`` acts with ``(params, obs_stats)``
    as its train state: one member's network parameters and the statistics it sees through
    (None without normalisation); the runner vmaps it over the population's parameters.
    """
    config.validate()
    check_action_space(action_space, config.continuous_action)
    network: Any = PolicyNetwork(
        tuple(config.hidden_sizes), config.activation, action_space, config.continuous_action
    )
    obs_zero = jnp.zeros((1, *observation_space.shape), jnp.float32)
    # The strategy reads only the parameters' shapes from its template: zeros of the traced
    # shapes, without running the network's initialisers op by op (seconds of compiles).
    shapes = jax.eval_shape(network.init, jax.random.key(0), obs_zero)
    solution = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    strategy, es_params = make_strategy(config, solution)

    def fresh_stats() -> RunningMeanStd | None:
        return RunningMeanStd.zeros(observation_space.shape) if config.normalize_observations else None

    def act(params: Any, obs_stats: RunningMeanStd | None, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)
        dist = network.apply(params, x if obs_stats is None else obs_stats.normalize(x))
        return dist.to_action(dist.mode())

    def member_policy(key: jax.Array, member: Any, obs: jax.Array, memory: Any, eval: bool = False) -> Any:
        params, obs_stats = member
        return act(params, obs_stats, obs), member, memory

    def no_update(trajectory: Any, train_state: Any, memory: Any) -> tuple[Any, Any, dict[str, jax.Array]]:
        return train_state, memory, {}

    def reset_memory(memory: Any, eval: bool = False) -> tuple[()]:
        return ()

    def member_init(key: jax.Array, obs_example: Any = None) -> tuple[Any, tuple[()]]:
        return (network.init(key, obs_zero), fresh_stats()), ()

    member_agent = Agent(init=member_init, policy=member_policy, update=no_update, reset_memory=reset_memory)

    def init(key: jax.Array, obs_example: Any = None) -> tuple[ESTrainState, tuple[()]]:
        key_net, key_es = jax.random.split(key)
        mean = network.init(key_net, obs_zero)
        return ESTrainState(strategy.init(key_es, mean, es_params), fresh_stats()), ()

    def policy(
        key: jax.Array, train_state: ESTrainState, obs: jax.Array, memory: Any, eval: bool = False
    ) -> Any:
        return act(strategy.get_mean(train_state.es_state), train_state.obs_stats, obs), train_state, memory

    def update(
        trajectory: Any, train_state: ESTrainState, memory: Any
    ) -> tuple[Any, Any, dict[str, jax.Array]]:
        population, returns, key, *observations = trajectory
        obs_stats = train_state.obs_stats
        if obs_stats is not None and not observations:
            raise ValueError(
                "ES with normalize_observations: agent.update takes (population, returns, key, "
                "(observation_sum, observation_sum_sq, count)); the observations are missing."
            )
        es_state, es_metrics = strategy.tell(key, population, -returns, train_state.es_state, es_params)
        metrics = {"best_return": -es_metrics["best_fitness"].astype(jnp.float32)}
        if obs_stats is not None:
            total, total_sq, count = observations[0]
            count = jnp.asarray(count, jnp.float32)
            # No observations (count 0) leaves the statistics as they are.
            mean = total / jnp.maximum(count, 1.0)
            var = jnp.maximum(total_sq / jnp.maximum(count, 1.0) - jnp.square(mean), 0.0)
            obs_stats = obs_stats.update_from_moments(mean, var, count)
        return ESTrainState(es_state, obs_stats), memory, metrics

    agent = Agent(init=init, policy=policy, update=update, reset_memory=reset_memory)
    return agent, member_agent, strategy, es_params


def make_es_runner(config: ESConfig) -> Runner:
    """A :class:`~lamella.agents.runner.Runner`: one generation per iteration.

    The runner splits its population over devices (``Runner.sharding``, the driver's
    ``num_devices``): every device asks the strategy for the whole population (the same key
    and state give the same members), plays the episodes of its block of ``population_size /
    num_devices`` members, and gathers every member's return, so that each device tells the
    strategy the same returns and keeps the same strategy state. The members' episodes are the
    expensive part and independent of each other; ``ask`` and ``tell`` are cheap, so they stay
    replicated.
    """
    check_config_type(config, ESConfig, "make_es_runner", algorithm="es")
    return _es_runner(config, DeviceAxis())


def _es_runner(config: ESConfig, devices: DeviceAxis) -> Runner:
    """ES's runner for one device's block of the population (all of it on one device)."""
    config.validate()
    devices.local(config.population_size, "population_size")
    with jax.ensure_compile_time_eval():
        env, env_params = lamella.envs.make(config.env_id)
        check_single_agent(env, "es", config.env_id, "ippo or mappo")
        observation_space, action_space = env.observation_space(env_params), env.action_space(env_params)
    agent, member_agent, strategy, es_params = make_es(config, observation_space, action_space)
    episode_steps = step_limit(config.max_episode_steps, env_params)
    eval_steps = eval_max_steps(config, env_params)
    steps_per_iteration = config.population_size * config.num_rollouts * episode_steps
    num_iterations = config.total_timesteps // steps_per_iteration
    if num_iterations < 1:
        raise ValueError(
            f"ESConfig.total_timesteps ({config.total_timesteps}) is less than one generation "
            f"(population_size * num_rollouts * max_episode_steps = {steps_per_iteration}); raise it."
        )

    def fitness(member: Any, key: jax.Array) -> dict[str, jax.Array]:
        return evaluate_agent(
            member_agent,
            member,
            env,
            env_params,
            key,
            config.num_rollouts,
            episode_steps,
            (),
            greedy=True,
            observation_moments=config.normalize_observations,
        )

    def init(key: jax.Array) -> ESRunnerState:
        key, key_init = jax.random.split(key)
        train_state, _ = agent.init(key_init)
        return ESRunnerState(train_state, key, jnp.zeros((), jnp.int32))

    def step(state: ESRunnerState) -> tuple[ESRunnerState, dict[str, jax.Array]]:
        key, key_ask, key_eval, key_tell = jax.random.split(state.key, 4)
        population, es_state = strategy.ask(key_ask, state.train_state.es_state, es_params)
        # Every member plays the same episodes (common random numbers); each device plays
        # those of its block of members, and every device then holds every member's return.
        obs_stats = state.train_state.obs_stats
        members = (devices.take(population), obs_stats)
        results = jax.vmap(fitness, in_axes=((0, None), None))(members, key_eval)
        returns = devices.gather(results["episode_return"].mean(-1))
        trajectory: tuple[Any, ...] = (population, returns, key_tell)
        if obs_stats is not None:
            # Every observation the members acted on this generation, summed over devices.
            observations = (
                results["observation_sum"].sum((0, 1)),
                results["observation_sum_sq"].sum((0, 1)),
                results["episode_length"].sum().astype(jnp.float32),
            )
            trajectory = (*trajectory, devices.sum(observations))
        train_state, _, metrics = agent.update(trajectory, ESTrainState(es_state, obs_stats), ())
        metrics = {
            **metrics,
            "episode_return": returns.mean(),
            "max_return": returns.max(),
            "loss": -returns.mean(),
            "env_steps": devices.sum(results["episode_length"].sum()).astype(jnp.float32),
        }
        return ESRunnerState(train_state, key, state.iteration + 1), metrics

    def evaluate(state: ESRunnerState, key: jax.Array) -> dict[str, jax.Array]:
        return evaluate_agent(
            agent, state.train_state, env, env_params, key, config.eval_episodes, eval_steps, (), greedy=True
        )

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        steps_per_iteration=steps_per_iteration,
        num_iterations=num_iterations,
        # One greedy episode of the search's mean drawn with the env's render (lamella train
        # --gif, lamella eval report).
        render_episode=lambda state, key: episode_frames(
            agent, state.train_state, env, env_params, key, eval_steps, ()
        ),
        # Nothing in the state has a population axis: the members are drawn afresh each step.
        sharding=runner_sharding(
            devices,
            "population_size",
            config.population_size,
            lambda axis: _es_runner(config, axis),
            lambda state: None,
        ),
    )
