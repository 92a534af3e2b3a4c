"""Admitted tasks exported in Harbor's task layout: the folders and task.toml against Harbor's schema
(1.3, at the commit the exporter names), and the scripts run for real as Harbor would run them
(bash, with nothing but Python's standard library: the verifier under ``python3 -I -S``).

Docker and Harbor do not run here; what Harbor does around the scripts (build the image from
``environment/``, upload ``tests/`` to /tests after the agent, read /logs/verifier) is stood in for
by a workspace folder and ``LOGS_DIR``. The verifier is interlock's check interpreter bundled into
one script; it must give every criterion the result interlock's own checks give on the same
folder, on the oracle's work, every scripted adversary's, and workspace content no tool of
interlock's could write (links, FIFOs, huge files, malformed tables, look-alike characters)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.analysis.artifacts import repository_paths
from interlock.analysis.cli import main
from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import write_table
from interlock.export import harbor, verifier
from interlock.export.bundle import bundle
from interlock.review.controls import run_reference
from interlock.rollout.runs import scripted_rollouts
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.packs import TaskPack
from interlock.synthesis.tasks import TaskContext
from interlock.synthesis.workspace import DirectoryStore, materialize
from interlock.testing.adversaries import ADVERSARIES, PLANS

from helpers.artifacts import apply_changes, loaded_script, write_packs
from helpers.repo import REPO, command_timeout

TASK_SCHEMA = json.loads((REPO / "tests" / "schemas" / "harbor-task-1.3.schema.json").read_text())


# ----------------------------------------------------------------------------- fixtures and helpers

@pytest.fixture(scope="module")
def exported(tasks, tmp_path_factory) -> dict[str, tuple[TaskPack, Path]]:
    """Every fixture task (one per decision kind) exported: task id -> (pack, folder)."""
    packs = [pack for *_, pack in tasks]
    folders = harbor.write_tasks(packs, tmp_path_factory.mktemp("harbor"))
    return {pack.task_id: (pack, folder) for pack, folder in zip(packs, folders, strict=True)}


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> dict[str, str]:
    """The environment the scripts run in: bash and coreutils from the system, and as ``python3``
    this interpreter (which test.sh starts with -I -S: no site-packages, no interlock)."""
    shims = tmp_path_factory.mktemp("bin")
    (shims / "python3").symlink_to(sys.executable)
    return {"PATH": f"{shims}:/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def bundled(exported):
    """The exported tests/verify.py loaded in this process (the same file in every task)."""
    scripts = {(folder / "tests" / "verify.py").read_text() for _, folder in exported.values()}
    assert len(scripts) == 1
    with loaded_script(next(iter(exported.values()))[1] / "tests" / "verify.py", "exported_verify") as module:
        yield module


def bash(script: Path, env: dict[str, str], **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script)], env={**env, **extra}, capture_output=True, text=True,
                          timeout=command_timeout())


def grade(folder: Path, workspace: Path, logs: Path, env: dict[str, str]) -> tuple[str, dict, dict]:
    """tests/test.sh on a workspace: (reward.txt, reward.json, reward-details.json)."""
    done = bash(folder / "tests" / "test.sh", env, INTERLOCK_WORKSPACE=str(workspace), LOGS_DIR=str(logs))
    assert done.returncode == 0, done.stderr
    out = logs / "verifier"
    return ((out / "reward.txt").read_text(), json.loads((out / "reward.json").read_text()),
            json.loads((out / verifier.DETAILS_FILE).read_text()))


def interlock_results(pack: TaskPack, root: Path) -> dict[str, tuple[bool, str] | str]:
    """Interlock's own checks on a folder, as the agent judge runs them on a finished episode (an
    exception by name): Harbor runs its verifier when the agent is done."""
    view = View(DirectoryStore(root), submitted=True)
    results: dict[str, tuple[bool, str] | str] = {}
    for criterion in pack.rubric:
        try:
            results[criterion.criterion_id] = run_check(pack.checks[criterion.criterion_id], view)
        except Exception as exc:  # noqa: BLE001 - recorded: the verifier must fail it, not crash
            results[criterion.criterion_id] = type(exc).__name__
    return results


def assert_agrees(report: dict, expected: dict[str, tuple[bool, str] | str], pack: TaskPack) -> None:
    """The verifier's report gives every criterion interlock's result, and the reward they imply."""
    got = {c["criterion_id"]: (c["passed"], c["evidence"]) for c in report["criteria"]}
    assert set(got) == set(expected)
    for criterion_id, result in expected.items():
        if isinstance(result, str):  # interlock's check raised: the verifier fails the criterion
            assert got[criterion_id][0] is False and result in got[criterion_id][1], (criterion_id, got)
        else:
            passed, evidence = result
            limit = verifier.MAX_EVIDENCE_CHARS
            if len(evidence) > limit:
                evidence = evidence[:limit] + f" [... {len(evidence) - limit} more]"
            assert got[criterion_id] == (passed, evidence), (criterion_id, got[criterion_id], result)
    passed = {criterion_id: not isinstance(r, str) and r[0] for criterion_id, r in expected.items()}
    assert report["reward"] == int(all(passed[c.criterion_id] for c in pack.rubric if c.mandatory))


def reference_final(pack: TaskPack) -> dict[str, str]:
    """The oracle's final files: the pack's reference tool calls replayed with interlock's tools."""
    return run_reference(pack).final.contents


