"""Build the configured model backend for a checkpoint: the one place that maps the backbone config
to a backend."""

from __future__ import annotations

import os
from pathlib import Path

from interlock.core.backend import ChatBackend
from interlock.core.config import BackboneConfig
from interlock.core.errors import InterlockError

#: where the ``openai`` backend finds its servers (e.g. ``vllm serve`` or ``transformers serve``) when
#: ``backbone.server.base_urls`` is empty: one ``/v1`` address, or several separated by commas
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

        server = backbone.server
        urls = server.base_urls or [u for u in os.environ.get(OPENAI_URL_ENV, "").split(",") if u.strip()]
        if not urls:
            raise InterlockError(f"set backbone.server.base_urls, or {OPENAI_URL_ENV}, to the servers' "
                                 f"/v1 addresses (they must serve {checkpoint})",
                                 field="backbone.server.base_urls")
        return OpenAIBackend(urls, str(checkpoint), max_in_flight=server.max_in_flight,
                             max_retries=server.max_retries, timeout_s=server.timeout_s)
    from interlock.models.vllm_backend import VLLMBackend

    return VLLMBackend(str(checkpoint), dtype=backbone.dtype, max_model_len=backbone.max_context)
