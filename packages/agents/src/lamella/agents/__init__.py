"""lamella.agents: the Agent protocol, networks, PPO, evolution strategies and runners."""

from lamella.agents.__about__ import __version__
from lamella.agents.protocol import Agent, reset_memory_where
from lamella.agents.runner import Runner, evaluate_agent, make_train

__all__ = ["Agent", "Runner", "__version__", "evaluate_agent", "make_train", "reset_memory_where"]
