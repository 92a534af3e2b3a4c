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

On a CPU the model attends with ``sdpa_gqa``: PyTorch's SDPA with grouped-query attention done
inside the kernel. Transformers' own SDPA path copies every cached key and value once per query
head group whenever a mask is given (``repeat_kv``), which at a few thousand cached tokens costs
more than the rest of the step (SmolLM2, batch 16, 1,500 tokens, one thread: 70 ms per layer
against 5).

Sampling: greedy at temperature 0, else a softmax sample from a :class:`torch.Generator` seeded
with the request's ``seed`` (so a turn is reproducible given its seed and its batch).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from interlock.core.backend import ChatRequest, Completion, EpisodeTask
from interlock.models.chat_template import END_OF_TEXT, IM_END, IM_START, openai_tools


@dataclass
class _Cached:
    """An episode's conversation so far: token ids and, per layer, their keys and values."""

    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, each [1, kv_heads, len(ids), head_dim]

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)


@dataclass
class _Row:
    index: int  # position in the request list
    request: ChatRequest
    prompt: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # what the row was fed
    generated: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    done: str | None = None  # finish reason once finished
    fed: int = 0  # generated tokens fed back to the model (their keys/values are in ``kv``)


@dataclass
class BackendStats:
    """What the backend computed (tokens) and how long it took; for benchmarks and logs."""

    requests: int = 0
    prompt_tokens: int = 0  # full prompt lengths, as reported to the caller
    prefilled_tokens: int = 0  # prompt tokens actually computed
    reused_tokens: int = 0  # prompt tokens taken from a cache
    generated_tokens: int = 0
    decode_steps: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def processed_tokens(self) -> int:
        return self.prefilled_tokens + self.generated_tokens


class _SlabLayer:
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


def _slab_cache(layers: list[_SlabLayer]):
    from transformers.cache_utils import Cache

    cache = Cache(layers=layers)
    return cache


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    if a[:n] == b[:n]:
        return n
    left = torch.tensor(a[:n]) != torch.tensor(b[:n])
    return int(left.nonzero()[0, 0])


class TransformersBackend:
    """A local Hugging Face checkpoint behind the :class:`ChatBackend` interface."""

    name = "transformers"

    def __init__(self, checkpoint: Path | str | None = None, *, model=None, tokenizer=None,
                 device: str | None = None, dtype: str = "float32", max_context: int | None = None,
                 reuse_cache: bool = True, cache_bytes: int = 4 << 30) -> None:
        if model is None:
            from interlock.models.checkpoint import load_checkpoint

            model, tokenizer = load_checkpoint(checkpoint, device, dtype)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.device = next(model.parameters()).device
        use_gqa_attention(model)
        self.max_context = max_context or int(model.config.max_position_embeddings)
        self.reuse_cache = reuse_cache
        self.cache_bytes = cache_bytes
        vocab = tokenizer.get_vocab()
        self.end_id = vocab[IM_END]
        self.stop_ids = {vocab[t] for t in (IM_END, END_OF_TEXT, IM_START) if t in vocab}
        if tokenizer.eos_token_id is not None:
            self.stop_ids.add(tokenizer.eos_token_id)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id
        self._cache: OrderedDict[str, _Cached] = OrderedDict()  # least recently used first
        self.stats = BackendStats()

    # ------------------------------------------------------------------------- interface

    def begin(self, key: str, task: EpisodeTask) -> None:
        """Models know nothing of the task beyond its messages."""

    def end(self, key: str) -> None:
        self._cache.pop(key, None)

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """The request rendered with the chat template (generation prompt appended), as token ids."""
        text = self.tokenizer.apply_chat_template(
            [m.to_dict() for m in request.messages], tools=openai_tools(request.tools) or None,
            add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.inference_mode()
    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)
        rows: list[_Row] = []
        for index, request in enumerate(requests):
            prompt = self.prompt_ids(request)
            self.stats.requests += 1
            self.stats.prompt_tokens += len(prompt)
            if len(prompt) + request.max_new_tokens > self.max_context or len(prompt) < 1:
                results[index] = Completion("", len(prompt), 0, "context")
                continue
            rows.append(_Row(index, request, prompt))
        if rows:
            start = time.perf_counter()
            first = self._prefill(rows)
            self.stats.prefill_seconds += time.perf_counter() - start
            start = time.perf_counter()
            self._decode(rows, first)
            self.stats.decode_seconds += time.perf_counter() - start
        for row in rows:
            text = self.tokenizer.decode(row.generated, skip_special_tokens=False)
            results[row.index] = Completion(text, len(row.prompt), len(row.generated) + (row.done == "stop"),
                                            row.done or "length")
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------------- prefill

    def _prefill(self, rows: list[_Row]) -> torch.Tensor:
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

    def _best_prefix(self, row: _Row, seen: dict[str, _Cached]) -> tuple[_Cached | None, int]:
        if not self.reuse_cache:
            return None, 0
        own = self._cache.get(row.request.key)
        if own is not None:
            self._cache.move_to_end(row.request.key)
            return own, _common_prefix(own.ids, row.prompt)
        best, best_len = None, 0
        for candidate in [*seen.values(), *self._cache.values()]:
            length = _common_prefix(candidate.ids, row.prompt)
            if length > best_len:
                best, best_len = candidate, length
        return best, best_len

    # ------------------------------------------------------------------------- decode

    def _decode(self, rows: list[_Row], logits: torch.Tensor) -> None:
        for row in rows:
            row.generator = torch.Generator().manual_seed(int(row.request.seed))
        live = list(rows)
        self._sample(live, logits)
        live = [r for r in live if r.done is None]
        if live:
            self._decode_batch(live)
        for row in rows:
            self._store(row)

    def _decode_batch(self, live: list[_Row]) -> None:
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
            layers.append(_SlabLayer(keys, values, width))
        for row in live:
            row.kv = []  # now in the slab
        dtype = layers[0].keys_buffer.dtype
        mask = torch.full((n, capacity), torch.finfo(dtype).min, dtype=dtype, device=self.device)
        for i, length in enumerate(lengths):
            mask[i, width - length:width] = 0.0
        offsets = torch.tensor(lengths, device=self.device)  # each row's next position, less the step
        cache = _slab_cache(layers)
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
            self._sample([batch[i] for i in active], out.logits[active, -1].float())
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

    def _sample(self, rows: list[_Row], logits: torch.Tensor) -> None:
        greedy = logits.argmax(dim=-1).tolist()
        for i, row in enumerate(rows):
            temperature = row.request.temperature
            if temperature > 0:
                probs = torch.softmax(logits[i] / temperature, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=row.generator))
            else:
                token = greedy[i]
            if token in self.stop_ids:
                row.done = "stop"
                continue
            row.generated.append(token)
            self.stats.generated_tokens += 1
            if len(row.generated) >= row.request.max_new_tokens:
                row.done = "length"

    # ------------------------------------------------------------------------- the cache

    def _store(self, row: _Row) -> None:
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
