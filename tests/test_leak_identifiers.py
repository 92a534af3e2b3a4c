"""The leak review reads every identifier of a case (its id, its subject, its row's position), in
every encoding a language model decodes without tools.

As in tests/test_leaks.py, each leak is planted in a real compiled pack of every decision kind with
that task's own secret, in a memo beside the workspace, and must be refused with a message naming
the file, the case and the value; each has its clean twin, the same text written the same way
(encoded as the leak is) with nothing secret in it, which must be admitted. Where a class is a
space of strings (spellings of a name, encodings composed, ways to count a row), hypothesis draws
its variants.
"""

from __future__ import annotations

import base64
import codecs
import csv
import dataclasses
import html
import io
import json
import urllib.parse
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_leaks import MEMO, _each, _named, _with

from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.review import leaks
from interlock.review.leaks import leak_problems
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import compile_pack

#: what a clean twin says where its leak states the secret
UNSTATED = "to be worked out"
EXAMPLES = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclasses.dataclass(frozen=True)
class Case:
    """One case of a fixture task and every identifier a reader may name it by."""

    domain_id: str
    graph: object = dataclasses.field(repr=False)
    pack: object = dataclasses.field(repr=False)
    key: str
    outcome: str
    subject: str
    table: str
    data_row: int  # its row among the table's rows, from 1
    pending_rank: int  # its rank among the pending rows, from 1
    noun: str  # what the task calls a case ("request")

    @property
    def file_line(self) -> int:
        return self.data_row + 1  # the header is line 1

    @property
    def first(self) -> str:
        return self.subject.split()[0]

    @property
    def last(self) -> str:
        return self.subject.split()[-1]


def _case(domain_id, graph, pack, key: str, outcome: str) -> Case:
    record = next(n for n in graph.of_kind("evidence") if n.subkind == "record" and n.ref == key)
    rows = list(csv.DictReader(io.StringIO(pack.files[record.attrs["path"]])))
    subject = next(v for v in record.attrs["row"].values() if isinstance(v, str) and " " in v)
    return Case(domain_id, graph, pack, key, outcome, subject, record.attrs["path"],
                [r["id"] for r in rows].index(key) + 1,
                [r["id"] for r in rows if r["status"] == "pending"].index(key) + 1,
                record.label.replace(key, "").split()[-1])


@pytest.fixture(scope="module")
def cases(tasks) -> list[Case]:
    """The first case of the fixture task of every decision kind."""
    return [_case(*found) for found in _each(tasks)]


def _problems(case: Case, text: str, path: str = MEMO) -> list[dict]:
    return leak_problems(case.graph, _with(case.pack, path, text))


def _refused_and_twin_admitted(case: Case, write: Callable[[Case, str], str]) -> None:
    """The memo ``write`` makes of the case's outcome is refused, naming the memo, the case and the
    outcome; the one it makes of nothing secret is admitted."""
    leaked = write(case, case.outcome)
    assert _named(_problems(case, leaked), MEMO, case.key, case.outcome), (case.domain_id, leaked)
    clean = write(case, UNSTATED)
    assert _problems(case, clean) == [], (case.domain_id, clean, _problems(case, clean))


# ----------------------------------------------------------------------------- encodings

def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _hex(text: str) -> str:
    return text.encode().hex()


def _hex_apart(text: str) -> str:
    return " ".join(f"{b:02x}" for b in text.encode())


def _rot13(text: str) -> str:
    return codecs.encode(text, "rot13")


def _reversed(text: str) -> str:
    return text[::-1]


def _each_word_reversed(text: str) -> str:
    return " ".join(word[::-1] for word in text.split(" "))


def _percent(text: str) -> str:
    return "".join(f"%{b:02X}" for b in text.encode())


