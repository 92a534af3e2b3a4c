"""The generators as model agents (``generator=llm``): each author's form, the ask-validate-retry
loop, and every class of mistake an author makes planted through a real OpenAI-compatible HTTP
server (the scripted author on loopback), each refused with a reason that names it, beside its
clean twin, which is admitted."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.core import schemas
from interlock.core.backend import ChatRequest, Completion
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.models.openai_backend import OpenAIBackend
from interlock.review import author_faults, static
from interlock.review.author_faults import REVIEWS, author_fault_controls, case_outcomes, reviewed
from interlock.review.model_critic import OUTCOMES, agreement, model_critic_rows
from interlock.review.scripted_author import FAULTS, RECOVERS, ScriptedAuthor
from interlock.review.static import review_pack
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import plan_episodes
from interlock.rollout.scripted import ScriptedBackend
from interlock.synthesis.authors.agents import Ask, Refusal, ask, author_backend, settings_of
from interlock.synthesis.authors.compile import Unwritten, author_packs
from interlock.synthesis.authors.forms import (
    Citation,
    FormError,
    Limits,
    critic_form,
    request_form,
    rubric_form,
    workspace_form,
)
from interlock.synthesis.authors.prompts import CRITIC_LINE_CHARS, CRITIC_LINES, critic_view
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.graph import build_graph
from interlock.synthesis.tasks import TaskContext
from interlock.testing.authors import ServedAuthor, served
from interlock.testing.loopback_server import LoopbackServer, client_limits

from helpers.config import defaults

LIMITS = Limits()
LLM = defaults("generator=llm").generator  # the llm generator as conf/ declares it (served by openai)
SETTINGS = settings_of(LLM, seed=0)
#: a few words each fault's refusal must say
REFUSED = {
    "row_dropped": "rows with id",
    "value_altered": "not '",
    "parameter_changed": "does not state",
    "contradicting_clause": "names clauses the graph does not have",
    "outcome_leaked": "leak: memos/intake_note.md",
    "deliverable_missing": "the request does not name",
    "index_misplaced": "not '",
    "rule_private": "states no clause",
    "malformed": "not one JSON object",
    "endless": "cut off",
    "addressed": "addresses whoever reviews or grades the task",
    "beyond_contract": "asks for work the contract does not require",
}


SMALL = TaskSize(2, 1, 1, 1)


def _graphs(catalog, domains, size=SMALL, index=0):
    return [build_graph(make_blueprint(d, "rft", index, size, stable_seed(11, d.id, index)), d)
            for d in domains]


def _authored(catalog, graphs, faults: dict[str, str]):
    with served(ScriptedAuthor(faults, case_outcomes(graphs)), max_in_flight=8, timeout_s=60) as backend:
        return author_packs(graphs, catalog, backend, SETTINGS)


def _verdict(catalog, graph, made) -> dict:
    if isinstance(made, Unwritten):
        return {"admitted": False, "reasons": [made.reason], "refused_by": reviewed(graph, made, None)[0]}
    verdict = review_pack(graph, made, catalog[graph.domain_id], authored=True)["verdicts"][0]
    return {**verdict, "refused_by": [r for r in REVIEWS if verdict[f"{r}_ok"] is False]}


# ----------------------------------------------------------------------------- the forms

@pytest.fixture(scope="module")
def graph(catalog):
    return _graphs(catalog, catalog.domains[:1])[0]


def _workspace_form(graph):
    return workspace_form({n.node_id: n.attrs["path"] for n in graph.of_kind("evidence")},
                          {"REQUEST.md", "out/decisions.csv"}, LIMITS)


def _clean_workspace(graph) -> dict:
    paths = sorted({n.attrs["path"] for n in graph.of_kind("evidence")})
    return {"files": [{"path": p, "content": "x\n"} for p in paths] + [{"path": "memo.md", "content": "hi"}],
            "index": [{"node_id": n.node_id, "path": n.attrs["path"],
                       "locator": "clause" if n.subkind == "clause" else "row", "ref": n.ref}
                      for n in graph.of_kind("evidence")]}


@pytest.mark.parametrize(("change", "reason"), [
    (lambda a: {**a, "extra": 1}, "not exactly ['files', 'index']"),
    (lambda a: {**a, "files": "all of them"}, "files is a JSON str, not an array"),
    (lambda a: {**a, "files": a["files"] + [{"path": "../escape.md", "content": "x"}]}, "contains '..'"),
    (lambda a: {**a, "files": a["files"] + [{"path": "out/decisions.csv", "content": "x"}]},
     "is the request or a deliverable"),
    (lambda a: {**a, "files": a["files"] + [{"path": "more/cases.csv", "content": "x"}]},
     "may only be a document"),
    (lambda a: {**a, "files": a["files"] + [a["files"][0]]}, "is written twice"),
    (lambda a: {**a, "files": a["files"][1:]}, "are not written"),
    (lambda a: {**a, "files": [{**a["files"][0], "content": "x" * (LIMITS.file_chars + 1)}, *a["files"][1:]]},
     "more than the 20000 allowed"),
    (lambda a: {**a, "files": [{**a["files"][0], "content": "a\x00b"}, *a["files"][1:]]}, "NUL"),
    (lambda a: {**a, "index": a["index"][1:]}, "the index places no"),
    (lambda a: {**a, "index": a["index"] + [a["index"][0]]}, "more than the"),
    (lambda a: {**a, "index": [{**a["index"][0], "node_id": "E99"}, *a["index"][1:]]}, "no evidence node"),
    (lambda a: {**a, "index": [{**a["index"][0], "locator": "page"}, *a["index"][1:]]}, "not one of row"),
    (lambda a: {**a, "index": [{**a["index"][0], "locator": "lines", "ref": "9-3"}, *a["index"][1:]]},
     "no line span"),
    (lambda a: {**a, "index": [{**a["index"][0], "path": "nowhere.md"}, *a["index"][1:]]},
     "not one of the files written"),
])
def test_the_workspace_form_refuses_each_malformed_answer_with_its_reason(graph, change, reason) -> None:
    form = _workspace_form(graph)
    clean = _clean_workspace(graph)
    draft = form.parse(json.dumps(clean), LIMITS)
    assert set(draft.files) == {f["path"] for f in clean["files"]} and len(draft.index) == len(clean["index"])
    jsonschema.validate(clean, form.schema)  # the schema a backend constrains to takes what the reader takes
    with pytest.raises(FormError, match=None) as refused:
        form.parse(json.dumps(change(clean)), LIMITS)
    assert reason in str(refused.value)


@pytest.mark.parametrize("reply", [
    "", "not json", "[1, 2]", '{"request": "a"} {"request": "b"}', '{"request": "a", "request": "b"}',
    '{"request": NaN}', '{"request": ' * 5000 + '"x"' + "}" * 5000, '{"request": "' + "x" * 70_000 + '"}',
])
def test_a_reply_that_is_not_one_json_object_is_refused_never_raised(reply) -> None:
    with pytest.raises(FormError):
        request_form(LIMITS).parse(reply, LIMITS)


def test_the_request_and_rubric_forms() -> None:
    assert request_form(LIMITS).parse('```json\n{"request": "Do it."}\n```', LIMITS) == "Do it."
    form = rubric_form(["C1", "C2"], LIMITS)
    answer = {"criteria": [{"criterion_id": "C2", "description": "b"},
                           {"criterion_id": "C1", "description": "a"}]}
    jsonschema.validate(answer, form.schema)
    assert form.parse(json.dumps(answer), LIMITS) == {"C2": "b", "C1": "a"}
    for bad, reason in [({"criteria": answer["criteria"][:1]}, "no description for C1"),
                        ({"criteria": [answer["criteria"][0]] * 2}, "a second time"),
                        ({"criteria": [{"criterion_id": "C9", "description": "x"}]}, "is not one of"),
                        ({"criteria": [{"criterion_id": "C1", "description": "two\nlines"}]},
                         "more than one line")]:
        with pytest.raises(FormError, match=reason):
            form.parse(json.dumps(bad), LIMITS)


# ----------------------------------------------------------------------------- asking

class _Replies:
    """A backend that answers each task's requests from a list, in turn, and keeps what it was sent."""

    name = "replies"

    def __init__(self, replies: dict[str, list[Completion]]) -> None:
        self.replies, self.sent = replies, []

    def begin(self, key, task) -> None:
        pass

    def end(self, key) -> None:
        pass

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        self.sent += requests
        return [self.replies[r.key.split("/")[0]].pop(0) for r in requests]


