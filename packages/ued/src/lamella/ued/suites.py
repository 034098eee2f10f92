"""Students evaluated on suites of named test mazes (``lamella eval checkpoints --suite``).

A *suite* is a list of the named mazes of :data:`lamella.envs.maze.NAMED_MAZES`: one of
:data:`SUITES` by name, or any comma-separated list of maze names. :func:`evaluate_suite` plays
``episodes`` episodes of a trained student on each maze, all episodes of a maze size in one
vmapped program (the student's network reads only its egocentric view, so a policy trained on
7x7 or 13x13 levels runs on PerfectMazeXL's 101x101 unchanged), and returns each maze's returns,
episode lengths and solved flags (an episode is solved when its return is positive, minimax's
rule). Each maze keeps its own horizon (:func:`lamella.envs.maze.named_maze_sampler`: 450 steps
for 13x13, 21,218 for PerfectMazeXL); an episode ends at the goal or at the horizon, and the
loop stops as soon as every episode has ended. The random mazes (the corridors' goal, FourRooms,
Crossing, PerfectMaze*) draw a fresh maze per episode.

:data:`MAZE_SUITES` is what lamella-eval finds through the ``lamella.test_suites`` entry point
``maze``: ``lamella eval checkpoints RUN_DIR --suite minimax-test`` loads a DR / PLR / ACCEL
checkpoint, evaluates its policy here and aggregates the seeds (bootstrap CIs) there.

Level-Based Foraging (multi-agent) has its own suites of named levels
(:data:`lamella.envs.multi_agent.lbf.NAMED_LEVELS`, fixed start layouts), entry point
``foraging`` (:data:`FORAGING_SUITES`): ``lamella eval checkpoints RUN_DIR --suite
foraging-5x5`` evaluates a DR / PLR / ACCEL student of ``Foraging-5x5-2p-1f-v3``. The levels
must fit the student's env (its grid, agents and food); each is played at the env's horizon (the
training config's ``max_episode_steps``) and is solved when the team eats every food. Both
providers play their episodes with the same code (:func:`evaluate_on_levels`, one vmapped
program per group of levels of one env).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import lamella.envs
from lamella.agents.runner import hashed_keys
from lamella.envs import maze
from lamella.envs.errors import UserError
from lamella.ued.levels import LevelParams, OnLevel
from lamella.ued.runners import DRConfig, evaluate_on_levels, make_actor_critic

__all__ = [
    "FORAGING_SUITES",
    "FORAGING_SUITE_ENVS",
    "FORAGING_SUITE_LEVELS",
    "MAZE_SUITES",
    "SUITES",
    "LevelSuites",
    "SuiteError",
    "evaluate_foraging_suite",
    "evaluate_suite",
    "resolve_suite",
]

_FIXED_13 = (
    "SixteenRooms",
    "SixteenRooms2",
    "Labyrinth",
    "LabyrinthFlipped",
    "Labyrinth2",
    "StandardMaze",
    "StandardMaze2",
    "StandardMaze3",
)
#: Every named maze (all 16; Memory plays by its own rules, ``AMazeParams.memory``).
EVALUABLE = tuple(maze.NAMED_MAZES)

SUITES: dict[str, tuple[str, ...]] = {
    # minimax's held-out test mazes, in its order.
    "minimax-test": EVALUABLE,
    # The eight fixed 13x13 layouts (JaxUED's prefabs too): deterministic levels.
    "minimax-fixed": _FIXED_13,
    # The 13x13 mazes: the size minimax trains on.
    "minimax-13x13": (*_FIXED_13, "SmallCorridor", "PerfectMaze"),
    # The procedural perfect mazes, 13x13 to 101x101.
    "perfect-mazes": ("PerfectMaze", "PerfectMazeMedium", "PerfectMazeXL"),
}
"""Named suites: name -> maze names (:data:`lamella.envs.maze.NAMED_MAZES`)."""


class SuiteError(UserError, ValueError):
    """An unknown suite or maze name; the message lists the valid ones."""


def resolve_suite(suite: str | Sequence[str]) -> tuple[str, ...]:
    """The maze names of ``suite``: a name of :data:`SUITES`, a comma-separated list of maze
    names (``"SixteenRooms,PerfectMazeXL"``), or a sequence of maze names.

    Raises:
        SuiteError: an empty suite, an unknown name (the message lists the suites and the mazes),
            or a maze named twice.
    """
    return _resolve(suite, SUITES, EVALUABLE, "maze")


def _resolve(
    suite: str | Sequence[str], suites: Mapping[str, tuple[str, ...]], cases: Sequence[str], kind: str
) -> tuple[str, ...]:
    """:func:`resolve_suite` over the ``suites`` and ``cases`` of one level family (``kind``
    names its cases in messages: "maze", "level")."""
    if isinstance(suite, str):
        if suite.strip() in suites:
            return suites[suite.strip()]
        names = [part.strip() for part in suite.split(",")]
    else:
        names = [str(part).strip() for part in suite]
    names = [n for n in names if n]
    if not names:
        raise SuiteError(f"empty suite {suite!r}; name a suite ({', '.join(suites)}) or {kind}s.")
    for name in names:
        if name not in cases:
            close = difflib.get_close_matches(name, [*suites, *cases], n=2, cutoff=0.6)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise SuiteError(
                f"unknown suite or {kind} {name!r}.{hint} Suites: {', '.join(suites)}; or a "
                f"comma-separated list of {kind}s: {', '.join(cases)}."
            )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SuiteError(f"suite {suite!r} names {', '.join(twice)} more than once; name each {kind} once.")
    return tuple(names)


#: ``(name, sample(key) -> level, env params with the level's horizon)``.
Case = tuple[str, Callable[[jax.Array], Any], Any]


def _cases(names: Sequence[str]) -> list[Case]:
    return [(name, *maze.named_maze_sampler(name)) for name in names]


def _train_params(config: DRConfig) -> maze.AMazeParams:
    """The training env's params: the view the student was trained with."""
    env, params = lamella.envs.make(config.env_id, autoreset=False)
    if not isinstance(env.unwrapped, maze.AMaze):
        raise SuiteError(
            f"the maze suites evaluate students of AMaze; this config trains on {config.env_id} "
            f"({type(env.unwrapped).__name__})."
        )
    return params


