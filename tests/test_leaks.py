"""The leak review reads the public material at least as leniently as a reader does.

Every leak here is planted in a real compiled pack (one per decision kind) with that task's own
secrets, read from its private contract: a file states a case's outcome (or another value the
agent must work out) across lines, with the case id in another spelling, with look-alike
characters, or in its path. Each is paired with its clean twin, the same planted file without
the secret, which the review must admit; and every template pack of the catalog must stay clean.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from interlock.core.io import loads
from interlock.core.seeds import stable_seed
from interlock.core.types import HELDOUT_POOLS, TRAIN_POOLS, TaskSize
from interlock.review.leaks import leak_problems
from interlock.synthesis.blueprints import Blueprint, make_blueprint
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import REQUEST_PATH, compile_pack

# ----------------------------------------------------------------------------- helpers


def _secrets(pack) -> dict[str, dict[str, str]]:
    """case id -> field -> value, for every value the contract's deliverables hold."""
    found: dict[str, dict[str, str]] = {}
    for item in pack.contract:
        realization = loads(item["realization"], file="contract", item=pack.task_id,
                            field=item["deliverable_id"])
        key = str(realization["key"])
        for field, value in realization["fields"].items():
            if str(value) != key:
                found.setdefault(key, {})[field] = str(value)
    return found


def _case_and_outcome(pack) -> tuple[str, str]:
    """The first case of the task and the outcome its register row records."""
    case = sorted(_secrets(pack))[0]
    return case, _secrets(pack)[case]["outcome"]


def _free_id(pack, case: str) -> str:
    """An id of the task's form that names no case of the task (no record, no deliverable)."""
    prefix, number = case.split("-")
    text = "\n".join(pack.files.values())
    return next(f"{prefix}-{n}" for n in range(int(number) + 1, 10_000)
                if str(n) not in text and f"{prefix}-{n}" not in _secrets(pack))


def _with(pack, path: str, text: str):
    """The pack with one public file added (or replaced); the request follows its file."""
    files = {**pack.files, path: text}
    return dataclasses.replace(pack, files=files,
                               request=files[REQUEST_PATH] if path == REQUEST_PATH else pack.request)


def _named(problems: list[dict], path: str, case: str, value: str, *where: str) -> bool:
    """Whether one problem names the file, the case, the value and every place in ``where``."""
    return any(path in p["problem"] and case in p["problem"] and repr(value) in p["problem"]
               and all(w in p["problem"] for w in where) for p in problems)


def _each(tasks):
    """(domain id, graph, pack, case, outcome) for the fixture task of every decision kind."""
    for domain, _, graph, pack in tasks:
        case, outcome = _case_and_outcome(pack)
        yield domain.id, graph, pack, case, outcome


def test_the_fixture_covers_every_decision_kind_with_its_own_outcomes(tasks):
    """The tests below plant real secrets of every kind: words, option ids, dates, team names."""
    outcomes = [outcome for *_, outcome in _each(tasks)]
    assert len(tasks) == 8 and any(o.isalpha() for o in outcomes), outcomes
    assert any(re.fullmatch(r"\d{4}-\d{2}-\d{2}", o) for o in outcomes)
    assert any(o.startswith("OPT-") for o in outcomes) and any("_" in o for o in outcomes)


# ----------------------------------------------------------------------------- 1. across lines

MEMO = "notes/memo.md"


def _memo(case: str, decision: str) -> str:
    return (f"# Review memo\n\nCase {case}\n\nThe file was read twice by the desk.\n\n"
            f"Decision: {decision}\n")


def test_a_case_and_its_outcome_on_separate_lines_of_a_memo_leak(tasks):
    for domain_id, graph, pack, case, outcome in _each(tasks):
        problems = leak_problems(graph, _with(pack, MEMO, _memo(case, outcome)))
        assert _named(problems, MEMO, case, outcome, "line 3", "line 7"), (domain_id, problems)


def test_the_same_memo_without_the_outcome_is_clean(tasks):
    for domain_id, graph, pack, case, _ in _each(tasks):
        assert leak_problems(graph, _with(pack, MEMO, _memo(case, "to be worked out"))) == [], domain_id
        # the outcome beside an id that names no case of the task states nothing
        _, outcome = _case_and_outcome(pack)
        assert leak_problems(graph, _with(pack, MEMO, _memo(_free_id(pack, case), outcome))) == [], domain_id