def test_a_refused_reply_goes_back_with_its_reason_until_the_attempts_run_out() -> None:
    form = request_form(LIMITS)
    backend = _Replies({
        "fixed": [Completion("nope", 10, 2), Completion('{"request": "Process them."}', 30, 8)],
        "never": [Completion("{", 10, 1), Completion("{}", 10, 1), Completion("x" * 10, 10, 99, "length")],
        "gone": [Completion("", 0, 0, "server_error", "HTTP 503 after 5 retries")] * 3,
    })
    asks = [Ask(task, (), form) for task in ("fixed", "never", "gone")]
    results, calls = ask(backend, asks, replace(SETTINGS, max_attempts=3, max_new_tokens=99))
    assert results["fixed"] == "Process them."
    assert results["never"] == Refusal("request", "the answer was cut off at 99 tokens")
    assert str(results["gone"]) == ("request writer: no answer came back (server_error: HTTP 503 after 5 "
                                    "retries)")
    assert [(c.task_id, c.attempt, c.accepted) for c in calls if c.task_id == "fixed"] == [
        ("fixed", 1, False), ("fixed", 2, True)]
    assert sum(c.completion_tokens for c in calls if c.task_id == "never") == 1 + 1 + 99
    second = next(r for r in backend.sent if r.key == "fixed/request" and len(r.messages) == 2)
    assert second.messages[0].content == "nope" and "That answer was refused: not one JSON object" in (
        second.messages[1].content)
    assert all(r.response_format == form.schema for r in backend.sent)


