"""BFCL v4's four multi-turn categories as transfer benchmarks, one evaluation pool each
(:data:`CATEGORIES`: ``bfcl`` is ``multi_turn_base``), read from the installed ``bfcl-eval``
package (never copied into the repository); per-pool metrics are BFCL's per-category columns.

- **Tasks**: a category's entries in BFCL's id order (``limit``: the first N), each with its
  ground truth and the function docs of its API classes; a task's domain is its API set
  (``GorillaFileSystem+TwitterAPI``), so the per-domain picture groups by API set.
  ``multi_turn_miss_param`` needs nothing of its own (some turns lack a value: the ground truth
  makes no call there, and the next turn gives it). ``multi_turn_miss_func`` follows BFCL's
  inference protocol: the functions an entry's ``missed_function`` names are held out of the
  tools until their turn, whose (empty) user message BFCL fills with its
  ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``; from then on their docs are among the tools.
  ``multi_turn_long_context`` loads BFCL's long scenarios (``long_context=True``, as BFCL's
  checker does for the category), so the state graded is the state the agent acted on.
- **Episodes** run through the project's rollout engine and tool-call protocol in a
  :class:`BfclEnvironment`: the docs offered so far are the tools, each BFCL user turn is a user
  message (the next one comes when the assistant replies without a call; the episode ends after
  the last), and every call runs against the episode's own instances of BFCL's simulated APIs
  through BFCL's ``execute_multi_turn_func_call``; a call to a function outside the entry's APIs
  is an error observation and never runs (a held-out one runs before its turn, as in BFCL, whose
  executor runs whatever names the entry's APIs: ``miss_func_49``'s ground truth calls ``tail``
  two turns before it is offered). The episodes carry BFCL's limits (:data:`LIMITS`), not the
  workspace tasks': BFCL's step limit (20 steps with calls per user turn; a 21st reply must end
  the turn), every call of a step runs (a ground-truth turn of ``long_context`` makes 34) and
  observations are never clipped (BFCL shows the model every result). A prompt that outgrows the
  context window ends the episode (``finish_reason="context"``).
- **Grading** is BFCL's own ``multi_turn_checker`` on the calls of each step, rebuilt from the
  trajectory's messages (user messages separate the turns). ``passed`` is BFCL's verdict: every
  turn's API state and execution results match the ground truth's, and every turn was answered
  within the context window (BFCL fails force-terminated and errored entries outright).
  ``criterion_pass_rate`` = ``score`` = the share of ground-truth turns passing *before the first
  failing one*: the checker stops at the first failure, so each prefix of turns is checked on its
  own; turns after a failure are not credited (no re-implemented per-turn check). A turn whose
  ground truth makes no call (``miss_param``, ``miss_func``) passes unchecked, as in BFCL: an
  agent that never calls scores 0 only where the first turn needs a call, and passes no task.

bfcl-eval is installed without its declared dependencies (``pip install --no-deps``): only the
multi-turn checker and the simulated APIs are imported (the standard library plus mpmath). Its
loaders are not: ``bfcl_eval.utils`` needs filelock and ``constants.eval_config`` creates folders
in site-packages on import, so the data files are read here. BFCL evaluates call strings with
``eval``: a call runs only when its name is one of the task's functions and its argument names
are identifiers, and values are written as Python literals (``repr`` of JSON values).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import keyword
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from types import SimpleNamespace

from interlock.core.chat import Message, ToolCall, ToolResult
from interlock.core.config import Params
from interlock.core.errors import InterlockError
from interlock.core.io import dumps
from interlock.core.paths import Paths
from interlock.evaluation.metrics import EpisodeResult
from interlock.rollout.engine import Episode, EpisodeLimits
from interlock.rollout.runs import episode_seed
from interlock.rollout.trajectory import Trajectory

#: the evaluation pools (``eval.pools``) and the BFCL v4 multi-turn category each runs
CATEGORIES = {"bfcl": "multi_turn_base", "bfcl_miss_param": "multi_turn_miss_param",
              "bfcl_miss_func": "multi_turn_miss_func", "bfcl_long_context": "multi_turn_long_context"}
VERSION = "2026.3.23"  # the bfcl-eval release the adapter was written against (the Makefile installs it)
INSTALL = f"pip install --no-deps bfcl-eval=={VERSION}"
STEP_LIMIT = 20  # BFCL's MAXIMUM_STEP_LIMIT: steps with calls per user turn (a test reads BFCL's)
#: BFCL's limits, the only ones its episodes run under: BFCL quits a turn when a step with calls
#: follows its 20th, so the 21st reply must end the turn; no cap on calls a step, no clipping
LIMITS = EpisodeLimits(max_turns=STEP_LIMIT + 1)
#: the user message of a turn that adds held-out functions (BFCL's, for function-calling models)
ADDED_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"
JUDGE = "bfcl"  # the verdicts' judge column
SYSTEM_PROMPT = (
    "You are an assistant that acts only through the functions listed below, on a simulated system. "
    "For each user request, call the functions it needs, reading each result before the next call; "
    "when the request is done (or cannot be done), reply without a tool call and the next request "
    "follows. Write each tool call as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>; "
    "several calls may follow each other in one turn. The functions are in Python 3 syntax."
)
#: BFCL's type names that JSON Schema spells otherwise (BFCL's own OpenAI conversion maps them so)
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}
_EXECUTION_ERROR = "Error during execution:"  # how BFCL reports a call that raised
_names = itertools.count()


# ----------------------------------------------------------------------------- the package

@cache
def _bfcl() -> SimpleNamespace:
    """BFCL's multi-turn checker, its executor and the class -> module/doc maps, imported once."""
    try:
        from bfcl_eval.constants import executable_backend_config as config
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
    except ImportError as exc:
        raise InterlockError(f"the BFCL benchmark needs the bfcl-eval package, which is not importable "
                             f"({exc}); install it with `.venv/bin/python -m {INSTALL}` "
                             "(`make venv` does)") from exc
    return SimpleNamespace(checker=multi_turn_checker.multi_turn_checker, utils=multi_turn_utils,
                           modules=config.CLASS_FILE_PATH_MAPPING,
                           docs=config.MULTI_TURN_FUNC_DOC_FILE_MAPPING,
                           data=resources.files("bfcl_eval") / "data", version=metadata.version("bfcl-eval"))