@functools.lru_cache(maxsize=32)
def _group_program(
    config: DRConfig, cases: tuple[Case, ...], episodes: int, greedy: bool
) -> Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]]:
    """``run(params, keys) -> (returns, lengths)``, each ``(seeds, len(cases), episodes)``:
    the mazes of one size, every episode at once, vmapped over seeds."""
    train = _train_params(config)
    height, width, memory = cases[0][2].height, cases[0][2].width, cases[0][2].memory
    env_params = train.replace(height=height, width=width, n_walls=0, memory=memory)
    bare = maze.AMaze(**{f.name: getattr(env_params, f.name) for f in dataclasses.fields(env_params)})
    actor_critic = make_actor_critic(config, bare.action_space(env_params))
    return _levels_program(actor_critic, bare, env_params, cases, episodes, greedy)


def _levels_program(
    actor_critic: Any, bare: Any, env_params: Any, cases: Sequence[Case], episodes: int, greedy: bool
) -> Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]]:
    """``run(params, keys) -> (returns, lengths)``, each ``(seeds, len(cases), episodes)``:
    ``episodes`` episodes of the student on each case's levels (``sample(key) -> level``, at its
    params' ``max_episode_steps``), every episode at once on the bare level-based env ``bare``
    with ``env_params``, vmapped over seeds. Shared by every level family's suites."""
    env = OnLevel(bare)
    horizons = np.asarray([params.max_episode_steps for _, _, params in cases], np.int32)
    num = len(cases) * episodes

    def run(params: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        keys = hashed_keys(key, (len(cases) + 1,))
        levels = [
            jax.vmap(sample)(hashed_keys(keys[i], (episodes,))) for i, (_, sample, _) in enumerate(cases)
        ]
        levels = jax.tree.map(lambda *xs: jnp.concatenate(xs), *levels)
        batch = jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (num, *jnp.shape(x))), env_params)
        batch = batch.replace(max_episode_steps=jnp.repeat(jnp.asarray(horizons), episodes))
        returns, lengths = evaluate_on_levels(
            actor_critic,
            params,
            env,
            LevelParams(levels, batch),
            keys[-1],
            num,
            int(horizons.max()),
            greedy=greedy,
        )
        shape = (len(cases), episodes)
        return returns.reshape(shape), lengths.reshape(shape)

    return jax.jit(jax.vmap(run))


