"""Adapters for the RL libraries users train with (each imports its library lazily)."""