def test_the_author_backend_needs_a_checkpoint_for_a_local_model_and_a_server_for_openai(tmp_path) -> None:
    with pytest.raises(InterlockError, match="no checkpoint folder"):
        author_backend(LLM.replace(backend="transformers", model=str(tmp_path)))
    backend = author_backend(LLM.replace(model="served-name",
                                         server=LLM.server.replace(base_urls=["http://127.0.0.1:9/v1"])))
    assert backend.name == "openai"
    with pytest.raises(InterlockError, match="generator.model"):
        LLM.replace(model=None)


# ----------------------------------------------------------------------------- the mistakes, planted

@pytest.fixture(scope="module")
def planted(catalog):
    """Each fault planted on a task of its own domain, over HTTP, the domain's next task clean
    beside it; and a first reply refused, then a clean one (the retry loop)."""
    domains = catalog.split("train")[:len(FAULTS) + 1]
    faulty, twins = _graphs(catalog, domains), _graphs(catalog, domains, index=1)
    faults = {g.task_id: fault for g, fault in zip(faulty, [*FAULTS, RECOVERS], strict=True)}
    made, calls = _authored(catalog, faulty + twins, faults)
    verdicts = {g.task_id: _verdict(catalog, g, m) for g, m in zip(faulty + twins, made, strict=True)}
    return faults, {g.task_id: t.task_id for g, t in zip(faulty, twins, strict=True)}, verdicts, calls


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_planted_mistake_is_refused_with_a_reason_that_names_it_and_its_clean_twin_is_admitted(
        planted, fault) -> None:
    faults, twins, verdicts, _ = planted
    task = next(t for t in twins if faults[t] == fault)
    verdict = verdicts[task]
    assert not verdict["admitted"] and set(verdict["refused_by"]) & set(FAULTS[fault][0]), verdict
    assert any(REFUSED[fault] in reason for reason in verdict["reasons"]), verdict["reasons"]
    twin = verdicts[twins[task]]
    assert twin["admitted"], twin["reasons"]


def test_a_refused_first_reply_is_retried_and_the_task_admitted(planted) -> None:
    faults, _, verdicts, calls = planted
    task = next(t for t, f in faults.items() if f == RECOVERS)
    assert verdicts[task]["admitted"], verdicts[task]["reasons"]
    assert [(c.attempt, c.accepted) for c in calls if c.task_id == task and c.role == "workspace"] == [
        (1, False), (2, True)]


