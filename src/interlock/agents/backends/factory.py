"""Build the configured backend for a checkpoint: the one place that maps config to backend."""

from __future__ import annotations

import os
from pathlib import Path

from interlock.agents.backends import ChatBackend
from interlock.config import BackboneConfig, Params
from interlock.errors import InterlockError

#: where the ``openai`` backend finds its server (e.g. ``vllm serve`` or ``transformers serve``)
OPENAI_URL_ENV = "INTERLOCK_OPENAI_BASE_URL"


def make_backend(backbone: BackboneConfig, checkpoint: Path) -> ChatBackend:
    if not (checkpoint / "config.json").is_file():
        raise InterlockError("no checkpoint here; run `dvc repro base_model` first", file=str(checkpoint))
    if backbone.backend == "transformers":
        from interlock.agents.backends.transformers_backend import TransformersBackend

        return TransformersBackend(checkpoint, dtype=backbone.dtype, max_context=backbone.max_context)
    if backbone.backend == "openai":
        from interlock.agents.backends.openai_backend import OpenAIBackend

        url = os.environ.get(OPENAI_URL_ENV)
        if not url:
            raise InterlockError(f"set {OPENAI_URL_ENV} to the server's /v1 address (the server must "
                                 f"serve {checkpoint})", field="backbone.backend")
        return OpenAIBackend(url, str(checkpoint))
    from interlock.agents.backends.vllm_backend import VLLMBackend

    return VLLMBackend(str(checkpoint), dtype=backbone.dtype, max_model_len=backbone.max_context)


def solver_backend(solver: str, params: Params, checkpoint: Path, name: str) -> tuple[ChatBackend, str]:
    """Who acts in the episodes of a stage, and the trajectories' ``policy`` label: the model
    checkpoint ``name`` (``policy``), or the scripted noisy solver (``noisy``: realization effects
    skipped and couplings ignored at ``scale.validation``'s rates; for tests, where a tiny random
    model would pass nothing)."""
    if solver == "noisy":
        from interlock.agents.scripted import ScriptedBackend

        rates = params.scale.validation
        return (ScriptedBackend("noisy", seed=params.seed, skip_effect=rates.skip_effect,
                                ignore_coupling=rates.ignore_coupling), "scripted/noisy")
    return make_backend(params.backbone, checkpoint), f"{params.backbone.name}/{name}"
