"""Build the configured model backend for a checkpoint: the one place that maps the backbone config
to a backend."""

from __future__ import annotations

import os
from pathlib import Path

from interlock.core.backend import ChatBackend
from interlock.core.config import BackboneConfig
from interlock.core.errors import InterlockError

#: where the ``openai`` backend finds its server (e.g. ``vllm serve`` or ``transformers serve``)
OPENAI_URL_ENV = "INTERLOCK_OPENAI_BASE_URL"


def make_backend(backbone: BackboneConfig, checkpoint: Path) -> ChatBackend:
    if not (checkpoint / "config.json").is_file():
        raise InterlockError("no checkpoint here; run `dvc repro base_model` first", file=str(checkpoint))
    if backbone.backend == "transformers":
        from interlock.models.transformers_backend import TransformersBackend

        return TransformersBackend(checkpoint, dtype=backbone.dtype, max_context=backbone.max_context)
    if backbone.backend == "llamacpp":
        from interlock.models.llamacpp_backend import LlamaCppBackend

        return LlamaCppBackend(checkpoint, precision=backbone.gguf, max_context=backbone.max_context)
    if backbone.backend == "openai":
        from interlock.models.openai_backend import OpenAIBackend

        url = os.environ.get(OPENAI_URL_ENV)
        if not url:
            raise InterlockError(f"set {OPENAI_URL_ENV} to the server's /v1 address (the server must "
                                 f"serve {checkpoint})", field="backbone.backend")
        return OpenAIBackend(url, str(checkpoint))
    from interlock.models.vllm_backend import VLLMBackend

    return VLLMBackend(str(checkpoint), dtype=backbone.dtype, max_model_len=backbone.max_context)