def test_the_author_fault_controls_count_each_class_and_show_what_a_blinded_review_lets_through(
        catalog, monkeypatch) -> None:
    domains = catalog.split("train")[:2]
    found = author_fault_controls(domains, catalog, size=SMALL, seed=3, settings=SETTINGS)
    classes = found["classes"]
    assert list(classes) == ["clean", *FAULTS] and found["domains"] == 2 and found["calls"] > 0
    assert classes["clean"] == {**classes["clean"], "tasks": 2, "refused": 0, "recall": None}
    for name in FAULTS:
        assert (classes[name]["tasks"], classes[name]["recall"]) == (2, 1.0), (name, classes[name])
        assert set(classes[name]["refused_by"]) & set(FAULTS[name][0]) and classes[name]["example"], name

    def blinded(graph, pack, domain, **options):
        tables = review_pack(graph, pack, domain, **options)
        for verdict in tables["verdicts"]:
            verdict["leaks_ok"] = True
        return tables

    # a run without training domains
    none = author_fault_controls([], catalog, size=SMALL, seed=3, settings=SETTINGS)
    assert none["calls"] == 0 and list(none["classes"]) == list(classes)
    assert all((row["tasks"], row["recall"]) == (0, None) for row in none["classes"].values())

    monkeypatch.setattr(author_faults, "review_pack", blinded)
    blind = author_fault_controls(domains, catalog, size=SMALL, seed=3, settings=SETTINGS)["classes"]
    assert blind["outcome_leaked"]["recall"] == blind["addressed"]["recall"] == 0.0
    assert blind["deliverable_missing"]["recall"] == blind["index_misplaced"]["recall"] == 1.0


def test_only_the_request_scope_reading_refuses_an_author_that_asks_beyond_the_contract(
        catalog, monkeypatch) -> None:
    """The ``beyond_contract`` author's tasks pass every other review: with the request's scope
    unread, all of them are admitted; read, none is, and no clean paraphrase is refused."""
    domains = catalog.split("train")[:3]
    read = author_fault_controls(domains, catalog, size=SMALL, seed=4, settings=SETTINGS)["classes"]
    assert (read["beyond_contract"]["recall"], read["clean"]["refused"]) == (1.0, 0)
    monkeypatch.setattr(static, "scope_problems", lambda *_: [])
    unread = author_fault_controls(domains, catalog, size=SMALL, seed=4, settings=SETTINGS)["classes"]
    assert (unread["beyond_contract"]["refused"], unread["beyond_contract"]["recall"]) == (0, 0.0)


def test_clean_paraphrases_of_every_decision_kind_are_admitted_and_the_oracle_solves_them(
        catalog, agent_judge, tmp_path) -> None:
    """One task of every decision kind at the default task size: the clean author's pack is
    admitted, and the oracle, through the agent's own tools on the authored workspace, passes
    every criterion of it."""
    seen, domains = set(), []
    for domain in catalog.domains:
        if domain.decision.kind not in seen:
            seen.add(domain.decision.kind)
            domains.append(domain)
    graphs = _graphs(catalog, domains, index=2)
    made, calls = _authored(catalog, graphs, {})
    assert all(not isinstance(m, Unwritten) for m in made)
    for graph, pack in zip(graphs, made, strict=True):
        verdict = _verdict(catalog, graph, pack)
        assert verdict["admitted"], (graph.task_id, verdict["reasons"])
        table = graph.of_kind("evidence")[-1].attrs["path"]
        assert pack.files["memos/intake_note.md"] and "notes" in pack.files[table].splitlines()[0]
    contexts = [TaskContext(p.task_id, p, g, catalog[g.domain_id]) for g, p in zip(graphs, made, strict=True)]
    episodes = plan_episodes(iter(contexts), policy="oracle", attempts=1, seed=0)
    trajectories = list(run_episodes(episodes, ScriptedBackend("oracle", seed=0), RolloutLimits(max_turns=12),
                                     tmp_path))
    packs = {p.task_id: p for p in made}
    judgements = agent_judge.judge([(t, packs[t.task_id]) for t in trajectories])
    failed = {j.task_id: sorted(c for c, ok in j.passed.items() if not ok) for j in judgements
              if not all(j.passed.values())}
    assert len(judgements) == len(graphs) and not failed, failed
    assert {c.role for c in calls} == {"workspace", "request", "rubric"}
    assert all(c.prompt_tokens and c.accepted for c in calls)


