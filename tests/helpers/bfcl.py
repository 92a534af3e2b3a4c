"""The BFCL adapter's control: BFCL's ground truth replayed through the chat interface, which the
adapter must grade all passed. Only the adapter's own tests need it (it reaches into the
adapter's BFCL imports), so it lives here, not in the library."""

from __future__ import annotations

import ast
import importlib
import inspect

from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import ToolCall, render_turn
from interlock.evaluation import bfcl
from interlock.evaluation.bfcl import BfclTask


def ground_truth_calls(task: BfclTask) -> list[list[ToolCall]]:
    """BFCL's ground-truth call strings as parsed tool calls (positional arguments named by the
    simulated API's method signature)."""
    modules = bfcl._bfcl().modules
    methods = {}
    for cls_name in task.entry["involved_classes"]:
        cls = getattr(importlib.import_module(modules[cls_name]), cls_name)
        methods.update({name: fn for name, fn in inspect.getmembers(cls, inspect.isfunction)
                        if not name.startswith("_")})
    turns = []
    for turn in task.ground_truth:
        calls = []
        for text in turn:
            node = ast.parse(text, mode="eval").body
            params = [p for p in inspect.signature(methods[node.func.id]).parameters if p != "self"]
            arguments = {params[i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
            arguments.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
            calls.append(ToolCall(node.func.id, arguments))
        turns.append(calls)
    return turns


class GroundTruthBackend:
    """Replays BFCL's ground truth through the chat interface: each user turn's calls in one step,
    then a reply without calls (the turn is done). A control: the adapter must grade it all passed."""

    name = "bfcl-ground-truth"

    def __init__(self) -> None:
        self.plans: dict[str, list[list[ToolCall]]] = {}

    def begin(self, key: str, task: BfclTask) -> None:
        self.plans[key] = ground_truth_calls(task)

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        completions = []
        for request in requests:
            users = [i for i, m in enumerate(request.messages) if m.role == "user"]
            first_step = not any(m.role == "assistant" for m in request.messages[users[-1]:])
            calls = self.plans[request.key][len(users) - 1] if first_step else []
            completions.append(Completion(render_turn("" if calls else "Done.", calls)))
        return completions

    def end(self, key: str) -> None:
        self.plans.pop(key, None)
