"""Model-backed judges' cost: the agent judge and the text judge, both backed by a checkpoint,
on the same policy rollouts, side by side in one run.

``judge.backed_by=model`` makes both judges consult the starting policy: the text judge
reads each transcript and answers every criterion in one JSON object; the agent judge runs the
compiled checks and has the model review each criterion they passed, with read-only tools. This
prints what that costs (seconds and output tokens per rollout, per judge) and the agent judge's
output tokens against the text judge's (the paper's agent judge spent ~11% more), and what each
judge accepted against the truth (the compiled checks on the replayed final workspace):
``truth_accepted``, ``false_accepts``, ``false_rejects``. The agent judge's model can only fail a
criterion the compiled checks passed, never pass one they failed, so its false accepts are 0
whatever the model says; ``reviewed`` counts the criteria it asked the model about (every one the
compiled checks passed); the text judge's ``no_verdict``, the rollouts on which its model gave no
parseable answer (every criterion then fails). Not a test: the default run judges with the
scripted backends, which cost no tokens.

    .venv/bin/python perf/model_judge_cost.py [--checkpoint data/models/demo_sft]
        [--rollouts 16] [--data data] [--params params.yaml] [--json PATH]

The rollouts are the first ``--rollouts`` of ``<data>/rollouts/trajectories.parquet`` (the
default run's policy rollouts) and their task packs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from interlock.analysis.artifacts import params_paths
    from interlock.core import schemas
    from interlock.core.config import load_params
    from interlock.core.io import read_rows, write_table
    from interlock.judging.judges import JudgeContext
    from interlock.judging.stage import run_judge
    from interlock.judging.text import NO_VERDICT
    from interlock.models.backends import make_backend
    from interlock.synthesis.tasks import pack_folders

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="the judge model (default: the run's demo_sft checkpoint)")
    parser.add_argument("--data", type=Path, default=None,
                        help="the artifacts' folder (default: the one params.yaml names)")
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml",
                        help="the composed config whose backbone settings the judge model uses")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    paths = params_paths(args.params, data=args.data)
    checkpoint = args.checkpoint or paths.model("demo_sft")
    source = paths.trajectories
    rows = read_rows(source, schemas.TRAJECTORIES)[:args.rollouts]
    if not rows:
        raise SystemExit(f"no rollouts in {source}: run `dvc repro rollouts` first")
    model = make_backend(load_params(args.params).backbone, checkpoint)  # as the judge stage does
    with tempfile.TemporaryDirectory(prefix="judge-cost-") as tmp:
        subset = Path(tmp) / "trajectories.parquet"
        write_table(subset, rows, schemas.TRAJECTORIES)
        summary = run_judge(subset, pack_folders(paths), Path(tmp) / "judgements",
                            context=JudgeContext(backend=model))
        verdicts = {name: read_rows(Path(tmp) / "judgements" / f"{name}.parquet", schemas.VERDICTS)
                    for name in ("agent", "text")}
    reviewed = sum("; agent review" in row["evidence"] for row in verdicts["agent"])
    unread = len({row["rollout_id"] for row in verdicts["text"] if row["evidence"].startswith(NO_VERDICT)})
    figures = {}
    print(f"\n{len(rows)} rollouts, both judges backed by {checkpoint}")
    print(f"{'judge':<6} {'s/rollout':>10} {'output tokens':>14} {'tokens/rollout':>15} {'accepted':>9} "
          f"{'truly accepted':>15} {'false accepts':>14} {'false rejects':>14}")
    for name, judge in summary["judges"].items():
        truth = judge["vs_truth"]["all"]["trajectories"]
        figures[name] = {**{key: judge[key] for key in ("seconds_per_rollout", "output_tokens",
                                                        "output_tokens_per_rollout", "accepted", "rollouts")},
                         "truth_accepted": truth["truth_pass"], "false_accepts": truth["false_accepts"],
                         "false_rejects": truth["false_rejects"]}
        print(f"{name:<6} {judge['seconds_per_rollout']:>10.2f} {judge['output_tokens']:>14} "
              f"{judge['output_tokens_per_rollout']:>15} {judge['accepted']:>9} {truth['truth_pass']:>15} "
              f"{truth['false_accepts']:>14} {truth['false_rejects']:>14}")
    figures["agent"]["reviewed"] = reviewed
    figures["text"]["no_verdict"] = unread
    print(f"the agent judge asked the model about {reviewed} criteria (those the compiled checks passed); "
          f"the text judge got no parseable verdict on {unread} of {len(rows)} rollouts (each of their "
          "criteria fails)")
    text_tokens = figures["text"]["output_tokens"]
    if text_tokens:
        ratio = figures["agent"]["output_tokens"] / text_tokens
        figures["agent_over_text_tokens"] = round(ratio, 3)
        print(f"agent judge output tokens / text judge's: {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