def _u_escapes(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def _x_escapes(text: str) -> str:
    return "".join(f"\\x{b:02x}" for b in text.encode())


def _entities(text: str) -> str:
    return "".join(f"&#{ord(c)};" for c in text)


def _hex_entities(text: str) -> str:
    return "".join(f"&#x{ord(c):x};" for c in text)


ENCODINGS: dict[str, Callable[[str], str]] = {
    "base64": _b64, "urlsafe base64": _b64url, "hex": _hex, "hex apart": _hex_apart, "rot13": _rot13,
    "reversed": _reversed, "each word reversed": _each_word_reversed, "percent": _percent,
    "u escapes": _u_escapes, "x escapes": _x_escapes, "entities": _entities, "hex entities": _hex_entities}


def _wrapped(text: str, width: int = 16) -> str:
    """Base64 wrapped at a width, as mail and PEM write it."""
    encoded = _b64(text)
    return "\n".join(encoded[i:i + width] for i in range(0, len(encoded), width))


def _lookalike(text: str) -> str:
    return text.translate(str.maketrans("aceopxyAEKMOPT", "асеорхуАЕКМОРТ"))


_ORDINAL_WORDS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
                  "tenth")


def _ordinal(n: int) -> str:
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10 if n not in (11, 12, 13) else 0, 'th')}"


# ----------------------------------------------------------------------------- 1. the phrasings

#: name -> what a memo says, given a case and what it states of its outcome (the outcome, or in
#: the clean twin, nothing secret); at least 34 phrasings over every identifier kind and encoding
PHRASINGS: dict[str, Callable[[Case, str], str]] = {
    # the subject, in any spelling
    "subject's possessive": lambda c, o: f"{c.subject}'s {c.noun}: {o}\n",
    "subject shouted": lambda c, o: f"{c.subject.upper()} -> {o}\n",
    "subject glued in lower case": lambda c, o: f"{c.subject.replace(' ', '').lower()} = {o}\n",
    "subject camel case": lambda c, o: f"Re {c.subject.replace(' ', '')}: {o}\n",
    "surname first": lambda c, o: f"{c.last}, {c.first} - {o}\n",
    "subject spaced out": lambda c, o: f"{' '.join(c.subject.replace(' ', ''))}\n\n{o}\n",
    "subject in look-alike letters": lambda c, o: f"{_lookalike(c.subject)}: {o}\n",
    "surname alone": lambda c, o: f"Note for {c.last}: the {c.noun} comes to {o}.\n",
    "subject and outcome lines apart": lambda c, o: f"# Desk notes\n\nAbout {c.subject}.\n\nWe expect {o}.\n",
    # the row's position, counted every way
    "row of the table": lambda c, o: f"Row {c.data_row} of {c.table} is {o}.\n",
    "line of the file": lambda c, o: f"line {c.file_line}: {o}\n",
    "number sign": lambda c, o: f"#{c.data_row} -> {o}\n",
    "entry number": lambda c, o: f"Entry no. {c.data_row}: {o}\n",
    "ordinal pending": lambda c, o: f"The {_ordinal(c.pending_rank)} pending {c.noun} is {o}.\n",
    "ordinal word": lambda c, o: f"The {_ORDINAL_WORDS[c.pending_rank - 1]} {c.noun}: {o}\n",
    "ordinal among the open ones":
        lambda c, o: f"The {_ordinal(c.pending_rank)} of the open {c.noun}s: {o}\n",
    "row from zero": lambda c, o: f"df.iloc row {c.data_row - 1} => {o}\n",
    # the id plain, the outcome encoded
    "outcome in base64": lambda c, o: f"{c.key}: {_b64(o)}\n",
    "outcome in urlsafe base64": lambda c, o: f"{c.key} {_b64url(o)}\n",
    "outcome in hex": lambda c, o: f"{c.key} => {_hex(o)}\n",
    "outcome in hex apart": lambda c, o: f"{c.key}: {_hex_apart(o)}\n",
    "outcome in rot13": lambda c, o: f"{c.key}: {_rot13(o)}\n",
    "outcome reversed": lambda c, o: f"{c.key}: {o[::-1]}\n",
    "outcome percent-encoded": lambda c, o: f"{c.key}: {_percent(o)}\n",
    "outcome in u escapes": lambda c, o: f'{{"case": "{c.key}", "note": "{_u_escapes(o)}"}}\n',
    "outcome in entities": lambda c, o: f"{c.key}: {_entities(o)}\n",
    "subject plain, outcome in base64": lambda c, o: f"{c.subject}: {_b64(o)}\n",
    # the whole statement encoded
    "statement in base64": lambda c, o: f"{_b64(f'{c.key} is {o}')}\n",
    "statement in hex": lambda c, o: f"blob {_hex(f'{c.key} is {o}')}\n",
    "statement in rot13": lambda c, o: f"{_rot13(f'{c.key} is {o}')}\n",
    "statement reversed": lambda c, o: f"{f'{c.key} is {o}'[::-1]}\n",
    "statement with each word reversed": lambda c, o: f"{_each_word_reversed(f'{c.key} is {o}')}\n",
    "statement percent-encoded": lambda c, o: f"q={_percent(f'{c.key} is {o}')}\n",
    "statement in x escapes": lambda c, o: f"{_x_escapes(f'{c.key} is {o}')}\n",
    "statement in hex entities": lambda c, o: f"{_hex_entities(f'{c.key} is {o}')}\n",
    "statement in base64 wrapped": lambda c, o: f"-----BEGIN NOTE-----\n{_wrapped(f'{c.key} is {o}')}\n",
    # two encodings
    "base64 of base64": lambda c, o: f"{_b64(_b64(f'{c.key} is {o}'))}\n",
    "base64 reversed": lambda c, o: f"{_b64(f'{c.key} is {o}')[::-1]}\n",
    "rot13 in base64": lambda c, o: f"{_b64(_rot13(f'{c.key} is {o}'))}\n",
    "reversed in hex": lambda c, o: f"{_hex(f'{c.key} is {o}'[::-1])}\n",
    "base64 percent-encoded": lambda c, o: f"{_percent(_b64(f'{c.key} is {o}'))}\n",
    "subject and outcome in base64": lambda c, o: f"{_b64(f'{c.subject}: {o}')}\n",
    "row and outcome in rot13": lambda c, o: f"{_rot13(f'row {c.data_row}: {o}')}\n",
    "subject and outcome reversed": lambda c, o: f"{f'{c.subject} gets {o}'[::-1]}\n",
}


