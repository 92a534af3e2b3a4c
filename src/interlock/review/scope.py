"""The request's scope: a request asks for exactly its task's obligations, no more.

A task requests some of its domain's effects (:func:`~interlock.synthesis.packs.requested_effects`);
the guard fails any change no decision requires. A request that asks for more (a domain effect
the contract leaves out, an effect kind the task has none of, a change to a file the guard
protects, a file that is neither in the workspace nor a deliverable) makes an agent that does
what it says fail the guard: the task would punish the very completion the method trains for.
:func:`scope_problems` reads the request file and the request message for such asks, whoever wrote
them, as leniently for the asker as a reader would (text folded as
:func:`interlock.review.leaks.fold` folds it, names matched however punctuated or inflected):

- an unrequested effect's names, outside the task's own (its case, its requested effects, its
  files): its label, the parts of its label (``payment file`` of ``refund payment file``; not a part
  its domain's workflow uses), its file, the file's base name, its account code;
- the words that carry a decision into a kind of effect the task does not request (notify, told;
  posted to, ledger; payment file, payee; on the calendar; logged, audit; status updated, written
  back; gets a letter), read after the task's own names are taken out (a case called a plow log is
  no audit log);
- a change asked of a file the guard protects (the policy, the evidence tables, the case table
  beyond a requested status), or a path that is neither in the workspace nor a deliverable.

A sentence that puts them out of scope ("dealer notices are out of scope", "leave the ledger as it
is", "do not notify anyone") asks nothing, unless it also says otherwise (but, except, until, ...)
or still tells the reader to do something of the kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from interlock.core.registry import DECISION_KINDS, EFFECT_KINDS
from interlock.review.reading import fold
from interlock.synthesis.catalog import Domain, holds, words
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.kinds.effects import REGISTER_PATH
from interlock.synthesis.packs import REQUEST_PATH, TaskPack, requested_effects
from interlock.synthesis.text import DETERMINER, any_of

#: words that start or end no distinctive part of a label ("letter of intent" has no part "of intent")
STOPWORDS = frozenset({"a", "an", "and", "the", "of", "for", "to", "in", "on", "or", "per", "by", "with"})
#: names by their first word (what :func:`_occurrences` looks them up by)
Index = dict[str, tuple[tuple[str, ...], ...]]
#: how many places a problem quotes
MAX_QUOTED = 3


#: scheduling as a verb: a schedule entry, but where the decision itself sets dates (``due_date``),
#: the decision's own word ("maintenance planning schedules each task")
SCHEDULING = any_of(r"\b(?:is|are|be|been|being|get|gets|got) scheduled\b",
                    rf"\bschedul(?:e|es|ing) (?:it|them|all|{DETERMINER})\b")
#: what a reader is asked to do in a sentence that otherwise puts things out of scope
_ACTION = (r"(?:notify|tell|inform|send|mail|email|alert|remind|post|charge|book|pay|remit|wire|log|record"
           r"|audit|schedule|enter|add|put|place|update|set|mark|change|write|issue|draft|prepare|produce"
           r"|generate|create|append|let)")
_DONE = (r"(?:notif(?:y|ied)|tell|told|inform(?:ed)?|sen[dt]|e ?mail(?:ed)?|mail(?:ed)?|alert(?:ed)?"
         r"|remind(?:ed)?|post(?:ed)?|charge[ds]?|book(?:ed)?|pa(?:y|id)|log(?:ged)?|record(?:ed)?"
         r"|audit(?:ed)?|schedule[ds]?|writ(?:e|ten)|wrote|chang(?:e|ed)|updat(?:e|ed)|touch(?:ed)?"
         r"|modif(?:y|ied)|edit(?:ed)?|creat(?:e|ed)|add(?:ed)?|append(?:ed)?|set|mark(?:ed)?|issu(?:e|ed)"
         r"|enter(?:ed)?|put|alter(?:ed)?|delet(?:e|ed)|remov(?:e|ed))")
#: a sentence's ways of putting something out of scope (each span is taken out before the
#: sentence is read for what it still asks)
OUT_OF_SCOPE = any_of(
    r"\bout of (?:the |this )?(?:task s |task )?scope\b",
    r"\bnot (?:\w+ )?(?:part of|in scope|within scope|required|needed|requested|asked for|expected"
    r"|wanted|necessary|included)\b",
    r"\bno (?:\w+ ){0,4}?(?:is|are) (?:required|needed|requested|expected|necessary|wanted|included"
    r"|part of)\b",
    r"\b(?:leave|keep|leaving|keeping) (?:\w+ ){0,8}?(?:as it is|as they are|as is|as it was|as they were"
    r"|unchanged|untouched|alone|as it stands|as they stand)\b",
    r"\b(?:stay|stays|remain|remains|is left|are left) (?:as it is|as they are|as is|unchanged|untouched"
    r"|alone)\b",
    r"\b(?:do not|don t|dont|never|must not|should not|need not|no need to|not to|is not to be|are not to"
    r" be|must not be|should not be|need not be|will not be|won t be|cannot be|can t be|nothing is"
    r"|nothing gets|nothing goes) (?:ever |otherwise |separately |additionally |directly |further )?"
    rf"{_DONE}\b")
#: what turns a statement of scope back into an ask
CONTRAST = any_of(r"\b(?:but|except|unless|however|instead|although|though|yet|still|until|before|after|once"
                r"|then|also|besides|rather|whereas|while|later|eventually|anyway|nevertheless|nonetheless"
                r"|even)\b", r"\bother than\b", r"\bapart from\b", r"\bonly if\b")
#: an instruction still given in a sentence that states scope
IMPERATIVE = re.compile(rf"(?:^|\b(?:and|please|must|should|shall|will|to|you|ensure|sure)\s){_ACTION}\b")
#: verbs that change a file, as :func:`~interlock.synthesis.catalog.words` gives them
CHANGES = frozenset({
    "update", "updated", "updating", "edit", "edited", "editing", "modify", "modified", "modifying",
    "amend", "amended", "rewrite", "rewritten", "overwrite", "overwritten", "change", "changed",
    "changing", "alter", "altered", "append", "appended", "add", "added", "adding", "insert", "inserted",
    "delete", "deleted", "remove", "removed", "fill", "filled", "correct", "corrected", "fix", "fixed",
    "replace", "replaced", "write", "writing", "written", "wrote", "record", "recorded", "enter",
    "entered", "set", "mark", "marked"
})
#: words between a change and a file that make the file no object of it ("write values as the policy says")
NOT_OBJECT = frozenset({
    "as", "by", "from", "per", "under", "following", "according", "using", "like", "than", "with", "that",
    "which", "cite", "citing"
})
#: how many words a change's object may have before the file it names
OBJECT_WORDS = 6
#: words after "policy" that make it no name of the policy file ("the policy clause that decided it")
POLICY_PARTS = frozenset({
    "clause", "ref", "reference", "id", "number", "say", "state", "give", "require", "set", "allow",
    "decide", "rule", "word", "value", "title", "section"
})
#: a path in text: folders and a name, or a file name with a common suffix
PATH = re.compile(r"(?<![\w./<>-])((?:[^\W\d_][\w.<>*-]*/)+[\w.<>*-]*|[\w-]+\.(?:csv|jsonl|json|md|txt|tsv"
                  r"|xlsx?|pdf|docx?|ya?ml|log|html?|xml))(?![\w/])")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s")
_SENTENCE = re.compile(r"[.;!?]+(?=\s|$)")
_TOKEN = re.compile(r"[^\W_]+")
#: letters spelled out one at a time ("n o t i f y", "n-o-t-i-f-y")
_SPACED = re.compile(r"(?<![^\W\d_])(?:[^\W\d_][^\w\n]){2,}[^\W\d_](?![^\W\d_])")
_NON_WORD = re.compile(r"\W")
#: what a name taken out leaves: one word, so the words around it stay as far apart as around a name
_MASK = "_"


@dataclass(frozen=True)
class Scope:
    """What a task's request may ask for. ``names``: the words that name an effect the task does
    not request, and which (``name_index``: them by their first word); ``kinds``: the effect kinds
    it requests none of, ``cues`` the words that ask for one of them (each effect kind's ``cues``,
    :data:`SCHEDULING`); ``own``: the task's own words (its domain's name, its case, its outcomes,
    its requested effects' labels) and ``file_words`` those of its files, its requested effects'
    other names and its policy's title: what is said inside them names nothing else (a case called
    a plow log is no audit log), and a change inside ``own`` is none (a change request);
    ``deliverables``: the words of the files it asks to be written; ``protected``: (file, words) of
    the files a request may not ask to change, ``case_words`` those of the case table (which a
    requested status update changes); ``paths``: the workspace's files; ``document_folders``: the
    requested documents' folders; ``folders``: the top folders of the workspace's files and of
    every effect of the domain (``payments/refunds`` names a place, ``and/or`` does not)."""

    names: dict[tuple[str, ...], str]
    name_index: Index
    kinds: frozenset[str]
    cues: tuple[tuple[str, re.Pattern], ...]
    own: Index
    file_words: Index
    deliverables: Index
    protected: tuple[tuple[str, tuple[str, ...]], ...]
    case_words: frozenset[tuple[str, ...]]
    paths: frozenset[str]
    document_folders: frozenset[str]
    folders: frozenset[str]

    @property
    def status_requested(self) -> bool:
        return "status_update" not in self.kinds


def task_scope(graph: CompletionGraph, domain: Domain, files: dict[str, str]) -> Scope:
    """The scope of a task: its domain's effects, those it requests, its workspace ``files``."""
    requested = requested_effects(graph, domain)
    decision, options = domain.decision, domain.decision.options
    own = tuple(words(text) for text in [
        domain.name, domain.case.noun, domain.case.plural, domain.case.subject, decision.fallback,
        *([decision.positive] if decision.positive else []), *(decision.tiers or ()), *(decision.teams or ()),
        *([options.noun, options.plural] if options else []), *(e.label for e in requested)])
    stated = (*(words(path) for path in files), *(n for e in requested for n in e.names()),
              words(domain.policy.title))
    workflow = words(domain.workflow)  # a part of a label the workflow holds names nothing of its own
    names: dict[tuple[str, ...], str] = {}
    for effect in domain.effects[len(requested):]:
        what = f"{effect.label} (an effect this task does not request)"
        # a status update's label is its case's status, which any request names
        label = () if effect.kind == "status_update" else words(effect.label)
        parts = [label[i:j] for i in range(len(label)) for j in range(i + 2, len(label) + 1)
                 if label[i] not in STOPWORDS and label[j - 1] not in STOPWORDS]
        names.update((name, what) for name in {label, *parts, *effect.names()[1:]}
                     if name and not holds(workflow, name))
    unchanged = set(files) - {REGISTER_PATH, domain.case.table, *(e.file for e in requested if e.file)}
    protected = [(path, name) for path in sorted(unchanged) for name in _file_names(path, files)]
    protected += [(domain.policy.file, words(domain.policy.title))]
    if options:
        protected += [(options.table, words(f"{text} table")) for text in (options.noun, options.plural)]
    case_words = {*_file_names(domain.case.table, files), words(f"{domain.case.noun} table"),
                  words(f"{domain.case.plural} table")}
    folders = {path.split("/", 1)[0] for path in [*files, *(e.file for e in domain.effects if e.file)]}
    kinds = frozenset(EFFECT_KINDS) - {e.kind for e in requested}
    cues = [(kind, EFFECT_KINDS[kind].cues) for kind in sorted(kinds) if EFFECT_KINDS[kind].cues]
    if "schedule_entry" in kinds and not DECISION_KINDS[decision.kind].dated:
        cues.append(("schedule_entry", SCHEDULING))
    deliverables = [words(path) for path in [REGISTER_PATH, *(e.file for e in requested if e.file)]]
    return Scope(names, _index(names), kinds, tuple(cues), _index(own), _index(stated), _index(deliverables),
                 tuple(protected), frozenset(case_words), frozenset(files),
                 frozenset(e.file for e in requested if e.kind == "document" and e.file), frozenset(folders))


