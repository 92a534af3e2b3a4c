"""How the transformers backend attends and caches on a CPU, apart from the backend so that the
dtype probe (:mod:`interlock.models.dtype`) times the very code the rollout loop runs.

- :func:`use_gqa_attention` switches a CPU model to ``sdpa_gqa``: PyTorch's SDPA with
  grouped-query attention done inside the kernel. Transformers' own SDPA path copies every cached
  key and value once per query head group whenever a mask is given (``repeat_kv``), which at a few
  thousand cached tokens costs more than the rest of the step.
- :class:`SlabLayer` is a decode cache layer over a preallocated buffer, written in place.
"""

from __future__ import annotations

import torch


class SlabLayer:
    """A cache layer over a preallocated ``[batch, heads, capacity, dim]`` buffer: decode steps
    write in place instead of concatenating (which would copy the whole cache every step)."""

    is_sliding = False
    is_compileable = False
    is_initialized = True

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        self.keys_buffer, self.values_buffer, self.length = keys, values, length

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self.keys_buffer[:, :, self.length:end] = key_states
        self.values_buffer[:, :, self.length:end] = value_states
        self.length = end
        return self.keys_buffer[:, :, :end], self.values_buffer[:, :, :end]

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return self.keys_buffer.shape[-2]

    def select(self, indices: torch.Tensor) -> None:
        self.keys_buffer = self.keys_buffer.index_select(0, indices)
        self.values_buffer = self.values_buffer.index_select(0, indices)


GQA_ATTENTION = "sdpa_gqa"


def sdpa_gqa_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0,
                       scaling: float | None = None, is_causal: bool | None = None,
                       **kwargs) -> tuple[torch.Tensor, None]:
    """Transformers' SDPA attention, with the key/value head groups handled by the kernel."""
    q_length = query.shape[2]
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(q_length > 1 and attention_mask is None and is_causal)
    if is_causal and key.shape[2] > q_length:  # a skipped (pure causal) mask over an empty static cache
        key, value = key[:, :, :q_length], value[:, :, :q_length]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def use_gqa_attention(model) -> bool:
    """Switch a CPU model from ``sdpa`` to :func:`sdpa_gqa_attention` (same masks, same results)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if model.config._attn_implementation not in ("sdpa", GQA_ATTENTION):
        return False
    if next(model.parameters()).device.type != "cpu":  # CUDA's fused kernels take no GQA with a mask
        return False
    AttentionInterface.register(GQA_ATTENTION, sdpa_gqa_attention)
    AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)
    model.set_attn_implementation(GQA_ATTENTION)
    return True


def slab_cache(layers: list[SlabLayer]):
    from transformers.cache_utils import Cache

    cache = Cache(layers=layers)
    return cache
