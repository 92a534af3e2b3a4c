"""The verifier of an exported Harbor task: run its compiled checks on a workspace folder and write
the reward files Harbor reads.

Harbor's container does not hold this package, so :func:`interlock.export.bundle.bundle` copies
this module, with every interlock function it reaches (the check interpreter, the strict record
parsers, the confined workspace reader), into one script that imports the standard library only:
the exported verifier runs interlock's own checks, not a re-implementation of them. Anything this
module imports must therefore be the standard library or interlock code that is itself such.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from interlock.core.io import atomic_output
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.workspace import DirectoryStore

#: a workspace is refused unread (reward 0) past these: a task's own files are a few kilobytes,
#: and a verifier must finish, not read gigabytes an agent left behind
MAX_FILE_BYTES = 16 << 20
MAX_TOTAL_BYTES = 64 << 20
MAX_FILES = 10_000
#: the longest evidence a criterion reports (a check quotes record values, which an agent chose)
MAX_EVIDENCE_CHARS = 2_000
#: the per-criterion results, named as Harbor's rewardkit names them (Harbor's viewer shows them)
DETAILS_FILE = "reward-details.json"


def survey(root: Path) -> str | None:
    """Why a workspace cannot be judged (not a folder, too many files or bytes), or None. Sizes
    are read without following links; a link is judged by the reader, which refuses one leaving
    the workspace."""
    if not root.is_dir():
        return f"the workspace {root} is not a folder"
    files = total = 0
    problems: list[str] = []
    for folder, dirs, names in os.walk(root, onerror=lambda exc: problems.append(str(exc))):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            try:
                size = os.lstat(path).st_size
            except OSError as exc:
                return f"cannot read {os.path.relpath(path, root)} ({exc.strerror})"
            files, total = files + 1, total + size
            if size > MAX_FILE_BYTES:
                return (f"{os.path.relpath(path, root)} holds {size} bytes, over the verifier's limit of "
                        f"{MAX_FILE_BYTES} a file")
            if files > MAX_FILES or total > MAX_TOTAL_BYTES:
                return (f"the workspace holds over {MAX_FILES} files or {MAX_TOTAL_BYTES} bytes, the "
                        "verifier's limits")
    return f"cannot list the workspace ({problems[0]})" if problems else None


def _check(spec: dict, view: View) -> tuple[bool, str]:
    """One criterion's check; a check that cannot run (a link leaving the workspace, a file it may
    not read) fails with the reason, never ends the verifier."""
    try:
        passed, evidence = run_check(spec, view)
    except Exception as exc:  # noqa: BLE001 - whatever the workspace holds, the criterion fails
        passed, evidence = False, f"the check could not run ({type(exc).__name__}: {exc})"
    if len(evidence) > MAX_EVIDENCE_CHARS:
        evidence = evidence[:MAX_EVIDENCE_CHARS] + f" [... {len(evidence) - MAX_EVIDENCE_CHARS} more]"
    return passed, evidence


def verify(task: dict, root: Path) -> dict:
    """The report on one workspace: ``reward`` 1 when every mandatory criterion passes, else 0;
    ``reason``; each criterion with ``passed`` and ``evidence``."""
    refused = survey(root)
    # Harbor runs the verifier once the agent has finished: the episode is over, as a submit says
    view = None if refused else View(DirectoryStore(root), submitted=True)
    criteria = []
    for criterion in task["criteria"]:
        passed, evidence = (False, f"not checked: {refused}") if refused else _check(criterion["check"], view)
        criteria.append({**{k: v for k, v in criterion.items() if k != "check"},
                         "passed": passed, "evidence": evidence})
    failed = [c for c in criteria if c["mandatory"] and not c["passed"]]
    if refused:
        reason = f"workspace refused: {refused}"
    elif failed:
        reason = (f"{len(failed)} mandatory criteria failed; the first, {failed[0]['criterion_id']} "
                  f"({failed[0]['kind']}): {failed[0]['evidence']}")
    else:
        reason = "every mandatory criterion passed"
    return {"task_id": task["task_id"], "reward": 0 if refused or failed else 1, "reason": reason,
            "criteria": criteria}


def write_reward(out: Path, report: dict) -> None:
    """The details first, then the rewards, each replacing what was there (a file or a link an
    agent planted) in one rename."""
    out.mkdir(parents=True, exist_ok=True)
    texts = {DETAILS_FILE: json.dumps(report, indent=2) + "\n",
             "reward.json": json.dumps({"reward": report["reward"]}) + "\n",
             "reward.txt": f"{report['reward']}\n"}
    for name, text in texts.items():
        with atomic_output(out / name) as tmp:
            tmp.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade a workspace by an interlock task's compiled checks.")
    parser.add_argument("--checks", type=Path, required=True, help="the task's checks.json")
    parser.add_argument("--workspace", type=Path, required=True, help="the workspace folder to grade")
    parser.add_argument("--out", type=Path, required=True, help="where the reward files go")
    args = parser.parse_args(argv)
    try:
        report = verify(json.loads(args.checks.read_text(encoding="utf-8")), args.workspace)
    except Exception as exc:  # noqa: BLE001 - the verifier's own failure is reward 0 with its reason
        report = {"task_id": None, "reward": 0, "criteria": [],
                  "reason": f"the verifier failed ({type(exc).__name__}: {exc})"}
    write_reward(args.out, report)
    lines = [f"{'pass' if c['passed'] else 'FAIL'} {c['criterion_id']} ({c['kind']}"
             f"{', mandatory' if c['mandatory'] else ''}): {c['evidence']}" for c in report["criteria"]]
    # escaped to ASCII: a log line an agent's text fills must not fail on the console's encoding
    print("\n".join([*lines, f"reward {report['reward']}: {report['reason']}"]).encode(
        "ascii", "backslashreplace").decode("ascii"))
    return 0
