"""The composed configuration for tests that build a config section in code: they take the
defaults conf/ declares and change only what they test, so no default is written twice."""

from __future__ import annotations

import functools

from interlock.core.config import Params, default_params


@functools.cache
def defaults(*overrides: str) -> Params:
    """``conf/`` composed with Hydra ``overrides`` (``"backbone=tiny"``), validated; once per process."""
    return default_params(list(overrides))
