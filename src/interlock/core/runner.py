"""The stage runner: what every stage script shares.

``stages/<name>.py`` is ``run_stage("<name>", <package>.stage.<function>)``. The runner reads
``params.yaml`` and holds the stage to what its entry in ``dvc.yaml`` declares: it hands the stage
only the declared parameters (a :class:`ParamsView`) and lets it read only the declared package
data (:mod:`interlock.core.resources`); anything else is an error, so a stage cannot depend on
something DVC does not re-run it for. It times the stage, writes the numbers the stage reports to
its metrics file with what it resolved as it ran (the backend and dtype of its model), logs both
to W&B, and turns bad input into one clear line on stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import BaseModel
from tqdm import tqdm

from interlock.core.config import Params, load_params
from interlock.core.errors import InterlockError
from interlock.core.io import write_json
from interlock.core.paths import Paths
from interlock.core.resources import guarded
from interlock.core.tracking import LoggedRun, StageReport, log_stage

#: a stage's library side: its parameters (what it declared), the pipeline's paths; what it
#: measured, or None for a stage that reports no numbers
Stage = Callable[[Params, Paths], StageReport | None]


def main_process() -> bool:
    """Whether this process is the main one of its stage (rank 0 of a launch such as ``accelerate
    launch`` or ``torchrun``; the only one where the stage runs as one process): it alone writes
    what the stage writes once (the checkpoint, metrics, timing, W&B run)."""
    return int(os.environ.get("RANK", "0")) == 0


def task_progress(total: int, stage: str) -> tqdm:
    """A progress bar over the tasks a stage streams."""
    return tqdm(total=total, desc=stage, unit="task", mininterval=1.0, dynamic_ncols=True)


class StageTimer:
    """Wall time of a stage, written to a metrics file that no later stage reads."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> StageTimer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None and main_process():
            write_json(self.path, {"seconds": round(time.perf_counter() - self.start, 3)})


class ParamsView:
    """The parameters one stage declared in ``dvc.yaml`` (``params:``), and nothing else.

    Attribute access walks the composed parameters; a key the stage declared (``scale.rollouts``)
    gives the value itself, with everything under it; a key above declared ones (``scale``) gives
    another view; anything else raises an :class:`InterlockError` naming the stage and the key, so
    every parameter a stage reads is one DVC re-runs it for."""

    def __init__(self, value: BaseModel, declared: Iterable[str], stage: str, prefix: str = "") -> None:
        self._value, self._declared, self._stage, self._prefix = value, frozenset(declared), stage, prefix

    def __getattr__(self, name: str) -> Any:
        key = f"{self._prefix}{name}"
        cls = type(self._value)
        if name not in cls.model_fields:
            own = next((vars(c)[name] for c in cls.__mro__ if name in vars(c)), None)
            if callable(own) and own not in vars(BaseModel).values():
                return own.__get__(self)  # a method of the config runs on the view: its reads are checked
            whole = self._prefix.rstrip(".") or "the parameters"
            raise InterlockError(f"stage {self._stage} reads {whole} as a whole ({name}), but declares "
                                 f"only some of it in dvc.yaml: {', '.join(sorted(self._declared))}",
                                 file="dvc.yaml", item=self._stage, field=f"{key}")
        value = getattr(self._value, name)
        if key in self._declared or any(key.startswith(f"{d}.") for d in self._declared):
            return value
        if isinstance(value, BaseModel) and any(d.startswith(f"{key}.") for d in self._declared):
            return ParamsView(value, self._declared, self._stage, f"{key}.")
        raise InterlockError(f"stage {self._stage} reads {key}, which its params in dvc.yaml do not "
                             f"declare (a change to it would not re-run the stage)", file="dvc.yaml",
                             item=self._stage, field=key)


@dataclass(frozen=True)
class Declared:
    """What one stage's entry in ``dvc.yaml`` declares: the ``params.yaml`` keys it reads and its
    dependencies as written (templated paths unresolved)."""

    stage: str
    params: tuple[str, ...]
    deps: tuple[str, ...]

    @classmethod
    def read(cls, stage: str, pipeline: Path = Path("dvc.yaml")) -> Declared:
        try:
            stages = yaml.safe_load(pipeline.read_text(encoding="utf-8"))["stages"]
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            raise InterlockError(f"cannot read the pipeline ({exc})", file=str(pipeline)) from None
        if stage not in stages:
            raise InterlockError(f"no stage {stage!r}", file=str(pipeline))
        keys = []
        for entry in stages[stage].get("params") or []:
            if isinstance(entry, str):
                keys.append(entry)
            elif isinstance(entry, dict) and list(entry) == ["params.yaml"]:
                keys += entry["params.yaml"]
            else:
                raise InterlockError(f"parameters must come from params.yaml, not {entry}",
                                     file=str(pipeline), item=stage, field="params")
        return cls(stage, tuple(keys), tuple(str(dep) for dep in stages[stage].get("deps") or []))

    def check_resource(self, path: Path) -> None:
        """A stage reads package data only where ``dvc.yaml`` lists it among its dependencies."""
        if not any(path == (Path.cwd() / dep).resolve() for dep in self.deps):
            raise InterlockError(f"stage {self.stage} reads {path.name}, which its deps in dvc.yaml do "
                                 f"not list (a change to it would not re-run the stage)",
                                 file="dvc.yaml", item=self.stage, field="deps")


def run_stage(name: str, stage: Stage) -> None:
    """Run one stage as DVC does: read params, call ``stage`` timed, write its metrics, track it.

    Bad input exits with one clear line, no traceback. A W&B failure never fails the stage: it
    prints one warning line and the stage still exits 0. The stage's outputs and its DVC metrics
    are the record; W&B is a copy of them for browsing. A non-zero exit would make DVC drop the
    stage's result (no dvc.lock entry, nothing cached), and a queued experiment would lose its
    temporary workspace, and with it hours of rollouts or training, over an unreachable server or
    a full disk.
    """
    try:
        params = load_params()
        declared = Declared.read(name)
        view = cast(Params, ParamsView(params, declared.params, name))
        paths = params.paths
        with StageTimer(paths.timing_of(name)), guarded(declared.check_resource):
            report = stage(view, paths)
            if report is not None:
                write_json(paths.metrics_of(name), report.record)
    except InterlockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    if report is not None:
        track(params, name, report)


def track(params: Params, name: str, report: StageReport) -> LoggedRun | None:
    """Log ``report`` to W&B (outside the timer: ``metrics/timing`` measures the stage, not the
    logging); on any failure print one warning line and return None."""
    try:
        logged = log_stage(params, name, report)
    except Exception as exc:  # tracking must never cost the stage its outputs
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"warning: {name}: W&B tracking failed ({type(exc).__name__}: {reason}); the stage's "
              f"outputs and DVC metrics are kept", file=sys.stderr)
        return None
    if logged is not None:
        print(f"{name}: W&B run written to {logged.dir}")
    return logged
