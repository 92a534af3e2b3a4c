"""Interlock: completion-graph task synthesis for agent training."""

__version__ = "0.1.0"