def test_the_packs_and_review_stages_write_the_authors_tables_and_their_cost(catalog, tmp_path) -> None:
    """The packs stage with model authors against the loopback server, then the review: a task
    left unwritten is rejected with its authors' reason; the calls and their seconds are written
    beside the packs; the review sums them per admitted task."""
    from interlock.core.config import PriceConfig
    from interlock.core.io import write_table_set
    from interlock.review.stage import authoring_summary, run_review
    from interlock.synthesis.authors.stage import run_authored_packs
    from interlock.synthesis.graph import graph_rows

    graphs = _graphs(catalog, catalog.split("train")[:4])
    graphs_dir, packs_dir, review_dir = tmp_path / "graphs", tmp_path / "packs", tmp_path / "review"
    with write_table_set(graphs_dir, schemas.GRAPH_TABLES) as tables:
        rows: dict = {name: [] for name in schemas.GRAPH_TABLES}
        for g in graphs:
            for name, table_rows in graph_rows(g).items():
                rows[name] += table_rows
        tables.write(rows)
    domains_path = tmp_path / "domains.parquet"
    from interlock.synthesis.stage import run_domains

    run_domains(domains_path)
    faults = {graphs[0].task_id: "malformed", graphs[1].task_id: "parameter_changed"}
    with served(ScriptedAuthor(faults), max_in_flight=4, timeout_s=60) as backend:
        counts = run_authored_packs(domains_path, graphs_dir, packs_dir, tmp_path / "timings.parquet",
                                    backend=backend, settings=SETTINGS, batch_tasks=3)
    assert (counts["packs"], counts["unwritten"]) == (3, 1)
    calls = read_rows(packs_dir / "author_calls.parquet", schemas.AUTHORING_TABLES["author_calls"])
    timings = read_rows(tmp_path / "timings.parquet", schemas.AUTHOR_TIMINGS)
    assert len(calls) == len(timings) == counts["calls"] and all(t["seconds"] > 0 for t in timings)
    summary = run_review(graphs_dir, packs_dir, review_dir, catalog=catalog, authored=True)
    verdicts = {v["task_id"]: v
                for v in read_rows(review_dir / "verdicts.parquet", schemas.REVIEW_TABLES["verdicts"])}
    assert verdicts[graphs[0].task_id]["reasons"][0].startswith(
        "authoring: workspace writer: not one JSON object")
    assert not verdicts[graphs[1].task_id]["admitted"] and verdicts[graphs[1].task_id]["coverage_ok"] is False
    assert [verdicts[g.task_id]["admitted"] for g in graphs[2:]] == [True, True]
    assert summary["rft"]["admitted"] == 2
    cost = authoring_summary(packs_dir, tmp_path / "timings.parquet", review_dir,
                             PriceConfig(prompt=1.0, completion=2.0))
    prompt, completion = (sum(c[k] for c in calls) for k in ("prompt_tokens", "completion_tokens"))
    assert cost["per_admitted_task"]["usd"] == pytest.approx((prompt + 2 * completion) / 1e6 / 2, abs=1e-6)
    assert cost["per_admitted_task"]["calls"] == len(calls) / 2 and cost["admission_rate"] == 0.5
    assert cost["rejected_by"] == {"authoring": 1, "coverage": 1}
    assert cost["roles"]["workspace"]["refused"] == SETTINGS.max_attempts
    # the review stage's model critic, through the generator's own backend configuration
    from interlock.review.stage import run_model_critic

    with LoopbackServer(ServedAuthor(ScriptedAuthor({})), endpoints=1) as server:
        generator = LLM.replace(model="scripted-author", batch_tasks=2,
                                server=LLM.server.replace(base_urls=server.urls, max_retries=0))
        rows, critic_calls = run_model_critic(graphs_dir, packs_dir, generator, seed=0)
    assert {r["task_id"] for r in rows} == {g.task_id for g in graphs[1:]} and len(critic_calls) == 3
    assert agreement(rows, critic_calls)["answered"] == len(rows)
    # what the critic spent is part of what a task cost
    total = authoring_summary(packs_dir, tmp_path / "timings.parquet", review_dir,
                              PriceConfig(prompt=1.0, completion=2.0), critic_calls)
    assert total["roles"]["critic"] == {"calls": 3, "refused": 0,
                                        "prompt_tokens": sum(c.prompt_tokens for c in critic_calls),
                                        "completion_tokens": sum(c.completion_tokens for c in critic_calls)}
    prompt += sum(c.prompt_tokens for c in critic_calls)
    completion += sum(c.completion_tokens for c in critic_calls)
    assert total["per_admitted_task"]["usd"] == pytest.approx((prompt + 2 * completion) / 1e6 / 2, abs=1e-6)
    assert total["per_admitted_task"]["calls"] == (len(calls) + 3) / 2


def test_a_real_model_that_cannot_write_the_form_gets_every_task_rejected_with_a_reason(
        catalog, tiny_checkpoint) -> None:
    """The tiny random model through transformers writes nothing of the form: every task is left
    unwritten, each with its authors' last reason, and nothing raises."""
    from interlock.models.transformers_backend import TransformersBackend

    graphs = _graphs(catalog, catalog.split("train")[:2])
    backend = TransformersBackend(tiny_checkpoint, max_context=4096)
    made, calls = author_packs(graphs, catalog, backend, replace(SETTINGS, max_new_tokens=24, max_attempts=2))
    assert all(isinstance(m, Unwritten) and m.reason.startswith("workspace writer: ") for m in made)
    assert len(calls) == 2 * len(graphs) and all(not c.accepted and c.problem for c in calls)


