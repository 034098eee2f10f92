"""State, params and per-step random numbers of :class:`~lamella.envs.multi_agent.smax.SMAX`."""

from __future__ import annotations

import jax

from lamella.envs import struct

__all__ = ["SMAXNoise", "SMAXParams", "SMAXState"]


class SMAXState(struct.PyTreeNode):
    """State of :class:`~lamella.envs.multi_agent.smax.SMAX`.

    ``A`` allies (the agents), ``E`` enemies (the built-in heuristic), ``U = A + E`` units:
    allies first, then enemies. Unit types are static (``env.unit_types``).

    Attributes:
        positions: float32 ``(U, 2)``, each unit's ``(x, y)`` on the map, ``+y`` north.
        health: float32 ``(U,)``, hit points; a unit is alive while ``health > 0``.
        weapon_cooldown: float32 ``(U,)``, seconds until the unit may fire again; it fires
            when ``<= 0``. It keeps falling while the unit does not fire (it goes negative).
        last_action: int32 ``(U,)``, each unit's action of the previous step in its own team's
            numbering (0-3 move, 4 stop, ``5 + k`` attack the ``k``-th unit of the other team
            in that team's observation order); 4 after reset.
        enemy_target: float32 ``(E, 2)``, each enemy's default destination (its reflected start
            position through the map centre; ``(0, 0)`` until its first step).
        enemy_last_attacked: int32 ``(E,)``, the ally slot each enemy keeps attacking while it
            can (``-1``: none).
        time: int32 ``()``, steps taken in this episode.
    """

    positions: jax.Array
    health: jax.Array
    weapon_cooldown: jax.Array
    last_action: jax.Array
    enemy_target: jax.Array
    enemy_last_attacked: jax.Array
    time: jax.Array


class SMAXParams(struct.PyTreeNode):
    """Traced parameters of :class:`~lamella.envs.multi_agent.smax.SMAX`.

    Attributes:
        max_episode_steps: int, steps after which the episode is truncated (100). JaxMARL's
            ``max_steps=m`` ends episodes after ``m + 1`` steps, so its default is
            ``max_episode_steps=101`` here.
        won_battle_bonus: float, added to the team reward on the step the last enemy dies
            while an ally lives (1.0).
        walls_cause_death: bool, a unit that touches the map's edge dies (True).
        see_enemy_actions: bool, allies observe the enemies' last moves and targets (True).
        enemy_shoots: bool, the heuristic enemies attack (True); False makes them only move.
    """

    max_episode_steps: int = struct.field(default=100, bounds=(1, None))
    won_battle_bonus: float = 1.0
    walls_cause_death: bool = True
    see_enemy_actions: bool = True
    enemy_shoots: bool = True


class SMAXNoise(struct.PyTreeNode):
    """The random numbers of one step, uniforms in ``[0, 1)`` (``env.draw_noise(key)``).

    :meth:`SMAX.transition` takes them explicitly, so a test can replay another
    implementation's random numbers (the parity test replays JaxMARL's).

    Attributes:
        cooldown: float32 ``(W, U)``, per world step and unit: the jitter of a new weapon
            cooldown (``-dt + 3 dt u`` seconds, ``dt`` the world step's duration).
        enemy_target: float32 ``(E,)``, which visible ally each enemy walks towards.
        enemy_attack: float32 ``(E,)``, which ally in range each enemy attacks
            (``attack_mode="random"`` only).
    """

    cooldown: jax.Array
    enemy_target: jax.Array
    enemy_attack: jax.Array