def workspace_files(root: Path) -> dict[str, str]:
    store = DirectoryStore(root)
    return {path: store.read(path) for path in store.files()}


# ----------------------------------------------------------------------------- layout and task.toml

def test_every_task_has_harbors_layout_and_a_valid_task_toml(exported):
    validator = jsonschema.Draft202012Validator(TASK_SCHEMA)
    for task_id, (pack, folder) in exported.items():
        assert folder.name == task_id
        for required in ("instruction.md", "task.toml", "environment/Dockerfile", "solution/solve.sh",
                         "tests/test.sh"):
            assert (folder / required).is_file(), required
        for script in harbor.SCRIPTS:
            assert os.access(folder / script, os.X_OK)
            assert (folder / script).read_text().startswith("#!/bin/bash\n")
        config = tomllib.loads((folder / "task.toml").read_text())
        assert sorted(e.message for e in validator.iter_errors(config)) == []
        assert config["schema_version"] == harbor.TASK_SCHEMA_VERSION
        assert config["task"]["name"] == f"interlock/{task_id}"
        assert config["metadata"]["criteria"] == len(pack.rubric)
        assert config["environment"]["workdir"] == harbor.WORKSPACE
        assert (folder / "instruction.md").read_text().startswith(pack.request)


def test_the_schema_check_can_fail():
    validator = jsonschema.Draft202012Validator(TASK_SCHEMA)
    good = {"schema_version": "1.3", "task": {"name": "interlock/x.rft.0000"},
            "verifier": {"timeout_sec": 1.0}}
    assert not list(validator.iter_errors(good))
    for bad in ({**good, "verifer": {}}, {**good, "schema_version": "1.0"},
                {**good, "task": {"name": "no-org"}}, {**good, "verifier": {"timeout_sec": "soon"}},
                {**good, "environment": {"memory": "2G"}}, {**good, "task": {"name": "a/b..c"}}):
        assert list(validator.iter_errors(bad)), bad