def test_the_scripted_author_serves_from_the_command_line(graph, catalog) -> None:
    """``python -m interlock.testing.authors --port N``: the clean author on loopback, for a
    ``generator=llm`` run without a model; a workspace request gets a workspace answer."""
    import subprocess
    import sys

    from interlock.models.serving import free_port
    from interlock.synthesis.authors.prompts import workspace_prompt
    from interlock.synthesis.packs import scripted_workspace

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "interlock.testing.authors", "--port", str(port),
                                "--seconds", "120"], stdout=subprocess.PIPE, text=True)
    try:
        assert "scripted author at http://127.0.0.1:" in process.stdout.readline()
        form = _workspace_form(graph)
        evidence = {p: t for p, t in scripted_workspace(graph, catalog[graph.domain_id])[0].items()
                    if p in {n.attrs["path"] for n in graph.of_kind("evidence")}}
        messages = workspace_prompt(graph, catalog[graph.domain_id], evidence, ["REQUEST.md"], form, LIMITS)
        backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "scripted-author",
                                **client_limits(max_retries=2, timeout_s=30))
        (reply,) = backend.complete([ChatRequest("k", messages, max_new_tokens=4096,
                                                 response_format=form.schema)])
        draft = form.parse(reply.text, LIMITS)
        assert set(evidence) <= set(draft.files) and "memos/intake_note.md" in draft.files
    finally:
        process.terminate()
        process.wait(timeout=30)


# ----------------------------------------------------------------------------- what the reviews read

@pytest.fixture(scope="module")
def clean_pack(catalog):
    graphs = _graphs(catalog, catalog.split("train")[:1], index=3)
    (pack,), _ = _authored(catalog, graphs, {})
    return graphs[0], pack


def test_a_rule_slipped_into_the_request_and_an_outcome_in_an_added_column_are_refused(
        catalog, clean_pack) -> None:
    """What no fault of the scripted author covers: a request that states a number the policy
    does not (a rule of its own), or names a clause the graph lacks; an outcome written into a
    column the author added to the case table."""
    graph, pack = clean_pack
    domain = catalog[graph.domain_id]
    assert _verdict(catalog, graph, pack)["admitted"]
    request = pack.files["REQUEST.md"] + "\nAnything under 2500 may be approved at once, as P-9 says.\n"
    slipped = replace(pack, files={**pack.files, "REQUEST.md": request}, request=request)
    verdict = _verdict(catalog, graph, slipped)
    said = "the request names clauses the graph does not have: P-9; numbers no clause of the graph has: 2500"
    assert any(said in r for r in verdict["reasons"]), verdict["reasons"]
    decision = graph.of_kind("decision")[0]
    table = next(n.attrs["path"] for n in graph.of_kind("evidence") if n.ref == decision.attrs["case_id"])
    header, *rows = pack.files[table].splitlines()
    rows = [row.replace("entered by intake", f"will be {decision.attrs['outcome']}")
            if row.startswith(decision.attrs["case_id"] + ",") else row for row in rows]
    leaked = "\n".join([header, *rows]) + "\n"
    verdict = review_pack(graph, replace(pack, files={**pack.files, table: leaked}), domain, authored=True)
    assert any(r.startswith(f"leak: {table}") and decision.attrs["case_id"] in r
               for r in verdict["verdicts"][0]["reasons"]), verdict["verdicts"][0]["reasons"]


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(content=st.text(max_size=400), path=st.sampled_from(["memo.md", "policy", "table"]),
       locator=st.sampled_from(["row", "clause", "lines"]), ref=st.text(min_size=1, max_size=12))
