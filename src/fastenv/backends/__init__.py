"""Simulator adapters: one package per simulator, the only place that imports it.

Each backend imports only ``fastenv.core`` (the protocols it implements, ``SimEnv``) and its
simulator; its envs are assembled into wrapped and vector envs in ``fastenv.envs``.
"""
