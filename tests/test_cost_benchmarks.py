"""The cost benchmarks (``benchmarks/bfcl_cost.py``, ``benchmarks/model_judge_cost.py``) run as a
user runs them, on the smoke run's checkpoints and rollouts, and report consistent figures (no
speed target: the figures themselves are measured on the default run, README)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import run

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
ENDINGS = {"no_tool_call", "max_turns", "context"}


def test_bfcl_cost_reports_every_checkpoint_it_ran(smoke_repo, tmp_path) -> None:
    out = tmp_path / "bfcl.json"
    printed = run([sys.executable, str(BENCHMARKS / "bfcl_cost.py"), "--models", "base", "rft/seed-0",
                   "--tasks", "1", "--models-dir", str(smoke_repo / "data" / "models"),
                   "--params", str(smoke_repo / "params.yaml"), "--json", str(out)], tmp_path,
                  stdout_only=True)
    rows = json.loads(out.read_text())
    assert [(r["model"], r["task"]) for r in rows] == [("base", "multi_turn_base_0"),
                                                       ("rft/seed-0", "multi_turn_base_0")]
    for row in rows:
        assert row["ended"] in ENDINGS and row["steps"] >= 1 and row["generated_tokens"] >= 0
        assert row["prompt_tokens"] > 1000  # BFCL's tool documentation is in every prompt
        assert 0 < row["model_prefill_s"] + row["model_decode_s"] <= row["model_seconds"] + 0.1  # rounding
        assert row["passed"] is False or row["score"] == 1.0
    assert "2 checkpoints x 1 BFCL task(s)" in printed


def test_model_judge_cost_reports_both_judges_on_the_same_rollouts(smoke_repo, tmp_path) -> None:
    out = tmp_path / "judges.json"
    printed = run([sys.executable, str(BENCHMARKS / "model_judge_cost.py"), "--rollouts", "3",
                   "--checkpoint", str(smoke_repo / "data" / "models" / "demo_sft"),
                   "--data", str(smoke_repo / "data"), "--params", str(smoke_repo / "params.yaml"),
                   "--json", str(out)], tmp_path, stdout_only=True)
    figures = json.loads(out.read_text())
    for name in ("agent", "text"):
        judge = figures[name]
        assert judge["rollouts"] == 3 and 0 <= judge["accepted"] <= 3
        assert judge["output_tokens"] >= 0 and judge["seconds_per_rollout"] > 0
        assert judge["output_tokens_per_rollout"] == round(judge["output_tokens"] / 3, 2)
        assert f"\n{name} " in printed
    assert figures["text"]["output_tokens"] > 0  # the text judge always asks the model once per rollout
    ratio = figures["agent"]["output_tokens"] / figures["text"]["output_tokens"]
    assert figures["agent_over_text_tokens"] == round(ratio, 3)
