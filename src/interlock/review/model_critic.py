"""The model-backed public-input critic, beside the reading one: a model (through the generators'
backend, ``generator=llm``) is shown what the solver sees, every public file with its lines
numbered, and each criterion's text, and answers per criterion whether that material supports it,
citing the file and line that does (:func:`~interlock.synthesis.authors.forms.critic_form`):
one of the lines it was shown (:func:`~interlock.synthesis.authors.prompts.critic_view`).

It reports; it does not gate. Its answers are compared, criterion by criterion, with the reading
critic's (:func:`~interlock.review.critic.support_problems`, whose verdict admits or refuses): the
share on which the two agree, and where they part (the reading critic finds the needs stated and
the model does not, or the other way). A citation of a line that states none of what the
criterion names (its case, its file) is counted apart: a model that says "supported" and points
anywhere is not reading.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from interlock.core.backend import ChatBackend
from interlock.review.critic import support_problems
from interlock.synthesis.authors.agents import Ask, AuthorSettings, Call, Refusal, ask
from interlock.synthesis.authors.forms import Citation, critic_form
from interlock.synthesis.authors.prompts import critic_prompt, critic_view
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import TaskPack

#: what one criterion's comparison is, in ``model_critic`` rows and counts
OUTCOMES = ("both_supported", "neither", "reading_only", "model_only", "no_answer")


def model_critic_rows(backend: ChatBackend, tasks: Iterable[tuple[CompletionGraph, TaskPack]],
                      settings: AuthorSettings) -> tuple[list[dict], list[Call]]:
    """One row per criterion of every task: what the reading critic and the model said, where the
    model pointed, and whether that line names the criterion's case or file."""
    tasks = list(tasks)
    asks, views = [], {}
    for _, pack in tasks:
        files = pack.public_files()
        views[pack.task_id] = critic_view(files)
        form = critic_form([c.criterion_id for c in pack.rubric],
                           {path: len(shown) for path, shown in views[pack.task_id].items()})
        asks.append(Ask(pack.task_id, critic_prompt(pack.task_id, files, pack.rubric, form), form))
    answers, calls = ask(backend, asks, settings)
    rows = []
    for graph, pack in tasks:
        unsupported = {p["criterion_id"] for p in support_problems(graph, pack)}
        answer, view = answers[pack.task_id], views[pack.task_id]
        for criterion in pack.rubric:
            reading = criterion.criterion_id not in unsupported
            cited = None if isinstance(answer, Refusal) else answer[criterion.criterion_id]
            pointed = cited is not None and cited.supported
            rows.append({"task_id": pack.task_id, "criterion_id": criterion.criterion_id,
                         "kind": criterion.kind, "reading": reading,
                         "model": None if cited is None else cited.supported,
                         "cited": f"{cited.path}:{cited.line}" if pointed else "",
                         "cited_names_it": (_names(graph, criterion.node_ids, view, cited) if pointed
                                            else None),
                         "outcome": _outcome(reading, None if cited is None else cited.supported),
                         "refused": str(answer) if isinstance(answer, Refusal) else ""})
    return rows, calls


def agreement(rows: list[dict], calls: list[Call]) -> dict:
    """The two critics' agreement over every criterion answered, and the model critic's cost."""
    counts = Counter(row["outcome"] for row in rows)
    answered = len(rows) - counts["no_answer"]
    agree = counts["both_supported"] + counts["neither"]
    cited = [row for row in rows if row["model"]]
    return {"criteria": len(rows), "answered": answered,
            "agreement": round(agree / answered, 4) if answered else None,
            **{name: counts[name] for name in OUTCOMES},
            "citations": len(cited), "citations_naming_it": sum(bool(row["cited_names_it"]) for row in cited),
            "calls": len(calls), "refused_replies": sum(not c.accepted for c in calls),
            "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls)}


def _outcome(reading: bool, model: bool | None) -> str:
    if model is None:
        return "no_answer"
    if reading and model:
        return "both_supported"
    if not reading and not model:
        return "neither"
    return "reading_only" if reading else "model_only"


def _names(graph: CompletionGraph, node_ids: tuple[str, ...], view: dict[str, list[str]],
           cited: Citation) -> bool:
    """Whether the cited line, as the critic was shown it, names what the criterion is about: a
    case of its decisions, a file its effects write, or a clause it rests on (a criterion about the
    episode as a whole: any line)."""
    shown = view.get(cited.path, [])
    line = shown[cited.line - 1] if 0 < cited.line <= len(shown) else ""
    names = set()
    for node_id in node_ids:
        node = graph.by_id.get(node_id)
        if node is None:  # a hyperedge
            continue
        if node.kind == "decision":
            names.add(node.attrs["case_id"])
        elif node.kind == "effect":
            names.add(node.attrs["realization"]["path"].rsplit("/", 1)[0])
        elif node.subkind == "clause":
            names.add(node.ref)
    return not names or any(name in line for name in names)
