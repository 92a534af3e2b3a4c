"""Multi-turn conversations that both local backends' tests play (transformers, llamacpp)."""

from __future__ import annotations

from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import Message, ToolCall, parse_turn
from interlock.synthesis.workspace import TOOL_SPECS

TOOLS = tuple(TOOL_SPECS)


def opening(i: int) -> list[Message]:
    """Episodes of different lengths from the start."""
    return [Message("system", "You are an agent."),
            Message("user", f"Task {i}: process the pending cases. " + "Check the policy. " * (3 * i))]


def requests_for(convos: list[list[Message]], temperature: float, turn: int) -> list[ChatRequest]:
    return [ChatRequest(f"episode-{i}", tuple(c), TOOLS, max_new_tokens=6 + 3 * i, temperature=temperature,
                        seed=1000 * i + turn) for i, c in enumerate(convos)]


def outcome(completion: Completion) -> tuple:
    """What two backends given one greedy request must agree on: the text, its ending, the token
    counts and the ids sampled (the text is decoded from them)."""
    sampled = completion.sampled
    return (completion.text, completion.finish_reason, completion.prompt_tokens, completion.completion_tokens,
            None if sampled is None else (sampled.ids, sampled.stopped))


def play(engine, turns: int, temperature: float = 0.0, fresh=None,
         outcome=outcome) -> list[list[Completion]]:
    """A multi-turn rollout: each episode's generated text goes back as its assistant turn (as
    parsed), followed by a tool result; with ``fresh`` (another backend), every turn is also run
    by it, and both must agree on each completion's ``outcome`` (text, ending, token counts, ids).
    Where the model wrote no call, the odd episodes' turns call a tool anyway: every backend is
    also asked to go on after structured calls and their results (a server wants them wired with
    ids; the tiny model never writes a call of its own)."""
    convos = [opening(i) for i in range(4)]
    history = []
    for turn in range(turns):
        requests = requests_for(convos, temperature, turn)
        done = engine.complete(requests)
        if fresh is not None:
            again = fresh.complete(requests)
            assert [outcome(c) for c in done] == [outcome(c) for c in again], turn
        history.append(done)
        for i, completion in enumerate(done):
            parsed = parse_turn(completion.text)
            calls = parsed.calls or ((ToolCall("read_file", {"path": f"cases/{turn}.csv"}),) if i % 2 else ())
            convos[i] += [Message("assistant", parsed.remainder(), calls),
                          Message("tool", f"result {turn} of episode {i}\n" + "row,1\n" * (i + turn),
                                  name="read_file")]
    return history


def check_a_new_episode_borrows_the_shared_prefix(engine) -> None:
    """A second episode reuses the first's cached system prompt and tool list (computed once)."""
    engine.complete(requests_for([opening(0)], 0.0, 0))
    before = engine.stats.reused_tokens
    other = ChatRequest("another", tuple(opening(5)), TOOLS, max_new_tokens=2)
    engine.complete([other])
    assert engine.stats.reused_tokens - before > 0.5 * len(engine.prompt_ids(other))


def check_sampled(completion: Completion, request: ChatRequest, model, tokenizer) -> None:
    """A completion's ids decode to its text, and each log-probability is the model's own at the
    request's temperature, recomputed by one forward pass of ``model`` (transformers) over the
    prompt and the ids."""
    import torch

    from interlock.models.chat_template import prompt_token_ids

    sampled = completion.sampled
    assert sampled is not None and len(sampled.ids) == completion.completion_tokens
    assert tokenizer.decode(list(sampled.generated), skip_special_tokens=False) == completion.text
    prompt = prompt_token_ids(tokenizer, request)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + list(sampled.ids)])).logits[0].float()
    scaled = logits[len(prompt) - 1:-1] / (request.temperature or 1.0)
    expected = torch.log_softmax(scaled, dim=-1).gather(-1, torch.tensor(sampled.ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(sampled.logprobs), expected, atol=1e-3)
