"""W&B offline runs read back from disk (their ``.wandb`` transaction log), with no W&B account or
server: what a notebook uses to look at a stage's logged run, and how the tests check what the
stages logged.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interlock.core.errors import InterlockError

# --- reading an offline run back -----------------------------------------------------------------

# The transaction log (``run-<id>.wandb``) is a LevelDB-style log: a 7-byte file header
# (b":W&B", magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each with a 7-byte header
# (CRC-32 of type byte + data, length, type: full / first / middle / last); a chunk header never
# straddles a block, the block's tail is zero padding instead. Each record is a protobuf ``Record``.
_BLOCK, _HEADER = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _log_records(data: bytes, path: Path) -> Iterator[bytes]:
    ident, magic, version = struct.unpack_from("<4sHB", data, 0)
    if ident != b":W&B" or magic != 0xBEE1 or version != 0:
        raise InterlockError("not a W&B transaction log", file=str(path))
    pos, pending = _HEADER, None
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:  # padding at a block's end
            pos += _BLOCK - pos % _BLOCK
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, pos)
        if length == 0 and kind == 0:  # zeroed tail (a run still being written)
            break
        chunk = data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            break  # a torn last record: keep what came before
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind in (_MIDDLE, _LAST) and pending is not None:
            pending += chunk
            if kind == _LAST:
                yield pending
                pending = None


def _json(text: str) -> Any:
    return json.loads(text) if text else None


def _history_value(item) -> Any:
    if item.value_json:
        return json.loads(item.value_json)
    kind = item.WhichOneof("value")  # typed values (newer W&B clients)
    if kind in (None, "none"):
        return None
    return json.loads(item.json) if kind == "json" else getattr(item, kind)


def _set(target: dict, item, value: Any) -> None:
    keys = list(item.nested_key) or [item.key]
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value


def read_offline_run(run_dir: Path | str) -> dict:
    """A run folder (``offline-run-*`` or ``run-*``) read back from its ``.wandb`` file.

    Returns ``id``, ``name``, ``group``, ``job_type``, ``project``, ``entity``, ``config`` (as
    logged, without W&B's own ``_wandb`` key), ``summary`` (the last value of every key; tables
    are not in it) and ``tables`` (name -> list of row dicts, read from the run's media files).
    """
    from wandb.proto import wandb_internal_pb2 as pb

    run_dir = Path(run_dir)
    logs = sorted(run_dir.glob("run-*.wandb"))
    if not logs:
        raise InterlockError("no W&B transaction log (run-*.wandb) in the run folder", file=str(run_dir))
    path = logs[0]
    out: dict[str, Any] = {"id": None, "name": None, "group": None, "job_type": None,
                           "project": None, "entity": None, "config": {}, "summary": {}, "tables": {}}
    summary: dict[str, Any] = {}
    for raw in _log_records(path.read_bytes(), path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            out.update(id=run.run_id, name=run.display_name, group=run.run_group,
                       job_type=run.job_type, project=run.project, entity=run.entity or None)
            for item in run.config.update:
                _set(out["config"], item, _json(item.value_json))
            for item in run.summary.update:
                _set(summary, item, _json(item.value_json))
        elif kind == "config":
            for item in record.config.update:
                _set(out["config"], item, _json(item.value_json))
        elif kind == "history":
            for item in record.history.item:  # the summary is the last value of every key
                _set(summary, item, _history_value(item))
        elif kind == "summary":
            for item in record.summary.update:
                _set(summary, item, _json(item.value_json))
            for item in record.summary.remove:
                summary.pop(item.key, None)
    out["config"].pop("_wandb", None)
    for key, value in list(summary.items()):
        if key.startswith("_"):
            summary.pop(key)
        elif isinstance(value, dict) and value.get("_type") == "table-file":
            table = json.loads((run_dir / "files" / value["path"]).read_text())
            out["tables"][key] = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
            summary.pop(key)
    out["summary"] = summary
    return out