def test_the_agent_sees_the_initial_workspace_and_never_the_verifier(exported):
    """environment/ (the image's build context) is the Dockerfile and the initial workspace, byte
    for byte; the checks and the verifier are only in tests/, which Harbor uploads after the agent."""
    for pack, folder in exported.values():
        environment = folder / "environment"
        files = {p.relative_to(environment).as_posix() for p in environment.rglob("*") if p.is_file()}
        assert files == {"Dockerfile"} | {f"workspace/{path}" for path in pack.files}
        for path, text in pack.files.items():
            assert (environment / "workspace" / path).read_bytes() == text.encode()
        dockerfile = (environment / "Dockerfile").read_text().splitlines()
        assert f"FROM {harbor.BASE_IMAGE}" in dockerfile and f"WORKDIR {harbor.WORKSPACE}" in dockerfile
        assert f"COPY workspace/ {harbor.WORKSPACE}/" in dockerfile
        assert sorted(p.name for p in (folder / "tests").iterdir()) == ["checks.json", "test.sh", "verify.py"]
        checks = json.loads((folder / "tests" / "checks.json").read_text())
        assert [c["criterion_id"] for c in checks["criteria"]] == [c.criterion_id for c in pack.rubric]
        assert all(c["check"] == pack.checks[c["criterion_id"]] for c in checks["criteria"])