def test_there_are_at_least_34_phrasings_over_every_kind_and_encoding():
    assert len(PHRASINGS) >= 34
    written = "\n".join(PHRASINGS)
    assert all(kind in written for kind in ("subject", "surname", "row", "line", "ordinal", "base64", "hex",
                                            "rot13", "reversed", "percent", "escapes", "entities"))


@pytest.mark.parametrize("phrasing", sorted(PHRASINGS))
def test_each_phrasing_of_an_outcome_is_refused_and_its_clean_twin_admitted(cases, phrasing):
    for case in cases:
        _refused_and_twin_admitted(case, PHRASINGS[phrasing])


def test_a_decoded_statement_says_how_it_was_read(cases):
    """A reviewer can see why a line of base64 was refused."""
    case = cases[0]
    problems = _problems(case, PHRASINGS["statement in base64"](case, case.outcome))
    assert any("read as base64" in p["problem"] for p in problems), problems


# ----------------------------------------------------------------------------- 2. the subject

#: look-alike letters of other scripts, per Latin letter
_LOOKALIKES = {"a": "а", "c": "с", "e": "е", "o": "о", "p": "р", "x": "х", "y": "у", "i": "і",
               "A": "А", "B": "В", "E": "Е", "K": "К", "M": "М", "H": "Н", "O": "О", "P": "Р", "T": "Т"}


