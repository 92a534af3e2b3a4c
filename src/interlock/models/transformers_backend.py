"""The ``transformers`` backend: a local checkpoint, every live episode's turn in one batched
decode loop, and each episode's conversation prefix kept in a KV cache between turns.

Re-reading the whole growing conversation every turn is what dominates multi-turn rollouts on a
CPU. So for every request ``key`` the backend keeps the token ids of the conversation so far and
their keys/values; on the next turn the new prompt is compared token by token with them and only
the new suffix (the assistant turn as re-rendered, the tool results, the next generation prompt)
is computed. A new episode borrows the longest matching prefix of any cached conversation (the
system prompt and tool list are the same in every episode), so that too is computed once.

One turn:

1. render each request with the chat template (``tools=``, generation prompt) and tokenize it;
   a prompt that leaves no room for ``max_new_tokens`` in the context window comes back at once
   with ``finish_reason="context"``;
2. prefill each row's uncached suffix on top of its cached prefix, one row at a time (no padding).
   Measured on 2 CPU cores with SmolLM2: 130-token prompts run at 568 tokens/s one at a time and
   548 tokens/s as a padded batch of 16, so batching the prefill gains nothing there, while
   padding suffixes of different lengths to one width wastes work (on a GPU, use ``vllm``);
3. stack the rows' caches, left-padded, into one preallocated buffer with room for the new tokens,
   and decode all rows together: one forward per step with explicit position ids and a mask
   that hides each row's padding; a row stops at ``<|im_end|>`` (or another stop token) or at its
   ``max_new_tokens``; finished rows leave the batch once carrying them would cost more than
   copying the batched cache without them;
4. keep each row's cache (prompt plus the tokens it was fed) under its key for the next turn,
   within a memory budget (``cache_bytes``; the least recently used episodes go first).

On a CPU the model attends with ``sdpa_gqa`` (:mod:`interlock.models.attention`): PyTorch's SDPA
with grouped-query attention done inside the kernel. Transformers' own SDPA path copies every
cached key and value once per query head group whenever a mask is given (``repeat_kv``), which
at a few thousand cached tokens costs more than the rest of the step (SmolLM2, batch 16, 1,500
tokens, one thread: 70 ms per layer against 5).

Tokenizing, stopping and sampling are :class:`~interlock.models.local.LocalBackend`'s, shared with
the ``llamacpp`` backend.

A request's ``response_format`` (a JSON schema: a model judge's answer) is not enforced here:
transformers has no schema-constrained decoding of its own, so the model decodes freely and the
caller's strict reading of the reply (:meth:`interlock.judging.verdicts.AnswerForm.parse`) is the
only defence; a reply that is not exactly the answer is no verdict.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from interlock.core.config import BackboneConfig
from interlock.models.attention import SlabLayer, slab_cache, use_gqa_attention
from interlock.models.backends import model_runtime
from interlock.models.local import LocalBackend, Row, common_prefix


@dataclass
class _Cached:
    """An episode's conversation so far: token ids and, per layer, their keys and values."""

    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, each [1, kv_heads, len(ids), head_dim]

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)


