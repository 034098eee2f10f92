"""Runners: one training iteration as a pure function, and ``make_train`` over it.

A :class:`Runner` is what every algorithm builds from its config
(``make_ppo_runner(config)``, ``make_es_runner(config)``). The driver runs
``runner.step`` in compiled chunks of iterations (``jax.vmap`` over seeds of a
``lax.scan``); :func:`make_train` is the same thing in one call::

    runner = make_ppo_runner(PPOConfig(env_id="CartPole-v1"))
    train = jax.jit(jax.vmap(make_train(runner)))
    final_state, metrics = train(jax.random.split(jax.random.key(0), 3))  # 3 seeds, one compile

A runner state is a pytree of arrays only (it holds its iteration counter and
every RNG key it uses), so it vmaps over seeds and serialises to a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.devices import block_index
from lamella.agents.protocol import Agent, PRNGKey, TrainState
from lamella.envs import check_prng_key
from lamella.envs import random as fast_random
from lamella.envs.environment import Environment, episode_done
from lamella.envs.wrappers import AutoReset

__all__ = [
    "Runner",
    "RunnerState",
    "episode_frames",
    "eval_max_steps",
    "evaluate_agent",
    "hashed_keys",
    "hashed_permutation",
    "make_train",
    "render_problem",
    "step_limit",
]

RunnerState = Any


class Runner(NamedTuple):
    """One algorithm on one environment, as pure functions.

    Attributes:
        init: ``init(key) -> runner_state``.
        step: ``step(runner_state) -> (runner_state, metrics)``: one training
            iteration (collect a rollout, update). ``metrics`` are float32 scalars
            (or arrays with the axes named in ``metric_axes``); the built-in runners
            report ``"episode_return"`` (mean return of the episodes that ended in this
            iteration; the previous value when none ended) and ``"loss"``.
        evaluate: ``evaluate(runner_state, key) -> metrics``: greedy evaluation of
            the current policy, each metric one value per episode (``(eval_episodes,)``,
            plus the axes named in ``metric_axes``); the built-in runners report
            ``"episode_return"``: float32 undiscounted returns.
        steps_per_iteration: env steps per iteration over all parallel envs.
        num_iterations: iterations for the configured ``total_timesteps``.
        metric_axes: the named axes of the metrics that are not scalars, by metric name,
            for example ``{"episode_return": ("agent",), "score": ("level",)}``. A step
            metric so declared has exactly these axes (``(num_agents,)``); an evaluation
            metric has them last, after its episode axis (``(eval_episodes, num_agents)``).
            The driver logs one key per index (``train_episode_return_agent_0``,
            ``mean_episode_return_agent_1``; ``docs/run-log-format.md``). Default: none
            (every step metric a scalar; evaluation metrics one list each). The driver does
            not require any particular metric; ``"episode_return"`` in ``evaluate`` is
            shown in the progress display and plotted when present.
        record_step: ``record_step(runner_state) -> (runner_state, metrics, experience)``:
            ``step`` that also returns the experience the iteration collected, a pytree with
            leading axes ``(time, batch)`` (steps of the iteration, parallel envs; the
            built-in runners use flashbax Vault's OG-MARL names ``observations``, ``actions``,
            ``rewards``, ``terminals``, ``truncations``). The driver calls it instead of
            ``step`` when it records experience to a Vault (``record_vault=``); ``None``: the
            runner cannot record.
        render_episode: ``render_episode(runner_state, key) -> (frames, length)``: one
            evaluation episode of the current policy drawn with the env's ``render``, frames
            uint8 ``(max_steps + 1, H, W, 3)`` of which the first ``length`` (int32) are the
            episode (:func:`episode_frames`). The driver writes them as a GIF with ``gif=True``
            (``lamella train ... --gif``); ``None``: the runner cannot draw its episodes.
        sharding: how the runner splits its batch axis over devices
            (:class:`lamella.agents.devices.BatchSharding`), for the driver's
            ``num_devices``; ``None``: it runs on one device.
        metric_weights: step metrics that are means over a count that changes from
            iteration to iteration, by metric name: the name of the (scalar) step metric that
            holds the count, for example ``{"loss": "updates"}`` (the off-policy loop's update
            metrics, means over the iteration's gradient steps, none during the warm-up). The
            driver's chunk mean of such a metric weights each iteration by its count, so it is
            the mean over the chunk's counted events, and a chunk whose count is 0 leaves the
            metric out of its evaluation in the run log (not measured). Default: none (every
            step metric the plain mean over the chunk's iterations).
    """

    init: Callable[[PRNGKey], RunnerState]
    step: Callable[[RunnerState], tuple[RunnerState, dict[str, jax.Array]]]
    evaluate: Callable[[RunnerState, PRNGKey], dict[str, jax.Array]]
    steps_per_iteration: int
    num_iterations: int
    metric_axes: Mapping[str, tuple[str, ...]] | None = None
    record_step: Callable[[RunnerState], tuple[RunnerState, dict[str, jax.Array], Any]] | None = None
    render_episode: Callable[[RunnerState, PRNGKey], tuple[jax.Array, jax.Array]] | None = None
    sharding: Any = None
    metric_weights: Mapping[str, str] | None = None


def make_train(runner: Runner) -> Callable[[PRNGKey], tuple[RunnerState, dict[str, jax.Array]]]:
    """``train(key) -> (final_state, metrics)``: ``runner.num_iterations`` steps in one ``lax.scan``.

    ``metrics`` are stacked over iterations (leading axis ``num_iterations``).
    ``train`` is pure: jit it, and vmap it over keys to train many seeds in one
    call, or over a traced hyper-parameter closed over by a runner factory.
    """

    def train(key: PRNGKey) -> tuple[RunnerState, dict[str, jax.Array]]:
        check_prng_key(key, "train", "jax.vmap(train)")  # trace time: one line, not JAX's key error
        state = runner.init(key)

        def body(state: RunnerState, _: None) -> tuple[RunnerState, dict[str, jax.Array]]:
            return runner.step(state)

        return jax.lax.scan(body, state, None, length=runner.num_iterations)

    return train


def hashed_keys(
    key: PRNGKey, shape: tuple[int, ...], *, block: tuple[int, Any, int] | None = None
) -> jax.Array:
    """Fresh keys of ``shape`` derived from ``key`` by :mod:`lamella.envs.random`'s hash.

    A drop-in for ``jax.random.split(key, shape)`` where the keys feed env steps and
    action sampling: a dozen integer operations per key instead of a Threefry
    evaluation, which inside a rollout loop costs more than a CartPole step and
    adds much of the compile time. Works for typed keys of any implementation and
    for raw ``uint32`` key data.

    ``block=(axis, start, size)``: only the keys ``start:start + size`` along ``axis`` of the
    keys of ``shape`` (``start`` may be traced), computed without the others: a device's block
    of a batch's keys (:mod:`lamella.agents.devices`).
    """
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    data = jax.random.key_data(key) if typed else key
    # stream=1: with stream 0 the first word of the all-zero key (``jax.random.key(0)``) hashes
    # to zero again, and a chain of keys derived this way would never move.
    full = (*shape, data.shape[-1])
    if block is None:
        words = fast_random.bits(data, full, stream=1, vector=True)
    else:
        axis, start, size = block
        words = fast_random.bits(data, stream=1, index=block_index(full, axis, start, size))
    return jax.random.wrap_key_data(words, impl=jax.random.key_impl(key)) if typed else words


# Largest index width packed into a permutation's sort words (16 hashed bits left above it).
_PACKED_PERMUTATION_BITS = 16


def hashed_permutation(key: PRNGKey, n: int) -> jax.Array:
    """A random permutation of ``range(n)`` (int32): the stable argsort of hashed words.

    A drop-in for ``jax.random.permutation(key, n)`` where the order only has to look
    random (minibatch shuffles): ``jax.random.permutation`` runs rounds of Threefry and
    sorting, which on CPU cost a large share of a PPO iteration's compile time. Equal
    words (about ``n**2 / 2**33`` pairs) keep their index order.

    Up to ``2**16`` elements the argsort is computed without sorting indices beside the words
    (on CPU a two-operand sort costs about four times a one-operand one): each word's low
    ``ceil(log2(n))`` bits are replaced by its index and those words are sorted, which orders
    by the high bits; neighbours equal in their high bits (rare: about ``n**2 / 2**(33 - b)``
    pairs for ``b`` index bits) are then put in word order by exchange passes. The result is
    the same permutation as ``jnp.argsort(words)``.
    """
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    data = jax.random.key_data(key) if typed else key
    words = fast_random.bits(data, (n,), stream=2, vector=True)
    width = max(1, (n - 1).bit_length())
    if width > _PACKED_PERMUTATION_BITS:
        return jnp.argsort(words).astype(jnp.int32)
    low = np.uint32((1 << width) - 1)
    order = (jnp.sort((words & ~low) | jnp.arange(n, dtype=jnp.uint32)) & low).astype(jnp.int32)

    def unsorted(carry: tuple[jax.Array, jax.Array]) -> jax.Array:
        return jnp.any(carry[0][1:] < carry[0][:-1])

    def exchange_passes(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return _exchange(*_exchange(*carry, start=0), start=1)

    return jax.lax.while_loop(unsorted, exchange_passes, (words[order], order))[1]


def _exchange(words: jax.Array, order: jax.Array, start: int) -> tuple[jax.Array, jax.Array]:
    """One pass of odd-even transposition sort: positions ``(i, i + 1)`` for ``i = start,
    start + 2, ...`` swap where their words are out of order (equal words stay)."""
    n = words.shape[0]
    position = np.arange(n)
    left = (position - start) % 2 == 0
    partner = np.where(left, position + 1, position - 1)
    paired = (partner >= 0) & (partner < n) & (position >= start)
    partner = np.clip(partner, 0, n - 1)
    partner_words = words[partner]
    swap = paired & jnp.where(left, partner_words < words, partner_words > words)
    return jnp.where(swap, partner_words, words), jnp.where(swap, order[partner], order)


def evaluate_agent(
    agent: Agent,
    train_state: TrainState,
    env: Environment[Any, Any],
    env_params: Any,
    key: PRNGKey,
    num_episodes: int,
    max_steps: int,
    memory: Any,
    greedy: bool = True,
    success: bool = False,
    per_agent: bool = False,
    final_info: Sequence[str] = (),
    observation_moments: bool = False,
) -> dict[str, jax.Array]:
    """Play ``num_episodes`` episodes in parallel, one per env, and return their returns.

    Each env plays exactly one episode from a fresh reset; steps after an env's
    episode ended are not counted. The loop stops when every episode ended or
    after ``max_steps`` steps (an episode still running then counts with the
    return it has so far).

    Args:
        agent: the agent; ``agent.policy`` is called with ``eval=greedy``.
        train_state: the agent's train state.
        env: an environment (with or without auto-reset).
        env_params: its params.
        key: randomness of resets, env steps and (if not greedy) actions.
        num_episodes: episodes, all played at once.
        max_steps: cap on the steps of the loop.
        memory: the agent's memory for a batch of ``num_episodes`` envs (for
            example ``agent.reset_memory(memory, eval=True)``).
        greedy: act greedily.
        success: also return ``"success"``: float32 ``(num_episodes,)``, 1 where the env's
            ``info["is_success"]`` was true on some step of the episode (goal-conditioned envs).
        per_agent: also return ``"agent_return"``: float32 ``(num_episodes, num_agents)``, each
            agent's own return (multi-agent envs; ``"episode_return"`` is their sum).
        final_info: names of ``info`` entries with one value per env (a scalar per step, such as
            SMAX's ``"won"``); each is also returned, float32 ``(num_episodes,)``, as its value
            on the episode's last step (the step it ended on, or the last step played). The mean
            of a 0/1 entry over the episodes is its rate (SMAX: the win rate).
        observation_moments: also return ``"observation_sum"`` and ``"observation_sum_sq"``:
            float32 ``(num_episodes, *obs_shape)``, the sum and the sum of squares of the
            observations each episode's policy acted on (``episode_length`` of them), for
            running observation statistics (ES's ``normalize_observations``).

    Returns:
        ``{"episode_return": float32 (num_episodes,), "episode_length": int32 (num_episodes,)}``
        (and ``"success"``, ``"agent_return"`` and the ``final_info`` names).

    Raises:
        lamella.envs.EnvInputError: ``key`` is not one PRNG key (a runner's ``evaluate(state,
            0)``), with the fix.
        ValueError: ``success`` or ``final_info`` names an entry the env's info does not have,
            or a ``final_info`` entry has more than one value per env.
    """
    check_prng_key(key, "evaluate", "jax.vmap(runner.evaluate)")
    final_info = tuple(final_info)
    own = {
        "episode_return",
        "episode_length",
        "success",
        "agent_return",
        "observation_sum",
        "observation_sum_sq",
    }
    clash = sorted(set(final_info) & own)
    if clash:
        raise ValueError(
            f"evaluate_agent(final_info=...) names {clash}, which are evaluate_agent's own metrics."
        )
    key_reset, key_loop = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(key_reset, num_episodes), env_params
    )
    zeros = jnp.zeros((num_episodes,), jnp.float32)
    carry0 = (
        obs,
        env_state,
        memory,
        train_state,
        zeros,
        jnp.zeros((num_episodes,), jnp.int32),
        jnp.zeros((num_episodes,), bool),
        jnp.zeros((), jnp.int32),
        key_loop,
    )
    # The success flags ride in the carry only when asked for, so other evaluations compile as before.
    extra0: tuple[jax.Array, ...] = (zeros,) if success else ()
    if per_agent:
        extra0 = (*extra0, jnp.zeros((num_episodes, max(int(env.num_agents), 1)), jnp.float32))
    last_info0 = {name: zeros for name in final_info}
    moments0: tuple[jax.Array, ...] = (jnp.zeros(obs.shape, jnp.float32),) * 2 if observation_moments else ()

    def cond(carry: tuple[Any, ...]) -> jax.Array:
        finished, t = carry[0][6], carry[0][7]
        return jnp.logical_and(~jnp.all(finished), t < max_steps)

    def body(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        (
            (obs, env_state, memory, train_state, returns, lengths, finished, t, key),
            extra,
            last_info,
            moments,
        ) = carry
        if observation_moments:
            live = jnp.where(
                jnp.reshape(finished, (-1,) + (1,) * (obs.ndim - 1)), 0.0, obs.astype(jnp.float32)
            )
            moments = (moments[0] + live, moments[1] + jnp.square(live))
        keys = hashed_keys(key, (num_episodes + 2,))
        key, key_act = keys[0], keys[1]
        action, train_state, memory = agent.policy(key_act, train_state, obs, memory, eval=greedy)
        obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys[2:], env_state, action, env_params
        )
        done = jax.vmap(episode_done)(terminated, truncated)
        agent_reward = jnp.reshape(reward, (num_episodes, -1))
        reward = agent_reward.sum(-1)
        returns = returns + jnp.where(finished, 0.0, reward)
        lengths = lengths + jnp.where(finished, 0, 1)
        if success:
            if "is_success" not in info:
                raise ValueError(
                    "evaluate_agent(success=True) needs an env that reports info['is_success'] "
                    f"(a goal-conditioned env); {type(env).__name__} does not."
                )
            reached = jnp.logical_and(~finished, jnp.reshape(info["is_success"], (num_episodes,)))
            extra = (jnp.where(reached, 1.0, extra[0]), *extra[1:])
        if per_agent:
            extra = (*extra[:-1], extra[-1] + jnp.where(finished[:, None], 0.0, agent_reward))
        new_info = {}
        for name in final_info:
            if name not in info:
                raise ValueError(
                    f"evaluate_agent(final_info=...) names info[{name!r}], which {type(env).__name__} "
                    f"does not report (its info has {sorted(info)})."
                )
            if info[name].size != num_episodes:
                raise ValueError(
                    f"evaluate_agent(final_info=...) needs one value per env; info[{name!r}] has shape "
                    f"{info[name].shape[1:]} per env."
                )
            value = jnp.reshape(info[name], (num_episodes,)).astype(jnp.float32)
            new_info[name] = jnp.where(finished, last_info[name], value)
        finished = jnp.logical_or(finished, done)
        carry = (obs, env_state, memory, train_state, returns, lengths, finished, t + 1, key)
        return carry, extra, new_info, moments

    out, extra, last_info, moments = jax.lax.while_loop(cond, body, (carry0, extra0, last_info0, moments0))
    extra = tuple(extra)
    metrics = {"episode_return": out[4], "episode_length": out[5]}
    if success:
        metrics["success"] = extra[0]
    if per_agent:
        metrics["agent_return"] = extra[-1]
    metrics.update(last_info)
    if observation_moments:
        metrics["observation_sum"], metrics["observation_sum_sq"] = moments[0], moments[1]
    return metrics


def episode_frames(
    agent: Agent,
    train_state: TrainState,
    env: Environment[Any, Any],
    env_params: Any,
    key: PRNGKey,
    max_steps: int,
    memory: Any,
    greedy: bool = True,
    num_envs: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """Play one episode (as :func:`evaluate_agent` plays each of its episodes) and draw every
    state with ``env.render``.

    Args:
        agent, train_state, env, env_params, key, max_steps, greedy: as for :func:`evaluate_agent`.
            An ``env`` wrapped in :class:`~lamella.envs.wrappers.AutoReset` plays unwrapped, so
            the last frame is the state the episode ended in, not the next episode's reset.
        memory: the agent's memory for a batch of ``num_envs`` envs.
        num_envs: how many envs the agent acts on at once; the first one is drawn. More than one
            for a policy that only takes batches of a given size (e.g. one split over several
            learning instances, as opponent shaping's co-players are).

    Returns:
        ``(frames, length)``: uint8 ``(max_steps + 1, H, W, 3)``, the reset state's frame first
        and the frames after the episode's end repeating its last state; int32 ``()``, the
        number of frames of the episode (its steps + 1). Write ``frames[:length]`` with
        :func:`lamella.envs.rendering.save_frames`.
    """
    if isinstance(env, AutoReset):
        env = env.env
    key_reset, key_loop = jax.random.split(key)
    # One env plays on the keys it had before num_envs existed (the same episodes as then).
    env_keys = (lambda k: k[None]) if num_envs == 1 else (lambda k: jax.random.split(k, num_envs))
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(env_keys(key_reset), env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    draw = lambda state: env.render(jax.tree.map(lambda x: x[0], state), env_params)  # noqa: E731

    def body(carry: tuple[Any, ...], key: PRNGKey) -> tuple[tuple[Any, ...], jax.Array]:
        obs, env_state, memory, train_state, finished, length = carry
        key_act, key_step = jax.random.split(key)
        action, train_state, memory = agent.policy(key_act, train_state, obs, memory, eval=greedy)
        next_obs, next_state, _, terminated, truncated, _ = step(
            env_keys(key_step), env_state, action, env_params
        )
        keep = lambda old, new: jax.tree.map(  # noqa: E731 - an env that ended keeps its last state
            lambda a, b: jnp.where(finished.reshape(finished.shape + (1,) * (a.ndim - 1)), a, b), old, new
        )
        env_state, obs = keep(env_state, next_state), keep(obs, next_obs)
        length = length + jnp.where(finished[0], 0, 1)
        finished = jnp.logical_or(finished, jax.vmap(episode_done)(terminated, truncated))
        carry = (obs, env_state, memory, train_state, finished, length)
        return carry, draw(env_state)

    carry = (obs, env_state, memory, train_state, jnp.zeros((num_envs,), bool), jnp.ones((), jnp.int32))
    carry, frames = jax.lax.scan(body, carry, jax.random.split(key_loop, max_steps))
    first = draw(env_state)
    return jnp.concatenate([first[None], frames]).astype(jnp.uint8), carry[-1]


def render_problem(runner: Any, states: Any, key: PRNGKey) -> str | None:
    """Why ``runner`` cannot draw an episode of the first member of ``states`` (a batch over
    seeds, concrete or abstract), or ``None`` when it can. Traced abstractly: nothing compiles.

    The driver asks before training with ``gif=True``, so a run that cannot write its GIF stops
    before it trains, not after.
    """
    render = getattr(runner, "render_episode", None)
    if render is None:
        return "its Runner has no render_episode"

    def first_episode(states: Any, key: PRNGKey) -> tuple[jax.Array, jax.Array]:
        return render(jax.tree.map(lambda x: x[0], states), key)

    try:
        jax.eval_shape(first_episode, states, key)
    except NotImplementedError as error:  # Environment.render's "<env> has no renderer"
        return str(error)
    return None


def step_limit(value: int, env_params: Any) -> int:
    """An episode step cap: ``value`` if it is > 0, else the env's ``max_steps_in_episode``
    param, else 1000."""
    if int(value) > 0:
        return int(value)
    limit = getattr(env_params, "max_steps_in_episode", None)
    return int(limit) if limit is not None else 1000


def eval_max_steps(config: Any, env_params: Any) -> int:
    """The step cap of a greedy evaluation: :func:`step_limit` of ``config.eval_max_steps``."""
    return step_limit(getattr(config, "eval_max_steps", 0), env_params)