def test_the_verifier_imports_only_the_standard_library_and_is_the_same_every_time(exported):
    script = (next(iter(exported.values()))[1] / "tests" / "verify.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(script)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}
    assert "interlock" not in imported
    assert harbor.verifier_script() == script


def test_the_bundler_refuses_what_is_not_the_standard_library():
    from interlock.core import io

    with pytest.raises(InterlockError, match="pyarrow"):
        bundle(io, "write_table", "a table writer")


# ----------------------------------------------------------------------------- test.sh and solve.sh

def test_test_sh_gives_0_on_the_initial_workspace_and_1_after_solve_sh(exported, shell, tmp_path):
    for task_id, (pack, folder) in exported.items():
        workspace, logs = tmp_path / task_id / "app", tmp_path / task_id / "logs"
        shutil.copytree(folder / "environment" / "workspace", workspace)
        text, reward, details = grade(folder, workspace, logs, shell)
        assert (text, reward, details["reward"]) == ("0\n", {"reward": 0}, 0)
        assert_agrees(details, interlock_results(pack, workspace), pack)

        done = bash(folder / "solution" / "solve.sh", shell, INTERLOCK_WORKSPACE=str(workspace))
        assert done.returncode == 0, done.stderr
        assert workspace_files(workspace) == reference_final(pack)  # the oracle's replay, byte for byte
        text, reward, details = grade(folder, workspace, logs, shell)
        assert (text, reward, details["reward"]) == ("1\n", {"reward": 1}, 1), details["reason"]
        assert_agrees(details, interlock_results(pack, workspace), pack)


@pytest.mark.parametrize("verifier_runs", [True, False])
def test_reward_files_an_agent_planted_are_replaced(verifier_runs, exported, shell, tmp_path):
    """An agent shares the verifier's container (Harbor's shared mode) and may plant reward files
    or links: whether the verifier runs or cannot start (a python3 that fails), the reward is 0
    and nothing outside /logs/verifier is written."""
    _, folder = next(iter(exported.values()))
    env = dict(shell)
    if not verifier_runs:
        broken = tmp_path / "bin"
        broken.mkdir()
        (broken / "python3").write_text("#!/bin/sh\nexit 3\n")
        (broken / "python3").chmod(0o755)
        env["PATH"] = f"{broken}:/usr/bin:/bin"
    workspace, logs = tmp_path / "app", tmp_path / "logs"
    shutil.copytree(folder / "environment" / "workspace", workspace)
    (logs / "verifier").mkdir(parents=True)
    (logs / "verifier" / "reward.json").write_text('{"reward": 1}')
    target = tmp_path / "elsewhere.txt"
    target.write_text("untouched")
    (logs / "verifier" / "reward.txt").symlink_to(target)
    done = bash(folder / "tests" / "test.sh", env, INTERLOCK_WORKSPACE=str(workspace), LOGS_DIR=str(logs))
    assert done.returncode == 0 and ("the verifier failed: reward 0" in done.stderr) != verifier_runs
    assert (logs / "verifier" / "reward.txt").read_text() == "0\n"
    assert json.loads((logs / "verifier" / "reward.json").read_text()) == {"reward": 0}
    assert target.read_text() == "untouched" and not (logs / "verifier" / "reward.txt").is_symlink()


def test_a_failed_optional_criterion_leaves_reward_1(tasks, exported, shell, tmp_path):
    """The reward is the mandatory criteria's: a decision citing the wrong clause (a grounding
    criterion, not mandatory) is reported, and the reward stays 1."""
    pack = next(p for *_, p in tasks if p.domain_id == "payroll_close")
    root = tmp_path / "app"
    materialize(reference_final(pack), root)
    register = root / "out" / "decisions.csv"
    register.write_text(register.read_text().replace(",P-", ",P-9"))
    text, reward, details = grade(exported[pack.task_id][1], root, tmp_path / "logs", shell)
    failed = [c for c in details["criteria"] if not c["passed"]]
    assert (text, reward) == ("1\n", {"reward": 1}) and failed
    assert {c["kind"] for c in failed} == {"grounding"} and not any(c["mandatory"] for c in failed)
    assert_agrees(details, interlock_results(pack, root), pack)


def test_a_corrupted_checks_file_is_reward_0_with_its_reason(exported, shell, tmp_path):
    _, folder = next(iter(exported.values()))
    copy = tmp_path / "task"
    shutil.copytree(folder, copy)
    (copy / "tests" / "checks.json").write_text('{"task_id": "x", "criteria": [{"criterion_id": ')
    _, reward, details = grade(copy, copy / "solution" / "workspace", tmp_path / "logs", shell)
    assert reward == {"reward": 0} and details["reason"].startswith("the verifier failed (JSONDecodeError")


def test_export_refuses_a_task_it_cannot_ship(tasks):
    pack = tasks[0][3]
    script = harbor.verifier_script()
    criterion = next(c for c in pack.rubric if c.kind == "primary")
    check = {**pack.checks[criterion.criterion_id], "expect": {"outcome": "never"}}
    broken = TaskPack(**{**pack.__dict__, "checks": {**pack.checks, criterion.criterion_id: check}})
    with pytest.raises(InterlockError, match=f"reference solution fails {criterion.criterion_id}"):
        harbor.harbor_task(broken, script)
    escaping = TaskPack(**{**pack.__dict__, "files": {**pack.files, "../outside.md": "x"}})
    with pytest.raises(InterlockError, match="plain relative path"):
        harbor.harbor_task(escaping, script)


# ----------------------------------------------------------------------------- the same results as interlock

def test_the_verifier_agrees_with_interlock_on_every_scripted_solver(tasks, bundled, exported, tmp_path):
    """The oracle, the noisy solver, the two no-work controls and every adversary on every fixture
    task: every criterion, every reward (of the final state: what a verifier of the final
    workspace can see; the agent judge also replays the episode)."""
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]
    rollouts = scripted_rollouts(contexts, ("oracle", "noisy", *ADVERSARIES), seed=0, workdir=tmp_path / "w",
                                 plans=PLANS)
    rewards = {0: 0, 1: 0}
    for trajectory in rollouts:
        pack, folder = exported[trajectory.task_id]
        root = tmp_path / "ws" / trajectory.rollout_id
        materialize(apply_changes(pack.files, trajectory.final_files), root)
        report = bundled.verify(json.loads((folder / "tests" / "checks.json").read_text()), root)
        assert_agrees(report, interlock_results(pack, root), pack)
        rewards[report["reward"]] += 1
    assert rewards[1] >= len(tasks) and rewards[0] >= len(tasks) * 10  # the oracle passes; attacks fail


