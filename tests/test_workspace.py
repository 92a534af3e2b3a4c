"""Workspace stores and the agent's tools.

Confinement is tested on real files: every refused call must leave every byte outside the
workspace as it was. The tools are tested through ``execute`` on both stores, since they are
written once against either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from interlock.core.chat import ToolCall, ToolResult
from interlock.synthesis.workspace import (
    MALFORMED,
    MAX_FIELD_CHARS,
    TOOL_SPECS,
    DirectoryStore,
    MemoryStore,
    PathRefused,
    clean_path,
    execute,
    format_csv,
    is_malformed,
    malformed,
    materialize,
    parse_csv,
    parse_jsonl,
)

FILES = {
    "cases.csv": "id,name,amount,status\nC-1,Ana Okafor,420,pending\nC-2,Ben Moreau,150,pending\n",
    "out/ledger.csv": "case_id,account,amount\n",
    "out/payments.jsonl": "",
    "notes/readme.md": "hello\n",
    "policy.md": "# Policy\n\n- **P-1.** A claim is approved when its amount is at most 500.\n",
}


def _call(store, tool: str, **arguments) -> ToolResult:
    result = execute(store, ToolCall(tool, arguments))
    assert isinstance(result, ToolResult)
    return result


def _contents(store) -> dict[str, str]:
    return {path: store.read(path) for path in store.files()}


@pytest.fixture(params=["memory", "directory"])
def store(request, tmp_path: Path):
    if request.param == "memory":
        return MemoryStore(FILES)
    return materialize(FILES, tmp_path / "ws")


# ----------------------------------------------------------------------------- paths

@pytest.mark.parametrize(("path", "clean"), [
    ("a.csv", "a.csv"), ("./a//b", "a/b"), ("a/./b.csv", "a/b.csv"), (".", "."), ("a b.csv", "a b.csv"),
])
def test_clean_path_normalises_only_spellings_of_the_same_file(path: str, clean: str) -> None:
    assert clean_path(path) == clean


@pytest.mark.parametrize("path", ["", "   ", "../x", "/etc/passwd", "a/../../x", "a/../b", "..\\x",
                                  "\\\\server\\share", None, 3,
                                  # what a tool would have to rewrite: refused, never taken for another file
                                  "a\\b.csv", " out/x.md ", "out/x.md ", "out/x.md\t", "./a//b/", "./",
                                  "out/x\u200b.md", "out/x.md\u00a0", "out/\x00x.md", "out/x\n.md"])
def test_clean_path_refuses(path) -> None:
    with pytest.raises(PathRefused):
        clean_path(path)


# ----------------------------------------------------------------------------- confinement on disk

def _tree_state(base: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Everything under ``base`` (but ``skip`` and what it holds): files with bytes and mtime,
    links with their targets, folders."""
    state = {}
    for folder, dirs, names in os.walk(base, followlinks=False):
        here = Path(folder)
        if skip is not None and (here == skip or skip in here.parents):
            continue
        for name in dirs + names:
            path = here / name
            if path == skip:
                continue
            key = path.relative_to(base).as_posix()
            if path.is_symlink():
                state[key] = ("link", os.readlink(path))
            elif path.is_file():
                state[key] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
            else:
                state[key] = ("dir",)
    return state