@st.composite
def _spellings(draw, name: str) -> str:
    """A name as a hostile author may write it: each letter in either case or a look-alike one,
    with nothing, a space, a dot, a hyphen or an invisible character between letters, the words
    in either order."""
    words = name.split()
    if draw(st.booleans()):
        words = [f"{words[-1]},", *words[:-1]]
    written = []
    for word in words:
        letters = []
        for letter in word:
            letter = draw(st.sampled_from([letter.lower(), letter.upper()]))
            if letter in _LOOKALIKES and draw(st.booleans()):
                letter = _LOOKALIKES[letter]
            letters.append(letter)
        joiner = draw(st.sampled_from(["", "", " ", ".", "-", "\u200b", "\u00ad"]))
        written.append(joiner.join(letters) if joiner in ("", "\u200b", "\u00ad") or len(word) >= 5
                       else "".join(letters))
    return draw(st.sampled_from([" ", "  ", "", "_"])).join(written)


@given(data=st.data())
@EXAMPLES
def test_any_spelling_of_the_subject_beside_the_outcome_is_refused(cases, data):
    case = data.draw(st.sampled_from(cases))
    spelled = data.draw(_spellings(case.subject))
    _refused_and_twin_admitted(case, lambda c, o: f"Re: {spelled}\n\nOutcome: {o}\n")


@given(data=st.data())
@EXAMPLES
def test_any_spelling_of_the_surname_alone_beside_the_outcome_is_refused(cases, data):
    case = data.draw(st.sampled_from(cases))
    spelled = data.draw(_spellings(case.last))
    _refused_and_twin_admitted(case, lambda c, o: f"{spelled}'s file: {o}\n")


@pytest.fixture(scope="module")
def short_named(tasks) -> Case:
    """A case whose subject's words are short (the fixture tasks' surnames are long)."""
    graph, pack, (key,) = _with_subjects(tasks, "Zoe Iyer")
    return _case("payroll_close", graph, pack, key, _outcomes(pack)[key])


@given(data=st.data())
@EXAMPLES
def test_any_spelling_of_a_short_name_alone_beside_the_outcome_is_refused(short_named, data):
    """Words of three or four letters ("Zoe", "Iyer") are read whole only (not inside other
    words): in any case, with look-alike letters or invisible characters."""
    case = short_named
    spelled = data.draw(st.sampled_from(["Iyer", "Zoe"]).flatmap(_spellings))
    spelled = spelled.replace(".", "").replace("-", "").replace(" ", "")
    _refused_and_twin_admitted(case, lambda c, o: f"{spelled} gets {o}\n")


def _with_subjects(tasks, *subjects: str):
    """The fixture task of the first decision kind rebuilt with its first cases' subjects
    renamed: (graph, pack, their ids)."""
    domain, blueprint, *_ = tasks[0]
    rows = [dict(row) for row in blueprint.cases]
    for row, subject in zip(rows, subjects, strict=False):
        row[domain.case.subject] = subject
    graph = build_graph(dataclasses.replace(blueprint, cases=rows), domain)
    return graph, compile_pack(graph, domain), [row["id"] for row in rows[:len(subjects)]]


def _outcomes(pack) -> dict[str, str]:
    found = {}
    for item in pack.contract:
        realization = json.loads(item["realization"])
        if "outcome" in realization["fields"]:
            found[realization["key"]] = realization["fields"]["outcome"]
    return found


def test_a_subject_shared_by_two_cases_names_both(tasks):
    """Naming a subject two cases share and stating the outcome of either is a statement about a
    case; the same text without the outcome states nothing."""
    name = "Dana Whitfield"
    graph, pack, keys = _with_subjects(tasks, name, name)
    for key in keys:
        outcome = _outcomes(pack)[key]
        problems = leak_problems(graph, _with(pack, MEMO, f"{name}: {outcome}\n"))
        assert any(key in p["problem"] for p in problems), (key, problems)
    assert leak_problems(graph, _with(pack, MEMO, f"{name}: {UNSTATED}\n")) == []