def test_a_case_and_its_outcome_on_separate_rows_of_a_table_leak(tasks):
    """A table that is not evidence is one statement too: its rows are read together."""
    path = "notes/review.csv"
    for domain_id, graph, pack, case, outcome in _each(tasks):
        table = f"field,value\ncase,{case}\nchecked,yes\ndecision,{outcome}\n"
        problems = leak_problems(graph, _with(pack, path, table))
        assert _named(problems, path, case, outcome, "line 2", "line 4"), (domain_id, problems)
        clean = f"field,value\ncase,{case}\nchecked,yes\ndecision,to be worked out\n"
        assert leak_problems(graph, _with(pack, path, clean)) == [], domain_id


def test_a_table_row_the_csv_reader_refuses_is_still_read(tasks):
    """A row with too few cells is malformed to the workspace tools, not to a reader."""
    path = "notes/hints.csv"
    for domain_id, graph, pack, case, outcome in _each(tasks):
        problems = leak_problems(graph, _with(pack, path, f"case,answer,remark\n{case},{outcome}\n"))
        assert _named(problems, path, case, outcome, "line 2"), (domain_id, problems)
        assert leak_problems(graph, _with(pack, path, f"case,answer,remark\n{case},open\n")) == [], domain_id


def test_evidence_rows_copied_into_another_table_state_nothing_new(tasks):
    """The graph's evidence rows (an option id beside its case included) are not leaks."""
    for domain_id, graph, pack, *_ in _each(tasks):
        for path, text in [(p, t) for p, t in pack.files.items() if p.endswith(".csv")]:
            copy = "notes/copy_of_" + path.replace("/", "_")
            assert leak_problems(graph, _with(pack, copy, text)) == [], (domain_id, path)


def test_another_value_of_the_case_leaks_across_lines_too(tasks):
    """Not only outcomes: the basis clause, an amount, a date, a document's lines."""
    for domain_id, graph, pack, case, _ in _each(tasks):
        for field, value in _secrets(pack)[case].items():
            memo = f"Re: {case}\n\nFor the record ({field}):\n{value}\n"
            problems = leak_problems(graph, _with(pack, MEMO, memo))
            assert _named(problems, MEMO, case, value, "line 1", "line 4"), (domain_id, field, problems)


def test_the_policys_own_clauses_state_nothing_about_a_case_it_names(tasks):
    """The policy's clauses are evidence, as a table's evidence rows are: their outcome words and
    clause refs are no statement about a case another line of the file names (its title and
    preamble are read: "Warranty acceptance rules" may well state "accepted"); a line that is not
    one of the graph's clauses is read."""
    for domain, _, graph, pack in tasks:
        case, outcome = _case_and_outcome(pack)
        path = domain.policy.file
        listed = pack.files[path] + f"\nCase {case} is listed here.\n"
        clause_lines = {str(n) for n, line in enumerate(listed.splitlines(), start=1)
                        if line.startswith("- **P-")}
        problems = leak_problems(graph, _with(pack, path, listed))
        assert not any(" 'P-" in p["problem"] for p in problems), (domain.id, problems)
        assert not set().union(*map(_value_lines, problems)) & clause_lines, (domain.id, problems)
        extra = str(len(listed.splitlines()) + 2)
        problems = leak_problems(graph, _with(pack, path, listed + f"\nIt comes to {outcome}.\n"))
        assert any(repr(outcome) in p["problem"] and extra in _value_lines(p) for p in problems), \
            (domain.id, problems)


def _value_lines(problem: dict) -> set[str]:
    """The line numbers a problem gives for the value (case and value on separate lines)."""
    place = re.search(r"the value on lines? ([\d, ]+)", problem["problem"])
    return set(re.findall(r"\d+", place.group(1))) if place else set()


def test_a_case_named_in_the_request_is_read_against_its_outcomes(tasks):
    """The request's deliverable lines hold outcome words ("each request that is not rejected"),
    read as everywhere; their columns, fixed values (an account) and example clause refs ("such
    as P-1") are the deliverable's form, no value of a case named elsewhere in the request."""
    for domain_id, graph, pack, case, outcome in _each(tasks):
        request = pack.files[REQUEST_PATH] + f"\nNote: {case} should be {outcome}.\n"
        problems = leak_problems(graph, _with(pack, REQUEST_PATH, request))
        assert problems and all(repr(outcome) in p["problem"] and case in p["problem"]
                                for p in problems), (domain_id, problems)


# ----------------------------------------------------------------------------- 2. other spellings of the id