def _file_names(path: str, files: dict[str, str]) -> list[tuple[str, ...]]:
    """What names a workspace file in prose: its path, and its base name where no other file
    has it (``audit/repair_jobs.csv`` beside ``fleet/repair_jobs.csv``)."""
    name = _base(path)
    shared = any(_base(other) == name for other in files if other != path)
    return [words(path)] if shared else [words(path), words(name)]


def overreach(text: str, scope: Scope) -> list[tuple[int, str]]:
    """Each ask of ``text`` beyond its task's scope, as (line number, what it asks for)."""
    found: list[tuple[int, str]] = []
    listed_out = False  # the list items under a line that puts them out of scope
    for number, line in enumerate(_SPACED.sub(_joined, fold(text)).splitlines(), start=1):
        item = _LIST_ITEM.match(line) is not None
        listed_out = listed_out and item
        for sentence in _SENTENCE.split(line):
            asks = _asks(sentence, scope)
            if asks and not _out_of_scope(sentence, scope, header=listed_out):
                found += [(number, ask) for ask in asks]
        header = line.rstrip()
        listed_out = listed_out or (header.endswith(":") and _out_of_scope(header, scope, header=False))
    return found


def _joined(match: re.Match) -> str:
    return _NON_WORD.sub("", match.group())


def _out_of_scope(sentence: str, scope: Scope, *, header: bool) -> bool:
    """Whether a sentence (under a list header that did, ``header``) puts what it names out of
    scope and asks nothing besides: no word that turns it (but, until, ...), and no instruction
    left, once the statements of scope are taken out, that asks for something beyond the scope
    ("leave the ledger as it is and post each refund")."""
    plain = " ".join(_TOKEN.findall(sentence))
    if CONTRAST.search(plain) or not (header or OUT_OF_SCOPE.search(plain)):
        return False
    rest = OUT_OF_SCOPE.sub(_MASK, plain)
    told = IMPERATIVE.search(rest)
    return told is None or not _asks(rest[told.start():], scope)


