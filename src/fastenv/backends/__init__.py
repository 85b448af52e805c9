"""Simulator adapters: one module per simulator, the only place that imports it; and the registry
that finds the backend for an env someone already built."""

from fastenv.backends.base import BatchSimulator, GymAdapter, SimulatorAdapter
from fastenv.backends.registry import find_backend, register_backend

__all__ = ["BatchSimulator", "GymAdapter", "SimulatorAdapter", "find_backend", "register_backend"]
