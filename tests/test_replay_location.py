"""Replay gives the same observation for the same call wherever the workspace copy lives: the
tools refuse a path or name longer than their own limits before the disk sees it, so a read of a
very long path fails alike in the rollout's deep folder and the judge's shallow one, and correct
work never depends on the folder depth."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.core.chat import ToolCall
from interlock.core.errors import InterlockError
from interlock.judging.verdicts import accepted
from interlock.rollout.engine import RolloutLimits
from interlock.synthesis.workspace import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    MAX_ROOT_BYTES,
    DirectoryStore,
    execute,
    materialize,
)

from helpers.episodes import oracle_turns, play_turns


def _deep(base: Path, total: int) -> Path:
    """A folder under ``base`` whose absolute path is about ``total`` bytes long."""
    folder = base
    while len(str(folder)) + 120 < total:
        folder = folder / ("d" * 100)
    return folder


#: paths near and past every limit: a name of 255 and 256 bytes, a path of 1,024 and 1,025 bytes,
#: deep folders, multi-byte characters counted as bytes, a lone surrogate
LIMITS = ["a" * MAX_NAME_BYTES, "a" * (MAX_NAME_BYTES + 1), "é" * 128, "é" * 127 + "a",
          "/".join(["b" * 200] * 5)[:MAX_PATH_BYTES], "/".join(["b" * 200] * 6), ("c/" * 511) + "c",
          ("c/" * 512) + "c", "x" * 5000, "ok\ud800.txt"]


@pytest.mark.parametrize("path", LIMITS, ids=lambda p: f"{len(p.encode('utf-8', 'surrogatepass'))}b")
def test_a_call_answers_the_same_in_a_shallow_and_a_deep_workspace(path: str, tmp_path: Path) -> None:
    shallow = materialize({"a.txt": "x"}, tmp_path / "s")
    deep = materialize({"a.txt": "x"}, _deep(tmp_path, MAX_ROOT_BYTES))
    read = ToolCall("read_file", {"path": path})
    write = ToolCall("write_file", {"path": path, "content": "y"})
    for call in (read, write, ToolCall("list_files", {"path": path}), read):  # read again after the write
        assert execute(shallow, call) == execute(deep, call), call


_PART = st.one_of(st.text(min_size=1, max_size=300).filter(lambda p: "/" not in p),
                  st.sampled_from(["a" * 255, "a" * 256, "é" * 128, ".", ""]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(_PART, min_size=1, max_size=8).map("/".join),
       tool=st.sampled_from(["read_file", "write_file"]))
def test_any_path_answers_the_same_wherever_the_workspace_lives(tmp_path: Path, path: str, tool: str) -> None:
    arguments = {"path": path, "content": "z"} if tool == "write_file" else {"path": path}
    shallow = materialize({"a.txt": "x"}, tmp_path / "shallow")
    deep = materialize({"a.txt": "x"}, _deep(tmp_path / "deep", MAX_ROOT_BYTES))
    assert execute(shallow, ToolCall(tool, arguments)) == execute(deep, ToolCall(tool, arguments))
    assert shallow.files() == deep.files()


def test_a_workspace_too_deep_for_the_tools_limits_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InterlockError, match="deeper than"):
        DirectoryStore(_deep(tmp_path, MAX_ROOT_BYTES + 400))


def test_an_honest_episode_with_a_failed_long_read_is_accepted_wherever_it_ran(contexts, agent_judge,
                                                                                tmp_path: Path) -> None:
    """The oracle's work with one read of a path past the disk's own limits, rolled out in a folder
    deep enough that the disk would refuse it there for its length: the judge, replaying in its
    own shallow folder, gets the same answer and accepts it."""
    context = contexts[0]
    turns = oracle_turns(context)
    long_read = ("Checking an archive.", [ToolCall("read_file", {"path": "archive/" + "x" * 300 + ".csv"}),
                                           ToolCall("read_file", {"path": "/".join(["y" * 250] * 14)})])
    plans = {"long.a0": (context, [turns[0], long_read, *turns[1:]])}
    [trajectory] = play_turns(plans, _deep(tmp_path, MAX_ROOT_BYTES - 300), RolloutLimits())
    reads = [m.content for m in trajectory.messages if m.role == "tool" and m.name == "read_file"]
    assert any("at most 255" in text for text in reads) and any("at most 1024" in text for text in reads)
    [judgement] = agent_judge.judge([(trajectory, context.pack)])
    assert accepted(judgement.passed, context.pack.rubric), judgement.verdicts
