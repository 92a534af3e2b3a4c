"""The ``vllm`` backend: the same rollouts on a GPU, and each completion ending by the reason its
request must end by. Skipped cleanly without a GPU or vLLM.

Greedy decoding on the tiny random model decides nothing a test could know in advance (its
logits are nearly flat), so where an ending must be certain the reply is constrained to a JSON
schema (vLLM's structured outputs): a one-word enum must be written whole and then end on the
end-of-sequence token (``stop``); a long constant cannot be written within a few tokens
(``length``, exactly at the cap); a prompt that leaves no room is never generated from
(``context``)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no GPU on this machine", allow_module_level=True)
pytest.importorskip("vllm", reason="the gpu extra (vLLM) is not installed")

from interlock.core.backend import ChatRequest  # noqa: E402
from interlock.core.chat import Message  # noqa: E402
from interlock.models.vllm_backend import VLLMBackend  # noqa: E402
from interlock.rollout.engine import (  # noqa: E402
    RolloutLimits,
    WorkspaceEnvironment,
    record_problem,
    reenact,
    run_episodes,
)
from interlock.rollout.runs import plan_episodes  # noqa: E402
from interlock.synthesis.tasks import TaskContext  # noqa: E402

pytestmark = pytest.mark.gpu

MAX_MODEL_LEN = 4096
#: far more tokens than a few: the tiny tokenizer's longest token is a few words at most
LONG = "the payroll refund is paid and the matching ledger row is posted; " * 12


@pytest.fixture(scope="module")
def vllm(tiny_checkpoint):
    return VLLMBackend(str(tiny_checkpoint), dtype="float32", max_model_len=MAX_MODEL_LEN,
                       gpu_memory_utilization=0.3)


def _ask(key: str, text: str, max_new_tokens: int, schema: dict | None = None) -> ChatRequest:
    return ChatRequest(key, (Message("system", "Answer."), Message("user", text)), (), max_new_tokens, 0.0, 0,
                       response_format=schema)


def test_each_completion_ends_by_the_reason_its_request_must_end_by(vllm) -> None:
    stop, length, context = vllm.complete([
        _ask("stop", "Say yes.", 16, {"type": "string", "enum": ["yes"]}),
        _ask("length", "Repeat the sentence.", 4, {"type": "string", "enum": [LONG]}),
        _ask("context", "Check the policy. " * MAX_MODEL_LEN, 8),
    ])
    # the enum written whole, then the end-of-sequence token: fewer tokens than allowed
    assert (stop.finish_reason, stop.text.strip()) == ("stop", '"yes"')
    assert 0 < stop.completion_tokens < 16 and stop.prompt_tokens > 0
    # the constant cannot be finished in 4 tokens: cut at the cap, a prefix of it
    assert (length.finish_reason, length.completion_tokens) == ("length", 4)
    assert json.dumps(LONG).startswith(length.text.lstrip()) and len(length.text.strip()) > 1
    # no room for the new tokens: nothing generated
    assert (context.finish_reason, context.text, context.completion_tokens) == ("context", "", 0)
    assert context.prompt_tokens + 8 > MAX_MODEL_LEN


def test_rollouts_run_through_vllm(vllm, tasks, tmp_path) -> None:
    """Two attempts at each of four tasks, three turns at most: every episode ends within its
    limits, and its record is what the engine makes of its own assistant turns when they are
    played again in a fresh workspace (messages, counts and ending)."""
    limits = RolloutLimits(max_turns=3, max_new_tokens=32)
    contexts = [TaskContext(p.task_id, p, g, d) for d, _, g, p in tasks[:4]]
    trajectories = list(run_episodes(plan_episodes(iter(contexts), policy="tiny/vllm", attempts=2, seed=1),
                                     vllm, limits, tmp_path / "work"))
    assert sorted((t.task_id, t.attempt) for t in trajectories) == sorted(
        (c.task_id, attempt) for c in contexts for attempt in range(2))
    packs = {c.task_id: c.pack for c in contexts}
    for index, trajectory in enumerate(trajectories):
        assert 1 <= trajectory.turns <= 3 and 0 < trajectory.generated_tokens <= 32 * trajectory.turns
        environment = WorkspaceEnvironment(packs[trajectory.task_id], tmp_path / "replay" / str(index))
        enacted = reenact(environment, trajectory.messages, limits.episode)
        environment.close()
        assert record_problem(trajectory, enacted, limits.episode) is None, trajectory.rollout_id
