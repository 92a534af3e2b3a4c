"""The ``llamacpp`` backend: a checkpoint's GGUF file served by llama.cpp on the CPU.

On a laptop's CPU, llama.cpp decodes a small model at one episode at a time about 4x faster than
torch; at the default run's 16-32 episodes at a time it decodes 15-29% faster but prefills at
half the speed, and the two cancel (measured on 2 cores with SmolLM2: docs/measurements.md), so
the default stays ``transformers``. The backend keeps the transformers backend's behaviour and
differs only in where logits come from:

- one llama.cpp context holds every live episode as a sequence of its own, each with its own KV
  cells (``max_context`` of them: llama.cpp's per-sequence streams; one unified pool makes every
  token attend over every episode's cells, masked, which at 16 episodes of 2,000 tokens doubles a
  decoding step);
- a turn computes only what the sequence has not seen: the new prompt is compared token by token
  with the episode's cached conversation, the rest is removed from the cache and the new suffix
  is computed; a new episode first copies the cached sequence with the longest matching prefix
  (the system prompt and the tool list are shared by every episode) and keeps that prefix;
- decoding feeds every live row its last token in one batch per step; a finished row just leaves
  the batch;
- token ids come from the checkpoint's own Hugging Face tokenizer and go back through it, so
  prompts, stop tokens and sampling are those of :class:`~interlock.models.local.LocalBackend`,
  shared with the transformers backend.

Which file: ``model.f32.gguf`` (the same weights as the safetensors; greedy completions match
the transformers backend's, tested) or ``model.q8_0.gguf`` (faster; its agreement is measured in
``perf/llamacpp_backend.py``). With the F32 file the KV cache is f32 and flash attention
is off (llama.cpp's CPU flash attention rounds through f16: logits then differ by about 1e-3
of their scale, against 1e-6 without); with Q8_0 the cache is f16, flash attention off too (it is
slower on these CPUs). Memory: the cache is allocated whole, ``max_sequences x max_context``
cells; SmolLM2 takes 23 KB a cell at f16 (6 GB for 32 episodes of 8,192 tokens), 46 KB at f32.

A request with a ``response_format`` (a JSON schema: a model judge's answer) is decoded under
llama.cpp's grammar sampler: the schema becomes a GBNF grammar (llama-cpp-python's
``json_schema_to_gbnf``), and at every step the row's logits are masked to the tokens the grammar
allows next (``llama_sampler_apply``), then the sampled token is fed to it
(``llama_sampler_accept``); the end of turn is allowed only once the answer is complete. The
sampling rule is otherwise the shared one; the caller still validates the reply (a reply cut at
``max_new_tokens`` is incomplete).

llama.cpp comes from ``llama-cpp-python``, built from source by the project's set-up with the
flags that work on these machines (``make llamacpp``; see the Makefile).
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from interlock.core.config import BackboneConfig
from interlock.core.errors import InterlockError
from interlock.models.gguf_export import GGUF_FILES
from interlock.models.local import LocalBackend, Row, common_prefix

#: the episodes one context holds at once (the default scale rolls out 32 at a time)
MAX_SEQUENCES = 32
#: tokens per llama_decode call while prefilling
BATCH_TOKENS = 512
#: ggml's type ids for the KV cache
_GGML_F32, _GGML_F16 = 0, 1

INSTALL_HINT = ("the llamacpp backend needs llama-cpp-python built for this CPU: run `make llamacpp` "
                "(the Makefile's flags: this CPU's instruction set but never AMX, which crashes here)")


def import_llama_cpp():
    """The ``llama_cpp`` module, or a clear error saying how to install it."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise InterlockError(f"{INSTALL_HINT} ({exc})", field="backbone.backend") from None
    return llama_cpp


_LOG_CALLBACK = None  # kept alive: llama.cpp holds the pointer


def _silence(llama_cpp) -> None:
    """llama.cpp logs every load to stderr; the backend reports through its own stats instead."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is None:
        _LOG_CALLBACK = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


class _Grammar:
    """llama.cpp's grammar sampler for one row constrained to a JSON schema: it masks the row's
    logits to the tokens the grammar allows next, and is told each token the row takes."""

    #: llama.cpp's ``llama_token_data`` (id, logit, p) as a numpy record
    TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])

    def __init__(self, lib, vocab, n_vocab: int, schema: dict) -> None:
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        if ctypes.sizeof(lib.llama_token_data) != self.TOKEN_DATA.itemsize:
            raise InterlockError("this llama-cpp-python's llama_token_data is not (int32, float, float)",
                                 field="backbone.backend")
        self._lib, self.n_vocab = lib, n_vocab
        grammar = json_schema_to_gbnf(json.dumps(schema))
        self._sampler = lib.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if not self._sampler:
            raise InterlockError("llama.cpp cannot make a grammar of this response format",
                                 field="response_format")
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._data = np.zeros(n_vocab, dtype=self.TOKEN_DATA)
        self._array = lib.llama_token_data_array(
            data=ctypes.cast(self._data.ctypes.data, lib.llama_token_data_p), size=n_vocab, selected=-1,
            sorted=False)

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` with every token the grammar refuses next at minus infinity."""
        data = self._data
        data["id"], data["logit"], data["p"] = self._ids, logits.numpy(), 0.0
        self._array.size, self._array.selected, self._array.sorted = self.n_vocab, -1, False
        self._lib.llama_sampler_apply(self._sampler, ctypes.byref(self._array))
        kept = data[:self._array.size]
        masked = np.full(self.n_vocab, -np.inf, dtype=np.float32)
        masked[kept["id"]] = kept["logit"]
        return torch.from_numpy(masked)

    def accept(self, token: int) -> None:
        self._lib.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        if self._sampler:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None


