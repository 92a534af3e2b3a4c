"""The ``llamacpp`` backend on the tiny random model: its GGUF files, fidelity to the transformers
backend (the F32 file gives the same greedy completions), cache reuse that changes nothing but
the work done, sequences freed and evicted, and clear errors where it cannot run."""

from __future__ import annotations

import sys
from importlib.util import find_spec

import pytest

from interlock.core.backend import ChatRequest
from interlock.core.errors import InterlockError
from interlock.models.checkpoint import load_checkpoint, read_manifest, save_checkpoint, verify_checkpoint
from interlock.models.gguf_export import GGUF_FILES, gguf_unsupported
from interlock.models.llamacpp_backend import LlamaCppBackend
from interlock.models.transformers_backend import TransformersBackend

from helpers.config import defaults
from helpers.conversations import (
    TOOLS,
    check_a_new_episode_borrows_the_shared_prefix,
    opening,
    play,
    requests_for,
)

#: the tests that run llama.cpp; the rest (GGUF files, errors) run without it
needs_llama_cpp = pytest.mark.skipif(find_spec("llama_cpp") is None,
                                     reason="llama-cpp-python is not installed (`make llamacpp`)")


@pytest.fixture(scope="module")
def transformers_engine(tiny_checkpoint):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer = load_checkpoint(tiny_checkpoint)
    yield lambda **kw: TransformersBackend(model=model, tokenizer=tokenizer, **kw)
    torch.set_num_threads(threads)


def llama(checkpoint, **kwargs) -> LlamaCppBackend:
    return LlamaCppBackend(checkpoint, **{"precision": "F32", "threads": 1, "max_context": 2048, **kwargs})


def test_every_checkpoint_carries_its_gguf_files_in_the_manifest(tiny_checkpoint, tmp_path):
    import gguf

    listed = {f["path"] for f in read_manifest(tiny_checkpoint)["files"]}
    assert set(GGUF_FILES.values()) <= listed
    assert verify_checkpoint(tiny_checkpoint) == []
    f32, q8 = (tiny_checkpoint / GGUF_FILES[p] for p in ("F32", "Q8_0"))
    assert q8.stat().st_size < 0.6 * f32.stat().st_size
    reader = gguf.GGUFReader(str(q8))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"
    # written again from the same weights: the same bytes (dvc repro after dvc repro does nothing)
    model, tokenizer = load_checkpoint(tiny_checkpoint)
    again = save_checkpoint(model, tokenizer, tmp_path / "again", source="tiny", origin="test",
                            name=read_manifest(tiny_checkpoint)["name"],
                            max_context=int(tokenizer.model_max_length))
    for name in GGUF_FILES.values():
        assert (again / name).read_bytes() == (tiny_checkpoint / name).read_bytes(), name


def test_what_has_no_export_says_so(tiny_checkpoint):
    from transformers import GPT2Config, GPT2LMHeadModel

    model, tokenizer = load_checkpoint(tiny_checkpoint)
    assert gguf_unsupported(model, tokenizer) is None
    other = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    assert "gpt2" in gguf_unsupported(other, tokenizer)
    assert "tokenizers" in gguf_unsupported(model, object())


@needs_llama_cpp
def test_f32_gives_the_transformers_backends_greedy_completions(tiny_checkpoint, transformers_engine):
    """Fidelity: over four turns of four episodes of different lengths (rows leaving the batch at
    different steps, each turn's prompt reusing the cached conversation), the F32 GGUF through
    llama.cpp writes exactly what the transformers backend writes."""
    engine = llama(tiny_checkpoint)
    history = play(engine, turns=4, fresh=transformers_engine())
    assert [c.completion_tokens for c in history[0]] == [6, 9, 12, 15]
    stats = engine.stats
    assert stats.reused_tokens > 0.7 * stats.prompt_tokens
    assert stats.prefilled_tokens + stats.reused_tokens == stats.prompt_tokens


@needs_llama_cpp
def test_sampling_matches_too_given_the_seed(tiny_checkpoint, transformers_engine):
    """The same seeded sampler over (nearly) the same logits: the same samples at T=1."""
    engine = llama(tiny_checkpoint)
    history = play(engine, turns=2, temperature=1.0, fresh=transformers_engine())
    assert len({c.text for turn in history for c in turn}) > 4


def _next_token_logits(path, prompts: list[list[int]]) -> list:
    """llama.cpp's logits of the next token at every position of each prompt (teacher-forced)."""
    import llama_cpp
    import numpy as np

    model = llama_cpp.Llama(str(path), n_ctx=2048, logits_all=True, n_threads=1, verbose=False)
    out = []
    for prompt in prompts:
        model.reset()
        model.eval(prompt)
        out.append(np.array(model.scores[:len(prompt)]))
    return out


