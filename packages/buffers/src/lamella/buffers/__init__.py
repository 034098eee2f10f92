"""lamella-buffers: replay buffers for lamella on flashbax, with episodes, n-step returns and HER on device.

* :func:`make_item_buffer`, :func:`make_flat_buffer`, :func:`make_trajectory_buffer`
  (each optionally prioritised): flashbax's buffers with checked arguments.
* :func:`make_episode_buffer`: parallel envs' time series plus an episode table;
  sample it with :func:`make_n_step_sampler`, :func:`make_episode_sampler` and
  :func:`make_her_sampler`.
* :func:`open_vault`, :func:`record`, :func:`write_experience`, :func:`read_vault`,
  :func:`load_episode_buffer`:
  experience on disk with flashbax's Vault.
"""

from lamella.buffers.__about__ import __version__
from lamella.buffers._src.episodes import (
    EpisodeBatch,
    EpisodeBuffer,
    EpisodeBufferState,
    make_episode_buffer,
    make_episode_sampler,
    make_n_step_sampler,
)
from lamella.buffers._src.her import HerSample, make_her_sampler
from lamella.buffers._src.n_step import n_step_transition
from lamella.buffers._src.replay import make_flat_buffer, make_item_buffer, make_trajectory_buffer
from lamella.buffers._src.types import NStepTransition, Transition, transition_like
from lamella.buffers._src.vault import load_episode_buffer, open_vault, read_vault, record, write_experience

__all__ = [
    "EpisodeBatch",
    "EpisodeBuffer",
    "EpisodeBufferState",
    "HerSample",
    "NStepTransition",
    "Transition",
    "__version__",
    "load_episode_buffer",
    "make_episode_buffer",
    "make_episode_sampler",
    "make_flat_buffer",
    "make_her_sampler",
    "make_item_buffer",
    "make_n_step_sampler",
    "make_trajectory_buffer",
    "n_step_transition",
    "open_vault",
    "read_vault",
    "record",
    "transition_like",
    "write_experience",
]
