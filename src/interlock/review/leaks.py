"""The leak review: the public material must not state what the agent is meant to work out.

The secrets are what the private contract says each deliverable holds (a decision's outcome and
basis, an effect's amount, payee or status, a document's lines), each tied to its case. A public
statement leaks one where it names the case and the value together. The review is the
conservative side, so it reads at least as leniently as any reader would:

- the statement is a whole public file, its path included (``approved/RFD-1234.md`` states an
  outcome), and the request message the solver is sent; a table's rows are read together with
  its header and path, and a table the CSV reader cannot take is read as prose;
- the graph's evidence states nothing about a case, wherever it stands: a table's evidence rows
  (which legitimately put, say, an option id beside its case) and the policy's clauses (their
  outcome words, refs and figures) are left out; so are, but for outcomes, the request's lines
  that describe a deliverable and name no case (an account every row gets, "such as P-1");
- text is folded as a reader sees it: case, entities, compatibility forms (fullwidth,
  mathematical digits), accents, invisible characters (zero-width spaces, soft hyphens),
  Cyrillic and Greek letters that look Latin, dash look-alikes, other scripts' digits, ``O``/``l``
  among digits, camel case and spaced-out letters;
- a case is named by its id in any spelling (``rfd_1234``, ``RFD 1234``, ``R.F.D. 1 2 3 4``,
  ``RFD‑1234``) and by its number alone (``1234``, ``#1234``), unless that number is part of a
  larger one (a date, a decimal) or of something else the task states: a figure of one of the
  graph's clauses (a cap of 1604 is no case RFD-1604), a code its records, clauses or
  deliverables use (``BR-1604``, ``6100-PAYROLL``), or a number followed by a code word in
  capitals (an account);
- values are matched regardless of case and ending ("APPROVED", "approve"), of separators
  ("general queue" for ``general_queue``), numbers regardless of formatting ("$1,270.00",
  "1.270,00" for 1270), dates in the usual orders and with month names, and an option id by its
  number alone as well.

Almost every file of a template task holds none of its cases' numbers; it is not even folded.
"""

from __future__ import annotations

import csv
import html
import io
import re
import unicodedata
from collections.abc import Iterator
from functools import cached_property

from interlock.core.io import loads
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import REQUEST_PATH, TaskPack
from interlock.synthesis.workspace import MALFORMED, parse_csv

#: a word value matches words that share all but its last letters ("approved" ~ "approve")
STEM_SLACK = 2
MIN_STEM = 4
#: a case's number alone names it when it has at least this many digits (case ids: PREFIX-dddd)
MIN_BARE_DIGITS = 4
#: an option-like value (``OPT-149``) is also read by its number alone from this many digits
MIN_VALUE_DIGITS = 3
#: the line number of a file's path in a statement
PATH_LINE = 0
#: how many line numbers a problem lists
MAX_PLACES = 5

