"""Judged rollouts in ATIF, Harbor's Agent Trajectory Interchange Format, for trajectory viewers.

One JSON document per rollout, ``<rollout_id>.json``, at :data:`ATIF_VERSION` (RFC 0001 and its
pydantic models in harbor-framework/harbor at :data:`~interlock.export.harbor.HARBOR_COMMIT`):

- the system prompt and the request become ``system`` and ``user`` steps;
- each assistant turn becomes one ``agent`` step: its text, its tool calls, and as its observation
  the tool messages that answer it, in order. Interlock's calls carry no ids, so each gets
  ``call-<step>-<n>``; the answer to a call cites it by ``source_call_id``, and the error answering
  a malformed call (a tool message named ``invalid``) cites none;
- tokens are counted per rollout, not per turn: ``final_metrics`` has the rollout's completion
  tokens, and its largest prompt under ``extra``; an agent step whose backend recorded what it
  sampled carries it in its ``metrics`` (``completion_token_ids``, ``logprobs``: ATIF's fields for
  training without re-tokenizing);
- ``extra.interlock`` holds the rollout's ids, counts and finish reason, its record-level diff, the
  collateral the agent judge flagged, and both judges' verdicts on every criterion, with whether
  every mandatory one passed (what ``accept`` keeps).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from interlock import __version__
from interlock.core import schemas
from interlock.core.backend import SampledTokens
from interlock.core.chat import Message
from interlock.core.errors import InterlockError
from interlock.core.io import atomic_output, iter_aligned, open_table
from interlock.core.paths import Paths
from interlock.judging.stage import GRADERS, accepted_rollouts, checked_rows, mandatory_criteria
from interlock.rollout.engine import TOOLS
from interlock.rollout.trajectory import BadRow, BadRows, Trajectory
from interlock.synthesis.tasks import pack_folders

ATIF_VERSION = "ATIF-v1.7"
#: a tool message that answers no call: the engine's error for a malformed one
INVALID_CALL = "invalid"
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NOTES = ("Exported by interlock from its judged rollouts. Interlock's tool calls carry no ids: "
         "tool_call_id is call-<step_id>-<n>. Tokens are recorded per rollout, not per step: "
         "final_metrics holds the rollout's completion tokens and, under extra, its largest prompt.")


@dataclass(frozen=True)
class JudgedRollout:
    """A rollout with both judges' verdicts on it and the agent judge's collateral flags."""

    trajectory: Trajectory
    verdicts: dict[str, list[dict]]  # judge -> rows of the VERDICTS schema
    accepted: dict[str, bool]  # judge -> every mandatory criterion passed
    mandatory: frozenset[str]
    collateral: list[dict]
    source: str  # the trajectories' file, named in errors


def atif(judged: JudgedRollout) -> dict:
    """The ATIF document of one judged rollout."""
    t = judged.trajectory
    steps = agent_steps(t.messages, t.rollout_id, judged.source, t.sampled)
    judges = {judge: {"accepted": judged.accepted[judge],
                      "verdicts": [{"criterion_id": v["criterion_id"],
                                    "mandatory": v["criterion_id"] in judged.mandatory,
                                    "passed": v["passed"], "evidence": v["evidence"]} for v in rows]}
              for judge, rows in judged.verdicts.items()}
    return {
        "schema_version": ATIF_VERSION,
        "session_id": t.rollout_id,
        "trajectory_id": t.rollout_id,
        "agent": {"name": "interlock", "version": __version__, "model_name": t.policy,
                  "tool_definitions": [dict(tool) for tool in TOOLS]},
        "steps": steps,
        "notes": NOTES,
        "final_metrics": {"total_completion_tokens": t.generated_tokens, "total_steps": len(steps),
                          "extra": {"largest_prompt_tokens": t.prompt_tokens}},
        "extra": {"interlock": {
            "rollout_id": t.rollout_id, "task_id": t.task_id, "domain_id": t.domain_id, "pool": t.pool,
            "policy": t.policy, "attempt": t.attempt, "seed": t.seed, "finish_reason": t.finish_reason,
            "turns": t.turns, "tool_calls": t.tool_calls, "invalid_calls": t.invalid_calls,
            "diff": t.diff, "collateral": judged.collateral, "judges": judges}},
    }


def agent_steps(messages: Sequence[Message], rollout_id: str, source: str,
                sampled: Sequence[SampledTokens | None] = ()) -> list[dict]:
    """ATIF steps of a conversation (``sampled``: per assistant message, what its backend sampled);
    a tool message that answers nothing is refused, naming it."""
    steps: list[dict] = []
    turns = iter(sampled)
    unanswered: list[tuple[str, str]] = []  # the last agent step's calls not yet answered: (id, tool)
    for index, message in enumerate(messages):
        where = {"file": source, "item": rollout_id, "field": f"messages[{index}]"}
        step_id = len(steps) + 1
        if message.role in ("system", "user"):
            steps.append({"step_id": step_id, "source": message.role, "message": message.content})
            unanswered = []
        elif message.role == "assistant":
            step: dict = {"step_id": step_id, "source": "agent", "message": message.content}
            if (tokens := next(turns, None)) is not None:
                step["metrics"] = {"completion_tokens": len(tokens.ids),
                                   "completion_token_ids": list(tokens.ids),
                                   **({} if tokens.logprobs is None else {"logprobs": list(tokens.logprobs)})}
            calls = [(f"call-{step_id}-{n}", call) for n, call in enumerate(message.tool_calls, start=1)]
            if calls:
                step["tool_calls"] = [{"tool_call_id": call_id, "function_name": call.name,
                                       "arguments": call.arguments} for call_id, call in calls]
            steps.append(step)
            unanswered = [(call_id, call.name) for call_id, call in calls]
        else:
            if not steps or steps[-1]["source"] != "agent":
                raise InterlockError("a tool message that follows no assistant turn", **where)
            result: dict = {"content": message.content}
            if message.name != INVALID_CALL:
                if not unanswered or unanswered[0][1] != message.name:
                    expected = unanswered[0][1] if unanswered else "none"
                    raise InterlockError(f"a {message.name!r} result where the turn's next unanswered "
                                         f"call is {expected!r}", **where)
                result = {"source_call_id": unanswered.pop(0)[0], **result}
            steps[-1].setdefault("observation", {"results": []})["results"].append(result)
    return steps


def iter_judged(trajectories: Path, judgements: Path, packs_dirs: Sequence[Path],
                refused: BadRows | None = None) -> Iterator[JudgedRollout]:
    """The rollouts with their verdicts, row group by row group (the ``judge`` stage writes its
    tables aligned with the trajectories'); a rollout a judge left unjudged is refused. A bad row
    (:func:`~interlock.judging.stage.checked_rows`) is left out, with its reason in ``refused``."""
    refused = refused if refused is not None else BadRows()
    mandatory = mandatory_criteria(packs_dirs)
    accepted = {judge: accepted_rollouts(judgements / f"{judge}.parquet", mandatory, judge)
                for judge in GRADERS}
    groups = open_table(trajectories, schemas.TRAJECTORIES).num_row_groups
    judged_groups = open_table(judgements / "agent.parquet", schemas.VERDICTS).num_row_groups
    if groups != judged_groups:
        raise InterlockError(f"{groups} row groups of trajectories but {judged_groups} of verdicts: the "
                             "judge ran on other rollouts; run `dvc repro judge`", file=str(judgements))
    judged = iter_aligned(judgements, schemas.judge_tables(GRADERS))
    for rows, tables in zip(checked_rows(trajectories, mandatory), judged, strict=True):
        verdicts: dict[tuple[str, str], list[dict]] = {}
        for judge in GRADERS:
            for row in tables[judge]:
                verdicts.setdefault((row["rollout_id"], judge), []).append(row)
        collateral: dict[str, list[dict]] = {}
        for row in tables["collateral"]:
            collateral.setdefault(row["rollout_id"], []).append(
                {"file": row["file"], "record": row["record"], "reason": row["reason"]})
        ids = {row.parsed.rollout_id for row in rows}
        stray = sorted({rollout for rollout, _ in verdicts} - ids)
        if stray:
            raise InterlockError("verdicts on a rollout this row group of trajectories does not hold",
                                 file=str(judgements), item=stray[0])
        for row in rows:
            t = row.parsed
            if isinstance(t, BadRow):
                refused.add(t)
                continue
            missing = [judge for judge in GRADERS if (t.rollout_id, judge) not in verdicts]
            if missing:
                raise InterlockError(f"no {missing[0]} verdicts on this rollout", file=str(judgements),
                                     item=t.rollout_id)
            yield JudgedRollout(t, {judge: verdicts[t.rollout_id, judge] for judge in GRADERS},
                                {judge: t.rollout_id in accepted[judge] for judge in GRADERS},
                                frozenset(mandatory.get(t.task_id, ())), collateral.get(t.rollout_id, []),
                                str(trajectories))


def write_trajectories(judged: Iterator[JudgedRollout], out: Path) -> list[Path]:
    """One ``<rollout_id>.json`` per rollout under ``out``, each written whole or not at all."""
    written = []
    for rollout in judged:
        name = rollout.trajectory.rollout_id
        if not _FILE_NAME.fullmatch(name):
            raise InterlockError(f"a rollout id that is no file name (it allows {_FILE_NAME.pattern})",
                                 item=name)
        with atomic_output(out / f"{name}.json") as tmp:
            tmp.write_text(json.dumps(atif(rollout), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(out / f"{name}.json")
    return written


def export_trajectories(paths: Paths, out: Path, refused: BadRows | None = None) -> list[Path]:
    """Every judged rollout of the run at ``paths`` as an ATIF document under ``out`` (its bad rows
    left out, with their reasons in ``refused``)."""
    return write_trajectories(iter_judged(paths.require(paths.trajectories), paths.require(paths.judgements),
                                          pack_folders(paths), refused), out)