def _asks(sentence: str, scope: Scope) -> list[str]:
    """What one sentence asks for beyond the scope (before any statement of scope is read)."""
    raw = _TOKEN.findall(sentence)
    if not raw:
        return []
    stems = words(" ".join(raw))
    own = _covered(stems, scope.own)
    masked = own | _covered(stems, scope.file_words)
    named: dict[str, tuple[str, ...]] = {}
    for start, name in _occurrences(stems, scope.name_index):  # each effect's longest, outside its own
        what = scope.names[name]
        if len(name) > len(named.get(what, ())) and set(range(start, start + len(name))) - masked:
            named[what] = name
    asks = [f"names {what} as {' '.join(name)!r}" for what, name in named.items()]
    plain = " ".join(_MASK if at in masked else token for at, token in enumerate(raw)
                     if at not in masked or at - 1 not in masked)  # a name taken out is one word
    for kind, cues in scope.cues:
        cue = cues.search(plain)
        if cue:
            asks.append(f"asks for a {kind.replace('_', ' ')}, which this task has none of, "
                        f"by {cue.group()!r}")
    asks += _protected_changes(stems, own, own | _covered(stems, scope.deliverables), scope)
    asks += [f"names {path}, which is neither in the workspace nor a deliverable"
             for path in PATH.findall(sentence) if _is_path(path, scope) and not _allowed(path, scope)]
    return asks


