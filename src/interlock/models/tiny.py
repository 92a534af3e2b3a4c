"""The tiny randomly initialised test backbone: a byte-level BPE tokenizer trained in seconds on
task text, and a two-layer Llama built from a config. No download, no hub."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from interlock.core.chat import ToolCall, render_call
from interlock.core.errors import InterlockError
from interlock.core.io import dumps
from interlock.models.chat_template import (
    CHAT_TEMPLATE,
    END_OF_TEXT,
    IM_END,
    SPECIAL_TOKENS,
    TOOLS_PREAMBLE,
    TOOLS_USAGE,
)
from interlock.models.checkpoint import save_checkpoint
from interlock.synthesis.packs import TaskPack
from interlock.synthesis.workspace import TOOL_SPECS

#: the default architecture of the tiny backbone (overridable from conf/backbone/tiny.yaml); the
#: initializer range is large enough that the random model's output depends on its context
#: (at the usual 0.02 it repeats one token whatever it reads, which tests nothing); heads of 32
#: dimensions, the least vLLM's CPU attention takes, so every stage can serve it through vLLM
TINY_ARCHITECTURE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                     "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 3072,
                     "initializer_range": 0.3}
#: fixed text of the chat template, added to the corpus so its pieces get tokens of their own
TEMPLATE_TEXT = ["system", "user", "assistant", "tool", TOOLS_PREAMBLE, TOOLS_USAGE]


def train_tokenizer(texts: Iterable[str], vocab_size: int = 3072):
    """A byte-level BPE trained on ``texts``, with the chat special tokens, wrapped for
    transformers and carrying the project's chat template. Deterministic for the same texts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator([*TEMPLATE_TEXT * 8, *texts], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=IM_END, pad_token=END_OF_TEXT,
                                        bos_token=None, unk_token=None, model_max_length=None,
                                        clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model(tokenizer, seed: int, max_context: int, architecture: dict | None = None):
    """A randomly initialised LlamaForCausalLM (fp32), the same weights for the same seed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = {**TINY_ARCHITECTURE, **(architecture or {})}
    arch.pop("vocab_size")  # the tokenizer decides
    unknown = sorted(set(arch) - set(TINY_ARCHITECTURE))
    if unknown:
        raise InterlockError(f"unknown tiny architecture key(s) {', '.join(unknown)}; known: "
                             f"{', '.join(TINY_ARCHITECTURE)}", field="backbone.weights.architecture")
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=max_context,
                         tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
                         pad_token_id=tokenizer.convert_tokens_to_ids(END_OF_TEXT), **arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(torch.float32).eval()


def build_tiny(out_dir: Path | str, corpus_texts: Iterable[str], seed: int, *, max_context: int = 4096,
               architecture: dict | None = None, name: str | None = None) -> Path:
    """Train the tokenizer on ``corpus_texts``, initialise the model from ``seed`` and save both
    (safetensors, tokenizer, chat template) to ``out_dir``. Same seed and corpus, same bytes."""
    vocab = {**TINY_ARCHITECTURE, **(architecture or {})}["vocab_size"]
    tokenizer = train_tokenizer(corpus_texts, vocab)
    model = tiny_model(tokenizer, seed, max_context, architecture)
    return save_checkpoint(model, tokenizer, out_dir, source="tiny", origin=f"random init, seed {seed}",
                           max_context=max_context, name=name)


def pack_texts(packs: Iterable[TaskPack]) -> list[str]:
    """Task text to train the tiny tokenizer on: each task's request and workspace files, and its
    reference solution as calls and observations (so tool-call JSON gets tokens of its own)."""
    texts = [dumps(TOOL_SPECS)]
    for pack in packs:
        texts.append(pack.request)
        texts += [f"{path}\n{content}" for path, content in sorted(pack.files.items())]
        for step in pack.reference:
            texts.append(render_call(ToolCall(step["tool"], json.loads(step["arguments"]))))
            texts.append(step["observation"])
    return texts
