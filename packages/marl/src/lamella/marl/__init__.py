"""lamella.marl: multi-agent runners (IPPO, MAPPO) built from lamella-agents' PPO pieces."""

from lamella.marl.__about__ import __version__

__all__ = ["__version__"]
