"""W&B tracking for the stages that produce numbers.

A stage returns a :class:`StageReport`; the stage runner (:mod:`interlock.core.runner`) hands it to
:func:`log_stage` after the stage's outputs are written. One W&B run per stage execution:

- ``project`` / ``entity`` from ``params.tracking``;
- ``group`` = the study: ``tracking.group`` if set, else ``$DVC_EXP_NAME``, else ``workspace``;
- ``name`` = ``{experiment}-{stage}`` (experiment = ``$DVC_EXP_NAME`` or ``workspace``);
- ``job_type`` = the stage (``$DVC_STAGE``, else the stage's name);
- ``config`` = the composed params, and beside them what the stage resolved as it ran (the
  report's ``config``: e.g. the backend and dtype that computed its model, ``runtime``); summary =
  the report's metrics, flattened to ``a/b/c`` keys (numbers and booleans only); each report table
  becomes a ``wandb.Table`` of the same name.

Mode: ``$WANDB_MODE`` if set, else ``tracking.mode`` (``offline`` by default). ``disabled`` logs
nothing and never imports wandb. Runs are written under :func:`wandb_dir`, which stays in the
original repository even when DVC runs a queued experiment in a temporary workspace
(``<repo>/.dvc/tmp/exps/tmpXXXX``, deleted once the experiment is collected), so offline runs
survive until ``wandb sync`` uploads them.

Nothing here reads a run back from disk: offline, W&B (0.31) keeps a run's config and summary only
in its ``.wandb`` transaction log, a private format, and writes no ``files/config.yaml`` or
``files/wandb-summary.json`` (wandb/wandb#9646), and ``wandb.Api`` needs a server. What a run logged
is taken from the live run through W&B's public ``Run`` properties (:class:`LoggedRun`); the stage's
metrics file (``metrics/<stage>.json``) is the record to read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Number
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.errors import InterlockError

if TYPE_CHECKING:
    from interlock.core.config import Params, TrackingConfig

WORKSPACE = "workspace"  # the experiment name outside `dvc exp run` (a plain `dvc repro`)
_MODE_ALIASES = {"dryrun": "offline", "run": "online"}  # what wandb itself accepts in WANDB_MODE


@dataclass(frozen=True)
class LoggedRun:
    """What one W&B run logged, as W&B's public ``Run`` properties give it just before the run
    finishes: its local folder (``offline-run-<time>-<id>`` in offline mode, holding the
    ``run-<id>.wandb`` log that ``wandb sync`` uploads), ids and names, ``config`` (without W&B's
    own ``_wandb`` key) and ``summary_keys`` (every key of its summary, the tables' too; W&B's own
    ``_`` keys left out). The summary's values are not read back: each read of one copies the
    whole summary, and they are the stage's metrics file's (``metrics/<stage>.json``) anyway."""

    dir: Path
    id: str
    project: str
    name: str
    group: str
    job_type: str
    config: dict[str, Any]
    summary_keys: frozenset[str]


@dataclass(frozen=True)
class StageReport:
    """What a stage hands to tracking: summary metrics and optional tables.

    ``metrics`` is what the stage measured. It may nest (``{"rft": {"admitted": 3}}`` is logged as
    ``rft/admitted``); only numbers (and booleans) go to the W&B summary. ``tables`` maps a table
    name to its rows, one dict per row (e.g. per-domain or per-benchmark results; a key missing
    from a row is None there); each becomes a ``wandb.Table``, and a metrics key of the same name
    is left out of the summary (one table, not hundreds of summary keys).

    ``config`` is what the stage resolved as it ran that its parameters do not say: which backend
    and dtype computed its model (``{"runtime": ...}``,
    :func:`~interlock.models.backends.model_runtime`; None where no model ran), so two runs that
    differ only in it can be told apart. It joins the composed params in the W&B run's config, and
    the metrics in the stage's metrics file (``metrics/<stage>.json``: :attr:`record`), under keys
    of its own.
    """

    metrics: dict
    tables: dict[str, list[dict]] = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.config.keys() & self.metrics.keys():
            raise ValueError(f"config keys {sorted(self.config.keys() & self.metrics.keys())} are "
                             f"metrics keys too")

    @property
    def record(self) -> dict:
        """What the stage's metrics file holds: the metrics, then the config."""
        return {**self.metrics, **self.config}


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


def _logged(run) -> LoggedRun:
    """The public properties of a live W&B run, before ``finish()`` empties its summary."""
    config, summary = run.config, list(run.summary.keys())  # a Summary does not iterate
    return LoggedRun(dir=Path(run.settings.sync_dir), id=run.id, project=run.project, name=run.name,
                     group=run.group, job_type=run.job_type,
                     config={key: config[key] for key in list(config.keys()) if key != "_wandb"},
                     summary_keys=frozenset(key for key in summary if not key.startswith("_")))


def log_stage(params: Params, stage: str, report: StageReport | None, *,
              cwd: Path | None = None) -> LoggedRun | None:
    """Log one stage's report as one W&B run; return what it logged (None when disabled).

    In ``offline`` mode the run's folder is ``<wandb_dir>/offline-run-<time>-<id>``, uploaded by
    ``wandb sync``; it is complete when this returns. Errors from W&B propagate: the caller decides
    whether they fail the stage (the stage runner does not). It ends with ``wandb.teardown()``,
    which also finishes any other W&B run the process left open: a stage that logs its own run
    (e.g. training curves) finishes it before returning its report.
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
                     config={**params.model_dump(mode="json"), **report.config}, dir=str(base),
                     settings=_settings(mode), reinit="create_new")
    exit_code = 1
    try:
        run.summary.update(flatten_metrics({key: value for key, value in report.metrics.items()
                                            if key not in report.tables}))
        if report.tables:
            run.log({name: _table(rows) for name, rows in report.tables.items()})
        logged = _logged(run)
        exit_code = 0
    finally:
        # finish() can return before W&B's service has written the whole log to disk; teardown
        # waits for that (and stops the service, as the stage's exit would anyway)
        run.finish(exit_code=exit_code)
        try:
            wandb.teardown()
        except SystemExit as exc:  # W&B exits when its service process failed: report it instead
            raise RuntimeError(f"the W&B service process exited with code {exc.code}") from None
    return logged