def test_a_word_of_a_subject_the_task_uses_otherwise_names_no_case(tasks):
    """A first name that is also a word of the policy (a code, a column) is no name on its own;
    the subject's other word, or the whole subject, still names the case."""
    graph, pack, (key,) = _with_subjects(tasks, "Cost Whitfield")  # "cost" is a word of cost_center
    outcome = _outcomes(pack)[key]
    assert leak_problems(graph, _with(pack, MEMO, f"Cost: {outcome}\n")) == []
    for named in ("Whitfield", "Cost Whitfield", "WHITFIELD, Cost"):
        problems = leak_problems(graph, _with(pack, MEMO, f"{named}: {outcome}\n"))
        assert _named(problems, MEMO, key, outcome), (named, problems)


def test_a_case_s_own_subject_is_no_secret_beside_it(cases):
    """The payee of a refund is its employee: naming the subject states no payee; naming the id
    beside it still does (the contract holds it)."""
    for case in cases:
        payees = [v for v in leaks._secrets(case.pack)[case.key] if v[1] == case.subject]
        assert _problems(case, f"Dear {case.subject},\n\nyour file is with us.\n") == [], case.domain_id
        for field, value in payees:
            problems = _problems(case, f"{case.key}: {case.subject}\n")
            assert _named(problems, MEMO, case.key, value), (case.domain_id, field, problems)


def test_an_ordinary_word_a_transform_makes_a_name_of_states_nothing(tasks):
    """"file" reversed is the name "Elif", "new" the name "Wen": a line read reversed names that
    case only with what that reading states, so a file that states an outcome plainly and says
    "file" is clean; the name and the outcome reversed together are a statement."""
    graph, pack, (key,) = _with_subjects(tasks, "Elif Osei")
    outcome = _outcomes(pack)[key]
    plain = f"The new file lists every request; one is {outcome}, that much is known.\n"
    assert leak_problems(graph, _with(pack, MEMO, plain)) == []
    problems = leak_problems(graph, _with(pack, MEMO, f"{f'Elif gets {outcome}'[::-1]}\n"))
    assert _named(problems, MEMO, key, outcome), problems


# ----------------------------------------------------------------------------- 3. the position


@st.composite
def _positions(draw, case: Case) -> str:
    """A way to point at the case's row: a number after a word for a row, counted among all rows
    (from 1 or from 0), as a file line, or among the pending ones; or an ordinal before a noun."""
    counted = draw(st.sampled_from([case.data_row, case.data_row - 1, case.file_line, case.pending_rank]))
    if draw(st.booleans()) and counted > 0:
        ordinal = draw(st.sampled_from([_ordinal(counted), _ORDINAL_WORDS[counted - 1]]))
        between = draw(st.sampled_from(["", "pending ", "open ", "pending open "]))
        noun = draw(st.sampled_from([case.noun, "row", "entry", "one"]))
        return f"the {ordinal} {between}{noun}"
    word = draw(st.sampled_from(["row", "Row", "line", "LINE", "entry", "record", "item", "#", "row no.",
                                 "line number", "index"]))
    joiner = "" if word == "#" else draw(st.sampled_from([" ", ": ", " #"]))
    return f"{word}{joiner}{counted}"


@given(data=st.data())
@EXAMPLES
def test_any_way_to_point_at_the_row_beside_the_outcome_is_refused(cases, data):
    case = data.draw(st.sampled_from(cases))
    pointed = data.draw(_positions(case))
    where = data.draw(st.sampled_from(["", f" of {case.table}", f" in `{case.table}`"]))
    _refused_and_twin_admitted(case, lambda c, o: f"Note: {pointed}{where} is {o}.\n")


def test_a_position_no_case_has_states_nothing(cases):
    for case in cases:
        assert _problems(case, f"Row 97 of {case.table} is {case.outcome}.\n") == [], case.domain_id


# ----------------------------------------------------------------------------- 4. encodings composed


@st.composite
def _encoded(draw, text: str) -> str:
    """The text in one or two encodings of :data:`ENCODINGS`, one inside the other."""
    for _ in range(draw(st.integers(1, 2))):
        text = ENCODINGS[draw(st.sampled_from(sorted(ENCODINGS)))](text)
    return text


