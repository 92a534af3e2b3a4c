"""Structure review: the pack's rubric and checks are exactly what its graph compiles to.

Coverage asks whether every relation has *a* criterion; this asks whether each criterion is the
one the graph makes. The rubric is compiled again from the graph over the pack's own files
(:func:`~interlock.synthesis.packs.scripted_rubric`, whoever wrote them) and compared criterion by
criterion, matched by what it is about (its kind and graph nodes): a criterion the graph makes
that is missing, optional where the graph makes it mandatory (or weighed otherwise), a check that
differs from the compiled one (a realization check with a field dropped; a guard whose files,
appends, tables or documents differ, such as the case table listed as a document, so the guard
ignores changes to it), or a criterion the graph does not make. Each opens an exploit the judge
then accepts, so each refuses the pack, naming the criterion.
"""

from __future__ import annotations

from interlock.core.errors import InterlockError
from interlock.core.io import dumps
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import Criterion, TaskPack, scripted_rubric

#: how many differing keys of one check a problem names
MAX_KEYS = 4


def structure_problems(graph: CompletionGraph, pack: TaskPack, domain: Domain) -> list[dict]:
    """One coverage row (relation ``rubric``) per criterion that is not what the graph compiles
    to, naming it and how it differs."""
    try:
        compiled, checks = scripted_rubric(graph, domain, pack.files)
    except InterlockError as exc:
        return [_row("(rubric)", f"the rubric cannot be compiled from the graph over this pack's files: "
                                 f"{exc.reason}")]
    expected = {_about(c): c for c in compiled}
    problems, seen = [], set()
    for criterion in pack.rubric:
        about, cid, what = _about(criterion), criterion.criterion_id, _what(criterion)
        made = expected.get(about)
        if made is None or about in seen:
            again = " twice" if about in seen else ""
            problems.append(_row(cid, f"criterion {cid} ({what}) is one the graph does not make{again}"))
            continue
        seen.add(about)
        if criterion.mandatory != made.mandatory:
            problems.append(_row(cid, f"criterion {cid} ({what}) is {_necessity(criterion)}; the graph makes "
                                      f"it {_necessity(made)}"))
        if criterion.weight != made.weight:
            problems.append(_row(cid, f"criterion {cid} ({what}) weighs {criterion.weight}; the graph "
                                      f"makes it {made.weight}"))
        spec, compiled_spec = pack.checks.get(cid), checks[made.criterion_id]
        if spec is not None and dumps(spec) != dumps(compiled_spec):  # as stored: tuples are lists
            differ = sorted(k for k in {*spec, *compiled_spec}
                            if dumps(spec.get(k)) != dumps(compiled_spec.get(k)))
            problems.append(_row(cid, f"the check of criterion {cid} ({what}) differs from the one compiled "
                                      f"from the graph in {', '.join(differ[:MAX_KEYS])}"))
    for about, made in expected.items():
        if about not in seen:
            problems.append(_row(made.criterion_id, f"the {_necessity(made)} criterion the graph makes for "
                                                    f"{_what(made)} is missing from the rubric"))
    return problems


def _about(criterion: Criterion) -> tuple[str, tuple[str, ...]]:
    return criterion.kind, criterion.node_ids


def _what(criterion: Criterion) -> str:
    nodes = ", ".join(criterion.node_ids[:4]) + (", ..." if len(criterion.node_ids) > 4 else "")
    return f"{criterion.kind} over {nodes}" if nodes else criterion.kind


def _necessity(criterion: Criterion) -> str:
    return "mandatory" if criterion.mandatory else "optional"


def _row(ref: str, problem: str) -> dict:
    return {"relation": "rubric", "ref": ref, "problem": problem}