def _hostile(name: str, root: Path, outside: Path) -> None:
    """Plant one kind of content a shell agent can leave and interlock's tools cannot."""
    register, table, records = root / "out" / "decisions.csv", root / "ledger" / "gross_cost.csv", \
        root / "payments" / "payroll_refunds.jsonl"
    if name == "link_out":
        register.unlink()
        register.symlink_to(outside)
    elif name == "link_in":
        shutil.copy(table, root / "ledger" / "copy.csv")
        table.unlink()
        table.symlink_to(root / "ledger" / "copy.csv")
    elif name == "folder_for_file":
        records.unlink()
        records.mkdir()
    elif name == "fifo":
        records.unlink()
        os.mkfifo(records)
    elif name == "huge_sparse_file":
        with open(root / "out" / "huge.bin", "wb") as handle:
            handle.truncate(1 << 30)
    elif name == "huge_register":
        with open(register, "ab") as handle:
            handle.truncate(verifier.MAX_FILE_BYTES + 1)
    elif name == "binary_bytes":
        with open(table, "ab") as handle:
            handle.write(b"\xff\xfe\x80,\xc3\x28,1\n")
    elif name == "crlf":
        register.write_bytes(register.read_bytes().replace(b"\n", b"\r\n"))
    elif name == "bom":
        register.write_bytes(b"\xef\xbb\xbf" + register.read_bytes())
    elif name == "unbalanced_quote":
        register.write_text(register.read_text() + '"RFD-1,approved,P-1\n')
    elif name == "nul_byte":
        register.write_text(register.read_text().replace("approved", "appro\x00ved", 1))
    elif name == "kelvin_and_fullwidth":
        register.write_text(register.read_text().replace("RFD-", "RFD\uff0d").replace("k", "\u212a"))
    elif name == "no_break_space":
        register.write_text(register.read_text().replace(",approved,", ",approved\u00a0,"))
    elif name == "cyrillic_a":
        register.write_text(register.read_text().replace("approved", "\u0430pproved"))
    elif name == "jsonl_duplicate_key":
        records.write_text(records.read_text().replace('"amount":', '"amount": 1, "amount":', 1))
    elif name == "jsonl_deep":
        records.write_text(records.read_text() + '{"case_id": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    elif name == "jsonl_huge_int":
        records.write_text(records.read_text().replace('"amount": ', '"amount": ' + "9" * 5_000, 1))
    elif name == "odd_names":
        (root / "out" / "new\nline.csv").write_text("x\n")
        (root / "out" / "\u212a.md").write_text("x\n")
    else:
        raise AssertionError(name)


HOSTILE = ("link_out", "link_in", "folder_for_file", "fifo", "huge_sparse_file", "huge_register",
           "binary_bytes", "crlf", "bom", "unbalanced_quote", "nul_byte", "kelvin_and_fullwidth",
           "no_break_space", "cyrillic_a", "jsonl_duplicate_key", "jsonl_deep", "jsonl_huge_int", "odd_names")


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_workspace_content_is_reward_0_with_a_reason_never_a_crash(name, tasks, exported, bundled,
                                                                           shell, tmp_path):
    pack = next(p for *_, p in tasks if p.domain_id == "payroll_close")
    folder = exported[pack.task_id][1]
    root = tmp_path / "app"
    materialize(reference_final(pack), root)
    outside = tmp_path / "secret.csv"
    outside.write_text("case_id,outcome,basis\n")
    _hostile(name, root, outside)
    report = bundled.verify(json.loads((folder / "tests" / "checks.json").read_text()), root)
    assert report["reward"] == 0 and report["reason"]
    if name.startswith("huge"):  # refused unread: interlock itself would read every byte
        assert "limit" in report["reason"] and all(not c["passed"] for c in report["criteria"])
    else:
        assert_agrees(report, interlock_results(pack, root), pack)
    if name in ("link_out", "fifo", "huge_sparse_file"):  # the script itself, end to end
        text, reward, details = grade(folder, root, tmp_path / "logs", shell)
        assert (text, reward) == ("0\n", {"reward": 0}) and details["criteria"] == report["criteria"]
    assert outside.read_text() == "case_id,outcome,basis\n"


def test_a_workspace_past_the_limits_is_refused(tasks, exported, bundled, tmp_path, monkeypatch):
    pack, folder = next(iter(exported.values()))
    checks = json.loads((folder / "tests" / "checks.json").read_text())
    root = tmp_path / "app"
    materialize(reference_final(pack), root)
    assert bundled.verify(checks, root)["reward"] == 1
    monkeypatch.setattr(bundled, "MAX_FILES", len(reference_final(pack)) - 1)
    report = bundled.verify(checks, root)
    assert report["reward"] == 0 and "files" in report["reason"]
    assert bundled.verify(checks, tmp_path / "missing")["reason"].endswith("is not a folder")


#: (which file, where, how many characters to cut, what to insert)
EDITS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 12), st.sampled_from(
    ["\u212a", "\uff11", "\u00a0", "\u0430", ",", '"', "\n", "\r", "\x00", "\ufeff", "{", "}", "\\", "\u2028",
     "approved", "x" * 5_000, ""])), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edits=EDITS)
