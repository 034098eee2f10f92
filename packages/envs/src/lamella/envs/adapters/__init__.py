"""Adapters between lamella environments and other libraries' APIs.

* :mod:`lamella.envs.adapters.gymnasium`: ``gymnasium.Env`` and
  ``gymnasium.vector.VectorEnv`` over a lamella env (``pip install
  'lamella-envs[gymnasium]'``).
* :mod:`lamella.envs.adapters.pettingzoo`: ``pettingzoo.ParallelEnv`` over a
  lamella multi-agent env (``pip install 'lamella-envs[pettingzoo]'``).
* :mod:`lamella.envs.adapters.jaxmarl`: the other way round, a JaxMARL env as a
  lamella multi-agent env (``pip install 'lamella-envs[jaxmarl]'``).

Each adapter imports its library lazily, so importing this package needs
nothing beyond lamella-envs' own dependencies.
"""

__all__: list[str] = []