_TOKEN = re.compile(r"[^\W\d_]+|\d+")
_DIGITS = re.compile(r"\d+")
_NUMBER = re.compile(r"\d+(?:[.,']\d+)*")
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_CASE_KEY = re.compile(r"([^\W\d_]+)[^\w]?(\d+)")
_NON_ALNUM = re.compile(r"[\W_]+")
#: digits with nothing but punctuation or spaces between them: one number to a skimming reader
_SKELETON_NUMBER = re.compile(r"\d(?:(?:[^\w\n]|_)*\d)*")
_NON_DIGITS = re.compile(r"\D+")
#: ``O``, ``l`` and ``I`` as the digits they may stand for, to find a text's numbers quickly
_DIGIT_LOOKALIKES = str.maketrans("oOlLiI", "001111")
#: what a folded line must not hold (folding keeps a file's lines)
_BREAKS = re.compile(r"[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
#: digit-group separators a reader skips inside a number (no-break and thin spaces)
_GROUP_SPACE = re.compile(r"(?<=\d)[\u00a0\u2007\u2009\u202f](?=\d)")
#: ``O``, ``l`` and ``I`` among digits read as 0 and 1 (after case folding)
_DIGITISH = re.compile(r"(?<![^\W\d_])[0-9oli]*\d[0-9oli]*(?![^\W\d_])")
#: letters spelled out one at a time ("a p p r o v e d", "A-P-P-R-O-V-E-D")
_SPACED = re.compile(r"(?<![^\W\d_])(?:[^\W\d_][^\w\n]){2,}[^\W\d_](?![^\W\d_])")
#: what joins a number to another into a larger one (a date, a decimal, a time)
_NUMBER_JOINERS = frozenset("-./:,'")
#: letters of other scripts that read as Latin ones, and Latin letters NFKD leaves alone
_LOOKALIKES = str.maketrans({
    **dict(zip("АВЕЅІЈКМНОРСТХУаеіјоԁрсѕхуһԛԝвкмнтьӏ", "ABESIJKMHOPCTXYaeijodpcsxyhqwbkmhtbl", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαβεικνορτυχϲϳ", "ABEZHIKMNOPTYXabeikvoptuxcj", strict=True)),
    **dict(zip("ıłøđħŀſƖǀ", "ilodhlsll", strict=True)),
})
#: a number followed by a word in capitals is a code of its own (an account: ``6100-PAYROLL``)
_SUFFIXED_CODE = re.compile(r"(?<![^\W_])\d+[^\w\s]?([A-Z]{2,})(?![^\W_])")
#: a code a clause names (a group: ``GA-2301``, ``BOND-2031A``)
_CLAUSE_CODE = re.compile(r"(?<![^\W_])[^\W\d_]+[^\w\s]?\d+(?:[^\w\s]?[^\W\d_]+)?(?![^\W_])")
#: invisible characters NFKD keeps that are not format characters
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")


def leak_problems(graph: CompletionGraph, pack: TaskPack) -> list[dict]:
    """One problem per leaked secret and public file, naming the file, the lines where the case
    and the value appear, the field, the value and the case."""
    cases = [_Case.of(key, pairs) for key, pairs in _secrets(pack).items()]
    if not cases:
        return []
    task = _Task(graph, pack, cases)
    problems = []
    given = {REQUEST_PATH, *(str(n.attrs["path"]) for n in graph.of_kind("evidence")),
             *(str(item["path"]) for item in pack.contract)}
    for label, lines in _statements(pack, task.evidence, given):
        statement = _Statement(lines)
        named = {}
        for case in cases:
            if case.number is not None and case.number not in statement.skeleton:
                continue  # what almost every file of a template task comes to
            case_lines = statement.case_lines(case, task)
            if case_lines:
                named[case.key] = (case, case_lines)
        if not named:
            continue
        statement.prepare(task, {n for _, case_lines in named.values() for n in case_lines})
        for case, case_lines in named.values():
            for name, value in case.values:
                value_lines = statement.value_lines(task.value(value), everywhere=value in case.outcomes)
                if value_lines:
                    problems.append({"criterion_id": "", "problem": _message(
                        label, name, value, case.key, case_lines, value_lines)})
    return problems


def _secrets(pack: TaskPack) -> dict[str, list[tuple[str, str]]]:
    """case id -> (field, value) for every value the contract's deliverables hold, bar the key."""
    found: dict[str, set[tuple[str, str]]] = {}
    for item in pack.contract:
        realization = loads(item["realization"], file="contract", item=pack.task_id,
                            field=item["deliverable_id"])
        key = str(realization["key"])
        for name, value in realization["fields"].items():
            if str(value).strip() and str(value) != key:
                found.setdefault(key, set()).add((name, str(value)))
    return {key: sorted(pairs) for key, pairs in sorted(found.items())}


def _beyond_evidence(row: dict, evidence: dict[str, dict[str, str]]) -> list[str] | None:
    """The cells of a table row beyond the evidence row it is (its id first, then the values of
    the columns the graph does not have: an author's notes), or None where it is no evidence row:
    no evidence row has its id, or a value differs."""
    known = evidence.get(str(row.get("id")))
    if known is None or any(row.get(column) != value for column, value in known.items()):
        return None
    extra = [str(value) for column, value in row.items() if column not in known and str(value).strip()]
    return [known["id"], *extra] if extra else []


# ----------------------------------------------------------------------------- statements


def _statements(pack: TaskPack, evidence: dict[str, dict[str, str]],
                given: set[str]) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(label, [(line number, text)]) of every public file, its path as line 0 unless the task
    gives it (``given``: where the graph puts its evidence and deliverables, and the request: no
    author chose those names, so ``referral_authorizations.csv`` says nothing of a case), and of
    the request message where it is not its file's text."""
    files = pack.public_files()
    for path, text in sorted(files.items()):
        rows = _table(text, evidence) if path.lower().endswith(".csv") else None
        lines = rows if rows is not None else _prose(text)
        if path not in given:
            lines = [(PATH_LINE, path), *lines]
        if lines:
            yield path, lines
    if pack.request and pack.request != files.get(REQUEST_PATH):
        yield "the request message", _prose(pack.request)


def _prose(text: str) -> list[tuple[int, str]]:
    return list(enumerate(text.splitlines(), start=1))


def _table(text: str, evidence: dict[str, dict[str, str]]) -> list[tuple[int, str]] | None:
    """The header and every row that is not an evidence row, by line, cells apart, and of an
    evidence row the cells an author added to it, with its id; None where the CSV reader cannot
    take the table (it is then read as prose). A row the workspace tools would refuse (too few or
    too many cells) is read all the same."""
    header, rows = parse_csv(text)  # cached: the other reviews read the same tables
    if not any(MALFORMED in row or _beyond_evidence(row, evidence) != [] for row in rows):
        return [(1, " | ".join(header))] if header else []
    reader = csv.reader(io.StringIO(text))
    lines: list[tuple[int, str]] = []
    columns: list[str] | None = None
    end = 0
    try:
        for cells in reader:
            start, end = end + 1, reader.line_num
            if not cells:
                continue
            if columns is None:
                columns = cells
            elif len(cells) == len(columns):
                beyond = _beyond_evidence(dict(zip(columns, cells, strict=True)), evidence)
                if beyond is not None:
                    if beyond:
                        lines.append((start, " | ".join(beyond)))
                    continue
            lines.append((start, " | ".join(cells)))
    except csv.Error:
        return None
    return lines


class _Statement:
    """One public file (or the request message), folded line by line."""

    def __init__(self, lines: list[tuple[int, str]]) -> None:
        self.raw = lines
        joined = "\n".join(text for _, text in lines)
        if joined.isascii() and "&" not in joined:
            # folding an ASCII text makes no digits but of O, l and I: whether a case's number may
            # be there is known without folding it, and it is folded only where one may be
            joined = joined.translate(_DIGIT_LOOKALIKES)
        else:
            joined = "\n".join(line.text for line in self.lines)
        #: the statement's letters and digits alone: every number a reader could see is in it
        self.skeleton = _NON_ALNUM.sub("", joined)
        self._tokens: list[tuple[str, int]] | None = None
        self._index: dict[str, list[int]] = {}
        self._amounts: dict[int, set[float]] | None = None
        self._reading: dict[int, str] = {}  # each line's text, evidence left out (:meth:`prepare`)
        self.instructions: set[int] = set()

    @cached_property
    def lines(self) -> list[_Line]:
        joined = "\n".join(text for _, text in self.raw)
        if joined.isascii() and "&" not in joined:
            folded = fold(joined).split("\n")
        else:
            folded = [_BREAKS.sub(" ", fold(text)) for _, text in self.raw]
        return [_Line(number, raw, text) for (number, raw), text in zip(self.raw, folded, strict=True)]

    def case_lines(self, case: _Case, task: _Task) -> list[int]:
        """The lines that name the case (:func:`_names`)."""
        if case.number is None:
            return sorted({line for line, _ in self._find(case.tokens, None)})
        return [line.number for line in self.lines
                if (case.number in line.text or case.number in line.skeleton) and _names(line, case, task)]

    def prepare(self, task: _Task, named: set[int]) -> None:
        """Before values are read: what of each line is the graph's evidence (a clause with its
        ref, ``- **P-1.** ...``), left out as a table's evidence rows are; and which lines describe
        a deliverable (name its file) and name no case: the request's instructions, read for
        outcomes only (their columns, fixed values such as an account, and example clause refs
        such as "P-1" are the deliverable's form, not any case's value)."""
        self._reading, self._tokens, self._index, self._amounts = {}, None, {}, None
        for line in self.lines:
            text = line.text
            for low, high in task.clause_spans(text):
                text = text[:low] + " " * (high - low) + text[high:]
            self._reading[line.number] = text
        self.instructions = {line.number for line in self.lines if line.number not in named
                             and any(marker in line.text for marker in task.deliverables)}

    def value_lines(self, value: _Value, everywhere: bool) -> list[int]:
        """The lines that state ``value``; ``everywhere``: instruction lines included."""
        found: set[int] = set()
        if value.number is not None:
            found |= {n for n, amounts in self.amounts().items() if value.number in amounts}
        for position, sequence in enumerate(value.sequences):
            found |= {line for line, _ in self._find(sequence, value.stem if position == 0 else None)}
        return sorted(found if everywhere else found - self.instructions)

    def tokens(self) -> list[tuple[str, int]]:
        """Every word and digit run of the statement's text (evidence left out), in order, with its
        line (digit runs without leading zeros); a word spelled out letter by letter follows its
        line."""
        if self._tokens is None:
            self._tokens = []
            for line in self.lines:
                text = self._reading.get(line.number, line.text)
                self._tokens += [(_int(t) if t[0].isdigit() else t, line.number)
                                 for t in _TOKEN.findall(text)]
                self._tokens += [(_NON_ALNUM.sub("", m.group()), line.number)
                                 for m in _SPACED.finditer(text)]
            for position, (token, _) in enumerate(self._tokens):
                self._index.setdefault(token, []).append(position)
        return self._tokens

    def amounts(self) -> dict[int, set[float]]:
        """line -> every number a reader could take from it, however its digits are grouped."""
        if self._amounts is None:
            reading = self._reading
            self._amounts = {line.number: {a for run in _NUMBER.findall(reading.get(line.number, line.text))
                                           for a in _readings(run)} for line in self.lines}
        return self._amounts

    def _find(self, sequence: list[str], stem: str | None) -> Iterator[tuple[int, int]]:
        """(line, position) of every run of tokens that reads as ``sequence``; its last token may
        instead be any word that starts with ``stem``."""
        tokens = self.tokens()
        last = len(sequence) - 1
        firsts = [t for t in self._index if t.startswith(stem)] if stem is not None and not last \
            else [sequence[0]]
        for first in firsts:
            for position in self._index.get(first, ()):
                window = tokens[position:position + len(sequence)]
                if len(window) == len(sequence) and all(
                        t == s or (i == last and stem is not None and t.startswith(stem))
                        for i, ((t, _), s) in enumerate(zip(window, sequence, strict=True))):
                    yield tokens[position][1], position


class _Line:
    """One folded line; its skeleton (its letters and digits alone) when a case is looked for."""

    def __init__(self, number: int, raw: str, text: str) -> None:
        self.number, self.raw, self.text = number, raw, text

    @cached_property
    def positions(self) -> list[int]:
        """Where each character of the skeleton is in the text."""
        return [i for i, c in enumerate(self.text) if c.isalnum()]

    @cached_property
    def skeleton(self) -> str:
        return "".join(self.text[i] for i in self.positions)

    @cached_property
    def cased(self) -> str | None:
        """The folded line before its case was folded, where every character kept its place."""
        cased = _BREAKS.sub(" ", _fold_keeping_case(self.raw))
        return cased if len(cased) == len(self.text) else None


def _names(line: _Line, case: _Case, task: _Task) -> bool:
    """Whether a line names the case: its prefix and number with anything but letters and digits
    between (``rfd_1234``, ``R.F.D. 1 2 3 4``), or its number alone, unless that number is joined
    to another one (``2026-10-19``, ``12.5``) or inside what the task states for itself
    (:class:`_Explainers`). Inside the text of one of the graph's clauses not even the id names
    the case: the clause is evidence (a project code may be written as a case id is)."""
    spelled, bare = [], []
    for match in _DIGITS.finditer(line.text):
        if _int(match.group()) != case.number:
            continue
        if _after_prefix(line.text, match.start(), case.prefix, 3):
            spelled.append(match.start())
        elif not _in_larger_number(line.text, *match.span()):
            bare.append(match.start())
    skeleton = line.skeleton
    for match in _DIGITS.finditer(skeleton):
        if _int(match.group()) == case.number:
            glued = _after_prefix(skeleton, match.start(), case.prefix, 0)
            (spelled if glued else bare).append(line.positions[match.start()])
    if not spelled and not bare:
        return False
    clauses = task.clause_spans(line.text)
    if any(not _within(start, clauses) for start in spelled):
        return True
    codes = clauses + task.explainers().code_spans(line, case, task) if bare else []
    return any(not _within(start, codes) for start in bare)


def _within(position: int, spans: list[tuple[int, int]]) -> bool:
    return any(low <= position < high for low, high in spans)


def _after_prefix(text: str, start: int, prefix: str, slack: int) -> bool:
    """Whether ``prefix`` ends at most ``slack`` characters other than letters and digits before
    ``start``."""
    for gap in range(slack + 1):
        if text.endswith(prefix, 0, start - gap):
            return True
        if gap >= start or text[start - gap - 1].isalnum():
            return False
    return False


def _in_larger_number(text: str, start: int, end: int) -> bool:
    """Whether the digit run at ``text[start:end]`` is joined to another (``2026-10-19``, ``12.5``)."""
    before = start >= 2 and text[start - 1] in _NUMBER_JOINERS and text[start - 2].isdigit()
    after = end + 1 < len(text) and text[end] in _NUMBER_JOINERS and text[end + 1].isdigit()
    return before or after


def _readings(run: str) -> set[float]:
    """The numbers a run of digits and separators can be read as (``1,270.00``, ``1.270,00``,
    ``1'270``), or its digit runs where it reads as no one number (``2026.10.19``)."""
    found = set()
    for text in (run.replace(",", "").replace("'", ""),
                 run.replace(".", "").replace("'", "").replace(",", ".")):
        if _PLAIN_NUMBER.fullmatch(text) and len(text) < 300:
            found.add(float(text))
    return found or {float(_int(d)[:300]) for d in _DIGITS.findall(run)}


# ----------------------------------------------------------------------------- reading text


def _fold_keeping_case(text: str) -> str:
    """The text as a reader sees it, but for letter case: entities, compatibility forms, accents,
    invisible characters, look-alike letters, dashes and other scripts' digits folded, camel case
    split."""
    if "&" in text:
        text = html.unescape(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKD", _GROUP_SPACE.sub("'", text)).translate(_LOOKALIKES)
        text = "".join(_fold_char(c) for c in text)
    return _CAMEL.sub(" ", text)


def fold(text: str) -> str:
    """The text as a reader takes it (:func:`_fold_keeping_case`, case folded, ``O``/``l``/``I``
    among digits read as digits)."""
    return _DIGITISH.sub(_as_digits, _fold_keeping_case(text).casefold())


def _fold_char(c: str) -> str:
    if c.isascii():
        return c
    category = unicodedata.category(c)
    if category in ("Mn", "Me", "Cf") or c in _INVISIBLE:
        return ""
    if category == "Nd":
        return str(unicodedata.digit(c))
    if category == "Pd" or c in "\u2212\u2043\u02d7\u2796":
        return "-"
    if category == "Zs":
        return " "
    return c


def _as_digits(match: re.Match) -> str:
    return match.group().replace("o", "0").replace("l", "1").replace("i", "1")


def _int(digits: str) -> str:
    """A digit run as a number is written: without leading zeros."""
    return digits.lstrip("0") or "0"


def _numbers_in(text: str) -> set[str]:
    """Every digit run of a folded text, and every number its skeleton holds (``1 2 3 4``)."""
    return {_int(d) for d in _DIGITS.findall(text)} | \
        {_int(_NON_DIGITS.sub("", d)) for d in _SKELETON_NUMBER.findall(text)}


# ----------------------------------------------------------------------------- cases and values


class _Case:
    """How a reader can name one case, and the values the agent must work out for it."""

    def __init__(self, key: str, values: list[tuple[str, str]], tokens: list[str], prefix: str,
                 number: str | None) -> None:
        self.key, self.values, self.tokens, self.prefix, self.number = key, values, tokens, prefix, number
        #: what the case's decision came to (a register's outcome, a status or a date carries it)
        self.outcomes = {value for name, value in values if name == "outcome"}

    @classmethod
    def of(cls, key: str, values: list[tuple[str, str]]) -> _Case:
        folded = fold(key)
        tokens = [_int(t) if t[0].isdigit() else t for t in _TOKEN.findall(folded)] or [folded]
        match = _CASE_KEY.fullmatch(folded)
        if match is None or len(match.group(2)) < MIN_BARE_DIGITS:
            return cls(key, values, tokens, folded, None)  # read as a whole, in any spelling
        return cls(key, values, tokens, match.group(1), _int(match.group(2)))


class _Value:
    """How a reader can write one value."""

    def __init__(self, value: str) -> None:
        self.number: float | None = None  # a numeric value, however its digits are grouped
        self.sequences: list[list[str]] = []  # the runs of tokens that read as it, its own first
        self.stem: str | None = None  # what else its last word may start with ("approv")
        if _PLAIN_NUMBER.fullmatch(value.strip()):
            self.number = float(value)
            return
        folded = fold(value)
        tokens = [_int(t) if t[0].isdigit() else t for t in _TOKEN.findall(folded)] or [folded]
        self.sequences.append(tokens)
        date = _ISO_DATE.fullmatch(value.strip())
        if date:
            self.sequences += _date_sequences(*(_int(g) for g in date.groups()))
        elif (len(tokens) == 2 and tokens[0].isalpha() and tokens[1].isdigit()
              and len(tokens[1]) >= MIN_VALUE_DIGITS):
            self.sequences.append([tokens[1]])  # an option id by its number alone
        if " " not in value.strip() and tokens[-1].isalpha() and len(tokens[-1]) > STEM_SLACK \
                and len("".join(tokens)) - STEM_SLACK >= MIN_STEM:
            self.stem = tokens[-1][:-STEM_SLACK]

    def is_word(self, word: str) -> bool:
        """Whether one word reads as this value."""
        own = self.sequences[0] if self.sequences else []
        return len(own) == 1 and (word == own[0] or (self.stem is not None and word.startswith(self.stem)))


def _date_sequences(year: str, month: str, day: str) -> list[list[str]]:
    """The other ways to write a date: day and month either way round, the month by name
    (``November 4th, 2026``, ``4 Nov``)."""
    sequences = [[month, day, year], [day, month, year]]
    if not 1 <= int(month) <= 12:
        return sequences
    name = _MONTHS[int(month) - 1]
    ordinal = "th" if day in ("11", "12", "13") else {"1": "st", "2": "nd", "3": "rd"}.get(day[-1], "th")
    for word in dict.fromkeys((name, name[:3], name[:4])):
        for days in ([day], [day, ordinal]):
            sequences += [[word, *days, year], [*days, word, year], [*days, "of", word, year],
                          [word, *days], [*days, word]]
    return sequences


class _Task:
    """What the review reads every file of one task against, built as it is first needed."""

    def __init__(self, graph: CompletionGraph, pack: TaskPack, cases: list[_Case]) -> None:
        self.graph, self.pack, self.cases = graph, pack, cases
        self.evidence = {str(n.attrs["row"].get("id")): {str(k): str(v) for k, v in n.attrs["row"].items()}
                         for n in graph.of_kind("evidence") if "row" in n.attrs}
        self._values: dict[str, _Value] = {}
        self._explainers: _Explainers | None = None

    @cached_property
    def deliverables(self) -> list[str]:
        """How a line names a deliverable: its file, or for one file per case, its folder."""
        markers = set()
        for item in self.pack.contract:
            path, key = str(item["path"]), str(item["key"])
            markers.add(fold(path.rsplit("/", 1)[0] + "/" if key in path else path))
        return sorted(m for m in markers if m.strip("/"))

    @cached_property
    def clauses(self) -> list[tuple[str, str]]:
        """(the skeleton of its ref, its folded text) of every clause of the graph."""
        return [(_NON_ALNUM.sub("", fold(n.ref)), fold(str(n.attrs.get("text", ""))))
                for n in self.graph.of_kind("evidence") if n.subkind == "clause" and n.attrs.get("text")]

    def clause_spans(self, text: str) -> list[tuple[int, int]]:
        """Where a folded line holds a clause's text, with its ref where the ref alone comes first."""
        found = []
        for ref, clause in self.clauses:
            start = text.find(clause)
            while start >= 0:
                low = 0 if _NON_ALNUM.sub("", text[:start]) in ("", ref) else start
                found.append((low, start + len(clause)))
                start = text.find(clause, start + 1)
        return found

    def value(self, value: str) -> _Value:
        reader = self._values.get(value)
        if reader is None:
            reader = self._values[value] = _Value(value)
        return reader

    def explainers(self) -> _Explainers:
        if self._explainers is None:
            self._explainers = _Explainers.of(self)
        return self._explainers


class _Explainers:
    """What the task states for itself that holds a case's number without naming it, besides the
    graph's clauses (a cap of 1604 is no case RFD-1604): the codes its records, clauses and
    deliverables use (``BR-1604``, ``6100-PAYROLL``), and any number followed by a word in
    capitals (an account the request names), unless that word is a value of the case
    (``1604-APPROVED``). A code put before the number (``CC-1604``) is excused only where the task
    uses it: a word before a number is how a case id is written."""

    def __init__(self, codes: list[re.Pattern]) -> None:
        self.codes = codes

    @classmethod
    def of(cls, task: _Task) -> _Explainers:
        """Only a code that holds one of the cases' numbers matters (usually none)."""
        numbers = {c.number for c in task.cases if c.number is not None}
        texts = {str(v) for n in task.graph.of_kind("evidence") if "row" in n.attrs
                 for v in n.attrs["row"].values()}
        texts |= {value for c in task.cases for _, value in c.values}
        texts |= {word for _, clause in task.clauses for word in _CLAUSE_CODE.findall(clause)}
        texts -= {c.key for c in task.cases} | {fold(c.key) for c in task.cases}
        codes = []
        for folded in sorted({fold(t) for t in texts}):
            tokens = _TOKEN.findall(folded)
            if len(tokens) > 1 and any(t[0].isalpha() for t in tokens) and _numbers_in(folded) & numbers:
                joined = r"[^\w\s]?".join(map(re.escape, tokens))
                codes.append(re.compile(rf"(?<![^\W_]){joined}(?![^\W_])"))
        return cls(codes)

    def code_spans(self, line: _Line, case: _Case, task: _Task) -> list[tuple[int, int]]:
        found = [m.span() for code in self.codes for m in code.finditer(line.text)]
        if line.cased is not None:
            found += [m.span() for m in _SUFFIXED_CODE.finditer(line.cased)
                      if not any(task.value(v).is_word(m.group(1).casefold()) for _, v in case.values)]
        return found


# ----------------------------------------------------------------------------- messages


def _message(label: str, name: str, value: str, case: str, case_lines: list[int],
             value_lines: list[int]) -> str:
    both = sorted(set(case_lines) & set(value_lines))
    what = f"the {name} {value!r} of {case}"
    tail = "which the agent must work out"
    if both and both[-1] != PATH_LINE:
        return f"leak: {label} line {min(n for n in both if n != PATH_LINE)} states {what}, {tail}"
    if both:
        return f"leak: {label} states {what} in its file name, {tail}"
    return (f"leak: {label} states {what} (the case {_places(case_lines)}, the value "
            f"{_places(value_lines)}), {tail}")


def _places(lines: list[int]) -> str:
    named = ["in its file name"] if PATH_LINE in lines else []
    numbers = [n for n in lines if n != PATH_LINE]
    if numbers:
        shown = ", ".join(map(str, numbers[:MAX_PLACES]))
        more = f" and {len(numbers) - MAX_PLACES} more" if len(numbers) > MAX_PLACES else ""
        named.append(f"on line {shown}" if len(numbers) == 1 else f"on lines {shown}{more}")
    return " and ".join(named)
