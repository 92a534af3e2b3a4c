"""``backbone.backend: auto`` (the default) decodes through vLLM where it answered a real probe
request on this machine, and through transformers elsewhere, saying why; stages record the engine.

The probe runs vLLM for real (its CPU build, installed by ``make test``); the failing cases put a
broken ``vllm`` package first on the child's path, the way a wheel built for another instruction
set or a hung engine looks to the set-up."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from interlock.core.backend import releasing
from interlock.core.config import GenerationConfig
from interlock.models import engine
from interlock.models.backends import make_backend, model_runtime

from helpers.config import defaults

VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not VLLM, reason="vllm is not installed (`make vllm`)")


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The venv's record moved to a temporary file, the per-process answer forgotten."""
    path = tmp_path / "interlock-engine.json"
    monkeypatch.setattr(engine, "RECORD", path)
    engine.auto_engine.cache_clear()
    yield path
    engine.auto_engine.cache_clear()


def broken_vllm(folder: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``vllm`` package whose import runs ``body``, first on the probe child's path."""
    package = folder / "broken" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(body)
    monkeypatch.setenv("PYTHONPATH", f"{package.parent}:{Path.cwd() / 'src'}")


@needs_vllm
def test_probe_takes_vllm_where_it_answers_a_request(record: Path) -> None:
    choice = engine.probe()
    assert choice.engine == "vllm", choice.reason
    assert "answered a probe request" in choice.reason and choice.key == engine.machine_key()
    engine.write(choice)
    assert engine.recorded() == choice


def test_probe_falls_back_where_vllm_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # what find_spec reports for a missing module
    choice = engine.probe()
    assert (choice.engine, choice.reason) == ("transformers", f"vllm is not installed; {engine.INSTALL_HINT}")
    assert choice.line().startswith("decoding engine for backbone.backend=auto: transformers (")


@needs_vllm
def test_probe_falls_back_where_vllm_installs_but_crashes(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    broken_vllm(tmp_path, "raise SystemExit('vllm built for another CPU')\n", monkeypatch)
    choice = engine.probe()
    assert choice.engine == "transformers"
    assert choice.reason == "vllm is installed but failed a probe request: vllm built for another CPU"


@needs_vllm
def test_probe_falls_back_where_vllm_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken_vllm(tmp_path, "import time\ntime.sleep(60)\n", monkeypatch)
    choice = engine.probe(timeout_s=3)
    assert choice.engine == "transformers"
    assert choice.reason == "vllm did not answer a probe request within 3 s"


def test_a_record_for_another_machine_is_not_used(record: Path) -> None:
    engine.write(engine.EngineChoice("vllm", "probed elsewhere", "0" * 16))
    assert engine.recorded() is None
    engine.write(engine.EngineChoice("transformers", "probed here", engine.machine_key()))
    assert engine.recorded() == engine.EngineChoice("transformers", "probed here", engine.machine_key())
    record.write_text("{not json")
    assert engine.recorded() is None


@pytest.mark.parametrize("chosen", ["transformers", pytest.param("vllm", marks=needs_vllm)])
def test_auto_builds_and_records_the_engine_this_machine_chose(chosen: str, record: Path,
                                                               tiny_checkpoint: Path) -> None:
    engine.write(engine.EngineChoice(chosen, "chosen by the test", engine.machine_key()))
    backbone = defaults("backbone=tiny").backbone.replace(
        weights={"source": "pretrained", "model": str(tiny_checkpoint)}, backend="auto", max_context=1024,
        generation=GenerationConfig(temperature=0.0, max_new_tokens=8))
    runtime = model_runtime(backbone, "generate", tiny_checkpoint)
    assert (runtime["backend"], runtime["engine"], runtime["resolved_dtype"]) == ("auto", chosen, "float32")
    with releasing(make_backend(backbone, tiny_checkpoint)) as backend:
        assert backend.name == chosen