def _spellings(case: str) -> dict[str, str]:
    prefix, number = case.split("-")
    return {"lower case": case.lower(), "without its prefix": number, "number sign": f"#{number}",
            "underscore": f"{prefix.lower()}_{number}", "dot": f"{prefix}.{number}",
            "slash": f"{prefix}/{number}", "space": f"{prefix} {number}", "glued": f"{prefix}{number}",
            "title case": f"{prefix.title()}-{number}", "leading zero": f"{prefix}-0{number}",
            "spaced digits": f"{prefix} {' '.join(number)}",
            "dotted letters": f"{'.'.join(prefix)}. {number}",
            "camel case": f"Case{prefix.title()}{number}"}


@pytest.mark.parametrize("spelling", sorted(_spellings("AB-1234")))
def test_the_id_in_another_spelling_beside_its_outcome_leaks(tasks, spelling):
    for domain_id, graph, pack, case, outcome in _each(tasks):
        written = _spellings(case)[spelling]
        problems = leak_problems(graph, _with(pack, MEMO, f"Note: {written} should be {outcome}.\n"))
        assert _named(problems, MEMO, case, outcome, "line 1"), (domain_id, written, problems)
        other = _spellings(_free_id(pack, case))[spelling]
        assert leak_problems(graph, _with(pack, MEMO, f"Note: {other} should be {outcome}.\n")) == [], \
            (domain_id, other)


def test_the_outcome_in_another_spelling_leaks(tasks):
    """Values are read as leniently as ids: shouted, spaced out, separators changed, dates in
    other orders and with the month by name, an option by its number alone."""
    months = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December")
    for domain_id, graph, pack, case, outcome in _each(tasks):
        forms = [outcome.upper(), outcome.replace("_", " ").replace("-", " ")]
        if outcome.isalpha():
            forms.append(" ".join(outcome.upper()))
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", outcome):
            year, month, day = outcome.split("-")
            forms += [f"{int(month)}/{int(day)}/{year}", f"{months[int(month) - 1]} {int(day)}, {year}",
                      f"{int(day)} {months[int(month) - 1][:3]} {year}"]
        if outcome.startswith("OPT-"):
            forms.append(f"offer {outcome.split('-')[1]}")
        for form in forms:
            problems = leak_problems(graph, _with(pack, MEMO, f"{case}\n\n{form}\n"))
            assert _named(problems, MEMO, case, outcome, "line 1", "line 3"), (domain_id, form, problems)


def test_a_prefixless_id_in_a_memo_leaks_with_its_outcome_in_the_request(tasks):
    for domain_id, graph, pack, case, outcome in _each(tasks):
        number = case.split("-")[1]
        request = pack.files[REQUEST_PATH] + f"\nFor {number}: the answer is {outcome}.\n"
        problems = leak_problems(graph, _with(pack, REQUEST_PATH, request))
        assert _named(problems, REQUEST_PATH, case, outcome), (domain_id, problems)


# ----------------------------------------------------------------------------- 3. look-alike characters

LOOKALIKES = {
    "non-breaking hyphen": lambda case: case.replace("-", "\u2011"),
    "en dash": lambda case: case.replace("-", "\u2013"),
    "minus sign": lambda case: case.replace("-", "\u2212"),
    "zero-width space in the prefix": lambda case: case[0] + "\u200b" + case[1:],
    "soft hyphen in the number": lambda case: case[:-2] + "\u00ad" + case[-2:],
    "fullwidth": lambda case: "".join(chr(ord(c) + 0xFEE0) for c in case),
    "mathematical digits": lambda case: re.sub(r"\d", lambda m: chr(0x1D7CE + int(m.group())), case),
    "arabic-indic digits": lambda case: re.sub(r"\d", lambda m: chr(0x0660 + int(m.group())), case),
    "letter O and l for digits": lambda case: case.replace("0", "O").replace("1", "l"),
    "combining accent": lambda case: case[0] + "\u0301" + case[1:],
}


@pytest.mark.parametrize("lookalike", sorted(LOOKALIKES))
def test_the_id_with_lookalike_characters_beside_its_outcome_leaks(tasks, lookalike):
    for domain_id, graph, pack, case, outcome in _each(tasks):
        written = LOOKALIKES[lookalike](case)
        problems = leak_problems(graph, _with(pack, MEMO, f"Note: {written} should be {outcome}.\n"))
        assert _named(problems, MEMO, case, outcome, "line 1"), (domain_id, ascii(written), problems)
        other = LOOKALIKES[lookalike](_free_id(pack, case))
        assert leak_problems(graph, _with(pack, MEMO, f"Note: {other} should be {outcome}.\n")) == [], \
            (domain_id, ascii(other))