@given(data=st.data())
@EXAMPLES
def test_any_two_encodings_of_the_statement_are_refused(cases, data):
    case = data.draw(st.sampled_from(cases))
    how = data.draw(st.integers(1, 2))
    encodings = [data.draw(st.sampled_from(sorted(ENCODINGS))) for _ in range(how)]

    def write(c: Case, o: str) -> str:
        text = f"{c.key} is {o}"
        for name in encodings:
            text = ENCODINGS[name](text)
        return f"Attachment:\n{text}\n"
    _refused_and_twin_admitted(case, write)


@given(data=st.data())
@EXAMPLES
def test_the_id_plain_and_the_outcome_in_any_two_encodings_are_refused(cases, data):
    case = data.draw(st.sampled_from(cases))
    encodings = [data.draw(st.sampled_from(sorted(ENCODINGS))) for _ in range(data.draw(st.integers(1, 2)))]

    def write(c: Case, o: str) -> str:
        for name in encodings:
            o = ENCODINGS[name](o)
        return f"{c.key}: {o}\n"
    _refused_and_twin_admitted(case, write)


def test_an_encoded_leak_deep_in_a_large_file_is_read(cases):
    """A few hundred kilobytes of base64 are decoded whole: the leak at its end is refused, the
    same blob without it admitted."""
    filler = "The desk checked the queue again today. " * 6000
    _refused_and_twin_admitted(cases[0], lambda c, o: f"{_b64(filler + f'{c.key} is {o}')}\n")


def test_hostile_encodings_are_read_within_a_bound(cases):
    """A megabyte of base64 nested ten deep is decoded at most two levels deep, and what its
    readings come to is bounded by a multiple of the file: the review does not blow up."""
    case = cases[0]
    blob = "filler text " * 1000
    for _ in range(10):
        blob = _b64(blob)
    text = (blob * (1 + (1 << 20) // len(blob)))[: 1 << 20]
    statement = leaks._Statement([(1, text)])
    secrets = leaks._secrets(case.pack)
    task = leaks._Task(case.graph, case.pack, [leaks._Case.of(key, pairs) for key, pairs in secrets.items()])
    assert statement.may_name(task)  # it looks encoded
    statement.read(task)
    extra = sum(len(line.raw) for line in statement.readings[1:])
    assert 0 < extra <= leaks.READING_FACTOR * len(text) + leaks.READING_FLOOR
    assert max(len(line.how) for line in statement.readings) <= leaks.MAX_DECODINGS


def test_text_that_merely_looks_encoded_states_nothing(cases):
    """Codes, paths, numbers and hex-like words decode to nothing a reader takes for text."""
    text = ("Post 6100-PAYROLL, see out/decisions.csv and payroll/refund_requests.csv; 3.9e2; "
            "the decade's facade; build a1b2c3d4; 1999-01-02; ids LE-SG04 and GA-2326.\n")
    for case in cases:
        assert _problems(case, f"{case.key}\n{text}") == [], case.domain_id


# ----------------------------------------------------------------------------- no false positives


def test_every_template_pack_of_a_larger_sample_reads_clean_in_every_file(catalog):
    """Beyond tests/test_leaks.py's sample: every domain at the paper's task size (eight cases,
    four distractor rows), where more rows make more positions, names and numbers to collide
    with the templates' words."""
    for domain in catalog.domains:
        seed = stable_seed(20261206, "leak-identifiers", domain.id)
        graph = build_graph(make_blueprint(domain, "rft", 0, TaskSize(8, 3, 2, 4), seed), domain)
        assert leak_problems(graph, compile_pack(graph, domain, made_by_domain=True)) == [], domain.id


def test_the_urlsafe_and_percent_forms_of_a_request_path_state_nothing(cases):
    """Paths written percent-encoded (as a link) are read decoded: still no statement."""
    for case in cases:
        link = urllib.parse.quote(f"https://example.org/{case.table}?case={case.key}")
        assert _problems(case, f"See {link} for {html.escape('the & queue')}.\n") == [], case.domain_id
