"""What the framework adapters' tests share: the episodes' limits, and a host of the fixture tasks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from interlock.frameworks.episodes import EpisodeHost
from interlock.rl.environment import TaskPool
from interlock.rollout.engine import RolloutLimits

LIMITS = RolloutLimits(max_turns=12, max_new_tokens=64, temperature=1.0)


@contextlib.contextmanager
def fixture_host(contexts, judge, folder: Path,
                 kind: type[EpisodeHost] = EpisodeHost) -> Iterator[EpisodeHost]:
    """A host (``kind``: one that records what it opens and judges) of ``contexts``, rewarding a pass."""
    host = kind(TaskPool(contexts), judge, LIMITS, "pass", folder)
    try:
        yield host
    finally:
        host.close()


def assert_documented(*commands: str) -> None:
    """Each command stands in docs/exports.md as written (lines continued with ``\\`` joined, runs
    of spaces as one): a test that runs the docs' commands runs what a user reads."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "exports.md").read_text(encoding="utf-8")
    flat = " ".join(text.replace("\\\n", " ").split())
    for command in commands:
        assert " ".join(command.split()) in flat, f"not in docs/exports.md as written: {command}"
