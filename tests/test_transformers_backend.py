"""The `transformers` backend on the tiny random model: batched multi-turn generation, KV-cache
reuse that changes nothing but the work done, seeded sampling, and the context limit."""

from __future__ import annotations

import pytest

from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import Message, ToolCall
from interlock.core.errors import InterlockError
from interlock.models.attention import GQA_ATTENTION
from interlock.models.checkpoint import load_checkpoint
from interlock.models.local import draw_tokens
from interlock.models.transformers_backend import TransformersBackend

from helpers.conversations import (
    TOOLS,
    check_a_new_episode_borrows_the_shared_prefix,
    opening,
    play,
    requests_for,
)


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    """The tiny model, run on one thread: its operations are too small to share between threads,
    and a second thread only waits (for a long time when another process holds the other core)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_checkpoint(tiny_checkpoint)
    torch.set_num_threads(threads)


def backend(loaded, **kwargs) -> TransformersBackend:
    model, tokenizer = loaded
    return TransformersBackend(model=model, tokenizer=tokenizer, **kwargs)


def test_cache_reuse_gives_the_same_greedy_output_as_fresh_full_prompts(loaded):
    engine, fresh = backend(loaded), backend(loaded, reuse_cache=False)
    history = play(engine, turns=4, fresh=fresh)
    assert all(len(turn) == 4 for turn in history)
    # the conversation prefix was reused, not recomputed
    stats = engine.stats
    assert stats.prompt_tokens == fresh.stats.prompt_tokens
    assert stats.reused_tokens > 0.7 * stats.prompt_tokens
    assert stats.prefilled_tokens + stats.reused_tokens == stats.prompt_tokens
    assert fresh.stats.reused_tokens == 0
    # different max_new_tokens per episode: rows left the batch at different steps
    assert [c.completion_tokens for c in history[0]] == [6, 9, 12, 15]
    assert all(c.finish_reason == "length" for c in history[0])


def test_cache_reuse_with_stops_and_sampling(loaded):
    """Rows that stop early (a stop token) and rows that run to their limit, sampled at T=1."""
    probe = backend(loaded, reuse_cache=False)
    first = probe.complete(requests_for([opening(i) for i in range(4)], 1.0, 0))
    tokenizer = loaded[1]
    # make a token that episode 1 samples early a stop token, for both backends
    stop = tokenizer(first[1].text, add_special_tokens=False)["input_ids"][2]
    engine, fresh = backend(loaded), backend(loaded, reuse_cache=False)
    for b in (engine, fresh):
        b.stop_ids.add(stop)
    history = play(engine, turns=3, temperature=1.0, fresh=fresh)
    reasons = {c.finish_reason for turn in history for c in turn}
    assert reasons == {"stop", "length"}
    # the stop token counts as generated, but not among the tokens the text is decoded from (counted
    # against the backend's own tally: a random model's text need not re-encode to the same tokens)
    completions = [c for turn in history for c in turn]
    assert sum(c.completion_tokens - (c.finish_reason == "stop") for c in completions) == \
        engine.stats.generated_tokens


def test_sampling_is_deterministic_given_the_seed(loaded):
    convos = [opening(i) for i in range(3)]
    one = backend(loaded).complete(requests_for(convos, 0.9, 0))
    two = backend(loaded).complete(requests_for(convos, 0.9, 0))
    assert [c.text for c in one] == [c.text for c in two]
    reseeded = [ChatRequest(r.key, r.messages, r.tools, r.max_new_tokens, r.temperature, r.seed + 1)
                for r in requests_for(convos, 0.9, 0)]
    three = backend(loaded).complete(reseeded)
    assert [c.text for c in three] != [c.text for c in one]


def _generators(seeds) -> list:
    import torch

    return [torch.Generator().manual_seed(seed) for seed in seeds]


def test_a_drawn_token_follows_the_tempered_softmax_and_never_takes_probability_zero() -> None:
    import torch

    logits = torch.tensor([0.0, 1.0, 2.0, float("-inf"), -0.5])
    draws = 20_000
    tokens = draw_tokens(logits.repeat(draws, 1), [0.7] * draws, _generators(range(draws)))
    counts = torch.bincount(torch.tensor(tokens), minlength=5).double() / draws
    expected = torch.softmax(logits / 0.7, dim=-1).double()
    assert counts[3] == 0  # the masked token
    assert torch.allclose(counts, expected, atol=0.012), (counts, expected)  # 4 SD of the 0.76 share


def test_a_rows_token_depends_on_its_own_logits_and_generator_only() -> None:
    """Batched or alone, first or last, beside rows of other temperatures: the same token, so a
    rollout is reproducible given its seed however the live episodes are batched."""
    import torch

    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(1)) * 3
    temperatures = [0.7, 1.0, 0.3, 1.5, 0.7, 0.9]
    together = draw_tokens(logits, temperatures, _generators(range(6)))
    alone = [draw_tokens(logits[i:i + 1], [temperatures[i]], _generators([i]))[0] for i in range(6)]
    reversed_ = draw_tokens(logits.flip(0), temperatures[::-1], _generators(range(5, -1, -1)))[::-1]
    assert together == alone == reversed_
    assert draw_tokens(logits, temperatures, _generators(range(1, 7))) != together  # the seed matters


def test_logits_that_are_not_numbers_are_refused_with_a_reason() -> None:
    import torch

    with pytest.raises(InterlockError, match="not finite"):
        draw_tokens(torch.tensor([[0.0, float("nan")]]), [0.7], _generators([0]))


def test_prompt_tokens_are_the_full_prompt(loaded):
    engine = backend(loaded)
    request = requests_for([opening(0)], 0.0, 0)[0]
    done = engine.complete([request])[0]
    assert done.prompt_tokens == len(engine.prompt_ids(request))
    text = loaded[1].apply_chat_template([m.to_dict() for m in request.messages], tools=list(TOOLS),
                                         add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n")
    assert engine.prompt_ids(request) == loaded[1](text, add_special_tokens=False)["input_ids"]


def test_context_limit_returns_context_without_generating(loaded):
    engine = backend(loaded)
    convos = [opening(0), opening(6)]
    lengths = [len(engine.prompt_ids(r)) for r in requests_for(convos, 0.0, 0)]
    engine.max_context = lengths[0] + 6  # room for the short episode's 6 new tokens only
    short, long = engine.complete(requests_for(convos, 0.0, 0))
    assert long == Completion("", lengths[1], 0, "context")
    assert short.finish_reason == "length" and short.completion_tokens == 6
    assert "episode-1" not in engine._cache


def test_end_drops_the_episode_cache_and_the_budget_evicts(loaded):
    engine = backend(loaded)
    engine.complete(requests_for([opening(i) for i in range(3)], 0.0, 0))
    assert set(engine._cache) == {"episode-0", "episode-1", "episode-2"}
    engine.end("episode-1")
    assert set(engine._cache) == {"episode-0", "episode-2"}
    engine.end("never-seen")  # harmless
    small = backend(loaded, cache_bytes=1)
    small.complete(requests_for([opening(i) for i in range(3)], 0.0, 0))
    assert len(small._cache) == 1  # least recently used first out; the newest always stays


def test_a_new_episode_borrows_the_shared_prefix(loaded):
    check_a_new_episode_borrows_the_shared_prefix(backend(loaded))


def test_the_backend_uses_gqa_attention_on_cpu(loaded):
    engine = backend(loaded)
    assert engine.model.config._attn_implementation == GQA_ATTENTION
    assert engine.name == "transformers"


def test_tool_calls_in_the_output_parse(loaded):
    """What the backend returns is plain text for parse_turn; a call rendered into the next
    prompt matches what the template renders for the same message."""
    engine = backend(loaded)
    call = ToolCall("read_file", {"path": "REQUEST.md"})
    convo = [*opening(0), Message("assistant", "", (call,)), Message("tool", "# Request", name="read_file")]
    request = ChatRequest("x", tuple(convo), TOOLS, max_new_tokens=3)
    text = loaded[1].decode(engine.prompt_ids(request))
    assert '<|im_start|>assistant\n<tool_call>{"name": "read_file", "arguments": {"path": "REQUEST.md"}}' \
           '</tool_call><|im_end|>\n<|im_start|>tool\n# Request<|im_end|>\n' in text


def test_batched_rows_match_rows_run_alone(loaded):
    """Left padding and the per-row masks and positions change nothing: each row of a batch
    generates what it generates alone (no padding), and what `model.generate` does greedily."""
    import torch

    model, tokenizer = loaded
    requests = requests_for([opening(i) for i in range(4)], 0.0, 0)
    together = backend(loaded, reuse_cache=False).complete(requests)
    alone = [backend(loaded, reuse_cache=False).complete([r])[0] for r in requests]
    assert [c.text for c in together] == [c.text for c in alone]
    engine = backend(loaded)
    for request, completion in zip(requests, together, strict=True):
        ids = torch.tensor([engine.prompt_ids(request)])
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=request.max_new_tokens, eos_token_id=sorted(engine.stop_ids),
                                 pad_token_id=engine.pad_id)
        assert tokenizer.decode(out[0, ids.shape[1]:]) == completion.text