@pytest.fixture
def jail(tmp_path: Path):
    """A workspace with links leading out of it (and some that stay inside)."""
    root = tmp_path / "ws"
    materialize(FILES, root)
    (tmp_path / "secret.txt").write_text("SECRET,1\n")
    (tmp_path / "secret.csv").write_text("id,value\nS-1,secret\n")
    (tmp_path / "secret.jsonl").write_text('{"case_id": "S-1"}\n')
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "f.csv").write_text("id,value\nO-1,out\n")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    os.symlink(tmp_path / "secret.csv", root / "link.csv")
    os.symlink(tmp_path / "secret.jsonl", root / "link.jsonl")
    os.symlink("../secret.txt", root / "notes" / "relative.txt")  # ws/notes/../secret.txt: inside
    os.symlink("../../secret.txt", root / "notes" / "escape.txt")
    os.symlink(tmp_path / "outdir", root / "linkdir")
    os.symlink(tmp_path / "created.txt", root / "dangling.txt")  # target does not exist (yet)
    os.symlink(tmp_path / "newdir", root / "danglingdir")
    os.symlink(root / "cases.csv", root / "inside.csv")
    os.symlink("notes", root / "insidedir")
    os.symlink(root / "linkdir", root / "chain")  # inside link -> inside link -> outside
    return tmp_path, root


