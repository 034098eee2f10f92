"""lamella.ued: unsupervised environment design (DR, PLR, ACCEL, PAIRED) on level-based envs."""

from lamella.ued.__about__ import __version__

__all__ = ["__version__"]
