"""What every framework adapter stands on (``interlock.frameworks.episodes``): an assistant turn in
OpenAI's chat format, however malformed, is one engine step whose answer pairs with the calls the
engine read; and the loopback model of the adapters' tests and docs (``ScriptedPolicies``) plays
the project's scripted policies over real HTTP."""

from __future__ import annotations

import json

import httpx
import pytest

from interlock.frameworks.episodes import assistant_text
from interlock.testing.adversaries import ADVERSARIES
from interlock.testing.loopback_server import LoopbackServer, ScriptedPolicies

from helpers.frameworks import fixture_host


@pytest.fixture(scope="module")
def host(contexts, agent_judge, tmp_path_factory):
    with fixture_host(contexts, agent_judge, tmp_path_factory.mktemp("episodes")) as host:
        yield host


def call(name: object, arguments: object) -> dict:
    return {"id": "x", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(("message", "errors"), [
    ({"content": None, "tool_calls": [call("list_files", "{}")]}, 0),  # arguments as JSON text
    ({"content": [{"type": "text", "text": "looking"}], "tool_calls": [call("list_files", {})]}, 0),
    ({"content": "", "tool_calls": [call("list_files", "{not json")]}, 1),
    ({"content": "", "tool_calls": [call(["list_files"], {}), call("list_files", "[]")]}, 2),
    ({"content": "", "tool_calls": [{"function": "list_files"}, 7, call("list_files", None)]}, 2),
])
def test_a_turn_in_openais_format_is_one_engine_step_answered_call_by_call(host, message, errors) -> None:
    """Each result carries the id of a call of the assistant turn the conversation now holds (the
    engine's reading of it), so a framework can send the history to a model that checks ids; a call
    the engine cannot read is the policy's error, answered as such."""
    episode = host.open(host.task_ids()[0])
    answers = episode.reply(message)
    turn = episode.conversation[-1 - len(answers)]
    ids = [c["id"] for c in turn.get("tool_calls", [])]
    assert turn["role"] == "assistant" and answers and all(a["role"] == "tool" for a in answers)
    assert [a["tool_call_id"] for a in answers if a["tool_call_id"] in ids] == ids
    assert sum(a["content"].startswith("error: ") for a in answers) == errors
    assert not episode.done
    episode.close()


@pytest.mark.parametrize("message", [None, 12, "plain text", {"content": {"a": 1}}, {"tool_calls": "x"}])
def test_what_is_no_turn_with_calls_ends_the_episode_as_a_turn_without_calls(host, message) -> None:
    episode = host.open(host.task_ids()[0])
    assert isinstance(assistant_text(message), str)
    assert episode.reply(message) == [] and episode.done
    assert episode.verdict().reward == 0.0 and episode.trajectory.finish_reason == "no_tool_call"


def test_the_scripted_policies_play_over_http_and_earn_what_they_earn_in_process(host) -> None:
    """Over the loopback model, each turn through :meth:`HostedEpisode.reply` with the history of
    :attr:`HostedEpisode.conversation`: the oracle earns 1, every attack 0; an unknown policy or a
    conversation that opens no task is answered 404 with the reason."""
    with LoopbackServer(ScriptedPolicies(host.pool), endpoints=1) as server, httpx.Client() as client:
        url = server.urls[0] + "/chat/completions"
        for policy in ("oracle", *ADVERSARIES):
            for task in host.task_ids():
                episode = host.open(task)
                while not episode.done:
                    answer = client.post(url, json={"model": policy, "messages": episode.conversation,
                                                    "tools": list(episode.tools)})
                    assert answer.status_code == 200, answer.text
                    episode.reply(answer.json()["choices"][0]["message"])
                assert episode.verdict().reward == (1.0 if policy == "oracle" else 0.0), (policy, task)
        nobody = client.post(url, json={"model": "nobody", "messages": episode.conversation})
        stranger = client.post(url, json={"model": "oracle", "messages": [{"role": "user", "content": "hi"}]})
    assert nobody.status_code == 404
    assert "no scripted policy 'nobody'" in json.loads(nobody.text)["error"]["message"]
    assert stranger.status_code == 404 and "opens no task" in stranger.text