def _unique_name(kind: str) -> str:
    """A model name for BFCL's instance cache, unique in this process (BFCL keys its module-global
    API instances by model name and entry id)."""
    return f"interlock_{kind}_{next(_names)}"


def _forget(model_name: str) -> None:
    """Drop the API instances BFCL cached in its module globals under ``model_name``."""
    namespace = vars(_bfcl().utils)
    for key in [k for k in namespace if k.startswith(model_name + "_")]:
        del namespace[key]


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----------------------------------------------------------------------------- tasks and tools

@dataclass(frozen=True)
class BfclTask:
    """One BFCL entry: ``entry`` as BFCL's checker takes it (id, question, initial_config,
    involved_classes), the ground-truth call strings per turn, the function docs offered from the
    start, and those held out until a turn (``miss_func``: BFCL's ``missed_function``, by turn)."""

    entry: dict
    ground_truth: list[list[str]]
    docs: list[dict]
    held_out: dict[int, list[dict]]

    @property
    def task_id(self) -> str:
        return self.entry["id"]

    @property
    def category(self) -> str:
        return self.task_id.rsplit("_", 1)[0]

    @property
    def long_context(self) -> bool:
        """BFCL's own test (its inference and its checker load the long scenarios so)."""
        return "long_context" in self.category

    @property
    def domain_id(self) -> str:
        return "+".join(sorted(self.entry["involved_classes"]))

    @property
    def user_turns(self) -> list[str]:
        """Each turn's user message: BFCL's own, or on a turn that adds held-out functions (BFCL's
        entry has none there) the message BFCL's inference sends."""
        return [turn[0]["content"] if turn else ADDED_FUNCTIONS for turn in self.entry["question"]]

    def docs_at(self, turn: int) -> list[dict]:
        """The docs offered at user turn ``turn``: held-out ones join at their turn, at the end (as
        BFCL extends its function list)."""
        return self.docs + [doc for at in sorted(self.held_out) if at <= turn for doc in self.held_out[at]]

    @property
    def functions(self) -> frozenset[str]:
        """What a call may name: every function of the entry's APIs, held out or not (BFCL runs a
        held-out function called before its turn; ``miss_func_49``'s ground truth does so)."""
        return frozenset(doc["name"] for doc in self.docs_at(len(self.ground_truth)))


