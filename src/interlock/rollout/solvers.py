"""Who acts in a stage's episodes: a model checkpoint through the configured backend, or a scripted
solver."""

from __future__ import annotations

from pathlib import Path

from interlock.core.backend import ChatBackend
from interlock.core.config import Params
from interlock.models.backends import make_backend, model_runtime
from interlock.rollout.scripted import ScriptedBackend


def solver_backend(solver: str, params: Params, checkpoint: Path,
                   name: str) -> tuple[ChatBackend, str, dict | None]:
    """Who acts in the episodes of a stage, the trajectories' ``policy`` label, and what computes
    the model (:func:`~interlock.models.backends.model_runtime`; None: no model runs): the model
    checkpoint ``name`` (``policy``), or the scripted noisy solver (``noisy``: realization effects
    skipped and couplings ignored at ``scale.validation``'s rates; for tests, where a tiny random
    model would pass nothing)."""
    if solver == "noisy":
        rates = params.scale.validation
        return (ScriptedBackend("noisy", seed=params.seed, skip_effect=rates.skip_effect,
                                ignore_coupling=rates.ignore_coupling), "scripted/noisy", None)
    return (make_backend(params.backbone, checkpoint), f"{params.backbone.name}/{name}",
            model_runtime(params.backbone, "generate", checkpoint))
