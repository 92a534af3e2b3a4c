"""The dtype probe's cache as a test sets it: what ``auto`` resolves to, without timing this CPU."""

from __future__ import annotations

import json
from pathlib import Path

from interlock.models.dtype import cache_file, checkpoint_architecture, machine_key


def probe_key(checkpoint: Path, workload: str) -> str:
    """The cache entry's key for ``workload`` with ``checkpoint``'s architecture on this machine."""
    return f"{workload}:{machine_key(checkpoint_architecture(checkpoint))}"


def pretend_measured(checkpoint: Path, workload: str, chosen: str) -> None:
    """Write the cache entry a probe choosing ``chosen`` would have written (``$XDG_CACHE_HOME``
    must point at the test's own folder)."""
    path = cache_file()
    stored = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    bf16 = chosen == "bfloat16"
    stored[probe_key(checkpoint, workload)] = {"workload": workload, "float32_s": 2.0 if bf16 else 1.0,
                                               "bfloat16_s": 1.0 if bf16 else 2.0, "chosen": chosen}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored), encoding="utf-8")
