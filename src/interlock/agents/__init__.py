"""Agents: the conversation format, the tool-call protocol, model backends and the rollout engine.

Every role that calls a model (solver now; generators, critics, judges and correctors later)
goes through :class:`~interlock.agents.backends.ChatBackend`.
"""