def evaluate_suite(
    config: DRConfig,
    params: Any,
    suite: str | Sequence[str],
    keys: jax.Array,
    episodes: int,
    *,
    greedy: bool | None = None,
    cases: Sequence[Case] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Play ``episodes`` episodes of the student on each maze of ``suite``, for every seed.

    Args:
        config: the student's training config (its network and its env's view).
        params: the student network's parameters with a leading seed axis
            (``UEDRunnerState.params`` of a driver checkpoint).
        suite: see :func:`resolve_suite`.
        keys: one PRNG key per seed, ``(seeds,)``.
        episodes: episodes per maze and seed.
        greedy: the most likely action (True) or a sampled one (False); default the config's
            ``eval_greedy`` (sampled, as minimax evaluates).
        cases: ``[(name, sample, params), ...]`` to evaluate instead of named mazes
            (``sample(key) -> MazeLevel``, ``params`` the level's :class:`AMazeParams` with
            its horizon); ``suite`` is then ignored.

    Returns:
        maze name -> ``{"episode_return": float64, "episode_length": float64, "solved":
        float64}``, each ``(seeds, episodes)``, in suite order.

    Raises:
        SuiteError: an unknown suite or maze, or a config that does not train on AMaze.
    """
    if isinstance(episodes, bool) or int(episodes) != episodes or episodes < 1:
        raise SuiteError(f"episodes must be a whole number >= 1, got {episodes!r}.")
    _check_seed_axis(params, keys)
    chosen = list(cases) if cases is not None else _cases(resolve_suite(suite))
    greedy = config.eval_greedy if greedy is None else bool(greedy)
    groups: dict[tuple[int, int, bool], list[Case]] = {}
    for case in chosen:
        groups.setdefault((case[2].height, case[2].width, case[2].memory), []).append(case)
    out: dict[str, dict[str, np.ndarray]] = {}
    for group in groups.values():
        program = _group_program(config, tuple(group), int(episodes), greedy)
        returns, lengths = jax.device_get(program(params, keys))
        for index, (name, _, _) in enumerate(group):
            r = np.asarray(returns[:, index], np.float64)
            out[name] = {
                "episode_return": r,
                "episode_length": np.asarray(lengths[:, index], np.float64),
                "solved": (r > 0).astype(np.float64),
            }
    return {case[0]: out[case[0]] for case in chosen}


def _check_seed_axis(params: Any, keys: Any) -> None:
    """Raise :class:`SuiteError` unless ``keys`` is one PRNG key per seed and every leaf of
    ``params`` leads with that many seeds (a vmap error from inside the program otherwise)."""
    shape, dtype = np.shape(keys), getattr(keys, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = (
        dtype is not None
        and not typed
        and np.dtype(dtype) == np.uint32
        and len(shape) == 2
        and shape[-1] == 2
    )
    if not ((typed and len(shape) == 1) or raw):
        raise SuiteError(
            f"keys must hold one PRNG key per seed, shape (seeds,), got shape {shape} of {dtype}. "
            "Split one: jax.random.split(jax.random.key(0), seeds)."
        )
    seeds = shape[0]
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        leaf_shape = np.shape(leaf)
        if leaf_shape[:1] != (seeds,):
            raise SuiteError(
                f"params must lead with a seed axis of {seeds} (one per key), but "
                f"params{jax.tree_util.keystr(path)} has shape {leaf_shape}. For one seed's parameters, "
                "add the axis: jax.tree.map(lambda x: x[None], params), with keys of shape (1,)."
            )


@dataclasses.dataclass(frozen=True)
class LevelSuites:
    """Named test levels of one level-based env, as lamella-eval's ``lamella.test_suites`` entry
    points see them (:data:`MAZE_SUITES`, :data:`FORAGING_SUITES`).

    Attributes:
        suites: suite name -> level names.
        cases: every level name a custom list may hold.
        kind: what a case is called in error messages (``"maze"``, ``"level"``).
        env_type: returns the env class (unwrapped) whose students the suites test.
        run: ``run(config, params, names, keys, episodes)``, the evaluation of a checkpoint's
            parameters (seeds leading) on the named levels (:func:`evaluate_suite`, ...).
        metric: the name of the per-episode success flag in :meth:`evaluate`'s results.
    """

    suites: Mapping[str, tuple[str, ...]]
    cases: tuple[str, ...]
    kind: str
    env_type: Callable[[], type]
    run: Callable[..., dict[str, dict[str, np.ndarray]]]
    metric: str = "solved"

    def resolve(self, suite: str | Sequence[str]) -> tuple[str, ...]:
        """The level names of ``suite`` (see :func:`resolve_suite`)."""
        return _resolve(suite, self.suites, self.cases, self.kind)

    def supports(self, config: Any) -> bool:
        """Whether checkpoints of this config (a DR / PLR / ACCEL config on this env, or a PAIRED
        one: its protagonist) can be evaluated."""
        if not isinstance(config, DRConfig):
            return False
        env, _ = lamella.envs.make(config.env_id, autoreset=False)
        return isinstance(env.unwrapped, self.env_type())

    def evaluate(
        self, config: Any, state: Any, names: Sequence[str], keys: jax.Array, episodes: int
    ) -> dict[str, dict[str, np.ndarray]]:
        """``run`` on a checkpoint's runner state (seeds leading): its student's ``params``, or a
        PAIRED state's protagonist (student 0 of ``student_params``), as the runner evaluates."""
        student_params = getattr(state, "student_params", None)
        if student_params is not None:
            params = jax.tree.map(lambda x: x[:, 0], student_params)
        else:
            params = state.params
        return self.run(config, params, list(names), keys, episodes)


