"""Shared fixtures: the real catalog, one compiled task per decision kind, and the tiny test
backbone, each built once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from interlock.blueprints import TaskSize, make_blueprint, stable_seed
from interlock.catalog import load_catalog
from interlock.config import write_params
from interlock.graph import build_graph
from interlock.pipeline import build_pack

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: what W&B and DVC may inherit from the caller's environment that would send the smoke run's
#: tracking or experiment names elsewhere
ISOLATED = ("WANDB_MODE", "WANDB_DIR", "WANDB_DISABLED", "DVC_ROOT", "DVC_EXP_NAME", "DVC_STAGE")
#: the smoke run's evaluation pools: the default's benchmark and the opt-in BFCL pool
SMOKE_POOLS = "eval.pools=[benchmark,bfcl]"


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture(scope="session")
def tasks(catalog):
    """(domain, blueprint, graph, pack) for the first domain of every decision kind."""
    built, seen = [], set()
    for domain in catalog.domains:
        if domain.decision.kind in seen:
            continue
        seen.add(domain.decision.kind)
        pool = "rft" if domain.split == "train" else "benchmark"
        blueprint = make_blueprint(domain, pool, 0, TaskSize(4, 3, 2, 2), stable_seed(7, domain.id))
        graph = build_graph(blueprint, domain)
        built.append((domain, blueprint, graph, build_pack(graph, domain)))
    return built


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tasks):
    """The tiny random test backbone (tokenizer trained on the fixture tasks' text), built once."""
    from interlock.models.tiny import build_tiny, pack_texts

    return build_tiny(tmp_path_factory.mktemp("models") / "tiny", pack_texts(t[3] for t in tasks), seed=7)


def user_env() -> dict[str, str]:
    """The environment a user's command runs in: the venv's tools first on PATH, W&B offline."""
    env = {key: value for key, value in os.environ.items() if key not in ISOLATED}
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", DVC_NO_ANALYTICS="1", WANDB_MODE="offline",
               WANDB_SILENT="true")
    return env


def run(args: list[str], cwd: Path, *, stdout_only: bool = False, check: bool = True) -> str:
    """Run a command the way a user would in ``cwd``; fail the test with its output if it fails
    (unless ``check`` is false: a failure is the point)."""
    done = subprocess.run(args, cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 or not check, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout if stdout_only else done.stdout + done.stderr


@pytest.fixture(scope="session")
def smoke_repo(tmp_path_factory) -> Path:
    """A copy of the repository's tracked files at the smoke scale, after one `dvc repro`: the
    pipeline runs once per test session and every test that needs its artifacts shares it. Its
    evaluation adds the opt-in BFCL pool, so the adapter runs end to end, BFCL's checker included."""
    root = tmp_path_factory.mktemp("smoke") / "repo"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (REPO / name).is_file() and not name.startswith(("data/", "metrics/")) and name != "dvc.lock":
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    write_params(root / "conf", root / "params.yaml", ["scale=smoke", SMOKE_POOLS])
    run(["git", "init", "-q"], root)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"], root)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "smoke"], root)
    run([str(BIN / "dvc"), "repro"], root)
    return root


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
