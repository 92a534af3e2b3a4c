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
    checkpoint ``name`` (``model``), or the scripted noisy solver (``noisy``: realization effects
    skipped and couplings ignored at ``solver.noisy``'s rates; for tests, where a tiny random
    model would pass nothing)."""
    label = policy_label(solver, params, name)
    if solver == "noisy":
        rates = params.solver.noisy
        return (ScriptedBackend("noisy", seed=params.seed, skip_effect=rates.skip_effect,
                                ignore_coupling=rates.ignore_coupling), label, None)
    backend = make_backend(params.backbone, checkpoint)
    return backend, label, model_runtime(params.backbone, "generate", checkpoint)


def policy_label(solver: str, params: Params, name: str) -> str:
    """The ``policy`` a stage's trajectories record: the scripted solver's, or the backbone and its
    checkpoint ``name``'s (``smollm2/demo_sft``)."""
    return "scripted/noisy" if solver == "noisy" else f"{params.backbone.name}/{name}"
