"""Seeds derived from names: every stage, task and episode draws its own, the same on every run
and machine, from the master ``seed``."""

from __future__ import annotations

import hashlib


def stable_seed(*parts: object) -> int:
    """A seed from names, identical across runs and machines (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "big") >> 1
