"""Multi-agent experience on disk: what IPPO, MAPPO, IDQN, ISAC and ``rec_iql`` record to a flashbax
Vault, and the offline reader.

``lamella train ippo ... --record-vault`` (``run_experiment(config, record_vault=True)``) writes
one vault per seed through lamella-agents' driver (:mod:`lamella.agents.recording`). Its
experience uses the names of OG-MARL's vaults, leaves ``(num_envs, steps, ...)`` on disk:

================  ==================================  =============================================
key               dtype, shape per step               meaning
================  ==================================  =============================================
``observations``  float32 ``(n, obs)``                each agent's observation, acted on
``actions``       int32 ``(n,)``                      each agent's action (ISAC: float32 ``(n, D)``)
``rewards``       float32 ``(n,)``                    each agent's own reward (never the team sum)
``terminals``     bool ``(n,)``                       the episode terminated at this step
``truncations``   bool ``(n,)``                       it hit the time limit at this step
``infos.legals``  bool ``(n, num_actions)``           the action mask (discrete actions only)
``infos.state``   float32 ``(G,)`` (MAPPO only)       the env's global state
================  ==================================  =============================================

:func:`read_offline` returns them as an :class:`OfflineExperience`.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from lamella.agents.rollout import Transition
from lamella.agents.rollout import recorded_experience as _base_experience
from lamella.buffers import Transition as StoredTransition

__all__ = ["OfflineExperience", "read_offline", "recorded_experience"]


def recorded_experience(transitions: Transition | StoredTransition) -> dict[str, Any]:
    """The experience the runners record from transitions of dict observations (the table above):
    IPPO/MAPPO's rollouts, the independent off-policy learners' steps."""
    obs = transitions.obs
    infos = {"legals": obs["action_mask"]} if "action_mask" in obs else {}  # none for continuous actions
    if "global_state" in obs:
        infos["state"] = obs["global_state"]
    extra = {"infos": infos} if infos else {}  # continuous IPPO: neither masks nor a global state
    return {**_base_experience(transitions, **extra), "observations": obs["obs"]}


class OfflineExperience(NamedTuple):
    """A recorded run as an offline multi-agent dataset (numpy arrays; the agent axis is axis 2).

    Attributes:
        observations: float32 ``(num_envs, steps, n, obs)``.
        actions: int32 ``(num_envs, steps, n)`` (continuous actions: float32 ``(num_envs, steps, n, D)``).
        rewards: float32 ``(num_envs, steps, n)``.
        terminals: bool ``(num_envs, steps, n)``.
        truncations: bool ``(num_envs, steps, n)``.
        legals: bool ``(num_envs, steps, n, num_actions)``, the action masks (None for
            continuous actions, which have none).
        state: float32 ``(num_envs, steps, G)``, the global state (None unless MAPPO recorded it).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray
    legals: np.ndarray | None
    state: np.ndarray | None

    @property
    def dones(self) -> np.ndarray:
        """bool ``(num_envs, steps, n)``: the episode ended at this step (terminal or truncated)."""
        return np.logical_or(self.terminals, self.truncations)

    @property
    def num_agents(self) -> int:
        return int(self.actions.shape[2])

    def agent(self, i: int) -> dict[str, np.ndarray]:
        """Agent ``i``'s ``observations``, ``actions``, ``rewards``, ``dones`` and (discrete
        actions) ``legals``, each ``(num_envs, steps, ...)``."""
        if not 0 <= i < self.num_agents:
            raise IndexError(f"agent {i} of {self.num_agents}")
        return {
            "observations": self.observations[:, :, i],
            "actions": self.actions[:, :, i],
            "rewards": self.rewards[:, :, i],
            "dones": self.dones[:, :, i],
            **({} if self.legals is None else {"legals": self.legals[:, :, i]}),
        }


def read_offline(
    directory: str | os.PathLike[str], task: str | None = None, run: str = "seed_0"
) -> OfflineExperience:
    """Read what a multi-agent run recorded (``--record-vault``) as an :class:`OfflineExperience`.

    Args:
        directory: the recording folder (``<out_dir>/vault`` by default).
        task: the env id (default: the only one recorded there).
        run: the seed's run name, ``seed_<n>``.
    """
    from lamella.agents.recording import read_recording

    data = read_recording(directory, task, run)
    missing = {"observations", "actions", "rewards", "terminals", "truncations"} - set(data)
    if missing:
        raise ValueError(
            f"{os.fspath(directory)!r} run {run} was not recorded by a multi-agent runner (missing {sorted(missing)})."
        )
    infos = data.get("infos", {})
    return OfflineExperience(
        observations=data["observations"],
        actions=data["actions"],
        rewards=data["rewards"],
        terminals=data["terminals"],
        truncations=data["truncations"],
        legals=infos.get("legals"),
        state=infos.get("state"),
    )