def _index(names: Iterable[tuple[str, ...]]) -> Index:
    index: dict[str, set[tuple[str, ...]]] = {}
    for name in names:
        if name:
            index.setdefault(name[0], set()).add(name)
    return {word: tuple(sorted(found)) for word, found in index.items()}


def _occurrences(stems: tuple[str, ...], index: Index) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Where in ``stems`` each name of ``index`` stands, as (its first position, the name)."""
    for start, word in enumerate(stems):
        for name in index.get(word, ()):
            if stems[start:start + len(name)] == name:
                yield start, name


def _covered(stems: tuple[str, ...], index: Index) -> set[int]:
    """The positions of ``stems`` that some name of ``index`` covers."""
    return {at for start, name in _occurrences(stems, index) for at in range(start, start + len(name))}


def _base(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _protected_changes(stems: tuple[str, ...], own: set[int], inside: set[int], scope: Scope) -> list[str]:
    """The protected files a sentence asks to change: a change (not a word of one of the task's own
    names, at ``own``: a change request is no change), then at most :data:`OBJECT_WORDS` words,
    then a protected file's name (not inside a deliverable's or another own name, at ``inside``:
    ``audit/vendor_chargebacks.csv`` holds no ``chargebacks.csv``; the case table's status aside,
    where the task requests a status update)."""
    targets = list(scope.protected)
    if not (scope.status_requested and "status" in stems):
        targets += [("the case table", name) for name in scope.case_words]
    found = set()
    for verb, word in enumerate(stems):
        if word not in CHANGES or verb in own:
            continue
        for start in range(verb + 1, min(verb + OBJECT_WORDS + 2, len(stems))):
            if start > verb + 1 and stems[start - 1] in NOT_OBJECT:
                break
            if start in inside:
                continue
            found |= {path for path, name in targets if stems[start:start + len(name)] == name}
            if stems[start] == "policy" and not POLICY_PARTS.intersection(stems[start + 1:start + 2]):
                found.add("the policy")
    return [f"asks to change {path}, which the guard keeps as it is" for path in sorted(found)]


def _is_path(text: str, scope: Scope) -> bool:
    """Whether a match of :data:`PATH` reads as a file or folder (``and/or`` does not)."""
    return (text.endswith("/") or text.count("/") > 1 or "." in _base(text)
            or text.split("/", 1)[0] in scope.folders)


def _allowed(path: str, scope: Scope) -> bool:
    """Whether a path a request names is a workspace file or one of its folders, or in a
    requested document folder; a bare file name, whether some workspace file has it."""
    if "/" not in path:
        return any(_base(p) == path for p in scope.paths)
    path = path.rstrip("/")
    return (path in scope.paths or path in scope.document_folders
            or any(p.startswith(path + "/") for p in scope.paths)
            or any(path.startswith(folder + "/") for folder in scope.document_folders))


def scope_problems(graph: CompletionGraph, pack: TaskPack, domain: Domain) -> list[dict]:
    """The request file's and the request message's asks beyond the task's contract, as critic
    rows against the guard (the criterion an agent that does what they say fails)."""
    scope = task_scope(graph, domain, pack.files)
    guard = next((c.criterion_id for c in pack.rubric if c.guard), "")
    sources = {REQUEST_PATH: pack.files.get(REQUEST_PATH, ""), "the request message": pack.request}
    problems = []
    for source, text in sources.items():
        if source != REQUEST_PATH and text == sources[REQUEST_PATH]:
            continue
        found = overreach(text, scope)
        if found:
            quoted = "; ".join(f"line {number} {ask}" for number, ask in found[:MAX_QUOTED])
            problems.append({"criterion_id": guard,
                             "problem": f"asks for work the contract does not require: {source} {quoted}"})
    return problems
