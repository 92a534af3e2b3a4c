"""The model backends by name (``backbone.backend``), and the one function that builds the
configured one for a checkpoint.

A backend registers a factory ``(backbone config, checkpoint folder) -> ChatBackend`` in its own
module under ``interlock/models/`` (or in a module of yours, named by its dotted path)::

    @BACKENDS.register("mine")
    def build(backbone: BackboneConfig, checkpoint: Path) -> ChatBackend:
        return MyBackend(checkpoint, max_context=backbone.max_context)

and a backbone option picks it (``backend: mine``). docs/authoring.md walks through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from interlock.core.backend import ChatBackend
from interlock.core.config import BackboneConfig
from interlock.core.errors import InterlockError
from interlock.core.registry import BACKENDS


class BackendFactory(Protocol):
    def __call__(self, backbone: BackboneConfig, checkpoint: Path) -> ChatBackend: ...




def make_backend(backbone: BackboneConfig, checkpoint: Path) -> ChatBackend:
    if not (checkpoint / "config.json").is_file():
        raise InterlockError("no checkpoint here; run `dvc repro base_model` first", file=str(checkpoint))
    return BACKENDS.get(backbone.backend)(backbone, checkpoint)
