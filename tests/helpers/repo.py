"""Running commands as a user would, in the repository or a copy of it, and how long a test lets
one run.

Timeouts follow the suite's budget, never a constant of their own: :data:`SUITE_BUDGET_S` is how
long ``make test`` may take, and :func:`command_timeout` gives every command, notebook cell and
wait a test starts that whole budget (or ``INTERLOCK_TEST_TIMEOUT`` seconds, where set). A command
that is slow only because the machine is busy then makes the suite slower, not red; a command that
hangs is still cut, at most one budget late. ``INTERLOCK_TEST_TIMEOUT=900 make test`` cuts hangs
sooner on a quiet machine; a larger value gives a slower machine more room.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from interlock.testing.copies import GIT_USER, working_tree_copy

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: what W&B and DVC may inherit from the caller's environment that would send the smoke run's
#: tracking or experiment names elsewhere
ISOLATED = ("WANDB_MODE", "WANDB_DIR", "WANDB_DISABLED", "DVC_ROOT", "DVC_EXP_NAME", "DVC_STAGE")
#: the smoke run: the smoke experiment, with the opt-in BFCL pool beside the default's benchmark, the
#: two methods on (rollout-time intervention, recursive synthesis), and two RFT seeds (enough for
#: the seed noise of every interval; each run of the suite that trains or evaluates then does a
#: third less)
SMOKE = ("experiment=smoke", "eval.pools=[benchmark,indist,bfcl]", "intervention=rti", "synthesis=rst",
         "train.seeds=2")
#: the suite's budget in seconds: how long ``make test`` (ruff and every test) may take on a clean
#: clone on 2 cores with two other CPU-heavy jobs beside it (issue 26's busy machine); on an idle
#: machine of that class it takes about half (docs/measurements.md, Tests and CI)
SUITE_BUDGET_S = 60 * 60
#: seconds: where set, every test's command timeout instead of :data:`SUITE_BUDGET_S`
TIMEOUT_ENV = "INTERLOCK_TEST_TIMEOUT"


def command_timeout() -> float:
    """The seconds a test lets one command, notebook cell or wait run before it fails the test:
    ``INTERLOCK_TEST_TIMEOUT`` where set (a positive number), else the suite's whole budget
    (:data:`SUITE_BUDGET_S`). One value for every such wait: a busy machine slows the long and
    the short ones alike."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return float(SUITE_BUDGET_S)
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"{TIMEOUT_ENV}={value!r}: expected a positive number of seconds")
    return seconds


def user_env(*, tracked: bool = False) -> dict[str, str]:
    """The environment a user's command runs in: the venv's tools first on PATH, W&B disabled
    unless ``tracked`` (offline then): a test that reads the W&B runs asks for them, the others save
    each stage process about a second of CPU, W&B's start."""
    env = {key: value for key, value in os.environ.items() if key not in ISOLATED}
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", DVC_NO_ANALYTICS="1",
               WANDB_MODE="offline" if tracked else "disabled", WANDB_SILENT="true")
    return env


def run(args: list[str], cwd: Path, *, stdout_only: bool = False, check: bool = True,
        tracked: bool = False) -> str:
    """Run a command the way a user would in ``cwd``, for at most :func:`command_timeout`; fail the
    test with its output if it fails (unless ``check`` is false: a failure is the point)."""
    done = subprocess.run(args, cwd=cwd, env=user_env(tracked=tracked), capture_output=True, text=True,
                          timeout=command_timeout())
    assert done.returncode == 0 or not check, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout if stdout_only else done.stdout + done.stderr


def dvc(*args: str, cwd: Path, check: bool = True, stdout_only: bool = False, tracked: bool = False) -> str:
    return run([str(BIN / "dvc"), *args], cwd, check=check, stdout_only=stdout_only, tracked=tracked)


def tracked_copy(root: Path) -> Path:
    """A fresh git repository at ``root`` holding the repository's tracked (and untracked, not
    ignored) files, without artifacts, metrics or the lock file: a clean clone of the working tree."""
    return working_tree_copy(REPO, root)


def commit(root: Path, message: str) -> None:
    run(["git", *GIT_USER, "add", "-A"], root)
    run(["git", *GIT_USER, "commit", "-qm", message, "--allow-empty"], root)


def stages_run(log: str) -> list[str]:
    """The stages a `dvc repro` log says it ran (not those it skipped or took from the cache)."""
    return [line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage '")]


def tree_digest(root: Path) -> dict[str, str]:
    """Path -> content hash of every file of a working copy (git's and DVC's own folders aside)."""
    return {path.relative_to(root).as_posix(): hashlib.md5(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*"))
            if path.is_file() and path.relative_to(root).parts[0] not in {".git", ".dvc"}}