def test_random_edits_of_the_oracles_work_agree_with_interlock(edits, tasks, exported, bundled):
    """A few characters inserted or deleted anywhere in the oracle's final files (look-alikes, quotes,
    line breaks, NUL, a byte-order mark, long runs): the verifier gives interlock's every result."""
    pack = tasks[0][3]
    checks = json.loads((exported[pack.task_id][1] / "tests" / "checks.json").read_text())
    files = reference_final(pack)
    paths = sorted(files)
    for which, at, cut, text in edits:
        path = paths[which % len(paths)]
        position = at % (len(files[path]) + 1)
        files[path] = files[path][:position] + text + files[path][position + cut:]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "app"
        materialize(files, root)
        assert_agrees(bundled.verify(checks, root), interlock_results(pack, root), pack)


# ----------------------------------------------------------------------------- the command line

@pytest.fixture(scope="module")
def data(tasks, tmp_path_factory) -> Path:
    """An artifacts folder holding the fixture tasks' packs, every one of them admitted."""
    root = tmp_path_factory.mktemp("artifacts") / "data"
    paths = repository_paths(REPO, data=root)
    write_packs(paths.packs, [pack for *_, pack in tasks])
    write_table(paths.admitted, [{"task_id": p.task_id, "domain_id": p.domain_id, "pool": p.pool}
                                 for *_, p in tasks], schemas.REVIEW_TABLES["admitted"])
    return root


def test_cli_exports_a_pools_admitted_tasks(data, tasks, tmp_path, capsys):
    rft = [p.task_id for *_, p in tasks if p.pool == "rft"]
    out = tmp_path / "harbor"
    code = main(["--data", str(data), "export", "tasks", "--format", "harbor", "-o", str(out),
                 "--pool", "rft", "--limit", "2"])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == sorted(rft[:2])
    assert f"wrote 2 admitted rft tasks in Harbor {harbor.HARBOR_VERSION}'s layout" in capsys.readouterr().out
    assert main(["--data", str(data), "export", "tasks", "--format", "harbor", "-o", str(out),
                 "--pool", "dev"]) == 0
    assert "wrote 0 admitted dev tasks" in capsys.readouterr().out


def test_cli_export_errors(data, tmp_path, capsys):
    with pytest.raises(SystemExit) as usage:
        main(["--data", str(data), "export", "tasks", "--format", "atif", "-o", str(tmp_path)])
    assert usage.value.code == 2 and "invalid choice: 'atif'" in capsys.readouterr().err
    (tmp_path / "unreviewed").mkdir()
    code = main(["--data", str(tmp_path / "unreviewed"), "export", "tasks", "--format", "harbor",
                 "-o", str(tmp_path / "out")])
    assert code == 1 and "admitted.parquet does not exist" in capsys.readouterr().err