_ESCAPES = [
    ("read_file", {"path": "../secret.txt"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("read_file", {"path": "a/../../secret.txt"}),
    ("read_file", {"path": "..\\secret.txt"}),
    ("read_file", {"path": "link.txt"}),
    ("read_file", {"path": "notes/escape.txt"}),
    ("read_file", {"path": "linkdir/f.csv"}),
    ("read_file", {"path": "chain/f.csv"}),
    ("list_files", {"path": "../"}),
    ("list_files", {"path": "/etc"}),
    ("write_file", {"path": "../secret.txt", "content": "pwned"}),
    ("write_file", {"path": "../new.txt", "content": "pwned"}),
    ("write_file", {"path": "notes/../../new.txt", "content": "pwned"}),
    ("write_file", {"path": "/tmp/interlock-escape.txt", "content": "pwned"}),
    ("write_file", {"path": "link.txt", "content": "pwned"}),
    ("write_file", {"path": "notes/escape.txt", "content": "pwned"}),
    ("write_file", {"path": "dangling.txt", "content": "pwned"}),
    ("write_file", {"path": "danglingdir/x.txt", "content": "pwned"}),
    ("write_file", {"path": "linkdir/f.csv", "content": "pwned"}),
    ("write_file", {"path": "linkdir/new.txt", "content": "pwned"}),
    ("write_file", {"path": "linkdir/deeper/new.txt", "content": "pwned"}),
    ("write_file", {"path": "chain/new.txt", "content": "pwned"}),
    ("append_record", {"path": "../secret.csv", "record": {"id": "X"}}),
    ("append_record", {"path": "link.csv", "record": {"id": "X", "value": "pwned"}}),
    ("append_record", {"path": "link.jsonl", "record": {"case_id": "X"}}),
    ("append_record", {"path": "linkdir/f.csv", "record": {"id": "X"}}),
    ("update_record", {"path": "link.csv", "id": "S-1", "fields": {"value": "pwned"}}),
    ("update_record", {"path": "linkdir/f.csv", "id": "O-1", "fields": {"value": "pwned"}}),
    ("update_record", {"path": "/etc/passwd", "id": "root", "fields": {}}),
]


@pytest.mark.parametrize(("tool", "arguments"), _ESCAPES,
                         ids=[f"{t}:{a['path']}" for t, a in _ESCAPES])
def test_paths_leaving_the_workspace_are_refused(jail, tool: str, arguments: dict) -> None:
    base, root = jail
    outside, inside = _tree_state(base, skip=root), _tree_state(root)
    result = _call(DirectoryStore(root), tool, **arguments)
    assert not result.ok and result.output.startswith("error")
    assert arguments["path"] in result.output or repr(arguments["path"]) in result.output
    for leaked in ("SECRET,1", "S-1,secret", "O-1,out", "root:x"):
        assert leaked not in result.output
    assert _tree_state(base, skip=root) == outside, "something outside the workspace changed"
    assert _tree_state(root) == inside, "a refused call changed the workspace"
    assert not Path("/tmp/interlock-escape.txt").exists()


def test_links_leaving_the_workspace_are_not_listed(jail) -> None:
    _, root = jail
    store = DirectoryStore(root)
    listed = _call(store, "list_files").output.splitlines()
    assert listed == sorted(FILES)
    assert _call(store, "list_files", path="linkdir").output == "(no files)"
    assert _call(store, "list_files", path="chain").output == "(no files)"


def test_links_that_stay_inside_may_be_read(jail) -> None:
    base, root = jail
    store = DirectoryStore(root)
    assert _call(store, "read_file", path="inside.csv").output == FILES["cases.csv"]
    assert _call(store, "read_file", path="insidedir/readme.md").output == FILES["notes/readme.md"]
    # notes/relative.txt -> ../secret.txt resolves to ws/secret.txt, which does not exist:
    # it stays inside, so it is no escape, just a missing file (the real secret is not read).
    result = _call(store, "read_file", path="notes/relative.txt")
    assert not result.ok and "SECRET" not in result.output


def test_links_are_never_written_through_even_inside(jail) -> None:
    base, root = jail
    before = (root / "cases.csv").read_bytes()
    result = _call(DirectoryStore(root), "write_file", path="inside.csv", content="id\n")
    assert not result.ok and "inside.csv" in result.output
    assert (root / "cases.csv").read_bytes() == before
    assert (root / "inside.csv").is_symlink()


def test_writing_through_a_folder_link_inside_stays_inside(jail) -> None:
    _, root = jail
    store = DirectoryStore(root)
    assert _call(store, "write_file", path="insidedir/new.md", content="x").ok
    assert (root / "notes" / "new.md").read_text() == "x"


# ----------------------------------------------------------------------------- the tools

def test_tool_specs_match_the_tools(store) -> None:
    names = [spec["name"] for spec in TOOL_SPECS]
    assert names == ["list_files", "read_file", "write_file", "append_record", "update_record", "submit"]
    samples = {"string": "cases.csv", "object": {}}
    for spec in TOOL_SPECS:
        params = spec["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
        valid = {name: samples[params["properties"][name]["type"]] for name in params["required"]}
        result = _call(store, spec["name"], **valid, bogus="x")
        assert not result.ok and "'bogus'" in result.output
        for name in params["required"]:
            result = _call(store, spec["name"], **{k: v for k, v in valid.items() if k != name})
            assert not result.ok and repr(name) in result.output


def test_list_files(store) -> None:
    assert _call(store, "list_files").output.splitlines() == sorted(FILES)
    assert _call(store, "list_files", path=".").output.splitlines() == sorted(FILES)
    assert _call(store, "list_files", path="out").output.splitlines() == ["out/ledger.csv",
                                                                          "out/payments.jsonl"]
    assert _call(store, "list_files", path="./out/").output.splitlines() == ["out/ledger.csv",
                                                                             "out/payments.jsonl"]
    assert _call(store, "list_files", path="policy.md").output == "policy.md"
    # a prefix is a folder, not a string prefix: "no" does not list notes/
    result = _call(store, "list_files", path="no")
    assert result.ok and result.output == "(no files)"


def test_read_file(store) -> None:
    for path, text in FILES.items():
        result = _call(store, "read_file", path=path)
        assert result.ok and result.output == text
    assert _call(store, "read_file", path="./notes//readme.md").output == FILES["notes/readme.md"]
    result = _call(store, "read_file", path="nope.md")
    assert not result.ok and "nope.md" in result.output
    result = _call(store, "read_file", path="notes")  # a folder is not a file
    assert not result.ok and "notes" in result.output


def test_write_file_creates_folders_and_overwrites(store) -> None:
    result = _call(store, "write_file", path="letters/2026/C-1.md", content="Case: C-1\n")
    assert result.ok and "letters/2026/C-1.md" in result.output
    assert _call(store, "read_file", path="letters/2026/C-1.md").output == "Case: C-1\n"
    assert "letters/2026/C-1.md" in _call(store, "list_files", path="letters").output
    assert _call(store, "write_file", path="policy.md", content="new").ok
    assert store.read("policy.md") == "new"
    assert _call(store, "write_file", path="empty.txt", content="").ok
    assert store.read("empty.txt") == ""


@pytest.mark.parametrize("content", ["a,b\r\nc,d\r\n", "line\rmore", "Zoë – 名前 ✓\n", "no newline"])
def test_write_then_read_gives_back_exactly_what_was_written(store, content: str) -> None:
    assert _call(store, "write_file", path="x.txt", content=content).ok
    assert _call(store, "read_file", path="x.txt").output == content
    assert store.read("x.txt") == content


@pytest.mark.parametrize("path", [".", "notes", "policy.md/inner.txt", "./"])
def test_write_file_onto_a_folder_or_under_a_file_is_an_error(store, path: str) -> None:
    before = _contents(store)
    result = _call(store, "write_file", path=path, content="x")
    assert not result.ok and result.output.startswith("error")
    assert _contents(store) == before


@pytest.mark.parametrize(("path", "content"), [("bad\x00name.txt", "x"), ("ok.txt", "lone \ud800 surrogate")])
def test_unwritable_input_is_an_error_observation_on_disk(tmp_path: Path, path: str, content: str) -> None:
    store = materialize(FILES, tmp_path / "ws")
    result = _call(store, "write_file", path=path, content=content)
    assert not result.ok and result.output.startswith("error")
    assert sorted(store.files()) == sorted(FILES)


def test_append_record_csv_follows_the_header(store) -> None:
    result = _call(store, "append_record", path="out/ledger.csv",
                   record={"amount": "420", "case_id": "C-1", "account": "6100"})
    assert result.ok and "out/ledger.csv" in result.output
    assert store.read("out/ledger.csv") == "case_id,account,amount\nC-1,6100,420\n"
    assert _call(store, "append_record", path="out/ledger.csv", record={"case_id": "C-2"}).ok
    assert store.read("out/ledger.csv") == "case_id,account,amount\nC-1,6100,420\nC-2,,\n"
    # values that need quoting survive, and the other rows are untouched
    assert _call(store, "append_record", path="cases.csv",
                 record={"id": "C-3", "name": 'Dev "D" Iyer, Jr.', "amount": "1.5", "status": "pending"}).ok
    header, rows = parse_csv(store.read("cases.csv"))
    assert header == ["id", "name", "amount", "status"]
    assert rows[-1] == {"id": "C-3", "name": 'Dev "D" Iyer, Jr.', "amount": "1.5", "status": "pending"}
    assert store.read("cases.csv").startswith(FILES["cases.csv"])


def test_append_record_csv_unknown_column_names_the_columns(store) -> None:
    result = _call(store, "append_record", path="out/ledger.csv",
                   record={"case_id": "C-1", "amt": "420", "acct": "6100"})
    assert not result.ok
    assert "'amt'" in result.output and "'acct'" in result.output
    assert "case_id, account, amount" in result.output
    assert store.read("out/ledger.csv") == FILES["out/ledger.csv"]


def test_append_record_missing_file_is_an_error(store) -> None:
    for path in ("out/missing.csv", "out/missing.jsonl"):
        result = _call(store, "append_record", path=path, record={"case_id": "C-1"})
        assert not result.ok and path in result.output
    assert sorted(store.files()) == sorted(FILES)


def test_append_record_other_formats_are_an_error(store) -> None:
    result = _call(store, "append_record", path="policy.md", record={"case_id": "C-1"})
    assert not result.ok and ".csv" in result.output
    assert store.read("policy.md") == FILES["policy.md"]


def test_append_record_jsonl(store) -> None:
    first = {"case_id": "C-1", "payee": "Ana Okafor", "amount": "420", "note": "Zoë \u2028 ok"}
    assert _call(store, "append_record", path="out/payments.jsonl", record=first).ok
    assert _call(store, "append_record", path="out/payments.jsonl", record={"case_id": "C-2"}).ok
    text = store.read("out/payments.jsonl")
    assert text.endswith("\n") and len(text.splitlines()) == 2
    assert parse_jsonl(text) == [first, {"case_id": "C-2"}]
    # a file whose last line has no newline gets one before the new record
    assert _call(store, "write_file", path="log.jsonl", content='{"a": "1"}').ok
    assert _call(store, "append_record", path="log.jsonl", record={"b": "2"}).ok
    assert parse_jsonl(store.read("log.jsonl")) == [{"a": "1"}, {"b": "2"}]


def test_update_record_updates_one_row(store) -> None:
    result = _call(store, "update_record", path="cases.csv", id="C-2", fields={"status": "approved"})
    assert result.ok and "C-2" in result.output
    assert store.read("cases.csv") == (
        "id,name,amount,status\nC-1,Ana Okafor,420,pending\nC-2,Ben Moreau,150,approved\n")
    assert _call(store, "update_record", path="cases.csv", id="C-1",
                 fields={"status": "rejected", "amount": "0"}).ok
    _, rows = parse_csv(store.read("cases.csv"))
    assert rows == [{"id": "C-1", "name": "Ana Okafor", "amount": "0", "status": "rejected"},
                    {"id": "C-2", "name": "Ben Moreau", "amount": "150", "status": "approved"}]


def test_update_record_unknown_id_is_an_error(store) -> None:
    result = _call(store, "update_record", path="cases.csv", id="C-9", fields={"status": "approved"})
    assert not result.ok and "C-9" in result.output and "cases.csv" in result.output
    assert store.read("cases.csv") == FILES["cases.csv"]


def test_update_record_unknown_column_is_an_error(store) -> None:
    result = _call(store, "update_record", path="cases.csv", id="C-1", fields={"state": "approved"})
    assert not result.ok and "'state'" in result.output and "id, name, amount, status" in result.output
    assert store.read("cases.csv") == FILES["cases.csv"]


def test_update_record_needs_a_csv(store) -> None:
    assert _call(store, "append_record", path="out/payments.jsonl", record={"id": "C-1"}).ok
    before = store.read("out/payments.jsonl")
    result = _call(store, "update_record", path="out/payments.jsonl", id="C-1", fields={"x": "y"})
    assert not result.ok and ".csv" in result.output
    assert store.read("out/payments.jsonl") == before
    result = _call(store, "update_record", path="missing.csv", id="C-1", fields={"status": "x"})
    assert not result.ok and "missing.csv" in result.output


def test_submit(store) -> None:
    result = _call(store, "submit")
    assert result.ok and result.submitted
    assert not _call(store, "list_files").submitted
    assert _contents(store) == FILES


@pytest.mark.parametrize(("name", "arguments", "words"), [
    ("delete_file", {"path": "policy.md"}, ["unknown tool", "delete_file", "list_files, read_file"]),
    ("read_file", {}, ["read_file", "'path'"]),
    ("write_file", {"path": "x.md"}, ["write_file", "'content'"]),
    ("append_record", {"record": {"case_id": "C-1"}}, ["append_record", "'path'"]),
    ("update_record", {"path": "cases.csv", "id": "C-1"}, ["update_record", "'fields'"]),
    ("read_file", {"path": 3}, ["'path'", "string"]),
    ("write_file", {"path": "x.md", "content": ["a"]}, ["'content'", "string"]),
    ("append_record", {"path": "out/ledger.csv", "record": "C-1,6100,420"}, ["'record'", "object"]),
    ("update_record", {"path": "cases.csv", "id": 1, "fields": {}}, ["'id'", "string"]),
    ("update_record", {"path": "cases.csv", "id": "C-1", "fields": [["status", "x"]]},
     ["'fields'", "object"]),
    ("list_files", {"path": None}, ["'path'", "string"]),
    ("read_file", {"path": "policy.md", "encoding": "latin-1"}, ["read_file", "'encoding'"]),
    ("submit", {"summary": "done"}, ["submit", "'summary'"]),
    ("list_files", {"path": ""}, ["non-empty"]),
])
def test_bad_calls_are_error_observations(store, name: str, arguments: dict, words: list[str]) -> None:
    result = _call(store, name, **arguments)
    assert not result.ok and not result.submitted and result.output.startswith("error")
    for word in words:
        assert word in result.output
    assert _contents(store) == FILES


@pytest.mark.parametrize("arguments", [None, "policy.md", ["policy.md"]])
def test_arguments_that_are_not_an_object_are_an_error(store, arguments) -> None:
    result = execute(store, ToolCall("read_file", arguments))
    assert not result.ok and "'path'" in result.output


# ----------------------------------------------------------------------------- materialize

def _disk(root: Path) -> tuple[dict[str, bytes], set[str]]:
    files, folders = {}, set()
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in dirs:
            folders.add((Path(folder) / name).relative_to(root).as_posix())
        for name in names:
            path = Path(folder) / name
            files[path.relative_to(root).as_posix()] = b"LINK" if path.is_symlink() else path.read_bytes()
    return files, folders


EXPECTED_FOLDERS = {"out", "notes"}


def test_materialize_writes_exactly_the_files(tmp_path: Path) -> None:
    files = {**FILES, "deep/a/b/c.txt": "crlf\r\nkept\r\n", "unicode.md": "Zoë ✓\n"}
    store = materialize(files, tmp_path / "ws")
    on_disk, folders = _disk(tmp_path / "ws")
    assert on_disk == {path: text.encode("utf-8") for path, text in files.items()}
    assert folders == EXPECTED_FOLDERS | {"deep", "deep/a", "deep/a/b"}
    assert store.files() == sorted(files)
    assert _contents(store) == files


def test_materialize_resets_after_changes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    store = materialize(FILES, root)
    initial = _disk(root)
    assert _call(store, "update_record", path="cases.csv", id="C-1", fields={"status": "approved"}).ok
    assert _call(store, "append_record", path="out/ledger.csv", record={"case_id": "C-1"}).ok
    assert _call(store, "write_file", path="letters/C-1.md", content="Case: C-1\n").ok
    (root / "policy.md").unlink()
    (root / "notes" / "readme.md").write_text("changed")
    (root / "empty").mkdir()
    os.symlink(tmp_path, root / "escape")
    assert _disk(root) != initial
    again = materialize(FILES, root)
    assert _disk(root) == initial
    assert _contents(again) == FILES
    assert sorted(os.listdir(tmp_path)) == ["ws"]


def test_materialize_from_a_memory_store_state(tmp_path: Path) -> None:
    memory = MemoryStore(FILES)
    assert _call(memory, "append_record", path="out/payments.jsonl", record={"case_id": "C-2"}).ok
    disk = materialize(memory.contents, tmp_path / "ws")
    assert _contents(disk) == memory.contents
    assert materialize(FILES, tmp_path / "ws").read("out/payments.jsonl") == ""


# ----------------------------------------------------------------------------- record formats

def test_csv_round_trip_with_awkward_values() -> None:
    header = ["id", "note", "amount"]
    rows = [{"id": "A-1", "note": 'says "hi", twice\nnew line', "amount": "1"},
            {"id": "A-2", "note": "", "amount": "2"}]
    text = format_csv(header, rows)
    assert text.endswith("\n") and "\r" not in text
    assert parse_csv(text) == (header, rows)


def test_parse_csv_reads_strictly_and_skips_blank_lines() -> None:
    """A row is never repaired: too few or too many cells, a NUL byte, an over-long cell, or a
    header that repeats or leaves out a name make it malformed, with the reason."""
    assert parse_csv("a,b,c\n1\n\n2,3,4\n1,2,3,4\n") == (["a", "b", "c"], [
        malformed("row 2: 1 cells under a header of 3"), {"a": "2", "b": "3", "c": "4"},
        malformed("row 5: 4 cells under a header of 3")])
    assert parse_csv("") == ([], [])
    assert parse_csv("a,b\n") == (["a", "b"], [])
    assert parse_csv("a,a\n1,2\n")[1] == [malformed("row 2: header: a column name repeats")]
    assert parse_csv("a,\n1,2\n")[1] == [malformed("row 2: header: a column has no name")]
    assert parse_csv("a,b\n1,\x002\n")[1] == [malformed("row 2: a NUL byte")]
    assert parse_csv(f"a,b\n1,{'x' * (MAX_FIELD_CHARS + 1)}\n")[1] == [
        malformed(f"row 2: a cell over {MAX_FIELD_CHARS} characters")]
    # what the csv module itself refuses (a cell over its own limit) ends the table, no exception
    header, rows = parse_csv("a\n1\n" + "y" * 200_000 + "\n")
    assert rows[0] == {"a": "1"} and is_malformed(rows[-1]) and "unreadable" in rows[-1][MALFORMED]


def test_parse_jsonl_marks_malformed_lines_and_skips_blank_ones() -> None:
    """Blank lines (a trailing one included) hold no record, as in a CSV table."""
    text = '{"case_id": "C-1"}\nnot json\n\n[1, 2]\n"text"\n{"case_id": "C-2"}\r\n\n\r\n'
    records = parse_jsonl(text)
    assert [r.get("case_id") for r in records] == ["C-1", None, None, None, "C-2"]
    assert [r[MALFORMED].split(":")[0] for r in records if is_malformed(r)] == ["line 2", "line 4", "line 5"]
    assert parse_jsonl(" \n")[0][MALFORMED].startswith("line 1")  # a space is not a blank line
    assert parse_jsonl("") == []


@pytest.mark.parametrize(("line", "why"), [
    ('{"case_id": "C-1", "case_id": "C-2"}', "a key repeats"),
    ('{"case_id": "C-1\x00"}', "NUL"),
    ('{"case_id": "C-1", "note": "a\u2028b"}', "a line break inside the record"),
    ('{"case_id": "C-1", "note": "a\x85b"}', "a line break inside the record"),
    ('{"a": ' * 20 + "1" + "}" * 20, "nested deeper"),
    ('{"a": ' + '[' * 3000 + ']' * 3000 + "}", "not one JSON object"),
    ('{"note": "' + "x" * (MAX_FIELD_CHARS + 1) + '"}', "a string over"),
])
def test_parse_jsonl_never_repairs_a_record(line: str, why: str) -> None:
    (record,) = parse_jsonl(line + "\n")
    assert is_malformed(record) and why in record[MALFORMED]
    # the same record written by the tool is one clean line: line breaks escaped
    if "line break" in why:
        store = MemoryStore({"p.jsonl": ""})
        value = json.loads(line)
        assert execute(store, ToolCall("append_record", {"path": "p.jsonl", "record": value})).ok
        assert parse_jsonl(store.read("p.jsonl")) == [value]


def test_the_record_tools_refuse_to_rewrite_a_malformed_table() -> None:
    store = MemoryStore({"t.csv": "id,status\nC-1,open\nC-2\n"})
    for call in (ToolCall("append_record", {"path": "t.csv", "record": {"id": "C-3", "status": "x"}}),
                 ToolCall("update_record", {"path": "t.csv", "id": "C-1", "fields": {"status": "x"}})):
        result = execute(store, call)
        assert not result.ok and "malformed row (row 3: 1 cells under a header of 2)" in result.output
    assert store.read("t.csv") == "id,status\nC-1,open\nC-2\n"  # nothing repaired
    assert json.loads(json.dumps(parse_jsonl('{"a": 1}'))) == [{"a": 1}]
