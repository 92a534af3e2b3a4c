"""What one model-written check script costs to run in the sandbox, over a bare interpreter start.

Runs a script that does nothing (``pass``) on a small workspace ``--runs`` times through
:func:`interlock.judging.sandbox.run_script` behind every sandbox provider this machine has (the
``namespaces`` provider also through a user namespace, the way a caller that is not root takes),
and as many bare ``python -I -c pass`` starts for reference, interleaved so that the machine's
load falls on all alike; prints the median and the 90th percentile of each, their ratio to the
bare start, the isolation each ran under, and the providers skipped with why. Not a test.

    .venv/bin/python perf/script_overhead.py [--runs 40] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from interlock.judging import boundary, sandbox

FILES = {"out/decisions.csv": "case_id,outcome\nC-1,approved\n", "cases.csv": "id,amount\nC-1,420\n"}


def bare() -> None:
    subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)


def script(workspace: Path, provider: str, user_namespace: bool | None = None) -> sandbox.ScriptResult:
    sandbox.USER_NAMESPACE = user_namespace
    result = sandbox.run_script("pass", workspace, provider=provider)
    assert result.passed, result
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder) / "ws"
        for name, text in FILES.items():
            (workspace / name).parent.mkdir(parents=True, exist_ok=True)
            (workspace / name).write_text(text)
        modes = {provider: sandbox.boundary_mode(provider) for provider in boundary.PROVIDERS}
        runs = {provider: (lambda p=provider: script(workspace, p))
                for provider, mode in modes.items() if mode.available}
        if modes[boundary.NAMESPACES].available:
            runs["namespaces, user namespace"] = lambda: script(workspace, boundary.NAMESPACES, True)
        isolation = {name: list(run().isolation) for name, run in runs.items()}
        runs["bare interpreter"] = bare
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                seconds[name].append(time.perf_counter() - start)
    figures: dict = {"runs": args.runs, "isolation": isolation,
                     "skipped": {p: m.detail for p, m in modes.items() if not m.available}}
    bare_median = 1000 * statistics.median(seconds["bare interpreter"])
    for name, values in seconds.items():
        ordered = sorted(values)
        figures[name] = {"median_ms": 1000 * statistics.median(ordered),
                         "p90_ms": 1000 * ordered[math.ceil(0.9 * (len(ordered) - 1))]}
        figures[name]["x_bare"] = figures[name]["median_ms"] / bare_median
        median, p90, ratio = figures[name]["median_ms"], figures[name]["p90_ms"], figures[name]["x_bare"]
        print(f"{name:28s} median {median:6.1f} ms   p90 {p90:6.1f} ms   {ratio:4.1f}x a bare start")
    for name, layers in isolation.items():
        print(f"isolation, {name}: {', '.join(layers)}")
    for provider, why in figures["skipped"].items():
        print(f"skipped {provider}: {why}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
