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
- every line is also read decoded, as a language model decodes without tools (:func:`_decodings`):
  base64 (standard and urlsafe) and hex runs, percent-encoding, ``\\uXXXX`` / ``\\xXX`` escapes and
  HTML entities decoded in place (so "RFD-1234: YXBwcm92ZWQ=" reads "RFD-1234: approved"), lines
  of base64 wrapped at a width joined, rot13, the characters reversed (the line's, or each
  word's) and the words' order reversed, up to two levels deep (base64 of base64, reversed
  base64, rot13 in hex), within a budget of a few times the file;
- a case is named by any identifier a reader can use (:class:`_Identifiers`): its id in any
  spelling (``rfd_1234``, ``RFD 1234``, ``R.F.D. 1 2 3 4``, ``RFD‑1234``) and by its number alone
  (``1234``, ``#1234``), unless that number is part of a larger one (a date, a decimal) or of
  something else the task states: a figure of one of the graph's clauses (a cap of 1604 is no
  case RFD-1604), a code its records, clauses or deliverables use (``BR-1604``, ``6100-PAYROLL``),
  or a number followed by a code word in capitals (an account); by its subject (each cell of its
  record row of two or more words: a person's name, a site), whole in either order and any case,
  spacing or look-alike letters, or by one word of it alone of three letters or more (a surname)
  unless the task uses that word otherwise (a group code ``HOSP-GRACE``, a column); and by its
  row's position in its table, counted every way a reader may count (:attr:`_Identifiers.
  positions`: the data row from 1 or from 0, the file line, the rank among the pending rows):
  a number after a word for a row ("row 4", "line 5", "entry no. 4", "#4") or an ordinal before a
  noun for one ("the 3rd pending request", "the third row"); not "the last one", which the
  templates say of a case's history;
- values are matched regardless of case and ending ("APPROVED", "approve"), of separators
  ("general queue" for ``general_queue``), numbers regardless of formatting ("$1,270.00",
  "1.270,00" for 1270), dates in the usual orders and with month names, and an option id by its
  number alone as well.

A subject or a position may name several cases (two requests of one employee, "row 3" counted
one way or another): a statement about any of them is a statement about a case. A case's own
subject is no secret beside it (the payee of a refund is its employee).

Rot13 and reversal turn ordinary words into others ("file" reversed is the name "Elif"), so a
line is read so only where that makes a word of an identifier or a value out of one that is
none, and what such a reading names by a word of a subject, a position or a bare number counts
only with a value that reading states too; an id with its prefix, or a whole subject, counts
with any value of the file.

Not read: three encodings deep or more; a plain number reversed ("0621" for 1260: reversed digits
are read beside a reversed word or date only, or every id reversed would be an amount); a word of a
subject of three or four letters broken up or glued to others ("Ana" is inside "banana").

Almost every file of a template task holds none of its cases' identifiers in any of those forms
and nothing that decodes (:meth:`_Statement.may_name`); it is not even folded.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property, lru_cache

from interlock.core.io import loads
from interlock.review.reading import (
    CAMEL,
    CHARACTER_CLASSES,
    DECODERS,
    TRANSFORMS,
    fold,
    fold_keeping_case,
    maybe_encoded,
    rot13,
)
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
#: a word of a subject names its case alone from this many letters ("Duarte", not "Li")
MIN_SUBJECT_PART = 3
#: a word of a subject the quick look finds glued to others or spaced out from this many letters
#: (shorter ones, "Dev", are inside too many words)
MIN_GLUED_PART = 5
#: a run of lines of base64 or hex is read as one text where its first line is this wide
MIN_BLOCK_WIDTH = 16
#: how many decodings deep a line is read (base64 of base64, reversed hex)
MAX_DECODINGS = 2
#: what a statement's other readings may come to, in characters: this many times the statement,
#: and at least the floor (a hostile megabyte of base64 is read, but not without bound)
READING_FACTOR = 4
READING_FLOOR = 1 << 16

_TOKEN = re.compile(r"[^\W\d_]+|\d+")
_DIGITS = re.compile(r"\d+")
_NUMBER = re.compile(r"\d+(?:[.,']\d+)*")
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_CASE_KEY = re.compile(r"([^\W\d_]+)[^\w]?(\d+)")
_NON_ALNUM = re.compile(r"[\W_]+")
_LETTERS = re.compile(r"[^\W\d_]+")
#: digits with nothing but punctuation or spaces between them: one number to a skimming reader
_SKELETON_NUMBER = re.compile(r"\d(?:(?:[^\w\n]|_)*\d)*")
_NON_DIGITS = re.compile(r"\D+")
#: what a folded line must not hold (folding keeps a file's lines)
_BREAKS = re.compile(r"[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_CAMEL_WORD = re.compile(r"[A-Za-z]*[a-z][A-Z][A-Za-z]*")
#: ASCII text (as bytes: translating them is fast) to its letters and digits alone (``O``, ``l`` and
#: ``I`` as digits), and to its words, numbers and ``#`` apart
_NOT_ALNUM = bytes(c for c in range(256) if not chr(c).isalnum() or c > 127)
_AS_DIGITS = bytes.maketrans(b"oOlLiI", b"001111")
_TOKENS = bytes.maketrans(_NOT_ALNUM.replace(b"#", b""), b" " * (len(_NOT_ALNUM) - 1))
_WORD_OR_SIGN = re.compile(r"[^\W_]+|#")
#: letters spelled out one at a time ("a p p r o v e d", "A-P-P-R-O-V-E-D")
_SPACED = re.compile(r"(?<![^\W\d_])(?:[^\W\d_][^\w\n]){2,}[^\W\d_](?![^\W\d_])")
#: what joins a number to another into a larger one (a date, a decimal, a time)
_NUMBER_JOINERS = frozenset("-./:,'")
#: a number followed by a word in capitals is a code of its own (an account: ``6100-PAYROLL``)
_SUFFIXED_CODE = re.compile(r"(?<![^\W_])\d+[^\w\s]?([A-Z]{2,})(?![^\W_])")
#: a code a clause names (a group: ``GA-2301``, ``BOND-2031A``)
_CLAUSE_CODE = re.compile(r"(?<![^\W_])[^\W\d_]+[^\w\s]?\d+(?:[^\w\s]?[^\W\d_]+)?(?![^\W_])")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
#: a reading's token that no value's run of tokens crosses (between two readings of lines)
_SENTINEL = "\x00"
#: a line that is nothing but a run of base64 or hex (of a text wrapped at a width, the last line
#: of it shorter)
_BLOCK_LINE = re.compile(r"[A-Za-z0-9+/_=-]{4,}")


def leak_problems(graph: CompletionGraph, pack: TaskPack) -> list[dict]:
    """One problem per leaked secret and public file, naming the file, the lines where the case
    and the value appear (and how they were read, where decoded), the field, the value and the
    case."""
    cases = [_Case.of(key, pairs) for key, pairs in _secrets(pack).items()]
    if not cases:
        return []
    task = _Task(graph, pack, cases)
    problems = []
    given = {REQUEST_PATH, *(str(n.attrs["path"]) for n in graph.of_kind("evidence")),
             *(str(item["path"]) for item in pack.contract)}
    for label, lines in _statements(pack, task.evidence, given):
        statement = _Statement(lines)
        if not statement.may_name(task):
            continue  # what almost every file of a template task comes to
        statement.read(task)
        named = statement.namings(task)
        if not named:
            continue
        statement.prepare(task, {statement.readings[i].number for found in named.values() for i, *_ in found})
        for case in cases:
            for name, value in case.values if case.key in named else ():
                namings = [(i, whole) for i, whole, by_subject in named[case.key]
                           if not (by_subject and task.identifiers.is_subject(case.key, value))]
                hits = statement.value_lines(task.value(value), everywhere=value in case.outcomes)
                pairs = statement.pairs(namings, hits)
                if pairs:
                    problems.append({"criterion_id": "", "problem": _message(
                        label, name, value, case.key, statement, pairs)})
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
    """One public file (or the request message), folded line by line, and read decoded."""

    def __init__(self, lines: list[tuple[int, str]]) -> None:
        self.raw = lines
        self.joined = joined = "\n".join(text for _, text in lines)
        self.ascii = joined.isascii() and "&" not in joined
        #: the statement's letters and digits alone: every number a reader could see is in it
        if self.ascii:
            # folding an ASCII text makes no digits but of O, l and I: whether a case's number may
            # be there is known without folding it, and it is folded only where one may be
            self.skeleton = joined.encode().translate(_AS_DIGITS, _NOT_ALNUM).decode()
        else:
            self.skeleton = _NON_ALNUM.sub("", "\n".join(line.text for line in self.lines))
        self._tokens: list[tuple[str, int]] | None = None
        self._index: dict[str, list[int]] = {}
        self._amounts: dict[int, set[float]] | None = None
        self._reading: dict[int, str] = {}  # each reading's text, evidence left out (:meth:`prepare`)
        self.instructions: set[int] = set()

    @cached_property
    def lines(self) -> list[_Line]:
        if self.ascii:
            folded = fold(self.joined).split("\n")
        else:
            folded = [_BREAKS.sub(" ", fold(text)) for _, text in self.raw]
        return [_Line(number, raw, text) for (number, raw), text in zip(self.raw, folded, strict=True)]

    @cached_property
    def readings(self) -> list[_Line]:
        """The lines as written, then every other reading of them (:meth:`read`)."""
        return list(self.lines)

    def may_name(self, task: _Task) -> bool:
        """The quick look: whether any reading may name a case (its number, a word of its subject
        or a position, as written, rot13'd or reversed, outside the graph's clauses), or anything
        may decode."""
        if any(case.number is None for case in task.cases):
            return True
        if any(number in self.skeleton for number in task.identifiers.numbers):
            return True
        if self.ascii:
            text = task.without_clauses(self.joined)
            lower = text.lower().replace("#", " # ")
            tokens = lower.encode().translate(_TOKENS).decode().split()
            camel = b"aA" in text.encode().translate(CHARACTER_CLASSES)
            words = set(tokens) | (_words(text) if camel else set())
        else:  # folded, but for camel case: _words() reads it both ways
            text = fold_keeping_case(self.joined, camel=False)
            tokens = _WORD_OR_SIGN.findall(text.casefold())
            words = _words(text) | set(tokens)
        return task.identifiers.may_name(words, "".join(tokens), tokens) or maybe_encoded(self.joined)

    def read(self, task: _Task) -> None:
        """Adds each line's other readings (:func:`_decodings`), and those of a run of lines that
        are one encoded text together (base64 wrapped at a width), at the run's first line; a
        transform only where it makes an identifier or a value of some word of the statement."""
        budget = [READING_FACTOR * len(self.joined) + READING_FLOOR]
        words = _words(self.joined)
        transforms = [name for name in TRANSFORMS if task.identifiers.gates(name, words)
                      or task.identifiers.spelled_under(name, self.joined)]
        sources = list(self.raw)
        block: list[tuple[int, str]] = []
        for number, text in [*self.raw, (PATH_LINE, "")]:
            if _BLOCK_LINE.fullmatch(text.strip()) and (block or len(text.strip()) >= MIN_BLOCK_WIDTH):
                block.append((number, text.strip()))
                continue
            if len(block) > 1:
                sources.append((block[0][0], "".join(t for _, t in block)))
            block = []
        for number, text in sources:
            for how, reading in _decodings(task.without_clauses(text), task, transforms, budget):
                self.readings.append(_Line(number, reading, _BREAKS.sub(" ", fold(reading)), how))

    def namings(self, task: _Task) -> dict[str, list[tuple[int, bool, bool]]]:
        """case -> (reading, whether by its id with its prefix or by its whole subject, whether by
        its subject) for every reading that names it."""
        found: dict[str, list[tuple[int, bool, bool]]] = {}
        for index, line in enumerate(self.readings):
            clauses = None
            for case in task.cases:
                if case.number is not None and (case.number in line.text or case.number in line.skeleton):
                    clauses = task.clause_spans(line.text) if clauses is None else clauses
                    spelled = _names(line, case, task, clauses)
                    if spelled is not None:
                        found.setdefault(case.key, []).append((index, spelled, False))
            if task.identifiers.subjects or task.identifiers.positions:
                clauses = task.clause_spans(line.text) if clauses is None else clauses
                for case, whole, by_subject in task.identifiers.names(line, clauses):
                    found.setdefault(case, []).append((index, whole, by_subject))
        for case in task.cases:
            if case.number is None:
                found.setdefault(case.key, []).extend(
                    (index, True, False) for index, _ in self._find(case.tokens, None))
        return {case: sorted(set(places)) for case, places in found.items() if places}

    def prepare(self, task: _Task, named: set[int]) -> None:
        """Before values are read: what of each reading is the graph's evidence (a clause with its
        ref, ``- **P-1.** ...``), left out as a table's evidence rows are; and which lines describe
        a deliverable (name its file) and name no case: the request's instructions, read for
        outcomes only (their columns, fixed values such as an account, and example clause refs
        such as "P-1" are the deliverable's form, not any case's value)."""
        self._reading, self._tokens, self._index, self._amounts = {}, None, {}, None
        for index, line in enumerate(self.readings):
            text = line.text
            for low, high in task.clause_spans(text):
                text = text[:low] + " " * (high - low) + text[high:]
            self._reading[index] = text
        self.instructions = {line.number for line in self.lines if line.number not in named
                             and any(marker in line.text for marker in task.deliverables)}

    def value_lines(self, value: _Value, everywhere: bool) -> set[int]:
        """The readings that state ``value``; ``everywhere``: instruction lines included."""
        found: set[int] = set()
        if value.number is not None:
            found |= {n for n, amounts in self.amounts().items() if value.number in amounts}
        for position, sequence in enumerate(value.sequences):
            found |= {index for index, _ in self._find(sequence, value.stem if position == 0 else None)}
        return found if everywhere else {i for i in found if self.readings[i].number not in self.instructions}

    def pairs(self, namings: list[tuple[int, bool]], hits: set[int]) -> list[tuple[int, int]]:
        """(naming reading, value reading) of every statement of the value about the case: a
        reading that names the case by a word of its subject, a position or a bare number after a
        transform states only what that reading states (rot13 and reversal make ordinary words
        into names); any other naming states every value the file reads as."""
        pairs = []
        for index, whole in namings:
            how = self.readings[index].how
            loose = whole or not _transformed(how)
            pairs += [(index, hit) for hit in sorted(hits) if loose or self.readings[hit].how == how]
        return pairs

    def tokens(self) -> list[tuple[str, int]]:
        """Every word and digit run of the statement's readings (evidence left out), in order, with
        its reading (digit runs without leading zeros); a word spelled out letter by letter follows
        its line; no run of tokens crosses from one reading into another decoded one."""
        if self._tokens is None:
            self._tokens = []
            for index, line in enumerate(self.readings):
                text = self._reading.get(index, line.text)
                if line.how:
                    self._tokens.append((_SENTINEL, index))
                self._tokens += [(_int(t) if t[0].isdigit() else t, index) for t in _TOKEN.findall(text)]
                self._tokens += [(_NON_ALNUM.sub("", m.group()), index) for m in _SPACED.finditer(text)]
            for position, (token, _) in enumerate(self._tokens):
                self._index.setdefault(token, []).append(position)
        return self._tokens

    def amounts(self) -> dict[int, set[float]]:
        """reading -> every number a reader could take from it, however its digits are grouped."""
        if self._amounts is None:
            self._amounts = {index: {a for run in _NUMBER.findall(self._reading.get(index, line.text))
                                     for a in _readings(run)} for index, line in enumerate(self.readings)}
        return self._amounts

    def _find(self, sequence: list[str], stem: str | None) -> Iterator[tuple[int, int]]:
        """(reading, position) of every run of tokens that reads as ``sequence``; its last token may
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
    """One folded reading of a line (``how``: the decodings it took, none for the line as written);
    its skeleton (its letters and digits alone) when a case is looked for."""

    def __init__(self, number: int, raw: str, text: str, how: tuple[str, ...] = ()) -> None:
        self.number, self.raw, self.text, self.how = number, raw, text, how

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
        cased = _BREAKS.sub(" ", fold_keeping_case(self.raw))
        return cased if len(cased) == len(self.text) else None


def _names(line: _Line, case: _Case, task: _Task, clauses: list[tuple[int, int]]) -> bool | None:
    """Whether a line names the case by its prefix and number with anything but letters and digits
    between (``rfd_1234``, ``R.F.D. 1 2 3 4``: True), or by its number alone (False), unless that
    number is joined to another one (``2026-10-19``, ``12.5``) or inside what the task states for
    itself (:class:`_Explainers`); None where it does not. Inside the text of one of the graph's
    clauses (``clauses``) not even the id names the case: the clause is evidence (a project code
    may be written as a case id is)."""
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
    if any(not _within(start, clauses) for start in spelled):
        return True
    codes = clauses + task.explainers().code_spans(line, case, task) if bare else []
    return False if any(not _within(start, codes) for start in bare) else None


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


# ----------------------------------------------------------------------------- encodings
#: the transforms that make one word of another, each once (reversing each word or the whole
#: line makes the same words), in the order :func:`_forms_of` writes a word after itself
_WORD_FORMS = ("rot13", "reversed", "rot13 reversed")


def _decodings(text: str, task: _Task, transforms: list[str], budget: list[int]
               ) -> list[tuple[tuple[str, ...], str]]:
    """(how, reading) of every other reading of a line, up to :data:`MAX_DECODINGS` deep: each
    decoder's where something decodes, and each transform's where it makes a word of an identifier
    or a value out of one that is none (:meth:`_Identifiers.gates`), or a date of digits it does
    not hold (:meth:`_Identifiers.spelled_under`); of the line as written, only ``transforms``,
    those that do so somewhere in its statement. What is decoded after a transform is read where
    its reading holds such a word or date (rot13'd percent signs decode to noise). A transform
    after a transform is none (rot13 and a reversal together are one). ``budget``: the characters
    the statement's readings may still take."""
    identifiers = task.identifiers
    seen, found = {text}, []
    level: list[tuple[tuple[str, ...], str]] = [((), text)]
    for depth in range(MAX_DECODINGS):
        deeper = depth + 1 < MAX_DECODINGS
        following = []
        for how, source in level:
            encoded = maybe_encoded(source)
            readings: list[tuple[str, str | None, bool | None]] = []  # readable: None where its words tell
            if not how or how[-1] in DECODERS:
                words = _words(source)
                for name, (transform, _) in TRANSFORMS.items():
                    readable = bool(how or name in transforms) and (
                        identifiers.gates(name, words) or identifiers.spelled_under(name, source))
                    if readable or (encoded and deeper):  # reversed base64 is decoded next
                        readings.append((name, transform(source), readable))
            if encoded:
                readings += [(name, decode(source), None if _transformed(how) else True)
                             for name, decode in DECODERS.items()]
            for name, reading, readable in readings:
                if reading is None or reading in seen:
                    continue
                seen.add(reading)
                if readable is None:
                    readable = not identifiers.meaningful.isdisjoint(_words(reading)) or any(
                        value in reading for value in identifiers.compound)
                if readable:
                    if budget[0] < len(reading):
                        return found
                    budget[0] -= len(reading)
                    found.append(((*how, name), reading))
                if deeper and (readable or encoded):
                    following.append(((*how, name), reading))
        level = following
    return found


def _transformed(how: tuple[str, ...]) -> bool:
    """Whether a reading undoes a transform (which ordinary words survive as other words)."""
    return any(name in TRANSFORMS for name in how)


def _words(text: str) -> set[str]:
    """Every word of a text in lower case: as written, its camel-case parts, and a word spelled out
    letter by letter joined."""
    found = set(_LETTERS.findall(text.lower()))
    found.update(part.lower() for word in _CAMEL_WORD.findall(text) for part in CAMEL.sub(" ", word).split())
    found.update(_NON_ALNUM.sub("", m.group()).lower() for m in _SPACED.finditer(text))
    return found


# ----------------------------------------------------------------------------- reading text
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
        self.words: list[str] = []  # its words, folded
        if _PLAIN_NUMBER.fullmatch(value.strip()):
            self.number = float(value)
            return
        folded = fold(value)
        tokens = [_int(t) if t[0].isdigit() else t for t in _TOKEN.findall(folded)] or [folded]
        self.words = _LETTERS.findall(folded)
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
    ordinal = _ordinal_suffix(day)
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
    def identifiers(self) -> _Identifiers:
        return _Identifiers(self.graph, self.pack, self.cases, self.value)

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

    @cached_property
    def raw_clauses(self) -> list[tuple[str, str]]:
        """(the skeleton of its ref, its text as the graph has it) of every clause."""
        return [(_NON_ALNUM.sub("", fold(n.ref)), str(n.attrs.get("text", "")))
                for n in self.graph.of_kind("evidence") if n.subkind == "clause" and n.attrs.get("text")]

    def without_clauses(self, text: str) -> str:
        """A line as written with the clauses it holds blanked (with their ref where the ref alone
        comes first): what is decoded of it, as a clause's evidence is left out of its reading."""
        for ref, clause in self.raw_clauses:
            start = text.find(clause)
            while start >= 0:
                line = text.rfind("\n", 0, start) + 1
                low = line if _NON_ALNUM.sub("", fold(text[line:start])) in ("", ref) else start
                text = text[:low] + " " * (start + len(clause) - low) + text[start + len(clause):]
                start = text.find(clause, start + len(clause))
        return text

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


# ----------------------------------------------------------------------------- identifiers

_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                 "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                 "eighteen", "nineteen", "twenty")
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
             "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
             "seventeenth", "eighteenth", "nineteenth", "twentieth")
#: a word a position's number follows ("row 4", "line 5", "entry no. 3")
_POSITION_WORDS = ("row", "line", "entry", "record", "item", "index", "position", "no", "nr", "number",
                   "num", "case")
#: a word an ordinal comes before ("the 3rd row", "the third pending one"); not "record", a verb
#: too ("First record each decision")
_ORDINAL_NOUNS = ("row", "line", "entry", "item", "case", "one")
_MONTH_WORDS = frozenset(_MONTHS) | {m[:3] for m in _MONTHS}
#: a number after a word (group 1: which must be one a position goes with): digits (group 2) with
#: a little punctuation between ("row: 4", "entry no. 4"), a number word (group 3) with spaces
#: alone ("row four"; "each request; one is" points at none)
_NUMBER_AFTER = re.compile(
    rf"(?<![^\W\d_])([^\W\d_]+)(?:[^\w\n#]{{0,3}}(?:(?:no|nr|number)[^\w\n]{{0,3}})?(\d{{1,3}})(?!\w)"
    rf"|[ \t]+({'|'.join(_NUMBER_WORDS)})(?!\w))")
#: a number after ``#`` ("#4")
_NUMBER_SIGN = re.compile(r"#[^\w\n]?(\d{1,3})(?!\w)")
#: an ordinal and the words after it (group 2: one of the next four must be a noun for a case:
#: "the 4th of the pending requests")
_ORDINAL_BEFORE = re.compile(
    rf"(?<![^\W\d_])(?<!\d)(\d{{1,3}}(?:st|nd|rd|th)|{'|'.join(_ORDINALS)})((?:[ \t]+\w+){{1,4}})")


def _plurals(words: tuple[str, ...]) -> set[str]:
    return set(words) | {w + "s" for w in words} | {w + "es" for w in words} | {
        w[:-1] + "ies" for w in words if w.endswith("y")}


@dataclass(frozen=True)
class _PositionWords:
    """What the quick look takes for a position, each as written, rot13'd or reversed: every
    number, number word or ordinal that is a position some case has (-> it), the ordinals among
    them, those reversed (the text reversed: what went before comes after), the words a position's
    number follows, and the nouns an ordinal goes before."""

    numbers: dict[str, int]
    ordinals: frozenset[str]
    backwards: frozenset[str]
    keys: frozenset[str]
    nouns: frozenset[str]


def _position_words(nouns: tuple[str, ...], positions: set[int]) -> _PositionWords:
    """:attr:`_Identifiers.position_words` of a task whose cases are called ``nouns`` and may be
    named by ``positions``."""
    spelled, ordinals, backwards, keys, things = _word_forms(nouns)
    numbers = {form: n for form, n in (spelled | ordinals).items() if n in positions}
    numbers |= {digits: n for n in positions for digits in (str(n), str(n)[::-1], f"0{n}")}
    written = {form: n for n in positions if n > 0 for form in _forms({f"{n}{_ordinal_suffix(str(n))}"})}
    numbers |= written
    return _PositionWords(numbers, frozenset(ordinals) | frozenset(written),
                          backwards | {form for form in written if form[0].isalpha()}, keys, things)


@lru_cache(maxsize=1024)
def _word_forms(nouns: tuple[str, ...]) -> tuple[dict[str, int], dict[str, int], frozenset[str],
                                                 frozenset[str], frozenset[str]]:
    """The number words and the ordinals as written, rot13'd or reversed (-> their number), those
    reversed, the words a position's number follows and the nouns an ordinal goes before, so too."""
    spelled = {form: n for n, word in enumerate(_NUMBER_WORDS) for form in _forms({word})}
    ordinals = {form: n + 1 for n, word in enumerate(_ORDINALS) for form in _forms({word})}
    plain = {w for word in (*_NUMBER_WORDS, *_ORDINALS) for w in (word, rot13(word))}
    backwards = frozenset(form for form in (*spelled, *ordinals) if form not in plain)
    keys = frozenset(_forms(_plurals(_POSITION_WORDS + nouns)) - {"on"}) | {"#"}
    return spelled, ordinals, backwards, keys, frozenset(_forms(_plurals(_ORDINAL_NOUNS + nouns)))


def _forms(words: set[str]) -> set[str]:
    """Words as written, rot13'd, reversed, and both."""
    return {form for word in words for form in _forms_of(word)}


@lru_cache(maxsize=1 << 14)  # names and numbers recur from task to task
def _forms_of(word: str) -> tuple[str, ...]:
    return word, rot13(word), word[::-1], rot13(word[::-1])


def _ordinal_suffix(digits: str) -> str:
    if digits[-2:] in ("11", "12", "13"):
        return "th"
    return {"1": "st", "2": "nd", "3": "rd"}.get(digits[-1], "th")


def _positions_stated(text: str, keys: set[str], nouns: set[str]) -> Iterator[tuple[int, int]]:
    """(where, position) of every position a folded line states: a number after one of ``keys``
    ("row 4", "line no. 5") or after ``#`` ("#4"), or an ordinal before one of ``nouns`` with at most
    three words between ("the 3rd pending request", "third row", "4th of the pending requests")."""
    for match in _NUMBER_AFTER.finditer(text):
        if match.group(1) in keys:
            yield match.start(), _number(match.group(2) or match.group(3))
    for match in _NUMBER_SIGN.finditer(text):
        yield match.start(), int(match.group(1))
    for match in _ORDINAL_BEFORE.finditer(text):
        if not nouns.isdisjoint(match.group(2).split()):
            yield match.start(), _number(match.group(1))


def _spelled(line: _Line, letters: str) -> Iterator[tuple[int, int]]:
    """Where a line spells ``letters`` out whole, in any spacing or punctuation between them
    ("Lena Duarte", "L e n a D u a r t e", "lenaduarte", "Du-arte"), from the start of a word to
    the end of one."""
    text, start = line.text, line.skeleton.find(letters)
    while start >= 0:
        low, high = line.positions[start], line.positions[start + len(letters) - 1] + 1
        if (low == 0 or not text[low - 1].isalnum()) and (high == len(text) or not text[high].isalnum()):
            yield low, high
        start = line.skeleton.find(letters, start + 1)


def _number(word: str) -> int:
    """The number a digit run, a number word or an ordinal stands for."""
    if word[0].isdigit():
        return int(word.rstrip("stndrh"))
    return _NUMBER_WORDS.index(word) if word in _NUMBER_WORDS else _ORDINALS.index(word) + 1


class _Identifiers:
    """What names a case besides its id: its subject, whole or by a word of it, and its row's
    position; and what the quick look and the transforms' gate look for. Each part is built as it
    is first needed (the quick look needs few)."""

    def __init__(self, graph: CompletionGraph, pack: TaskPack, cases: list[_Case],
                 value: Callable[[str], _Value]) -> None:
        self.graph, self.pack, self.cases, self.value = graph, pack, cases, value
        self.keys = {c.key for c in cases}
        self._made: dict[tuple[str, bool], frozenset[str]] = {}
        self.records = [n for n in graph.of_kind("evidence") if n.subkind == "record" and "row" in n.attrs]
        #: the folded words of each subject -> the rows it is the subject of (cases or not)
        self.subjects: dict[tuple[str, ...], set[str]] = {}
        #: case -> the folded words of its subject
        self.subject_of: dict[str, tuple[str, ...]] = {}
        for node in self.records:
            row = node.attrs["row"]
            for cell in row.values():
                if isinstance(cell, str) and len(cell.split()) > 1:
                    words = _subject_words(cell)
                    if any(w.isalpha() for w in words):
                        self.subjects.setdefault(words, set()).add(str(row.get("id")))
                        if str(row.get("id")) in self.keys:
                            self.subject_of[str(row.get("id"))] = words
        numbers = {c.number for c in cases if c.number is not None}
        #: each case's number, and reversed (the quick look)
        self.numbers = sorted(numbers | {n[::-1] for n in numbers})
        glued = {"".join(words) for words in self.subject_of.values()}
        parts = {w for words in self.subject_of.values() for w in words if w.isalpha()}
        #: every word that may name a case as written (the quick look)
        self.probes = frozenset(glued | parts | _forms(glued))
        #: transform -> the words of subjects it makes (a reading that names a case by one states
        #: only what it states itself)
        self.transformed = {name: frozenset(_forms_of(w)[form] for w in parts)
                            for form, name in enumerate(_WORD_FORMS, start=1)}
        #: transform -> the words it makes each whole subject of (an id, named so, however read)
        self.transformed_subjects = {name: [frozenset(_forms_of(w)[form] for w in words)
                                            for words in self.subject_of.values()]
                                     for form, name in enumerate(_WORD_FORMS, start=1)}
        #: what may name a case spaced out or glued to other words: a whole subject, a long word
        self.glued = sorted(glued | {w for w in parts if len(w) >= MIN_GLUED_PART})

    @cached_property
    def parts(self) -> dict[str, set[str]]:
        """A word of a subject the task uses for nothing else (no other cell of a record or an
        option, no clause: ``HOSP-GRACE`` makes "grace" no name) -> the cases whose subject has it."""
        other: set[str] = set()
        for node in self.graph.of_kind("evidence"):
            cells = [f"{k} {v}" for k, v in node.attrs.get("row", {}).items()
                     if not (isinstance(v, str) and len(v.split()) > 1)]
            other.update(_TOKEN.findall(fold(" ".join(cells) + " " + str(node.attrs.get("text", "")))))
        parts: dict[str, set[str]] = {}
        for case, words in self.subject_of.items():
            for word in words:
                if word.isalpha() and len(word) >= MIN_SUBJECT_PART and word not in other:
                    parts.setdefault(word, set()).add(case)
        return parts

    @cached_property
    def positions(self) -> dict[int, set[str]]:
        """position -> the cases it may name, counted every way a reader may count: the data row
        (from 1, or from 0), the file line, and the rank among the pending rows (the task's cases,
        or the rows whose status is pending: from 1, or from 0). Not "the last one": "after its
        last one" is how a template speaks of a case's history."""
        positions: dict[int, set[str]] = {}
        for path in sorted({str(n.attrs["path"]) for n in self.records if n.ref in self.keys}):
            text = self.pack.files.get(path)
            if text is None:
                continue
            reader = csv.reader(io.StringIO(text))
            rows, header = [], None
            try:
                for cells in reader:
                    if header is None:
                        header = cells or None
                    elif "id" in header and len(cells) == len(header):
                        row = dict(zip(header, cells, strict=True))
                        pending = row["id"] in self.keys or row.get("status") == "pending"
                        rows.append((reader.line_num, row["id"], pending))
            except csv.Error:
                continue
            pending = 0
            for data, (line, key, is_pending) in enumerate(rows, start=1):
                pending += is_pending
                named = {data, data - 1, line} | ({pending, pending - 1} if is_pending else set())
                for position in named if key in self.keys else ():
                    positions.setdefault(position, set()).add(key)
        return positions

    @cached_property
    def nouns(self) -> tuple[str, ...]:
        """What the task calls a case ("request" of "refund request"): its records' labels' last word."""
        return tuple(sorted({words[-1] for n in self.records if n.ref in self.keys for words in [
            [w for w in _LETTERS.findall(fold(n.label.replace(n.ref, " "))) if len(w) >= MIN_SUBJECT_PART]]
            if words}))

    @cached_property
    def position_words(self) -> _PositionWords:
        return _position_words(self.nouns, set(self.positions))

    @cached_property
    def meaningful(self) -> frozenset[str]:
        """The words of an identifier or a value: what a transform must make to be read (of three
        letters or more but a case's prefix: "on" reversed is "no")."""
        words = ({"".join(words) for words in self.subjects} | {w for words in self.subjects for w in words}
                 | {w for c in self.cases if c.number is None for w in c.tokens if w.isalpha()}
                 | self.value_words | {*_POSITION_WORDS, *_ORDINALS, *_NUMBER_WORDS, *self.nouns})
        return frozenset({w for w in words if len(w) >= MIN_SUBJECT_PART}
                         | {c.prefix for c in self.cases if c.number is not None})

    @cached_property
    def value_words(self) -> frozenset[str]:
        return frozenset(w for c in self.cases for _, v in c.values for w in self.value(v).words
                         if len(w) > 1) | self.ordered

    @cached_property
    def secret_words(self) -> frozenset[str]:
        """The words of values but of subjects (a payee beside its own name is no secret)."""
        return self.value_words - {w for words in self.subjects for w in words}

    @cached_property
    def stems(self) -> tuple[str, ...]:
        return tuple(sorted({s for c in self.cases for _, v in c.values if (s := self.value(v).stem)}))

    @cached_property
    def ordered(self) -> frozenset[str]:
        """The words of a value of several words but a subject, and where a value is a date, month
        names: where reversing the words' order may make a value."""
        values = [value for c in self.cases for _, value in c.values]
        subjects = {w for words in self.subjects for w in words}
        dated = _MONTH_WORDS if any(_ISO_DATE.fullmatch(v.strip()) for v in values) else frozenset()
        return frozenset(w for v in values if len(words := self.value(v).words) > 1 for w in words
                         if w not in subjects) | dated

    def may_name(self, words: set[str], skeleton: str, tokens: list[str]) -> bool:
        """Whether a text may name a case (as written, rot13'd or reversed): a word of a subject
        among its ``words``, a whole subject or a long word of one in its ``skeleton`` (spaced out,
        glued), or a number or an ordinal a position may be beside a word a position goes with
        among its ``tokens``."""
        if not self.probes.isdisjoint(words) or any(probe in skeleton for probe in self.glued):
            return True
        for name in _WORD_FORMS:
            if not self.transformed[name].isdisjoint(words) and (self.gates(name, words, values=True) or any(
                    whole <= words for whole in self.transformed_subjects[name])):
                return True
        if not self.positions:
            return False
        words = self.position_words
        anchors = words.numbers.keys() & tokens
        for i, token in enumerate(tokens if anchors else ()):
            if token not in anchors:
                continue
            if token in words.ordinals:
                beside, near = words.nouns, (i - 4, i) if token in words.backwards else (i + 1, i + 5)
            else:
                beside = words.keys
                # a digit reads the same reversed: the word may come on either side of it
                near = (i + 1, i + 3) if token in words.backwards else (i - 2, i + 2 * token.isdigit())
            if not beside.isdisjoint(tokens[max(0, near[0]):near[1]]):
                return True
        return False

    def gates(self, transform: str, words: set[str], values: bool = False) -> bool:
        """Whether a transform makes a word of an identifier or a value (``values``: of a value)
        out of one of ``words`` that is none (reversing the words' order: where a value of several
        words may come of it)."""
        word_form = TRANSFORMS[transform][1]
        if word_form is None:
            return not self.ordered.isdisjoint(words)
        made = self._made.get((transform, values))
        if made is None:  # the words it makes those words of (each transform undoes itself)
            made = self._made[transform, values] = frozenset(
                map(word_form, self.secret_words if values else self.meaningful))
        return any(word_form(word) not in words for word in made & words)

    @cached_property
    def compound(self) -> list[str]:
        """The values of digits and separators a transform keeps whole (a date: "91-01-6202")."""
        return sorted({v for c in self.cases for _, v in c.values
                       if any(ch.isdigit() for ch in v) and not v.isalnum() and len(v) >= MIN_STEM})

    def spelled_under(self, transform: str, text: str) -> bool:
        """Whether a text holds such a value as the transform writes it (and not as it is)."""
        form = TRANSFORMS[transform][0]
        return any(form(value) != value and form(value) in text for value in self.compound)

    def names(self, line: _Line, clauses: list[tuple[int, int]]) -> Iterator[tuple[str, bool, bool]]:
        """(case, whole subject, by subject) for every case the line names outside ``clauses`` by
        its subject (whole: in either order, in any spacing, glued; or by a word of it, spaced out
        or broken up too where it is long) or by its row's position."""
        text = line.text
        covered: list[tuple[int, int]] = []
        tokens = [(m.group(), m.start()) for m in _TOKEN.finditer(text)]
        present = {t for t, _ in tokens}
        for words, rows in self.subjects.items():
            cases = [case for case in rows if case in self.subject_of]
            for low, high in _spelled(line, "".join(words)):
                covered.append((low, high))
                yield from ((case, True, True) for case in cases if not _within(low, clauses))
            if len(words) > 1 and present.issuperset(words):
                for i in range(len(tokens) - len(words) + 1):
                    window = tokens[i:i + len(words)]
                    if sorted(t for t, _ in window) == sorted(words):
                        covered.append((window[0][1], window[-1][1] + len(window[-1][0])))
                        if not _within(window[0][1], clauses):
                            yield from ((case, True, True) for case in cases)
        found = [(word, start) for word, start in tokens if word in self.parts]
        found += [(word, m.start()) for m in _SPACED.finditer(text)
                  if (word := _NON_ALNUM.sub("", m.group())) in self.parts]
        found += [(word, low) for word in self.parts if len(word) >= MIN_GLUED_PART
                  for low, _ in _spelled(line, word)]
        for word, start in found:
            if not _within(start, covered) and not _within(start, clauses):
                yield from ((case, False, True) for case in self.parts[word])
        unsplit = fold_keeping_case(line.raw, camel=False)
        if CAMEL.search(unsplit) and not clauses:  # in random case ("oSeI") a word is still one
            for word in (set(_LETTERS.findall(unsplit.casefold())) & self.parts.keys()) - present:
                yield from ((case, False, True) for case in self.parts[word])
        if self.positions:
            keys, nouns = _plurals(_POSITION_WORDS + self.nouns), _plurals(_ORDINAL_NOUNS + self.nouns)
            for start, position in _positions_stated(text, keys, nouns):
                if not _within(start, clauses):
                    yield from ((case, False, False) for case in self.positions.get(position, ()))

    def is_subject(self, case: str, value: str) -> bool:
        """Whether a value is the case's own subject (a refund's payee, its employee)."""
        return self.subject_of.get(case) == _subject_words(value)


@lru_cache(maxsize=1 << 14)  # names recur from task to task
def _subject_words(cell: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(fold(cell)))


# ----------------------------------------------------------------------------- messages


def _message(label: str, name: str, value: str, case: str, statement: _Statement,
             pairs: list[tuple[int, int]]) -> str:
    readings = statement.readings
    case_lines = sorted({readings[n].number for n, _ in pairs})
    value_lines = sorted({readings[v].number for _, v in pairs})
    both = sorted(set(case_lines) & set(value_lines))
    what = f"the {name} {value!r} of {case}"
    plain = [(n, v) for n, v in pairs if not readings[n].how and not readings[v].how]
    decoded = "" if plain else " (read as " + "; ".join(sorted(
        {" then ".join(readings[i].how) for n, v in pairs for i in (n, v) if readings[i].how})) + ")"
    tail = "which the agent must work out"
    if both and both[-1] != PATH_LINE:
        return f"leak: {label} line {min(n for n in both if n != PATH_LINE)} states {what}{decoded}, {tail}"
    if both:
        return f"leak: {label} states {what} in its file name{decoded}, {tail}"
    return (f"leak: {label} states {what} (the case {_places(case_lines)}, the value "
            f"{_places(value_lines)}){decoded}, {tail}")


def _places(lines: list[int]) -> str:
    named = ["in its file name"] if PATH_LINE in lines else []
    numbers = [n for n in lines if n != PATH_LINE]
    if numbers:
        shown = ", ".join(map(str, numbers[:MAX_PLACES]))
        more = f" and {len(numbers) - MAX_PLACES} more" if len(numbers) > MAX_PLACES else ""
        named.append(f"on line {shown}" if len(numbers) == 1 else f"on lines {shown}{more}")
    return " and ".join(named)
