"""The agent judge's model review of one criterion: an :class:`~interlock.rollout.engine.Environment`
that the rollout engine drives like any episode (one tool-calling loop for every role).

The model sees the criterion, what the compiled check said and the diff; it may list and read
files of the workspace copy and run check scripts of its own (each in a fresh sandboxed process),
and ends with ``VERDICT: PASS`` or ``VERDICT: FAIL``. Nothing it does changes the copy: the tools
are read-only, and a script runs in a scratch copy of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from interlock.core.chat import Message, ToolCall, ToolResult
from interlock.judging.sandbox import Limits, run_script
from interlock.judging.verdicts import quote
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.workspace import TOOL_SPECS, DirectoryStore, execute

RUN_SCRIPT = {
    "name": "run_check_script",
    "description": "Run a Python 3 check script in a sandbox, in a copy of the final workspace (the "
                   "current folder). Exit status 0 means the check passed: fail it with assert or "
                   "sys.exit(1). No network, no subprocesses; output is clipped.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
}
READ_ONLY = ("list_files", "read_file")
JUDGE_TOOLS = tuple({"type": "function", "function": spec}
                    for spec in [*(s for s in TOOL_SPECS if s["name"] in READ_ONLY), RUN_SCRIPT])
SYSTEM_PROMPT = (
    "You are a verifier. An agent worked on a workspace of files; you see a copy of its final "
    "state. Decide whether one criterion holds. You may call list_files and read_file, and "
    "run_check_script to run a Python check of your own. Write each call as "
    "<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>. When you have decided, answer "
    "with a last line VERDICT: PASS or VERDICT: FAIL and one sentence of reason.")
_VERDICT = re.compile(r"verdict\s*[:=]\s*\**\s*(pass|fail)", re.IGNORECASE)


class InspectionEnvironment:
    """One criterion's review on a workspace copy: read-only file tools and sandboxed scripts."""

    tools = JUDGE_TOOLS

    def __init__(self, prompt: str, root: Path, limits: Limits) -> None:
        self.prompt, self.root, self.limits = prompt, root, limits

    def opening(self) -> list[Message]:
        return [Message("system", SYSTEM_PROMPT), Message("user", self.prompt)]

    def execute(self, call: ToolCall) -> ToolResult:
        """What a tool gives back; the workspace's text (files, a script's output) quoted, since
        the agent wrote it."""
        if call.name in READ_ONLY:
            result = execute(DirectoryStore(self.root), call)
            return ToolResult(result.ok, quote(result.output), result.submitted)
        if call.name == RUN_SCRIPT["name"]:
            code = call.arguments.get("code")
            if not isinstance(code, str):
                return ToolResult(False, "error: run_check_script needs a string argument 'code'")
            result = run_script(code, self.root, self.limits)
            verdict = "PASSED" if result.passed else "FAILED"
            return ToolResult(True, f"{verdict} ({result.reason})\n{quote(result.output)}")
        return ToolResult(False, f"error: unknown tool {call.name!r}; tools are "
                                 f"{', '.join([*READ_ONLY, RUN_SCRIPT['name']])}")

    def next_user_message(self) -> None:
        return None  # a turn without calls is the verifier's answer

    def close(self) -> tuple[dict[str, str | None], list[dict]]:
        return {}, []  # the copy is the judge's; nothing here changed it


def review_verdict(review: Trajectory) -> tuple[str | None, str]:
    """(``"pass"``, ``"fail"`` or None when it gave none, its reason): the last verdict any of the
    review's turns wrote."""
    verdict, reason = None, ""
    for message in review.messages:
        found = _VERDICT.findall(message.content) if message.role == "assistant" else []
        if found:
            verdict, reason = found[-1].lower(), _reason(message.content)
    return verdict, reason


def _reason(content: str) -> str:
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    tail = next((line for line in reversed(lines) if _VERDICT.search(line)), lines[-1] if lines else "")
    reason = _VERDICT.sub("", tail).strip(" .:-*") or (lines[-2] if len(lines) > 1 else "")
    return reason[:200]
