"""The model backends by name (``backbone.backend``), and the one function that builds the
configured one for a checkpoint.

A backend is a factory ``(backbone config, checkpoint folder) -> ChatBackend`` in a module (here
or in a package of yours)::

    def build(backbone: BackboneConfig, checkpoint: Path) -> ChatBackend:
        return MyBackend(checkpoint, max_context=backbone.max_context)

registered by one line of a ``pyproject.toml`` (``[project.entry-points."interlock.backends"]``:
``mine = "mylab.backend:build"``, :mod:`interlock.core.registry`); ``backbone.backend=mine`` picks
it. docs/authoring.md walks through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from interlock.core.backend import ChatBackend
from interlock.core.config import BackboneConfig
from interlock.core.errors import InterlockError
from interlock.core.registry import BACKENDS
from interlock.models.dtype import resolve_dtype
from interlock.models.engine import resolve_backend


class BackendFactory(Protocol):
    def __call__(self, backbone: BackboneConfig, checkpoint: Path) -> ChatBackend: ...


#: the backends that run the checkpoint in torch, in the dtype ``backbone.dtype`` resolves to
TORCH_BACKENDS = ("transformers", "vllm")


def model_runtime(backbone: BackboneConfig, workload: str, checkpoint: Path, *,
                  backend: str | None = None) -> dict:
    """What computes a model's ``workload`` (``generate`` or ``train``) on ``checkpoint``, as a
    stage records it (its metrics and W&B config): ``backend`` (default the configured one; the
    trainer and the intervention scorer run the checkpoint through ``transformers`` whatever it
    is); ``engine``, what runs it (``backend`` itself, or for ``auto`` the engine it resolves to
    on this machine: :mod:`interlock.models.engine`); ``dtype`` as configured and
    ``resolved_dtype``, the dtype it computes in. That is ``backbone.dtype`` resolved
    (:func:`~interlock.models.dtype.resolve_dtype`) where torch runs the model: on the CPU for the
    transformers engine, on the GPU where there is one for vllm and for training. llamacpp
    computes in its GGUF's precision (``gguf``; ``backbone.dtype`` does not apply: no resolved
    dtype), openai and other backends in what their servers or authors chose (None). The torch
    engines load in this dtype, so the record is what runs. Where the stage serves its checkpoint
    itself (``backbone.serve``), ``backend`` is the engine of that server and ``served`` is true."""
    served = backend is None and backbone.serve != "none"
    backend = backend or (backbone.serve if served else backbone.backend)
    engine = resolve_backend(backend)
    record = {"backend": backend, "engine": engine, "served": served, "dtype": backbone.dtype,
              "resolved_dtype": None}
    if engine == "llamacpp":
        record["gguf"] = backbone.gguf
    elif engine in TORCH_BACKENDS:
        import torch

        gpu = (engine == "vllm" or workload == "train") and torch.cuda.is_available()
        record["resolved_dtype"] = resolve_dtype(backbone.dtype, workload, checkpoint,
                                                 device="cuda" if gpu else "cpu")
    return record


def make_backend(backbone: BackboneConfig, checkpoint: Path) -> ChatBackend:
    """The configured backend over ``checkpoint``; with ``backbone.serve`` set, a server of the
    checkpoint this process starts (and stops when the backend is released: its ``close``)."""
    if not (checkpoint / "config.json").is_file():
        raise InterlockError("no checkpoint here; run `dvc repro base_model` first", file=str(checkpoint))
    return BACKENDS.get(backbone.builder())(backbone, checkpoint)
