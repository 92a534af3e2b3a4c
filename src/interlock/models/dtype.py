"""The dtype a model computes in, chosen by measuring this machine rather than believing a rule.

Whether bf16 pays on a CPU depends on the CPU: one 2-core machine of this project's class ran
bf16 about 100x slower than fp32, another (AMX) 5-20x faster, a third (AVX512-BF16, no AMX)
faster on prefill-sized products and slower on single decode rows. ``backbone.dtype: auto``
therefore times both on the shapes the model's work has (the checkpoint's hidden and MLP sizes;
decode rows of a batch of episodes and a chunk of prefill for generation, a packed row forward
and backward for training) and takes bf16 only where it is faster by a margin. On a GPU, ``auto``
is bf16 where the device supports it.

The probe takes a second or two and its answer is kept per machine (CPU model and flags, torch
version and thread count, the shapes) in ``$XDG_CACHE_HOME/interlock/dtype-probe.json``, so
every stage on one machine resolves ``auto`` the same way. Everything that runs a model resolves
it through :func:`interlock.models.backends.model_runtime`: the transformers and vllm backends
(and the intervention scorer) when they load, for ``generate``; the trainer for ``train``, where
bf16 means autocast over fp32 weights (:mod:`interlock.training.trainer`). The record that
function returns (backend, configured and resolved dtype) goes into the metrics and the W&B config
of every stage that runs a model, and training's compute dtype into the checkpoint's manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from interlock.core.errors import InterlockError
from interlock.core.io import atomic_output

DTYPES = ("float32", "bfloat16", "float16")
WORKLOADS = ("generate", "train")
#: bf16 is taken only when it is at least this much faster (timing noise must not flip it)
MARGIN = 1.15
#: rows of the shapes timed: a decode step over a batch of episodes, a prefill chunk, a packed row
DECODE_ROWS, PREFILL_ROWS, TRAIN_ROWS = 32, 256, 512


@dataclass(frozen=True)
class Probe:
    """Seconds per row of each dtype on one workload's shapes, and what ``auto`` made of them."""

    workload: str
    float32_s: float
    bfloat16_s: float
    chosen: str

    @property
    def speedup(self) -> float:
        """How many times faster bf16 ran than fp32 (below 1: slower)."""
        return self.float32_s / self.bfloat16_s


def cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "interlock" / "dtype-probe.json"


def machine_key(hidden: int, intermediate: int) -> str:
    """What the probe's answer depends on: the CPU, torch, its threads and the shapes."""
    import torch

    cpu = platform.processor()
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        cpu = next((line for line in info.splitlines() if line.startswith("model name")), cpu)
        cpu += next((line for line in info.splitlines() if line.startswith("flags")), "")
    except OSError:
        pass
    parts = [cpu, torch.__version__, str(torch.get_num_threads()), str(hidden), str(intermediate)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _seconds_per_row(step, rows: int, budget_s: float) -> float:
    step()  # warm-up: kernels chosen, memory touched
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s and calls >= 3:
            return elapsed / calls / rows


def measure(workload: str, hidden: int, intermediate: int, budget_s: float = 0.15) -> Probe:
    """Time fp32 against bf16 on ``workload``'s shapes, alternating so load hits both alike."""
    import torch

    if workload not in WORKLOADS:
        raise InterlockError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}",
                             field="workload")
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(hidden, intermediate, generator=generator) / hidden ** 0.5,
               torch.randn(intermediate, hidden, generator=generator) / intermediate ** 0.5]

    def steps(dtype):
        w = [x.to(dtype) for x in weights]
        if workload == "generate":
            shapes = [torch.randn(rows, hidden, generator=generator).to(dtype)
                      for rows in (DECODE_ROWS, PREFILL_ROWS)]
            return [(lambda x=x: (x @ w[0]) @ w[1], x.shape[0]) for x in shapes]
        trained = [x.clone().requires_grad_(True) for x in weights]
        x = torch.randn(TRAIN_ROWS, hidden, generator=generator)

        def train_step():  # fp32 weights under autocast, as the trainer runs them
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                loss = ((x @ trained[0]) @ trained[1]).float().square().mean()
            loss.backward()
        return [(train_step, TRAIN_ROWS)]

    totals = {torch.float32: 0.0, torch.bfloat16: 0.0}
    plans = {dtype: steps(dtype) for dtype in totals}
    with torch.inference_mode(workload == "generate"):
        for _ in range(2):
            for dtype, plan in plans.items():
                totals[dtype] += sum(_seconds_per_row(step, rows, budget_s) for step, rows in plan)
    fp32, bf16 = totals[torch.float32], totals[torch.bfloat16]
    return Probe(workload, fp32, bf16, "bfloat16" if fp32 >= MARGIN * bf16 else "float32")


def probe(workload: str, hidden: int, intermediate: int) -> Probe:
    """:func:`measure`, once per machine and shapes: later calls read the cached answer."""
    path, key = cache_file(), f"{workload}:{machine_key(hidden, intermediate)}"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cached = {}
    entry = cached.get(key) if isinstance(cached, dict) else None
    if isinstance(entry, dict) and set(entry) == {"workload", "float32_s", "bfloat16_s", "chosen"} \
            and entry["chosen"] in ("float32", "bfloat16"):
        return Probe(**entry)
    found = measure(workload, hidden, intermediate)
    cached = {**(cached if isinstance(cached, dict) else {}), key: asdict(found)}
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True), encoding="utf-8")
    return found


def resolve_dtype(requested: str, workload: str, checkpoint: Path | str | None = None, *,
                  device: str = "cpu") -> str:
    """The dtype to compute in: ``requested`` itself unless it is ``auto``; then bf16 on a GPU
    that supports it, and on a CPU what :func:`probe` measured faster for ``workload`` at the
    checkpoint's sizes (its ``config.json``)."""
    if requested in DTYPES:
        return requested
    if requested != "auto":
        raise InterlockError(f"unknown dtype {requested!r}; one of auto, {', '.join(DTYPES)}",
                             field="backbone.dtype")
    import torch

    if device != "cpu":
        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    hidden, intermediate = 576, 1536  # SmolLM2-135M's, where no checkpoint is named
    if checkpoint is not None:
        config_path = Path(checkpoint) / "config.json"
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            hidden, intermediate = int(config["hidden_size"]), int(config["intermediate_size"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InterlockError(f"cannot read the model's sizes: {error}", file=str(config_path),
                                 field="hidden_size") from None
    return probe(workload, hidden, intermediate).chosen