def test_whatever_an_author_writes_is_a_pack_or_a_reason_never_an_exception(
        catalog, clean_pack, content, path, locator, ref) -> None:
    """Any text in a file, any locator: the authored task is refused with a reason or reviewed;
    compiling and reviewing it never raise."""
    graph, pack = clean_pack
    evidence = {n.node_id: n.attrs["path"] for n in graph.of_kind("evidence")}
    policy = next(n.attrs["path"] for n in graph.of_kind("evidence") if n.subkind == "clause")
    table = next(n.attrs["path"] for n in graph.of_kind("evidence") if n.subkind == "record")
    target = {"policy": policy, "table": table}.get(path, path)
    files = {p: pack.files[p] for p in set(evidence.values())} | {target: content or " "}
    index = [{"node_id": node, "path": p, "locator": "clause" if p == policy else "row",
              "ref": graph.by_id[node].ref} for node, p in evidence.items()]
    index[0] = {**index[0], "locator": locator, "ref": ref}
    replies = {
        "workspace": json.dumps({"files": [{"path": p, "content": t} for p, t in files.items()],
                                 "index": index}),
        "request": json.dumps({"request": pack.request}),
        "rubric": json.dumps({"criteria": [{"criterion_id": c.criterion_id, "description": "x"}
                                           for c in pack.rubric]}),
    }

    class Author(_Replies):
        def complete(self, requests):
            return [Completion(replies[r.key.split("/")[1]], 10, 10) for r in requests]

    (made,), _ = author_packs([graph], catalog, Author({}), SETTINGS)
    verdict = _verdict(catalog, graph, made)
    assert verdict["admitted"] or verdict["reasons"]


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("llama_cpp") is None,
                    reason="llama-cpp-python is not installed (`make llamacpp`)")
def test_every_authors_schema_is_decoded_under_llama_cpps_grammar(graph, tiny_checkpoint) -> None:
    """Each role's form, as a grammar llama.cpp constrains decoding to, on the tiny model: a few
    constrained tokens of each, in a child process (a grammar llama.cpp cannot hold crashed its
    sampler: a length bound of 20,000 characters did), each the start of that form's JSON."""
    import subprocess
    import sys

    from helpers.repo import command_timeout

    forms = {"workspace": _workspace_form(graph).schema, "request": request_form(LIMITS).schema,
             "rubric": rubric_form(["C1", "C2"], LIMITS).schema}
    script = (
        "import json, sys\n"
        "from interlock.core.backend import ChatRequest\n"
        "from interlock.core.chat import Message\n"
        "from interlock.models.llamacpp_backend import LlamaCppBackend\n"
        "backend = LlamaCppBackend(sys.argv[1], precision='F32', threads=1, max_context=1024)\n"
        "forms = json.loads(sys.argv[2])\n"
        "out = backend.complete([ChatRequest(role, (Message('user', 'Answer.'),), max_new_tokens=12,\n"
        "                                    response_format=schema) for role, schema in forms.items()])\n"
        "print(json.dumps([c.text for c in out]))\n"
        "backend.close()\n")
    done = subprocess.run([sys.executable, "-c", script, str(tiny_checkpoint), json.dumps(forms)],
                          capture_output=True, text=True, timeout=command_timeout())
    assert done.returncode == 0, done.stderr[-2000:]
    texts = json.loads(done.stdout.strip().splitlines()[-1])
    for (role, schema), text in zip(forms.items(), texts, strict=True):
        first = next(iter(schema["properties"]))
        assert text.replace(" ", "").startswith('{"' + first[:len(text.replace(" ", "")) - 2]), (role, text)


# ----------------------------------------------------------------------------- the model critic

def test_the_critic_form_takes_a_citation_of_a_public_line_and_refuses_any_other(clean_pack) -> None:
    _, pack = clean_pack
    lines = {path: len(text.splitlines()) for path, text in pack.public_files().items()}
    ids = [c.criterion_id for c in pack.rubric]
    form = critic_form(ids, lines)
    good = {"criteria": [{"criterion_id": cid, "supported": n % 2 == 0, "file": "REQUEST.md",
                          "line": 1 if n % 2 == 0 else 0} for n, cid in enumerate(ids)]}
    jsonschema.validate(good, form.schema)
    found = form.parse(json.dumps(good), LIMITS)
    assert found[ids[0]] == Citation(True, "REQUEST.md", 1) and not found[ids[1]].supported
    for change, reason in [
            (lambda a: a["criteria"][0].update(file="data/private.csv"), "is not a public file"),
            (lambda a: a["criteria"][0].update(line=lines["REQUEST.md"] + 1), "is not a line of REQUEST.md"),
            (lambda a: a["criteria"][0].update(line=0), "0 only where not supported"),
            (lambda a: a["criteria"][0].update(supported="yes"), "not true or false"),
            (lambda a: a["criteria"].pop(), "no answer for"),
            (lambda a: a["criteria"].append(dict(a["criteria"][0])), "more than the")]:
        bad = json.loads(json.dumps(good))
        change(bad)
        with pytest.raises(FormError, match=reason):
            form.parse(json.dumps(bad), LIMITS)


