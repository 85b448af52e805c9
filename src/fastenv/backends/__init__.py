"""Simulator adapters: one module per simulator, the only place that imports it."""

from fastenv.backends.base import GymAdapter, SimulatorAdapter

__all__ = ["GymAdapter", "SimulatorAdapter"]
