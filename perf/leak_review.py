"""What the leak review costs on the template packs it runs on in every run.

Compiles the packs tests/test_leaks.py checks (every catalog domain, every pool, two seeds, the
scales' task sizes) and times :func:`interlock.review.leaks.leak_problems` over all of them,
best of ``--repeats``; with ``--before PATH`` (a copy of ``leaks.py`` as it was), times that
module too, interleaved so that the machine's load falls on both alike. Prints the time over all
packs, per pack and per file, how many packs each refused (none is right), and how many files
the quick look let through unread. Not a test.

    .venv/bin/python perf/leak_review.py [--repeats 5] [--before /tmp/leaks_before.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

from interlock.review import leaks
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.packs import REQUEST_PATH
from interlock.testing.templates import template_packs


def unread(built: list[tuple]) -> tuple[int, int]:
    """(files the quick look passes over, files) of the packs."""
    passed = total = 0
    for graph, pack in built:
        cases = [leaks._Case.of(key, pairs) for key, pairs in leaks._secrets(pack).items()]
        task = leaks._Task(graph, pack, cases)
        given = {REQUEST_PATH, *(str(n.attrs["path"]) for n in graph.of_kind("evidence")),
                 *(str(item["path"]) for item in pack.contract)}
        for _, lines in leaks._statements(pack, task.evidence, given):
            total += 1
            passed += not leaks._Statement(lines).may_name(task)
    return passed, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None, help="a copy of leaks.py as it was")
    args = parser.parse_args()
    modules = {"now": leaks}
    if args.before:
        spec = importlib.util.spec_from_file_location("leaks_before", args.before)
        modules = {"before": importlib.util.module_from_spec(spec), **modules}
        spec.loader.exec_module(modules["before"])
    built = [(graph, pack) for _, graph, pack in template_packs(load_catalog())]
    files = sum(len(pack.public_files()) for _, pack in built)
    best = dict.fromkeys(modules, float("inf"))
    refused = dict.fromkeys(modules, 0)
    for _ in range(args.repeats):
        for name, module in modules.items():
            start = time.perf_counter()
            refused[name] = sum(bool(module.leak_problems(graph, pack)) for graph, pack in built)
            best[name] = min(best[name], time.perf_counter() - start)
    for name, took in best.items():
        print(f"{name}: {took * 1e3:.0f} ms over {len(built)} packs ({files} files): "
              f"{took / len(built) * 1e6:.0f} us a pack, {took / files * 1e6:.1f} us a file; "
              f"{refused[name]} refused")
    passed, total = unread(built)
    print(f"the quick look passes over {passed} of {total} statements unread")


if __name__ == "__main__":
    main()
