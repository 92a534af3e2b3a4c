"""Checkpoints as GGUF, so llama.cpp can serve what torch trained.

Training stays in torch; every checkpoint the pipeline saves is also written here, beside its
safetensors, in two precisions (:data:`GGUF_FILES`): ``F32`` (the same weights; llama.cpp's
greedy completions match the transformers backend's) and ``Q8_0`` (8-bit blocks, about a quarter
of the size and faster to decode on a CPU). Only Llama-architecture models are written (the tiny
backbone and SmolLM2 are, with byte-level BPE tokenizers); for anything else
:func:`gguf_unsupported` says why none is written.

Two conversions make the files llama.cpp's: the query and key projections are permuted from the
Hugging Face rotary layout (the two halves of each head rotated together) to llama.cpp's
(adjacent pairs rotated together), and the tokenizer is written as a GPT-2 style byte-level BPE
(its tokens, their types and its merges). The ``llamacpp`` backend feeds llama.cpp token ids
made by the checkpoint's own Hugging Face tokenizer, so the GGUF's tokenizer matters only to
other llama.cpp tools.

Deterministic: the same checkpoint gives the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: precision -> file name, beside ``model.safetensors``
GGUF_FILES = {"F32": "model.f32.gguf", "Q8_0": "model.q8_0.gguf"}
GGUF_ARCHITECTURES = ("llama",)


def gguf_unsupported(model, tokenizer) -> str | None:
    """Why ``model`` and ``tokenizer`` cannot be written as GGUF here, or None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or json.loads(backend.to_str())["model"].get("type") != "BPE":
        return "no GGUF: only byte-level BPE tokenizers (fast tokenizers) are exported"
    model_type = model.config.model_type
    if model_type not in GGUF_ARCHITECTURES:
        return f"no GGUF: architecture {model_type!r} is not exported (only {', '.join(GGUF_ARCHITECTURES)})"
    rope = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"no GGUF: rotary scaling {rope.get('rope_type')!r} is not exported"
    return None


def write_gguf(model, tokenizer, path: Path | str, precision: str, *, name: str, max_context: int) -> Path:
    """``model`` and ``tokenizer`` as one GGUF file at ``path`` (``precision``: a key of
    :data:`GGUF_FILES`). The caller writes into a temporary folder and renames it whole."""
    import gguf

    if precision not in GGUF_FILES:
        raise ValueError(f"unknown GGUF precision {precision!r}; one of {', '.join(GGUF_FILES)}")
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    rope = getattr(config, "rope_parameters", None) or {}
    rope_theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    state = {k: v.detach().to("cpu").float().numpy() for k, v in model.state_dict().items()}
    n_vocab = state["model.embed_tokens.weight"].shape[0]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(max_context)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if precision == "F32" else gguf.LlamaFileType.MOSTLY_Q8_0)
    _add_tokenizer(writer, tokenizer, n_vocab)

    quantized = None if precision == "F32" else gguf.GGMLQuantizationType.Q8_0
    for hf_name, array in state.items():
        gguf_name = _tensor_name(hf_name)
        if gguf_name is None:
            continue
        if gguf_name.endswith("attn_q.weight"):
            array = _rotary_permuted(array, heads)
        elif gguf_name.endswith("attn_k.weight"):
            array = _rotary_permuted(array, kv_heads)
        array = np.ascontiguousarray(array, dtype=np.float32)
        if quantized is not None and array.ndim == 2 and array.shape[-1] % 32 == 0:
            writer.add_tensor(gguf_name, gguf.quants.quantize(array, quantized), raw_dtype=quantized)
        else:  # norms (1-D) stay F32, as llama.cpp expects
            writer.add_tensor(gguf_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


_LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _tensor_name(hf_name: str) -> str | None:
    """llama.cpp's name for a Hugging Face Llama tensor; None for what it does not take (a rotary
    cache; a tied output projection, which llama.cpp takes from the embedding)."""
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in _LAYER_TENSORS:
        return f"blk.{parts[2]}.{_LAYER_TENSORS[parts[3]]}"
    if hf_name.endswith("rotary_emb.inv_freq"):
        return None
    raise ValueError(f"unexpected tensor {hf_name!r} in a Llama checkpoint")


def _rotary_permuted(weights: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a query/key projection reordered from rotate-half to adjacent-pair rotary."""
    half = weights.shape[0] // heads // 2
    return weights.reshape(heads, 2, half, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def _add_tokenizer(writer, tokenizer, n_vocab: int) -> None:
    """A byte-level BPE tokenizer: tokens by id (padded with unused ones up to the embedding's
    rows), their types, merges, and the special tokens' ids."""
    import gguf

    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = tokenizer.get_vocab()
    by_id = {i: token for token, i in vocab.items()}
    special = set(tokenizer.all_special_ids) | {
        t["id"] for t in backend.get("added_tokens", []) if t.get("special")}
    tokens, types = [], []
    for i in range(n_vocab):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"].get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer(backend))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if tokenizer.eos_token_id is not None:
        writer.add_eos_token_id(tokenizer.eos_token_id)
    if tokenizer.bos_token_id is not None:
        writer.add_bos_token_id(tokenizer.bos_token_id)
    if tokenizer.pad_token_id is not None:
        writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)


def _pre_tokenizer(backend: dict) -> str:
    """llama.cpp's name for the pre-tokenizer: ``smollm`` (digits split one by one, then
    byte-level, as SmolLM2's), else ``default`` (GPT-2's)."""
    pre = backend.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre])
    kinds = [step.get("type") for step in steps]
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits"):
        return "smollm"
    return "default"
