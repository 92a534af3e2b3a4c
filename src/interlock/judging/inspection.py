"""The agent judge's model review of one criterion: an :class:`~interlock.rollout.engine.Environment`
that the rollout engine drives like any episode (one tool-calling loop for every role).

The model sees the criterion, what the compiled check said and the diff; it may list and read
files of the workspace copy and run check scripts of its own (each in a fresh sandboxed process),
and ends with a turn without tool calls that is exactly its answer in the structure of
:class:`~interlock.judging.verdicts.AnswerForm` (the nonce of its own prompt, a boolean for the
criterion). Only that last turn is read, and only when the review ended with it: a verdict
anywhere else (an earlier turn, text the model quotes from a file, a reply around the answer) is
none. Decoding is not constrained to the answer's schema here: the review's turns are tool calls
until the last, and the engine sends one kind of request for all of them; the strict reading is
the defence. Nothing the review does changes the copy: the tools are read-only, and a script runs
in a scratch copy of its own.
"""

from __future__ import annotations

from pathlib import Path

from interlock.core.chat import Message, ToolCall, ToolResult
from interlock.judging.sandbox import Limits, run_script
from interlock.judging.verdicts import AnswerForm, Refused, quote
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
    "<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>. When you have decided, reply "
    "without any tool call with only the JSON answer the user message describes.")


class InspectionEnvironment:
    """One criterion's review on a workspace copy: read-only file tools and sandboxed scripts.

    ``prompt`` is the judge's user message; the answer's instructions are added below it, with
    the nonce of the rollout, the criterion and that message (:meth:`AnswerForm.of`)."""

    tools = JUDGE_TOOLS

    def __init__(self, prompt: str, root: Path, limits: Limits, rollout_id: str, criterion_id: str,
                 sandbox: str = "auto") -> None:
        self.criterion_id, self.sandbox = criterion_id, sandbox
        self.form = AnswerForm.of(f"agent-review/{rollout_id}/{criterion_id}", [criterion_id], prompt)
        self.prompt = f"{prompt}\n\n{self.form.instructions()}"
        self.root, self.limits = root, limits

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
            result = run_script(code, self.root, self.limits, provider=self.sandbox)
            verdict = "PASSED" if result.passed else "FAILED"
            return ToolResult(True, f"{verdict} ({result.reason})\n{quote(result.output)}")
        return ToolResult(False, f"error: unknown tool {call.name!r}; tools are "
                                 f"{', '.join([*READ_ONLY, RUN_SCRIPT['name']])}")

    def next_user_message(self) -> None:
        return None  # a turn without calls is the verifier's answer

    def close(self) -> tuple[dict[str, str | None], list[dict]]:
        return {}, []  # the copy is the judge's; nothing here changed it

    def verdict(self, review: Trajectory) -> tuple[str | None, str]:
        """(``"pass"``, ``"fail"`` or None where it gave none; its reason, or why there is none):
        read from the review's last turn alone, when the review ended on it (a turn without tool
        calls), and only when that turn is exactly the answer."""
        last = review.messages[-1] if review.messages else None
        if (review.finish_reason != "no_tool_call" or last is None or last.role != "assistant"
                or last.tool_calls):
            return None, f"the review ended without an answer ({review.finish_reason})"
        try:
            answer = self.form.parse(last.content)
        except Refused as refused:
            return None, f"its last turn is no answer ({refused})"
        return ("pass" if answer.verdicts[self.criterion_id] else "fail"), answer.reason