def load_tasks(limit: int | None = None, category: str = "multi_turn_base") -> list[BfclTask]:
    """A BFCL v4 multi-turn category's tasks in its id order: the first ``limit``, or all."""
    bfcl = _bfcl()
    if category not in CATEGORIES.values():
        raise InterlockError(f"unknown BFCL multi-turn category {category!r}; choose from "
                             f"{', '.join(CATEGORIES.values())}")
    file = f"BFCL_v4_{category}.json"
    entries = sorted(_jsonl(bfcl.data / file), key=lambda e: int(e["id"].rsplit("_", 1)[1]))
    answers = {a["id"]: a["ground_truth"] for a in _jsonl(bfcl.data / "possible_answer" / file)}
    docs = {cls: _jsonl(bfcl.data / "multi_turn_func_doc" / name) for cls, name in bfcl.docs.items()}
    return [_task(entry, answers.get(entry["id"]),
                  [doc for cls in entry["involved_classes"] for doc in docs[cls]],
                  {"file": f"bfcl_eval/data/{file}", "item": entry["id"]})
            for entry in (entries if limit is None else entries[:limit])]


def _task(entry: dict, truth: list[list[str]] | None, docs: list[dict], where: dict) -> BfclTask:
    """One entry checked against what the adapter relies on; held-out docs taken out of ``docs``."""
    if truth is None or len(truth) != len(entry["question"]):
        raise InterlockError("no ground truth with one list of calls per turn", **where)
    missed = {int(turn): names for turn, names in entry.get("missed_function", {}).items()}
    for turn, messages in enumerate(entry["question"]):
        expected = 0 if turn in missed else 1  # a held-out turn has no user message of its own
        if len(messages) != expected or any(m["role"] != "user" for m in messages):
            raise InterlockError(f"turn {turn} is not {'empty' if expected == 0 else 'one user message'}",
                                 **where)
    by_name = {doc["name"]: doc for doc in docs}
    unknown = sorted({name for names in missed.values() for name in names} - set(by_name))
    if unknown:
        raise InterlockError(f"held-out functions {', '.join(unknown)} are none of the entry's", **where)
    held = {name for names in missed.values() for name in names}
    return BfclTask(entry, truth, [doc for doc in docs if doc["name"] not in held],
                    {turn: [by_name[name] for name in names] for turn, names in sorted(missed.items())})


def bfcl_tool(doc: dict) -> dict:
    """A BFCL function doc as the OpenAI-style tool dict the chat template renders: BFCL's type
    names mapped to JSON Schema's, floats flagged in their description (as BFCL's own OpenAI
    conversion does: "number" alone would lose them), the ``response`` schema dropped (tokens)."""
    return {"type": "function", "function": {"name": doc["name"], "description": doc["description"],
                                             "parameters": _schema(doc["parameters"])}}


def _schema(node: dict) -> dict:
    node = dict(node)
    if node.get("type") == "float" and "description" in node:
        node["description"] += " This is a float type value."
    node["type"] = _TYPES.get(node.get("type"), node.get("type", "string"))
    if isinstance(node.get("properties"), dict):
        node["properties"] = {name: _schema(value) for name, value in node["properties"].items()}
    if isinstance(node.get("items"), dict):
        node["items"] = _schema(node["items"])
    return node


def call_string(call: ToolCall, functions: frozenset[str]) -> str:
    """A parsed call as the string BFCL executes, ``name(arg=value, ...)``; ValueError (the
    reason) for a call that must not reach BFCL's ``eval``."""
    if call.name not in functions:
        raise ValueError(f"unknown function {call.name!r}; the functions are {', '.join(sorted(functions))}")
    bad = [name for name in call.arguments if not name.isidentifier() or keyword.iskeyword(name)]
    if bad:
        raise ValueError(f"{call.name}: {bad[0]!r} is not an argument name")
    return f"{call.name}({', '.join(f'{name}={value!r}' for name, value in call.arguments.items())})"