def test_lookalike_letters_in_the_id_and_the_outcome_leak(tasks):
    """Cyrillic and Greek letters that read as Latin ones, and a fullwidth outcome."""
    cyrillic = str.maketrans("ACEHKMOPTXaceopxy", "АСЕНКМОРТХасеорху")
    for domain_id, graph, pack, case, outcome in _each(tasks):
        written, stated = case.translate(cyrillic), "".join(chr(ord(c) + 0xFEE0) if c.isascii() and
                                                           c.isalnum() else c for c in outcome)
        problems = leak_problems(graph, _with(pack, MEMO, f"{written}\n\n{stated}\n"))
        assert _named(problems, MEMO, case, outcome, "line 1", "line 3"), (domain_id, ascii(written),
                                                                           problems)
        assert leak_problems(graph, _with(pack, MEMO, f"{written}\n\nto be worked out\n")) == [], domain_id


# ----------------------------------------------------------------------------- 4. file names


def _paths(case: str, outcome: str) -> dict[str, str]:
    return {"id and outcome in the name": f"out/{case}-{outcome}.txt",
            "outcome as the folder": f"{outcome}/{case}.md",
            "case as the folder": f"cases/{case.lower()}/{outcome}",
            "underscores": f"notes/{case.replace('-', '_')}_{outcome}.md"}


@pytest.mark.parametrize("shape", sorted(_paths("AB-1234", "x")))
def test_an_outcome_stated_only_in_a_file_name_leaks(tasks, shape):
    for domain_id, graph, pack, case, outcome in _each(tasks):
        path = _paths(case, outcome)[shape]
        problems = leak_problems(graph, _with(pack, path, "See the attached notes.\n"))
        assert _named(problems, path, case, outcome, "file name"), (domain_id, path, problems)
        clean = _paths(case, "pending-review")[shape]
        assert leak_problems(graph, _with(pack, clean, "See the attached notes.\n")) == [], (domain_id, clean)
        other = _paths(_free_id(pack, case), outcome)[shape]
        assert leak_problems(graph, _with(pack, other, "See the attached notes.\n")) == [], (domain_id, other)


def test_a_case_in_a_file_name_and_its_outcome_in_the_content_leak(tasks):
    for domain_id, graph, pack, case, outcome in _each(tasks):
        path = f"drafts/{case}.txt"
        problems = leak_problems(graph, _with(pack, path, f"Draft.\n\nResult: {outcome}\n"))
        assert _named(problems, path, case, outcome, "file name", "line 3"), (domain_id, problems)
        assert leak_problems(graph, _with(pack, path, "Draft.\n\nResult: open\n")) == [], domain_id


def test_the_request_message_is_read_as_well_as_the_request_file(tasks):
    """The rollout engine sends ``pack.request`` itself: a request that differs from its file is
    read too."""
    for domain_id, graph, pack, case, outcome in _each(tasks):
        leaked = dataclasses.replace(pack, request=pack.request + f"\n{case}: {outcome}\n")
        problems = leak_problems(graph, leaked)
        assert _named(problems, "request", case, outcome), (domain_id, problems)


# ----------------------------------------------------------------------------- no false positives

def test_every_template_pack_of_the_catalog_is_clean(catalog, template_packs):
    """Every domain (train and held-out), every pool, two seeds, every scale's task size."""
    for _, graph, pack in template_packs:
        assert leak_problems(graph, pack) == [], pack.task_id
    assert len(template_packs) == 2 * sum(len(TRAIN_POOLS if d.split == "train" else HELDOUT_POOLS)
                                          for d in catalog.domains) > 800


def _renumbered(blueprint: Blueprint, old: str, new: str) -> Blueprint:
    """The blueprint with one case id replaced by another everywhere it appears."""
    def swap(value):
        return json.loads(json.dumps(value).replace(f'"{old}"', f'"{new}"'))
    return dataclasses.replace(blueprint, cases=swap(blueprint.cases), options=swap(blueprint.options),
                               groups=swap(blueprint.groups))


def _collided(catalog, kind: str, where) -> tuple:
    """A template task whose first case's number is a number ``where`` finds in the pack (a cap
    in the policy, an account code in the request), and that case."""
    domain = next(d for d in catalog.domains if d.decision.kind == kind
                  and any(e.kind == "ledger_posting" for e in d.effects))
    size = TaskSize(4, len(domain.effects), 2, 1)
    for index in range(50):
        blueprint = make_blueprint(domain, "rft", index, size, stable_seed(5, domain.id, index))
        pack = compile_pack(build_graph(blueprint, domain), domain)
        taken = {r["id"].split("-")[1] for r in [*blueprint.cases, *blueprint.distractor_rows]}
        number = next((n for n in where(pack) if n not in taken), None)
        if number is None:
            continue
        case = blueprint.cases[0]["id"]
        new = f"{case.split('-')[0]}-{number}"
        graph = build_graph(_renumbered(blueprint, case, new), domain)
        return domain, graph, compile_pack(graph, domain), new, number
    raise AssertionError(f"no {kind} task with a number to collide with")


