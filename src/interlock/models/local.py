"""What the two local model backends (``transformers``, ``llamacpp``) share: the prompt as the
checkpoint's tokenizer renders it, the stop tokens, the sampling rule and the accounting, so the
two differ only in how they compute logits and keep each episode's conversation cached.

Sampling: greedy at temperature 0, else a softmax sample from a :class:`torch.Generator` seeded
with the request's ``seed`` (so a turn is reproducible given its seed and its logits), drawn for
all rows of a step at once (:func:`draw_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from interlock.core.backend import ChatRequest, Completion, EpisodeTask, SampledTokens
from interlock.core.errors import InterlockError
from interlock.models.chat_template import IM_END, prompt_token_ids, stop_token_ids


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


@dataclass
class Row:
    """One request of a batch while it is generated."""

    index: int  # position in the request list
    request: ChatRequest
    prompt: list[int]
    generated: list[int]
    generator: torch.Generator
    logprobs: list[float] = field(default_factory=list)  # of each token drawn, its stop token's last
    done: str | None = None  # finish reason once finished
    stop: int | None = None  # the stop token it ended on
    fed: int = 0  # generated tokens fed back to the model (cached with the prompt)
    kv: list = field(default_factory=list)  # transformers: per layer, the keys/values of what was fed


def draw_tokens(logits: torch.Tensor, temperatures: list[float],
                generators: list[torch.Generator]) -> list[int]:
    """One token per row of ``logits`` from ``softmax(logits / temperature)``, by the inverse of
    its cumulative distribution at one uniform number from the row's own generator: a row's token
    depends on its logits and its generator only, not on the rows beside it. ``torch.multinomial``
    row by row did the same draw in 27 of a 32-row decode step's 29 ms of sampling over SmolLM2's
    49,152-token vocabulary (a step of the model itself: 48-152 ms); this takes about 2."""
    if not generators:
        return []
    scaled = logits.float() / torch.tensor(temperatures, dtype=torch.float32)[:, None]
    cumulative = torch.softmax(scaled, dim=-1).double().cumsum(dim=-1)
    totals = cumulative[:, -1:]
    if not bool(torch.isfinite(totals).all()):
        raise InterlockError("the model's logits are not finite numbers: there is nothing to sample from")
    uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])[:, None]
    # the first token whose cumulative share exceeds the draw: never one of probability 0
    tokens = torch.searchsorted(cumulative, uniforms * totals, right=True)
    return tokens.clamp_(max=logits.shape[-1] - 1)[:, 0].tolist()


def token_logprobs(logits: torch.Tensor, rows: list[Row], tokens: list[int]) -> list[float]:
    """``log softmax(logits / temperature)`` at each row's token (temperature 0, greedy: the
    logits as they are): what a trainer's importance ratio compares its own log-probability with."""
    temperatures = torch.tensor([row.request.temperature or 1.0 for row in rows], dtype=torch.float32)
    scaled = logits.float() / temperatures[:, None]
    chosen = scaled.gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    return (chosen - torch.logsumexp(scaled, dim=-1)).tolist()


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading token ids ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    if a[:n] == b[:n]:
        return n
    left = torch.tensor(a[:n]) != torch.tensor(b[:n])
    return int(left.nonzero()[0, 0])


class LocalBackend:
    """The tokenizer side of a local backend; subclasses compute the rows of :meth:`complete`."""

    name = "local"

    def __init__(self, tokenizer, max_context: int) -> None:
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.end_id = tokenizer.get_vocab()[IM_END]
        self.stop_ids = stop_token_ids(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id
        self.stats = BackendStats()

    def begin(self, key: str, task: EpisodeTask) -> None:
        """Models know nothing of the task beyond its messages."""

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """The request rendered with the chat template (generation prompt appended), as token ids."""
        return prompt_token_ids(self.tokenizer, request)

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)
        rows: list[Row] = []
        for index, request in enumerate(requests):
            prompt = self.prompt_ids(request)
            self.stats.requests += 1
            self.stats.prompt_tokens += len(prompt)
            if len(prompt) + request.max_new_tokens > self.max_context or len(prompt) < 1:
                results[index] = Completion("", len(prompt), 0, "context")
                continue
            rows.append(Row(index, request, prompt, [], torch.Generator().manual_seed(int(request.seed))))
        if rows:
            self._generate(rows)
        for row in rows:
            text = self.tokenizer.decode(row.generated, skip_special_tokens=False)
            ids = (*row.generated, *([] if row.stop is None else [row.stop]))
            sampled = SampledTokens(ids, tuple(row.logprobs), row.stop is not None)
            results[row.index] = Completion(text, len(row.prompt), len(ids), row.done or "length",
                                            sampled=sampled)
        return results  # type: ignore[return-value]

    def _generate(self, rows: list[Row]) -> None:
        """Generate every row until it stops or reaches its ``max_new_tokens``."""
        raise NotImplementedError

    def sample(self, rows: list[Row], logits: torch.Tensor) -> None:
        """Each row's next token from its row of ``logits``, with its log-probability under the
        distribution it was drawn from; marks the rows that finished."""
        tokens = logits.argmax(dim=-1).tolist()
        hot = [i for i, row in enumerate(rows) if row.request.temperature > 0]
        if hot:
            drawn = draw_tokens(logits[hot], [rows[i].request.temperature for i in hot],
                                [rows[i].generator for i in hot])
            for i, token in zip(hot, drawn, strict=True):
                tokens[i] = token
        for row, token, logprob in zip(rows, tokens, token_logprobs(logits, rows, tokens), strict=True):
            row.logprobs.append(logprob)
            if token in self.stop_ids:
                row.done, row.stop = "stop", token
                continue
            row.generated.append(token)
            self.stats.generated_tokens += 1
            if len(row.generated) >= row.request.max_new_tokens:
                row.done = "length"