def decoded_turns(messages: Sequence[Message], functions: frozenset[str]) -> list[list[list[str]]]:
    """The calls of each step per user turn, as BFCL's checker takes them: a user message opens a
    turn, each assistant message with calls is a step. Refused calls never ran and are left out,
    and so are steps left without calls (BFCL's decoder drops empty steps too)."""
    turns: list[list[list[str]]] = []
    for message in messages:
        if message.role == "user":
            turns.append([])
        elif message.role == "assistant" and turns:
            step = []
            for call in message.tool_calls:
                try:
                    step.append(call_string(call, functions))
                except ValueError:
                    continue
            if step:
                turns[-1].append(step)
    return turns


# ----------------------------------------------------------------------------- the environment

def bfcl_episode(rollout_id: str, task: BfclTask, pool: str, policy: str, attempt: int, seed: int) -> Episode:
    """An episode on a BFCL task: BFCL's environment, under BFCL's limits only."""
    return Episode(rollout_id, task, task.domain_id, pool, policy, attempt, seed,
                   open_environment=BfclEnvironment, limits=LIMITS)


class BfclEnvironment:
    """One episode on its own instances of BFCL's simulated APIs (see :class:`Environment
    <interlock.rollout.engine.Environment>`); the episode's task is a :class:`BfclTask`. The tools
    are the docs offered at the current user turn (held-out ones join at theirs)."""

    def __init__(self, episode: Episode, folder: Path) -> None:
        if not isinstance(episode.task, BfclTask):
            raise TypeError(f"a BFCL episode needs a BFCL task, not {type(episode.task).__name__}")
        self.task = episode.task
        self.model_name = _unique_name("episode")
        self.turn = 0
        self.tools = self._tools()
        self.instances = self._run([])[1]
        self.initial = api_state(self.instances)

    def _tools(self) -> tuple[dict, ...]:
        return tuple(bfcl_tool(doc) for doc in self.task.docs_at(self.turn))

    def _run(self, calls: list[str]) -> tuple[list[str], dict]:
        entry = self.task.entry
        return _bfcl().utils.execute_multi_turn_func_call(
            calls, entry["initial_config"], entry["involved_classes"], self.model_name, entry["id"],
            long_context=self.task.long_context)

    def opening(self) -> list[Message]:
        return [Message("system", SYSTEM_PROMPT), Message("user", self.task.user_turns[0])]

    def execute(self, call: ToolCall) -> ToolResult:
        try:
            text = call_string(call, self.task.functions)
        except ValueError as exc:
            return ToolResult(False, f"error: {exc}")
        [output], self.instances = self._run([text])
        return ToolResult(not output.startswith(_EXECUTION_ERROR), output)

    def next_user_message(self) -> Message | None:
        self.turn += 1
        turns = self.task.user_turns
        if self.turn >= len(turns):
            return None
        self.tools = self._tools()
        return Message("user", turns[self.turn])

    def close(self) -> tuple[dict[str, str | None], list[dict]]:
        """Each API's final public state as JSON, and its attributes that changed."""
        final = api_state(self.instances)
        _forget(self.model_name)
        diff = [{"file": api, "record": name, "before": self.initial[api].get(name), "after": value}
                for api, state in final.items() for name, value in state.items()
                if self.initial[api].get(name) != value]
        return {api: dumps(state) for api, state in final.items()}, diff


def api_state(instances: dict) -> dict[str, dict]:
    """The public attributes of each API instance (what BFCL's state checker compares), as JSON
    data; an attribute that points back to an enclosing object (a directory's parent) is left out."""
    return {api: _plain(instance, ()) for api, instance in sorted(instances.items())}


def _plain(value: object, enclosing: tuple[int, ...]) -> object:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    inner = (*enclosing, id(value))
    if isinstance(value, dict):
        return {str(k): _plain(v, inner) for k, v in value.items() if id(v) not in inner}
    if isinstance(value, (list, tuple)):
        return [_plain(v, inner) for v in value if id(v) not in inner]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v, inner) for v in value), key=repr)
    if hasattr(value, "__dict__"):
        return {k: _plain(v, inner) for k, v in vars(value).items()
                if not k.startswith("_") and id(v) not in inner}
    return str(value)


