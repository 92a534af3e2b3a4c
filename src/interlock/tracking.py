"""W&B tracking for the stages that produce numbers.

A stage's ``main`` returns a :class:`StageReport`; ``stages/common.py`` hands it to
:func:`log_stage` after the stage's outputs are written. One W&B run per stage execution:

- ``project`` / ``entity`` from ``params.tracking``;
- ``group`` = the study: ``tracking.group`` if set, else ``$DVC_EXP_NAME``, else ``workspace``;
- ``name`` = ``{experiment}-{stage}`` (experiment = ``$DVC_EXP_NAME`` or ``workspace``);
- ``job_type`` = the stage (``$DVC_STAGE``, else the stage's name);
- ``config`` = the composed params; summary = the report's metrics, flattened to ``a/b/c`` keys
  (numbers and booleans only); each report table becomes a ``wandb.Table`` of the same name.

Mode: ``$WANDB_MODE`` if set, else ``tracking.mode`` (``offline`` by default). ``disabled`` logs
nothing and never imports wandb. Runs are written under :func:`wandb_dir`, which stays in the
original repository even when DVC runs a queued experiment in a temporary workspace
(``<repo>/.dvc/tmp/exps/tmpXXXX``, deleted once the experiment is collected), so offline runs
survive until ``wandb sync`` uploads them. :func:`read_offline_run` reads a run back from disk
(its ``.wandb`` transaction log), with no W&B account or server.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from numbers import Number
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.errors import InterlockError

if TYPE_CHECKING:
    from interlock.config import Params, TrackingConfig

WORKSPACE = "workspace"  # the experiment name outside `dvc exp run` (a plain `dvc repro`)
_MODE_ALIASES = {"dryrun": "offline", "run": "online"}  # what wandb itself accepts in WANDB_MODE


@dataclass(frozen=True)
class StageReport:
    """What a stage hands to tracking: summary metrics and optional tables.

    ``metrics`` may nest (``{"rft": {"admitted": 3}}`` is logged as ``rft/admitted``); only numbers
    (and booleans) are logged. ``tables`` maps a table name to its rows, one dict per row (e.g.
    per-domain or per-benchmark results; a key missing from a row is None there); each becomes a
    ``wandb.Table``.
    """

    metrics: dict
    tables: dict[str, list[dict]] = field(default_factory=dict)


# --- what a run is called and where it goes ------------------------------------------------------

def experiment_name(env: Mapping[str, str] | None = None) -> str:
    """The DVC experiment this process runs in (``$DVC_EXP_NAME``), else ``workspace``."""
    env = os.environ if env is None else env
    return env.get("DVC_EXP_NAME") or WORKSPACE


def tracking_mode(config: TrackingConfig, env: Mapping[str, str] | None = None) -> str:
    """``offline``, ``online`` or ``disabled``: ``$WANDB_MODE`` wins over ``tracking.mode``."""
    env = os.environ if env is None else env
    if str(env.get("WANDB_DISABLED", "")).lower() in ("1", "true", "yes"):
        return "disabled"
    mode = (env.get("WANDB_MODE") or "").strip().lower() or config.mode
    mode = _MODE_ALIASES.get(mode, mode)
    if mode not in ("offline", "online", "disabled"):
        raise InterlockError(f"WANDB_MODE={mode!r}: expected offline, online or disabled",
                             field="tracking.mode")
    return mode


def repository_root(cwd: Path, env: Mapping[str, str] | None = None) -> Path:
    """The original repository's root, also from inside a DVC temporary workspace.

    Queued experiments (``dvc exp run --queue`` + ``dvc queue start``, or ``--temp``) run in
    ``<repo>/.dvc/tmp/exps/tmpXXXX/``, a throwaway clone: if ``cwd`` (or ``$DVC_ROOT``) lies under a
    ``.dvc/tmp/exps`` folder, the root is the folder holding that ``.dvc``. Otherwise it is
    ``$DVC_ROOT`` (DVC sets it for every stage; for queued runs recent DVC points it at the parent
    repository already), else ``cwd``.
    """
    env = os.environ if env is None else env
    candidates = [Path(cwd).resolve()]
    if env.get("DVC_ROOT"):
        candidates.append(Path(env["DVC_ROOT"]).resolve())
    for path in candidates:
        parts = path.parts
        for i in range(len(parts) - 2):
            if parts[i:i + 3] == (".dvc", "tmp", "exps"):
                return Path(*parts[:i])
    return candidates[-1]


def wandb_dir(config: TrackingConfig, cwd: Path, env: Mapping[str, str] | None = None) -> Path:
    """The folder the W&B runs are written into (``offline-run-*`` / ``run-*`` folders).

    ``tracking.dir`` is what ``wandb.init(dir=...)`` gets: W&B writes its ``wandb/`` folder inside
    it (a relative path is taken from the repository root). Null: ``$WANDB_DIR`` if set, else the
    repository root (:func:`repository_root`), so runs go to ``<repository root>/wandb``.
    """
    env = os.environ if env is None else env
    root = repository_root(cwd, env)
    if config.dir:
        base = Path(config.dir).expanduser()
        base = base if base.is_absolute() else root / base
    elif env.get("WANDB_DIR"):
        base = Path(env["WANDB_DIR"]).expanduser().resolve()
    else:
        base = root
    return base / "wandb"


# --- logging -------------------------------------------------------------------------------------

def flatten_metrics(metrics: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to ``a/b/c`` keys; numbers (NaN too) and booleans only: strings, lists and None
    are dropped."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, f"{name}/"))
        elif isinstance(value, bool):
            flat[name] = value
        elif isinstance(value, Number) and not isinstance(value, complex):
            flat[name] = value.item() if hasattr(value, "item") else value  # numpy scalars to Python
    return flat


def _table(rows: list[dict]):
    import wandb

    columns = list(dict.fromkeys(key for row in rows for key in row))  # every row's keys, in order
    return wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in rows])


def _settings(mode: str):
    """Settings that keep one stage's logging to about a second: no console capture, no system
    stats sampling, no machine or git metadata scan, no code or requirements upload."""
    import wandb

    return wandb.Settings(mode=mode, silent=True, console="off", x_disable_stats=True,
                          x_disable_meta=True, x_disable_machine_info=True, save_code=False,
                          x_save_requirements=False, disable_job_creation=True)


def log_stage(params: Params, stage: str, report: StageReport | None, *,
              cwd: Path | None = None) -> Path | None:
    """Log one stage's report as one W&B run; return the run's local folder (None when disabled).

    In ``offline`` mode the folder is ``<wandb_dir>/offline-run-<time>-<id>``, read back by
    :func:`read_offline_run` and uploaded by ``wandb sync``; it is complete when this returns.
    Errors from W&B propagate: the caller decides whether they fail the stage
    (``stages/common.py`` does not). It ends with ``wandb.teardown()``, which also finishes any
    other W&B run the process left open: a stage that logs its own run (e.g. training curves)
    finishes it before returning its report.
    """
    config = params.tracking
    mode = tracking_mode(config)
    if mode == "disabled" or report is None:
        return None
    import wandb

    experiment = experiment_name()
    base = wandb_dir(config, Path.cwd() if cwd is None else cwd).parent
    base.mkdir(parents=True, exist_ok=True)  # W&B falls back to a temp dir if it cannot write here
    run = wandb.init(project=config.project, entity=config.entity,
                     group=config.group or experiment, name=f"{experiment}-{stage}",
                     job_type=os.environ.get("DVC_STAGE") or stage,
                     config=params.model_dump(mode="json"), dir=str(base),
                     settings=_settings(mode), reinit="create_new")
    exit_code = 1
    try:
        run.summary.update(flatten_metrics(report.metrics))
        if report.tables:
            run.log({name: _table(rows) for name, rows in report.tables.items()})
        exit_code = 0
    finally:
        # finish() can return before W&B's service has written the whole log to disk; teardown
        # waits for that (and stops the service, as the stage's exit would anyway)
        run.finish(exit_code=exit_code)
        try:
            wandb.teardown()
        except SystemExit as exc:  # W&B exits when its service process failed: report it instead
            raise RuntimeError(f"the W&B service process exited with code {exc.code}") from None
    return Path(run.settings.sync_dir)


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