@needs_llama_cpp
def test_q8_0_runs_and_agrees_with_f32_token_by_token(tiny_checkpoint):
    """Q8_0 against F32 greedy, teacher-forced over the same fixed token prefixes (eight chat
    prompts, each distinct position counted once): the next token Q8_0 would pick is F32's at
    most positions, and at every position where F32's choice is clear.

    Measured on the tiny random model (seed 7; its large random weights quantize worst, and its
    logits are nearly flat: a median gap of 0.47 between F32's top two): 1,211 of 1,383 distinct
    positions agree (0.876), where another random model (seed 8) agrees with it on none; every
    disagreement is at a top-two gap of at most 0.83, and at the 21% of positions with a gap above
    1.0 every one agrees. The thresholds, 0.80 and 1.0, leave room for other CPUs' numerics.
    SmolLM2's agreement is measured by perf/backends.py."""
    requests = requests_for([opening(i) for i in range(8)], 0.0, 0)
    quantized = llama(tiny_checkpoint, precision="Q8_0")
    assert [c.finish_reason for c in quantized.complete(requests[:4])] == ["length"] * 4
    prompts = [quantized.prompt_ids(r) for r in requests]
    reference = _next_token_logits(tiny_checkpoint / GGUF_FILES["F32"], prompts)
    candidate = _next_token_logits(tiny_checkpoint / GGUF_FILES["Q8_0"], prompts)
    positions = {}  # the prefix up to a position -> (agrees, F32's top-two gap there)
    for prompt, f32, q8 in zip(prompts, reference, candidate, strict=True):
        for k in range(len(prompt)):
            top = sorted(f32[k])[-2:]
            positions.setdefault(tuple(prompt[:k + 1]), (f32[k].argmax() == q8[k].argmax(), top[1] - top[0]))
    agree = [a for a, _ in positions.values()]
    assert len(positions) > 1000 and sum(agree) >= 0.80 * len(agree), (sum(agree), len(agree))
    clear = [a for a, gap in positions.values() if gap > 1.0]
    assert len(clear) > 100 and all(clear), (len(clear), sum(clear))


@needs_llama_cpp
def test_sequences_are_freed_and_the_idle_ones_evicted(tiny_checkpoint):
    engine = llama(tiny_checkpoint, max_sequences=2)
    engine.complete(requests_for([opening(0), opening(1)], 0.0, 0))
    assert set(engine._sequences) == {"episode-0", "episode-1"}
    engine.end("episode-0")
    engine.end("never-seen")  # harmless
    assert set(engine._sequences) == {"episode-1"}
    engine.complete([ChatRequest("a", tuple(opening(2)), TOOLS, max_new_tokens=2)])
    engine.complete([ChatRequest("b", tuple(opening(3)), TOOLS, max_new_tokens=2)])
    assert set(engine._sequences) == {"a", "b"}  # episode-1, idle the longest, gave up its sequence
    with pytest.raises(InterlockError, match="at most"):
        engine.complete(requests_for([opening(i) for i in range(3)], 0.0, 0))


@needs_llama_cpp
def test_a_new_episode_borrows_the_shared_prefix(tiny_checkpoint):
    check_a_new_episode_borrows_the_shared_prefix(llama(tiny_checkpoint))


@needs_llama_cpp
def test_a_prompt_beyond_the_context_ends_without_generating(tiny_checkpoint):
    """Each episode has ``max_context`` cells of its own: a prompt that leaves no room for its new
    tokens comes back at once (``context``), as from the transformers backend, never as
    llama.cpp's abort."""
    requests = requests_for([opening(0), opening(6)], 0.0, 0)
    engine = llama(tiny_checkpoint)
    lengths = [len(engine.prompt_ids(r)) for r in requests]
    short, long = llama(tiny_checkpoint, max_context=lengths[0] + 6).complete(requests)
    assert (long.finish_reason, long.completion_tokens, long.prompt_tokens) == ("context", 0, lengths[1])
    assert (short.finish_reason, short.completion_tokens) == ("length", 6)


def test_missing_pieces_are_clear_errors(tiny_checkpoint, tmp_path, monkeypatch):
    with pytest.raises(InterlockError, match="no model.q8_0.gguf"):
        LlamaCppBackend(tmp_path)
    with pytest.raises(InterlockError, match="unknown GGUF precision"):
        LlamaCppBackend(tiny_checkpoint, precision="Q4_K")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(InterlockError, match="make llamacpp"):
        LlamaCppBackend(tiny_checkpoint)


@needs_llama_cpp
def test_the_config_selects_it(tiny_checkpoint):
    from interlock.models.backends import make_backend

    backbone = defaults("backbone=tiny").backbone.replace(
        backend="llamacpp", gguf="F32", max_context=4096,
        generation={"temperature": 0.0, "max_new_tokens": 8})
    engine = make_backend(backbone, tiny_checkpoint)
    assert engine.name == "llamacpp" and engine.precision == "F32" and engine.max_context == 4096