#: The entry point ``maze`` of the group ``lamella.test_suites`` (lamella-eval).
MAZE_SUITES = LevelSuites(
    suites=SUITES, cases=EVALUABLE, kind="maze", env_type=lambda: maze.AMaze, run=evaluate_suite
)


# Level-Based Foraging ----------------------------------------------------------------------

FORAGING_SUITE_LEVELS: dict[str, tuple[str, ...]] = {
    # Every named level that fits Foraging-5x5-2p-1f-v3 (lamella-ued's LBF presets).
    "foraging-5x5": ("Adjacent", "FarCorner", "Corridor", "OppositeCorners", "StrongFar"),
    # Every named level that fits Foraging-8x8-2p-2f-v3.
    "foraging-8x8": ("SplitFoods", "CoopCorners"),
}
"""Named LBF suites: name -> levels of :data:`lamella.envs.multi_agent.lbf.NAMED_LEVELS`."""
#: The env whose students each suite tests (its levels fit that env).
FORAGING_SUITE_ENVS = {"foraging-5x5": "Foraging-5x5-2p-1f-v3", "foraging-8x8": "Foraging-8x8-2p-2f-v3"}


def _foraging_family(config: DRConfig) -> Any:
    from lamella.envs.multi_agent import lbf
    from lamella.ued.runners import default_family

    env, _ = lamella.envs.make(config.env_id, autoreset=False)
    if not isinstance(env.unwrapped, lbf.LevelBasedForaging):
        raise SuiteError(
            f"the foraging suites evaluate students of Level-Based Foraging; this config trains on "
            f"{config.env_id} ({type(env.unwrapped).__name__})."
        )
    return default_family(config)