# ----------------------------------------------------------------------------- the benchmark

class BfclMultiTurn:
    """The :class:`~interlock.evaluation.benchmarks.Benchmark` over one BFCL v4 multi-turn
    category: the one its pool ``name`` runs (:data:`CATEGORIES`)."""

    def __init__(self, name: str = "bfcl", limit: int | None = None) -> None:
        if name not in CATEGORIES:
            raise InterlockError(f"no BFCL category for pool {name!r}; the BFCL pools are "
                                 f"{', '.join(CATEGORIES)}", field="eval.pools")
        self.name, self.category = name, CATEGORIES[name]
        self.bfcl_tasks = load_tasks(limit, self.category)
        self._by_id = {task.task_id: task for task in self.bfcl_tasks}

    def tasks(self) -> list[tuple[str, str]]:
        return [(task.task_id, task.domain_id) for task in self.bfcl_tasks]

    def identity(self) -> dict:
        digest = hashlib.sha256(dumps([SYSTEM_PROMPT, ADDED_FUNCTIONS, dataclasses.asdict(LIMITS)]).encode())
        for task in self.bfcl_tasks:
            digest.update(dumps([task.entry, task.ground_truth, task.docs, task.held_out]).encode())
        return {"benchmark": f"bfcl/{self.category}", "bfcl_eval": _bfcl().version,
                "tasks": len(self.bfcl_tasks), "digest": digest.hexdigest()}

    def episodes(self, policy: str, attempts: int, seed: int) -> Iterator[Episode]:
        return (bfcl_episode("", task, self.name, policy, attempt, episode_seed(seed, task.task_id, attempt))
                for task in self.bfcl_tasks for attempt in range(attempts))

    def grade(self, trajectories: Sequence[Trajectory]) -> list[EpisodeResult]:
        return [self._grade(trajectory) for trajectory in trajectories]

    def _grade(self, trajectory: Trajectory) -> EpisodeResult:
        task = self._by_id.get(trajectory.task_id)
        if task is None:
            raise InterlockError(f"a trajectory of a task outside benchmark {self.name!r}",
                                 item=trajectory.rollout_id)
        truth = task.ground_truth
        turns = decoded_turns(trajectory.messages, task.functions)
        answered = len(turns) == len(truth) and trajectory.finish_reason != "context"
        turns += [[] for _ in range(len(truth) - len(turns))]
        full = _check(task, turns, truth)
        # the checker stops at the first failing turn: the longest passing prefix locates it
        passing = len(truth) if full["valid"] else next(
            (k - 1 for k in range(1, len(truth)) if not _check(task, turns[:k], truth[:k])["valid"]),
            len(truth) - 1)
        failure = "" if full["valid"] else f"{full.get('error_type')}: {full.get('error_message')}"
        verdicts = [{"rollout_id": trajectory.rollout_id, "task_id": task.task_id, "judge": JUDGE,
                     "criterion_id": f"turn-{i}", "passed": i < passing,
                     "evidence": "" if i < passing else failure if i == passing else
                     "not checked: BFCL's checker stops at the first failing turn"}
                    for i in range(len(truth))]
        share = passing / len(truth)
        return EpisodeResult.of(trajectory, passed=answered and full["valid"], score=share,
                                criterion_pass_rate=share, criteria=len(truth), verdicts=verdicts)

    def close(self) -> None:
        """Nothing is held between gradings (every check drops its API instances)."""


def _check(task: BfclTask, turns: list[list[list[str]]], truth: list[list[str]]) -> dict:
    """BFCL's multi-turn checker under a model name of its own, whose instances are dropped after."""
    name = _unique_name("check")
    try:
        return _bfcl().checker(turns, truth, task.entry, task.category, name)
    finally:
        _forget(name)


def build(name: str, params: Params, paths: Paths) -> BfclMultiTurn:
    """One pool per BFCL multi-turn category (:data:`CATEGORIES`), the first
    ``scale.evaluation.bfcl_tasks`` of it."""
    return BfclMultiTurn(name, limit=params.scale.evaluation.bfcl_tasks)
