"""``interlock``: look at what the pipeline produced.

    interlock [--data DIR] domains [--split train|heldout]
    interlock [--data DIR] tasks [--pool P] [--domain D] [--admitted]
    interlock [--data DIR] show TASK_ID
    interlock [--data DIR] draw TASK_ID -o FILE.png
    interlock params [-S GROUP=OPTION ...]
    interlock run-queue [--repo DIR] [--grace SECONDS] [--timeout SECONDS]
    interlock collect [--group NAME] [-o DIR]
    interlock compare-runs FIRST SECOND
    interlock retokenization TABLE... --checkpoint DIR
    interlock [--data DIR] export tasks --format harbor -o DIR [--pool POOL] [--limit N]
    interlock [--data DIR] export trajectories --format atif -o DIR
    interlock [--data DIR] export dataset -o DIR

Exit codes: 0 success, 1 bad or missing artifacts (one line on stderr), 2 usage errors and
unknown task ids.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from interlock.analysis.artifacts import Artifacts, UnknownTask, find_repository, repository_paths
from interlock.core.errors import InterlockError
from interlock.core.types import POOLS
from interlock.recursive.contract import TransformationContract, changed_nodes

EXIT_ERROR, EXIT_USAGE = 1, 2


def _parser() -> argparse.ArgumentParser:
    # --data is accepted before or after the subcommand; the subcommand's copy only
    # overrides the global one when given.
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument("--data", type=Path, default=argparse.SUPPRESS, metavar="DIR",
                      help="artifact directory written by `dvc repro` (default: the repository's)")
    parser = argparse.ArgumentParser(
        prog="interlock", description="List, show and draw the domains and tasks in the artifacts.")
    parser.add_argument("--data", type=Path, default=None, metavar="DIR",
                        help="artifact directory written by `dvc repro` (default: the repository's)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("domains", parents=[data], help="list the domain catalog")
    p.add_argument("--split", choices=("train", "heldout"), help="only this split")
    p.set_defaults(run=cmd_domains)

    p = sub.add_parser("tasks", parents=[data], help="list tasks with their graph sizes")
    p.add_argument("--pool", choices=POOLS, help="only this pool")
    p.add_argument("--domain", metavar="DOMAIN_ID", help="only this domain")
    p.add_argument("--admitted", action="store_true", help="only tasks the review admitted")
    p.set_defaults(run=cmd_tasks)

    p = sub.add_parser("show", parents=[data],
                       help="request, contract, rubric, reference solution and verdict of a task")
    p.add_argument("task_id", metavar="TASK_ID")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser("draw", parents=[data], help="draw a task's completion graph to PNG")
    p.add_argument("task_id", metavar="TASK_ID")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.png")
    p.add_argument("--against-parent", action="store_true",
                   help="a recursive-synthesis child: outline the nodes its rewrite added or changed")
    p.set_defaults(run=cmd_draw)

    p = sub.add_parser("params", help="compose conf/ into params.yaml, as `dvc exp run -S` does")
    p.add_argument("-S", "--set", dest="overrides", action="append", default=[],
                   metavar="GROUP=OPTION", help="a Hydra override, e.g. scale=smoke (repeatable)")
    p.add_argument("--conf", type=Path, default=Path("conf"), help="config directory (default: conf)")
    p.add_argument("--output", type=Path, default=Path("params.yaml"), help="default: params.yaml")
    p.set_defaults(run=cmd_params)

    p = sub.add_parser("run-queue", help="run the queued DVC experiments (a sweep) to the end, "
                                         "starting DVC's queue worker again where it stops early")
    p.add_argument("--repo", type=Path, default=Path("."), help="repository (default: .)")
    p.add_argument("--grace", type=float, default=60.0, metavar="SECONDS",
                   help="how long experiments may wait with none running before the worker is started "
                        "again (default: 60)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="give up after this long, naming what has not ended (default: wait)")
    p.set_defaults(run=cmd_run_queue)

    p = sub.add_parser("collect", help="compare finished DVC experiments (a sweep): table and plots")
    p.add_argument("--group", metavar="NAME", help="only the experiments of this sweep (tracking.group)")
    p.add_argument("--repo", type=Path, default=Path("."), help="repository (default: .)")
    p.add_argument("--rev", dest="revs", action="append", metavar="REV",
                   help="the commit (branch, tag) the sweep started from, as `dvc exp show --rev` "
                        "takes it (repeatable; default: HEAD)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="DIR",
                   help="for ablations.tsv, comparisons.tsv and the ablations' pictures "
                        "(default: reports/<group or all>)")
    p.set_defaults(run=cmd_collect)

    p = sub.add_parser("compare-runs", help="whether two runs wrote the same artifacts, stage by stage")
    p.add_argument("first", type=Path, help="a repository (or clone) after `dvc repro`")
    p.add_argument("second", type=Path, help="another, to compare with the first")
    p.set_defaults(run=cmd_compare_runs)

    p = sub.add_parser("retokenization", help="per trajectories table, the sampled assistant turns whose "
                       "text tokenizes again to other ids (what training on the text would learn instead)")
    p.add_argument("tables", nargs="+", type=Path, metavar="TABLE",
                   help="trajectories tables or training sets")
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="the checkpoint whose tokenizer sampled them")
    p.set_defaults(run=cmd_retokenization)

    p = sub.add_parser("export", help="the training set, tasks or trajectories in formats other tools read")
    what = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    e = what.add_parser("tasks", parents=[data], help="admitted tasks in Harbor's task layout")
    e.add_argument("--format", required=True, choices=("harbor",))
    e.add_argument("--pool", choices=("rft", "dev", "benchmark", "indist"), default="benchmark",
                   help="whose admitted tasks (default: benchmark, the held-out domains)")
    e.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    e.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    e.set_defaults(run=cmd_export_tasks)
    e = what.add_parser("trajectories", parents=[data], help="judged rollouts in ATIF, one file each")
    e.add_argument("--format", required=True, choices=("atif",))
    e.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    e.set_defaults(run=cmd_export_trajectories)
    e = what.add_parser("dataset", parents=[data],
                        help="the training set as a Hugging Face dataset (Parquet and a card)")
    e.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    e.set_defaults(run=cmd_export_dataset)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    interactive = sys.stdout.isatty()
    # piped output is read by scripts: a line is never broken, however long its path
    console = Console(width=None if interactive else 160, soft_wrap=not interactive, highlight=False)
    try:
        args.run(args, console)
    except UnknownTask as exc:
        print(f"interlock: {exc.reason}", file=sys.stderr)
        return EXIT_USAGE
    except InterlockError as exc:
        print(f"interlock: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def _run() -> None:  # pragma: no cover - `python -m interlock.analysis.cli`
    sys.exit(main())


# ----------------------------------------------------------------------------- commands

def cmd_domains(args: argparse.Namespace, console: Console) -> None:
    artifacts = _artifacts(args)
    rows = [r for r in artifacts.domain_rows() if args.split in (None, r["split"])]
    table = Table()
    for name in ("id", "name", "area", "split", "signature"):
        table.add_column(name, no_wrap=name in ("id", "split"), overflow="fold")
    for r in rows:
        table.add_row(r["domain_id"], escape(r["name"]), escape(r["area"]), r["split"], r["signature"])
    _print_table(console, f"{len(rows)} domains ({artifacts.paths.domains})", table)


def cmd_tasks(args: argparse.Namespace, console: Console) -> None:
    artifacts = _artifacts(args)
    rows = artifacts.task_rows()
    reviewed = any(r["admitted"] is not None for r in rows)
    if args.admitted and not reviewed:
        raise InterlockError(f"no review verdicts in {artifacts.paths.verdicts}; run `dvc repro` first")
    rows = [r for r in rows
            if args.pool in (None, r["pool"]) and args.domain in (None, r["domain_id"])
            and (not args.admitted or r["admitted"])]
    table = Table()
    columns = ["task_id", "domain", "pool", "decisions", "effects", "couplings"]
    columns += ["admitted"] if reviewed else []
    for name in columns:
        table.add_column(name, no_wrap=True,
                         justify="right" if name in ("decisions", "effects", "couplings") else "left")
    for r in rows:
        cells = [r["task_id"], r["domain_id"], r["pool"], str(r["decisions"]), str(r["effects"]),
                 str(r["couplings"])]
        if reviewed:
            cells.append({True: "yes", False: "[red]no[/]", None: "-"}[r["admitted"]])
        table.add_row(*cells)
    _print_table(console, f"{len(rows)} tasks ({artifacts.paths.graphs})", table)


def cmd_show(args: argparse.Namespace, console: Console) -> None:
    artifacts = _artifacts(args)
    pack = artifacts.pack(args.task_id)
    verdict = artifacts.verdict(args.task_id)
    console.rule(f"[bold]{escape(pack.task_id)}[/]  domain {escape(pack.domain_id)} · pool {pack.pool}")

    console.print("\n[bold]Request[/] (public)\n")
    console.print(pack.request.rstrip(), markup=False, soft_wrap=True)

    contract = Table()
    for name in ("id", "kind", "nodes", "path", "key"):
        contract.add_column(name, no_wrap=name != "path")
    for d in pack.contract:
        contract.add_row(d["deliverable_id"], d["kind"], " ".join(d["node_ids"]), escape(d["path"]),
                         escape(d["key"] or ""))
    console.print()
    _print_table(console, f"Contract (private): {len(pack.contract)} deliverables", contract)

    rubric = Table()
    for name in ("id", "kind", "mandatory", "weight", "description", "nodes"):
        rubric.add_column(name, no_wrap=name in ("id", "kind", "mandatory", "weight"),
                          justify="right" if name == "weight" else "left")
    for c in pack.rubric:
        rubric.add_row(c.criterion_id, c.kind, "yes" if c.mandatory else "no", f"{c.weight:g}",
                       escape(c.description), " ".join(c.node_ids))
    console.print()
    _print_table(console, f"Rubric (private): {len(pack.rubric)} criteria", rubric)

    reference = Table()
    for name in ("step", "tool", "arguments", "observation"):
        reference.add_column(name, no_wrap=name in ("step", "tool"),
                             justify="right" if name == "step" else "left")
    for step in pack.reference:
        reference.add_row(str(step["step"]), step["tool"], escape(_arguments(step["arguments"])),
                          escape(_clip(step["observation"], 60)))
    console.print()
    _print_table(console, f"Reference solution: {len(pack.reference)} tool calls", reference)

    lineage = artifacts.lineage(args.task_id)
    if lineage:
        table = Table()
        for name in ("task", "round", "operator", "parents", "demands"):
            table.add_column(name, no_wrap=name in ("round", "operator"))
        for row in lineage:
            contract = TransformationContract.from_json(row["contract"], source=str(artifacts.paths.lineage),
                                                        item=row["task_id"])
            table.add_row(escape(row["task_id"]), str(row["round"]), row["operator"],
                          escape(", ".join(row["parents"])), escape(contract.demands))
        console.print()
        rewrites = f"{len(lineage)} rewrite{'s' if len(lineage) != 1 else ''}"
        _print_table(console, f"Lineage (recursive synthesis): {rewrites} from "
                              f"{escape(lineage[-1]['parents'][0])}", table)
        console.print(f"[bold]Verdict[/]: [green]validated[/] by the grow stage in round "
                      f"{lineage[0]['round']} (reviews, contract conformance, oracle execution)")
        return
    console.print()
    if verdict is None:
        console.print(f"[bold]Verdict[/]: not reviewed yet ({artifacts.paths.verdicts} is missing)")
        return
    flags = "  ".join(f"{name} {'ok' if verdict[f'{name}_ok'] else '[red]FAIL[/]'}"
                      for name in ("coverage", "critic", "controls"))
    status = "[green]admitted[/]" if verdict["admitted"] else "[red]rejected[/]"
    console.print(f"[bold]Verdict[/]: {status}   {flags}")
    for reason in verdict["reasons"]:
        console.print(f"  - {escape(reason)}")


def cmd_draw(args: argparse.Namespace, console: Console) -> None:
    artifacts = _artifacts(args)
    from interlock.analysis.draw import draw_graph  # matplotlib only when drawing

    graph = artifacts.graph(args.task_id)
    changed = {}
    if args.against_parent:
        lineage = artifacts.lineage(args.task_id)
        if not lineage:
            raise InterlockError(f"{args.task_id} has no parent: recursive synthesis did not make it "
                                 f"({artifacts.paths.lineage})", item=args.task_id)
        changed = changed_nodes(artifacts.graph(lineage[0]["parents"][0]), graph)
    try:
        path = draw_graph(graph, args.output, changed)
    except OSError as exc:
        raise InterlockError(f"cannot write the drawing ({exc.strerror or exc})",
                             file=str(args.output)) from None
    console.print(f"wrote {escape(str(path))}: {len(graph.nodes)} nodes, {len(graph.edges)} edges, "
                  f"{len(graph.hyperedges)} hyperedges"
                  + (f"; {len(changed)} added or changed against its parent" if args.against_parent else ""),
                  markup=True)


def cmd_params(args: argparse.Namespace, console: Console) -> None:
    from interlock.core.config import write_params  # Hydra only when composing

    if not args.conf.is_dir():
        raise InterlockError("no config directory here; run from the repository root", file=str(args.conf))
    params = write_params(args.conf, args.output, args.overrides)
    choices = ", ".join(f"{group}={params[group]['name']}" for group in ("scale", "backbone")
                        if group in params)
    console.print(f"wrote {escape(str(args.output))} ({choices})")


def cmd_retokenization(args: argparse.Namespace, console: Console) -> None:
    from transformers import AutoTokenizer

    from interlock.training.examples import encode_trajectories, read_training_items

    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    table = Table("table", "trajectories", "refused", "sampled turns", "rendered turns",
                  "re-tokenized differ", "share")
    for path in args.tables:
        data = encode_trajectories(read_training_items(path), tokenizer, max_length=sys.maxsize)
        turns = data.turns.summary()
        share = turns["retokenized_differ_share"]
        table.add_row(str(path), str(len(data.examples) + len(data.too_long) + len(data.nothing_to_learn)),
                      str(data.refused["count"]), str(turns["sampled"]), str(turns["rendered"]),
                      str(turns["retokenized_differ"]), "n/a" if share is None else f"{share:.1%}")
    _print_table(console, "Sampled turns against their text tokenized again", table)


def cmd_run_queue(args: argparse.Namespace, console: Console) -> None:
    from interlock.analysis.queue import run_queue

    def restarted(waiting) -> None:
        console.print(f"DVC's queue worker stopped with {len(waiting)} experiments still to run "
                      f"({escape(', '.join(entry.label for entry in waiting))}): started it again")

    ran = run_queue(args.repo, grace=args.grace, timeout=args.timeout, on_restart=restarted)
    if not ran.succeeded and not ran.failed:
        console.print("no experiment is queued: queue a sweep with `dvc exp run --queue -S ...`")
        return
    console.print(f"{len(ran.succeeded)} experiments succeeded: {escape(', '.join(ran.succeeded) or '-')}")
    if ran.failed:
        raise InterlockError(f"{len(ran.failed)} experiments failed: {', '.join(ran.failed)} "
                             f"(`dvc queue logs NAME` says why)")


def cmd_collect(args: argparse.Namespace, console: Console) -> None:
    # matplotlib only when collecting
    from interlock.analysis.ablations import describe, level_name, write_ablation_report

    out = args.output or Path("reports") / (args.group or "all")
    frame, comparisons = write_ablation_report(args.repo, out, args.group, args.revs)
    shown = frame[frame["metric"] == "pass_rate"]
    table = Table("experiment", "breadth", "judge", "intervention", "seeds", "trajectories", "pool", "model",
                  "pass rate", "delta vs base", "MDE")
    for row in shown.itertuples():
        table.add_row(row.experiment, _count(row.breadth, "all"), row.judge, row.intervention,
                      _count(row.seeds), _count(row.training_trajectories), row.pool, row.model,
                      f"{row.value:.3f} [{row.low:.3f}, {row.high:.3f}]",
                      f"{row.delta:+.3f} [{row.delta_low:+.3f}, {row.delta_high:+.3f}]", _mde(row.delta_mde))
    experiments = frame["experiment"].nunique()
    _print_table(console, f"task pass rate on every evaluated pool, {experiments} experiments", table)
    compared = comparisons[(comparisons["metric"] == "pass_rate") & (comparisons["model"] == "rft")]
    if len(compared):
        versus = Table("ablation", "experiment", "against", "pool",
                       escape("rft pass-rate difference [interval], MDE"))
        for row in compared.itertuples():
            versus.add_row(row.axis, escape(f"{row.experiment} ({level_name(row.level)})"),
                           escape(f"{row.reference_experiment} ({level_name(row.reference_level)})"),
                           escape(row.pool), escape(describe(row)))
        console.print()
        _print_table(console, "each ablation's comparison (MDE: the smallest true difference this run "
                     "would detect, 95% confidence, 80% power)", versus)
    console.print(f"wrote {escape(str(out))}/ablations.tsv, comparisons.tsv, breadth.png, judges.png, "
                  "interventions.png, synthesis.png, rl.png")


def cmd_compare_runs(args: argparse.Namespace, console: Console) -> None:
    from interlock.analysis.compare import compare_runs

    table = Table("stage", "same", "timings only", "differing")
    comparisons = compare_runs(args.first, args.second)
    for c in comparisons:
        table.add_row(c.stage, str(len(c.same)), str(len(c.timings_only)),
                      escape(", ".join(c.differing)) or "-", style="red" if c.differing else None)
    console.print(table)
    differing = [c.stage for c in comparisons if c.differing]
    if differing:
        raise InterlockError(f"{len(differing)} stages wrote other artifacts: {', '.join(differing)}")
    console.print("every stage wrote the same artifacts (measured timings aside)")


def cmd_export_tasks(args: argparse.Namespace, console: Console) -> None:
    from interlock.export.harbor import HARBOR_VERSION, export_tasks

    written = export_tasks(_artifacts(args).paths, args.output, args.pool, args.limit)
    console.print(f"wrote {len(written)} admitted {args.pool} tasks in Harbor {HARBOR_VERSION}'s layout "
                  f"to {escape(str(args.output))}")


def cmd_export_trajectories(args: argparse.Namespace, console: Console) -> None:
    from interlock.export.atif import ATIF_VERSION, export_trajectories
    from interlock.rollout.trajectory import BadRows

    refused = BadRows()
    written = export_trajectories(_artifacts(args).paths, args.output, refused)
    console.print(f"wrote {len(written)} judged rollouts as {ATIF_VERSION} to {escape(str(args.output))}")
    for row in refused.examples:
        console.print(f"[yellow]left out row {row['row']} ({escape(str(row['rollout_id']))}), "
                      f"{escape(str(row['field']))}: {escape(str(row['reason']))}[/]")
    if refused.count > len(refused.examples):
        console.print(f"[yellow]and {refused.count - len(refused.examples)} more bad rows[/]")


def cmd_export_dataset(args: argparse.Namespace, console: Console) -> None:
    from interlock.export.dataset import export_training_set  # pandas only when exporting

    result = export_training_set(_artifacts(args).paths, args.output, repo=find_repository())
    contents, provenance = result.contents, result.provenance
    console.print(f"wrote {escape(str(result.out))}: {contents.rows} examples ({contents.sources}) from "
                  f"{contents.domains} domains; {len(contents.left_out)} left out (see its README.md)")
    if not provenance.matches_lock:
        console.print(f"[yellow]the training set read ({provenance.read_md5}) is not the one dvc.lock "
                      f"records ({provenance.locked_md5}); the card says so[/]")


def _mde(value: object) -> str:
    """A minimum detectable effect from a table cell (n/a for the reference and older metrics)."""
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _artifacts(args: argparse.Namespace) -> Artifacts:
    """The artifacts of the repository around the working directory (the paths its params.yaml
    names), or those in ``--data``."""
    return Artifacts(repository_paths(data=args.data))


def _count(value: object, missing: str = "n/a") -> str:
    """An integer count from a table cell (pandas gives floats, and NaN where there is none)."""
    return missing if value is None or (isinstance(value, float) and math.isnan(value)) else str(int(value))


def _print_table(console: Console, title: str, table: Table) -> None:
    console.print(f"[bold]{escape(title)}[/]")
    console.print(table)


def _arguments(text: str) -> str:
    """Tool-call arguments on one line, long values clipped."""
    try:
        arguments = json.loads(text)
    except (TypeError, ValueError):
        return _clip(str(text), 80)
    if not isinstance(arguments, dict):
        return _clip(str(arguments), 80)
    return ", ".join(f"{k}={_clip(json.dumps(v, ensure_ascii=False), 160)}" for k, v in arguments.items())


def _clip(text: str, limit: int) -> str:
    line = " ⏎ ".join(part for part in str(text).splitlines() if part.strip())
    return line if len(line) <= limit else line[:limit - 1] + "…"


if __name__ == "__main__":  # pragma: no cover
    _run()
