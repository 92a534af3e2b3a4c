"""Multi-turn conversations that both local backends' tests play (transformers, llamacpp)."""

from __future__ import annotations

from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import Message, parse_turn
from interlock.synthesis.workspace import TOOL_SPECS

TOOLS = tuple(TOOL_SPECS)


def opening(i: int) -> list[Message]:
    """Episodes of different lengths from the start."""
    return [Message("system", "You are an agent."),
            Message("user", f"Task {i}: process the pending cases. " + "Check the policy. " * (3 * i))]


def requests_for(convos: list[list[Message]], temperature: float, turn: int) -> list[ChatRequest]:
    return [ChatRequest(f"episode-{i}", tuple(c), TOOLS, max_new_tokens=6 + 3 * i, temperature=temperature,
                        seed=1000 * i + turn) for i, c in enumerate(convos)]


def _outcome(completion: Completion) -> tuple:
    return completion.text, completion.finish_reason, completion.prompt_tokens, completion.completion_tokens


def play(engine, turns: int, temperature: float = 0.0, fresh=None,
         outcome=_outcome) -> list[list[Completion]]:
    """A multi-turn rollout: each episode's generated text goes back as its assistant turn (as
    parsed), followed by a tool result; with ``fresh`` (another backend), every turn is also run
    by it, and both must agree on each completion's ``outcome`` (text, ending and token counts)."""
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
            convos[i] += [Message("assistant", parsed.remainder(), parsed.calls),
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