class TransformersBackend(LocalBackend):
    """A local Hugging Face checkpoint behind the :class:`ChatBackend` interface."""

    name = "transformers"

    def __init__(self, checkpoint: Path | str | None = None, *, model=None, tokenizer=None,
                 device: str | None = None, dtype: str = "float32", max_context: int | None = None,
                 reuse_cache: bool = True, cache_bytes: int = 4 << 30) -> None:
        if model is None:
            from interlock.models.checkpoint import load_checkpoint

            model, tokenizer = load_checkpoint(checkpoint, device, dtype)
        super().__init__(tokenizer, max_context or int(model.config.max_position_embeddings))
        self.model = model.eval()
        self.device = next(model.parameters()).device
        use_gqa_attention(model)
        self.reuse_cache = reuse_cache
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, _Cached] = OrderedDict()  # least recently used first

    def end(self, key: str) -> None:
        self._cache.pop(key, None)

    @torch.inference_mode()
    def _generate(self, rows: list[Row]) -> None:
        start = time.perf_counter()
        first = self._prefill(rows)
        self.stats.prefill_seconds += time.perf_counter() - start
        start = time.perf_counter()
        self._decode(rows, first)
        self.stats.decode_seconds += time.perf_counter() - start

    # ------------------------------------------------------------------------- prefill

    def _prefill(self, rows: list[Row]) -> torch.Tensor:
        """Compute each row's uncached prompt suffix; returns the logits of every prompt's last token."""
        from transformers import DynamicCache

        last_logits = []
        seen: dict[str, _Cached] = {}  # rows prefilled in this call, for prefix sharing
        for row in rows:
            cached, common = self._best_prefix(row, seen)
            # at least the last prompt token is computed: its logits start the generation
            common = min(common, len(row.prompt) - 1)
            past = None
            if common:
                past = DynamicCache(config=self.model.config)
                for layer, (k, v) in zip(past.layers, cached.kv, strict=True):
                    layer.lazy_initialization(k, v)
                    layer.keys, layer.values = k[:, :, :common], v[:, :, :common]
            suffix = torch.tensor([row.prompt[common:]], device=self.device)
            positions = torch.arange(common, len(row.prompt), device=self.device)[None]
            out = self.model(input_ids=suffix, position_ids=positions, past_key_values=past,
                             use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            row.kv = [(layer.keys, layer.values) for layer in cache.layers]
            last_logits.append(out.logits[0, -1].float())
            seen[row.request.key] = _Cached(row.prompt, row.kv)
            self.stats.reused_tokens += common
            self.stats.prefilled_tokens += len(row.prompt) - common
        return torch.stack(last_logits)

    def _best_prefix(self, row: Row, seen: dict[str, _Cached]) -> tuple[_Cached | None, int]:
        if not self.reuse_cache:
            return None, 0
        own = self._cache.get(row.request.key)
        if own is not None:
            self._cache.move_to_end(row.request.key)
            return own, common_prefix(own.ids, row.prompt)
        best, best_len = None, 0
        for candidate in [*seen.values(), *self._cache.values()]:
            length = common_prefix(candidate.ids, row.prompt)
            if length > best_len:
                best, best_len = candidate, length
        return best, best_len

    # ------------------------------------------------------------------------- decode

    def _decode(self, rows: list[Row], logits: torch.Tensor) -> None:
        live = list(rows)
        self.sample(live, logits)
        live = [r for r in live if r.done is None]
        if live:
            self._decode_batch(live)
        for row in rows:
            self._store(row)

    def _decode_batch(self, live: list[Row]) -> None:
        """Feed each live row its last sampled token, step after step, all rows in one forward.

        A finished row rides along (fed padding, its output ignored) until dropping the finished
        rows is cheaper than carrying them: dropping copies the whole batched cache once, carrying
        costs about one row's share of every remaining step."""
        lengths = [len(r.prompt) for r in live]
        width = max(lengths)
        capacity = width + max(r.request.max_new_tokens for r in live)
        n = len(live)
        layers = []
        for layer in range(len(live[0].kv)):
            k0 = live[0].kv[layer][0]
            shape = (n, k0.shape[1], capacity, k0.shape[3])
            keys = torch.empty(shape, dtype=k0.dtype, device=self.device)
            values = torch.empty(shape, dtype=k0.dtype, device=self.device)
            for i, row in enumerate(live):  # left padding, zeroed: masked, but never NaN
                k, v = row.kv[layer]
                start = width - k.shape[2]
                keys[i, :, :start] = 0.0
                values[i, :, :start] = 0.0
                keys[i, :, start:width] = k[0]
                values[i, :, start:width] = v[0]
            layers.append(SlabLayer(keys, values, width))
        for row in live:
            row.kv = []  # now in the slab
        dtype = layers[0].keys_buffer.dtype
        mask = torch.full((n, capacity), torch.finfo(dtype).min, dtype=dtype, device=self.device)
        for i, length in enumerate(lengths):
            mask[i, width - length:width] = 0.0
        offsets = torch.tensor(lengths, device=self.device)  # each row's next position, less the step
        cache = slab_cache(layers)
        batch = list(live)  # rows in the slab, finished ones included
        step = 0
        while True:
            tokens = torch.tensor([[r.generated[-1] if r.done is None else self.pad_id] for r in batch],
                                  device=self.device)
            mask[:, width + step] = 0.0
            out = self.model(input_ids=tokens, position_ids=(offsets + step)[:, None],
                             attention_mask=mask[:, None, None, :width + step + 1],
                             past_key_values=cache, use_cache=True)
            step += 1
            self.stats.decode_steps += 1
            active = [i for i, r in enumerate(batch) if r.done is None]
            self.sample([batch[i] for i in active], out.logits[active, -1].float())
            for i in active:
                row = batch[i]
                if row.done is not None:  # keep what the row was fed: its prompt and ``step`` tokens
                    row.fed = step
                    start = width - len(row.prompt)
                    row.kv = [(layer.keys_buffer[i:i + 1, :, start:width + step].clone(),
                               layer.values_buffer[i:i + 1, :, start:width + step].clone())
                              for layer in layers]
            keep = [i for i, r in enumerate(batch) if r.done is None]
            if not keep:
                return
            idle = len(batch) - len(keep)
            remaining = max(r.request.max_new_tokens - len(r.generated) for r in batch if r.done is None)
            if idle and idle * remaining >= len(batch):
                index = torch.tensor(keep, device=self.device)
                for layer in layers:
                    layer.select(index)
                mask, offsets = mask.index_select(0, index), offsets.index_select(0, index)
                batch = [batch[i] for i in keep]

    # ------------------------------------------------------------------------- the cache

    def _store(self, row: Row) -> None:
        """Keep the row's conversation (prompt and the tokens it was fed) under its key."""
        if not self.reuse_cache:
            return
        fed = row.prompt + row.generated[:row.fed]
        if not row.kv or row.kv[0][0].shape[2] != len(fed):  # never: a bug, so keep nothing
            self._cache.pop(row.request.key, None)
            return
        self._cache[row.request.key] = _Cached(fed, row.kv)
        self._cache.move_to_end(row.request.key)
        total = sum(c.nbytes for c in self._cache.values())
        while total > self.cache_bytes and len(self._cache) > 1:
            _, evicted = self._cache.popitem(last=False)
            total -= evicted.nbytes


def build(backbone: BackboneConfig, checkpoint: Path) -> TransformersBackend:
    dtype = model_runtime(backbone, "generate", checkpoint)["resolved_dtype"]
    return TransformersBackend(checkpoint, dtype=dtype, max_context=backbone.max_context)