class _Sequence:
    """An episode's place in the context: its sequence id and the token ids cached under it."""

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.ids: list[int] = []


class LlamaCppBackend(LocalBackend):
    """A checkpoint's GGUF behind the :class:`ChatBackend` interface, through llama.cpp."""

    name = "llamacpp"

    def __init__(self, checkpoint: Path | str, *, precision: str = "Q8_0", max_context: int | None = None,
                 threads: int | None = None, max_sequences: int = MAX_SEQUENCES) -> None:
        from transformers import AutoTokenizer

        checkpoint = Path(checkpoint)
        if precision not in GGUF_FILES:
            raise InterlockError(f"unknown GGUF precision {precision!r}; one of {', '.join(GGUF_FILES)}",
                                 field="backbone.gguf")
        path = checkpoint / GGUF_FILES[precision]
        if not path.is_file():
            raise InterlockError(f"no {GGUF_FILES[precision]} in the checkpoint (written by interlock since "
                                 "the llamacpp backend; re-run the stage that made it)", file=str(checkpoint))
        llama_cpp = import_llama_cpp()
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        super().__init__(tokenizer, max_context or int(tokenizer.model_max_length))
        self.precision = precision
        self._lib = llama_cpp
        _silence(llama_cpp)
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 0
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            raise InterlockError("llama.cpp cannot load this GGUF file", file=str(path))
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._grammars: dict[int, _Grammar] = {}  # row index -> its grammar, while a turn is generated
        threads = threads or len(os.sched_getaffinity(0))
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = self.max_context * max_sequences
        params.n_batch = params.n_ubatch = self.chunk = BATCH_TOKENS
        params.n_seq_max = max_sequences
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = False  # every sequence attends over its own cells only
        params.type_k = params.type_v = _GGML_F32 if precision == "F32" else _GGML_F16
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise InterlockError(f"llama.cpp cannot make a context of {max_sequences} x {self.max_context} "
                                 "KV cells (too little memory?)", file=str(path))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.chunk, 0, 1)
        self._free_ids = list(range(max_sequences - 1, -1, -1))
        self._sequences: OrderedDict[str, _Sequence] = OrderedDict()  # least recently used first

    def close(self) -> None:
        """Free llama.cpp's memory now (also done when the backend is collected)."""
        if getattr(self, "_ctx", None):
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._lib.llama_model_free(self._model)
            self._ctx = None

    def __del__(self) -> None:
        self.close()

    def end(self, key: str) -> None:
        sequence = self._sequences.pop(key, None)
        if sequence is not None:
            self._lib.llama_memory_seq_rm(self._memory, sequence.seq_id, -1, -1)
            self._free_ids.append(sequence.seq_id)

    # ------------------------------------------------------------------------- generation

    def _generate(self, rows: list[Row]) -> None:
        try:
            for row in rows:
                if row.request.response_format is not None:
                    self._grammars[row.index] = _Grammar(self._lib, self._vocab, self.n_vocab,
                                                         row.request.response_format)
            self._generate_rows(rows)
        finally:
            for grammar in self._grammars.values():
                grammar.close()
            self._grammars = {}

    def sample(self, rows: list[Row], logits: torch.Tensor) -> None:
        """The shared sampling rule, on logits masked by each constrained row's grammar; the token
        a constrained row takes is fed to its grammar."""
        constrained = [(i, row, self._grammars[row.index]) for i, row in enumerate(rows)
                       if row.index in self._grammars]
        if not constrained:
            super().sample(rows, logits)
            return
        logits = logits.clone()
        for i, row, grammar in constrained:
            logits[i] = grammar.mask(logits[i])
            if not torch.isfinite(logits[i]).any():  # the grammar allows nothing more: the turn ends
                row.done = "stop"
        open_rows = [i for i, row in enumerate(rows) if row.done is None]
        before = [len(row.generated) for row in rows]
        super().sample([rows[i] for i in open_rows], logits[open_rows])
        for i, row, grammar in constrained:
            if len(row.generated) > before[i]:
                grammar.accept(row.generated[-1])

    def _generate_rows(self, rows: list[Row]) -> None:
        start = time.perf_counter()
        logits = torch.stack([self._prefill(row, rows) for row in rows])
        self.stats.prefill_seconds += time.perf_counter() - start
        start = time.perf_counter()
        self.sample(rows, logits)
        live = [r for r in rows if r.done is None]
        while live:
            for row in live:
                row.fed += 1
            logits = self._run([(self._sequences[r.request.key], [r.generated[-1]], len(r.prompt) + r.fed - 1)
                                for r in live])
            self.stats.decode_steps += 1
            self.sample(live, logits)
            live = [r for r in live if r.done is None]
        for row in rows:
            self._sequences[row.request.key].ids = row.prompt + row.generated[:row.fed]
        self.stats.decode_seconds += time.perf_counter() - start

    def _prefill(self, row: Row, batch_rows: list[Row]) -> torch.Tensor:
        """Bring the row's sequence to its prompt; the logits of the prompt's last token."""
        key = row.request.key
        sequence = self._sequences.get(key)
        if sequence is None:
            sequence = self._sequences[key] = _Sequence(self._claim_id(batch_rows))
            source, common = self._best_prefix(row.prompt, exclude=key)
            if common:  # copied whole (per-sequence buffers copy no part), the rest removed below
                self._lib.llama_memory_seq_cp(self._memory, source.seq_id, sequence.seq_id, -1, -1)
        else:
            self._sequences.move_to_end(key)
            common = common_prefix(sequence.ids, row.prompt)
        common = min(common, len(row.prompt) - 1)  # the last prompt token is computed: its logits start
        self._lib.llama_memory_seq_rm(self._memory, sequence.seq_id, common, -1)
        sequence.ids = row.prompt[:common]
        self.stats.reused_tokens += common
        self.stats.prefilled_tokens += len(row.prompt) - common
        logits = None
        for start in range(common, len(row.prompt), self.chunk):
            chunk = row.prompt[start:start + self.chunk]
            logits = self._run([(sequence, chunk, start)])[0]
            sequence.ids = row.prompt[:start + len(chunk)]
        return logits

    def _best_prefix(self, prompt: list[int], exclude: str) -> tuple[_Sequence | None, int]:
        best, best_len = None, 0
        for key, candidate in self._sequences.items():
            if key == exclude:
                continue
            length = common_prefix(candidate.ids, prompt)
            if length > best_len:
                best, best_len = candidate, length
        return best, best_len

    def _claim_id(self, batch_rows: list[Row]) -> int:
        """A free sequence id, taking the least recently used idle episode's where none is free."""
        if not self._free_ids and not self._evict_idle(batch_rows):
            raise InterlockError(f"more than {len(self._sequences)} episodes at once; the llamacpp backend "
                                 "holds at most that many (max_sequences; scale.rollouts.batch_size sets how "
                                 "many run at once)", field="backbone.backend")
        return self._free_ids.pop()

    def _evict_idle(self, batch_rows: list[Row]) -> bool:
        """Drop the least recently used sequence no row of this batch uses; False if there is none."""
        busy = {r.request.key for r in batch_rows}
        idle = next((key for key in self._sequences if key not in busy), None)
        if idle is None:
            return False
        self.end(idle)
        return True

    def _run(self, pieces: list[tuple[_Sequence, list[int], int]]) -> torch.Tensor:
        """One llama_decode over ``pieces`` (sequence, tokens, first position); the logits of each
        piece's last token, one row per piece."""
        # complete() keeps every prompt and its new tokens within max_context; llama.cpp would abort
        if any(first + len(tokens) > self.max_context for _, tokens, first in pieces):
            raise InterlockError(f"an episode outgrew its {self.max_context} KV cells",
                                 field="backbone.max_context")
        batch = self._batch
        n = 0
        for sequence, tokens, first in pieces:
            for offset, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = first + offset
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = sequence.seq_id
                batch.logits[n] = offset == len(tokens) - 1
                n += 1
        batch.n_tokens = n
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise InterlockError(f"llama_decode failed with status {status}", field="backbone.backend")
        out = np.empty((len(pieces), self.n_vocab), dtype=np.float32)
        index = -1
        for i, (_, tokens, _) in enumerate(pieces):
            index += len(tokens)
            pointer = self._lib.llama_get_logits_ith(self._ctx, index)
            out[i] = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
        return torch.from_numpy(out)


def build(backbone: BackboneConfig, checkpoint: Path) -> LlamaCppBackend:
    return LlamaCppBackend(checkpoint, precision=backbone.gguf, max_context=backbone.max_context)