def test_the_model_critic_may_cite_only_what_it_was_shown(clean_pack) -> None:
    """A public file longer than the critic is shown, whose only line naming a case lies past the
    cut: the critic is told lines are missing; a reply citing the unseen line is refused with the
    reason (a critic pointing where it never looked is not reading), as is one citing a line of an
    empty file, and a line that names the case only past the characters it was shown does not
    count as naming it."""
    graph, pack = clean_pack
    case = graph.of_kind("decision")[0].attrs["case_id"]
    filler = [f"line {n} of the archive" for n in range(1, CRITIC_LINES + 30)]
    archive = [*filler[:CRITIC_LINES + 4], f"the case {case} is settled", *filler[CRITIC_LINES + 4:]]
    wide = "x" * CRITIC_LINE_CHARS + f" {case}"
    pack = replace(pack, files={**pack.files, "memos/archive.md": "\n".join(archive) + "\n",
                                "memos/wide.md": wide + "\n", "memos/empty.md": ""})
    assert critic_view(pack.files)["memos/archive.md"] == archive[:CRITIC_LINES]

    def citing(path: str, line: int) -> Completion:
        return Completion(json.dumps({"criteria": [
            {"criterion_id": c.criterion_id, "supported": True, "file": path, "line": line}
            for c in pack.rubric]}), 10, 10)

    unseen = CRITIC_LINES + 5
    assert archive[unseen - 1].endswith(f"{case} is settled")
    backend = _Replies({pack.task_id: [citing("memos/archive.md", unseen), citing("memos/empty.md", 1),
                                       citing("memos/wide.md", 1)]})
    rows, calls = model_critic_rows(backend, [(graph, pack)], SETTINGS)
    prompt = backend.sent[0].messages[1].content
    assert f"({len(archive) - CRITIC_LINES} more lines not shown)" in prompt and "is settled" not in prompt
    assert [c.accepted for c in calls] == [False, False, True]
    refusals = [backend.sent[n].messages[-1].content for n in (1, 2)]
    assert f"line {unseen} is not a line of memos/archive.md (1 to {CRITIC_LINES}" in refusals[0], refusals
    assert "line 1 is not a line of memos/empty.md" in refusals[1], refusals
    assert all(r["cited"] == "memos/wide.md:1" for r in rows)
    nodes = {c.criterion_id: c.node_ids for c in pack.rubric}
    decided = [r for r in rows if any(case == graph.by_id[n].attrs.get("case_id")
                                      for n in nodes[r["criterion_id"]] if n in graph.by_id)]
    assert decided and not any(r["cited_names_it"] for r in decided)


def test_the_model_critic_over_http_is_compared_with_the_reading_critic(catalog, tmp_path) -> None:
    """The scripted critic (it reads names, as the reading critic does, but from each criterion's
    own text) through the loopback server, on clean packs and on one whose request lost a
    deliverable: per criterion what each critic said and where the model pointed; the agreement
    counts every answered criterion once; the faulty task's register criteria are unsupported for
    the reading critic, and where the model still says supported it is counted as model_only."""
    graphs = _graphs(catalog, catalog.split("train")[:3], index=4)
    faults = {graphs[0].task_id: "deliverable_missing"}
    with served(ScriptedAuthor(faults), max_in_flight=4, timeout_s=60) as backend:
        made, _ = author_packs(graphs, catalog, backend, SETTINGS)
        rows, calls = model_critic_rows(backend, list(zip(graphs, made, strict=True)), SETTINGS)
    summary = agreement(rows, calls)
    assert summary["criteria"] == summary["answered"] == len(rows) == sum(len(p.rubric) for p in made)
    assert sum(summary[o] for o in OUTCOMES) == len(rows) and len(calls) == len(graphs)
    assert summary["agreement"] == round((summary["both_supported"] + summary["neither"]) / len(rows), 4)
    faulty = [r for r in rows if r["task_id"] == graphs[0].task_id and r["kind"] in ("primary", "grounding")]
    assert faulty and not any(r["reading"] for r in faulty)
    assert {r["outcome"] for r in faulty} <= {"neither", "model_only"}
    clean = [r for r in rows if r["task_id"] != graphs[0].task_id]
    assert all(r["reading"] for r in clean)
    assert all(r["cited_names_it"] for r in clean if r["model"]) and summary["citations_naming_it"] > 0