def _fixed_level(level: Any, key: jax.Array) -> Any:
    """A fixed level as a sampler: the same level for every key."""
    del key
    return level


@functools.lru_cache(maxsize=32)
def _foraging_program(
    config: DRConfig, names: tuple[str, ...], episodes: int, greedy: bool
) -> tuple[Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]], float]:
    """``(run, solved_above)``: :func:`_levels_program` on the named levels ``names`` in the
    training env of ``config`` (its horizon), and the return above which an episode is solved."""
    from lamella.envs.environment import EnvInputError
    from lamella.envs.multi_agent import lbf

    family = _foraging_family(config)
    env = family.env
    cases: list[Case] = []
    for name in names:
        try:
            level = lbf.named_level(name, env)
        except EnvInputError as error:
            fitting = lbf.named_levels_for(env)
            raise SuiteError(
                f"level {name!r} does not fit this student's env {config.env_id}: {error} Levels that "
                f"fit it: {', '.join(fitting) if fitting else 'none'}."
            ) from None
        cases.append((name, functools.partial(_fixed_level, level), family.env_params))
    actor_critic = make_actor_critic(config, env.action_space(family.env_params), family.network)
    program = _levels_program(actor_critic, env, family.env_params, cases, episodes, greedy)
    return program, family.solved_above


def evaluate_foraging_suite(
    config: DRConfig,
    params: Any,
    suite: str | Sequence[str],
    keys: jax.Array,
    episodes: int,
    *,
    greedy: bool | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Play ``episodes`` episodes of a Level-Based Foraging student on each named level of
    ``suite`` (a name of :data:`FORAGING_SUITE_LEVELS`, or level names of
    :data:`lamella.envs.multi_agent.lbf.NAMED_LEVELS`, comma-separated or as a sequence), for
    every seed, in the student's training env at its horizon; as :func:`evaluate_suite` does
    for mazes, and with the same code.

    Returns:
        level name -> ``{"episode_return": float64, "episode_length": float64, "solved":
        float64}``, each ``(seeds, episodes)``, in suite order; an episode is solved when the
        team's return is above the family's ``solved_above`` (every food eaten).

    Raises:
        SuiteError: an unknown suite or level, a level that does not fit the student's env (the
            message lists those that do), a config that does not train on Level-Based Foraging,
            or ``params`` / ``keys`` without the seed axis (as :func:`evaluate_suite`).
    """
    if isinstance(episodes, bool) or int(episodes) != episodes or episodes < 1:
        raise SuiteError(f"episodes must be a whole number >= 1, got {episodes!r}.")
    _check_seed_axis(params, keys)
    names = FORAGING_SUITES.resolve(suite)
    greedy = config.eval_greedy if greedy is None else bool(greedy)
    program, solved_above = _foraging_program(config, names, int(episodes), greedy)
    returns, lengths = jax.device_get(program(params, keys))
    out = {}
    for index, name in enumerate(names):
        r = np.asarray(returns[:, index], np.float64)
        out[name] = {
            "episode_return": r,
            "episode_length": np.asarray(lengths[:, index], np.float64),
            "solved": (r > solved_above).astype(np.float64),
        }
    return out


def _foraging_env_type() -> type:
    from lamella.envs.multi_agent import lbf

    return lbf.LevelBasedForaging


def _foraging_cases() -> tuple[str, ...]:
    from lamella.envs.multi_agent import lbf

    return tuple(lbf.NAMED_LEVELS)


#: The entry point ``foraging`` of the group ``lamella.test_suites`` (lamella-eval).
FORAGING_SUITES = LevelSuites(
    suites=FORAGING_SUITE_LEVELS,
    cases=_foraging_cases(),
    kind="level",
    env_type=_foraging_env_type,
    run=evaluate_foraging_suite,
)