def test_a_case_number_that_is_also_a_cap_or_an_account_code_is_no_leak(catalog):
    """A prefix-less id is a bare number, and so are caps and account codes: a number the policy's
    own clauses state, or a code the task uses ("6100-PAYROLL"), is that clause's figure or that
    code, not the case; the same number anywhere else beside the outcome is the case."""
    policy_caps = lambda pack: re.findall(r"(?:at most|maximum of) (\d{4})\b", "".join(  # noqa: E731
        t for p, t in pack.files.items() if p.startswith("policies/")))
    account_codes = lambda pack: re.findall(r"account (\d{4})-[A-Z]+", pack.files[REQUEST_PATH])  # noqa: E731
    for kind, where in (("capped_payment", policy_caps), ("limit_approval", policy_caps),
                        ("limit_approval", account_codes)):
        domain, graph, pack, case, number = _collided(catalog, kind, where)
        public = "\n".join([*pack.files, *pack.files.values()])
        assert re.search(rf"(?<![\d-]){number}(?!\d)", public), (kind, number)
        assert leak_problems(graph, pack) == [], (domain.id, case)
        outcome = _secrets(pack)[case]["outcome"]
        problems = leak_problems(graph, _with(pack, MEMO, f"{number}\n\n{outcome}\n"))
        assert _named(problems, MEMO, case, outcome, "line 1", "line 3"), (domain.id, problems)
        # a number followed by a code word in capitals is that code (an account), unless the word
        # is the outcome itself
        assert leak_problems(graph, _with(pack, MEMO, f"Post to {number}-GROSSCOST.\n\n{outcome}\n")) == []
        problems = leak_problems(graph, _with(pack, MEMO, f"{number}-{outcome.upper()}\n"))
        assert _named(problems, MEMO, case, outcome, "line 1"), (domain.id, problems)


def test_a_case_id_that_is_also_a_group_code_of_the_policy_is_no_leak(catalog):
    """Where a domain writes its group codes as it writes case ids (capital projects: requests
    CAP-dddd, project codes CAP-22dd), a case can share its id with a project code the policy's
    clauses name beside an outcome word; the clause is evidence, not a statement about the case.
    The same id beside the outcome anywhere else still names the case."""
    domain = next(d for d in catalog.domains
                  if any(str(g).split("-")[0] == d.case.id_prefix for g in d.case.group_values))
    for index in range(40):
        seed = stable_seed(11, domain.id, index)
        blueprint = make_blueprint(domain, "rft", index, TaskSize(4, 2, 2, 1), seed)
        group = blueprint.groups[0]["group"]
        case = next(r["id"] for r in blueprint.cases if r[domain.case.group] != group)
        graph = build_graph(_renumbered(blueprint, case, group), domain)
        pack = compile_pack(graph, domain)
        outcome = _secrets(pack)[group]["outcome"]
        policy = pack.files[domain.policy.file]
        if any(group in line and outcome in line for line in policy.splitlines()):
            break  # the clause of the project code names the outcome of the case with its id
    else:
        raise AssertionError(f"no {domain.id} task whose project code clause names the outcome")
    assert leak_problems(graph, pack) == [], domain.id
    problems = leak_problems(graph, _with(pack, MEMO, f"{group}: {outcome}\n"))
    assert _named(problems, MEMO, group, outcome, "line 1"), problems


def test_a_case_whose_id_has_no_number_is_read_in_any_spelling(tasks):
    """A hand-built task may key its cases otherwise; such an id is read as a whole, in any case
    and with any separators."""
    _, _, graph, pack = tasks[0]
    case, outcome = _case_and_outcome(pack)
    contract = [{**item, "key": str(item["key"]).replace(case, "NORTH-WING"),
                 "realization": item["realization"].replace(case, "NORTH-WING")} for item in pack.contract]
    renamed = dataclasses.replace(pack, contract=contract)
    problems = leak_problems(graph, _with(renamed, MEMO, f"north wing\n\n{outcome}\n"))
    assert _named(problems, MEMO, "NORTH-WING", outcome, "line 1", "line 3"), problems
    assert leak_problems(graph, _with(renamed, MEMO, "north wing\n\nto be worked out\n")) == []
