"""Where the pipeline's artifacts, metrics and plots live.

The paths are written once, in ``conf/paths/default.yaml``: DVC's Hydra integration composes them
into ``params.yaml``, ``dvc.yaml`` templates its deps and outs from them (``${paths.packs}``), and
the library reads the same values through :class:`Paths`, so the pipeline and the code that
writes its artifacts cannot disagree about a path. Inside an artifact folder the layout is the
library's own (``trajectories.parquet``, ``verdicts.parquet``, ...; see :mod:`interlock.core.schemas`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from interlock.core.errors import InterlockError


class MissingArtifacts(InterlockError):
    """An artifact the reader needs has not been produced yet."""


class Paths(BaseModel):
    """Every path of the pipeline (relative to the repository root, as ``params.yaml`` has them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: Path  # every artifact, tracked by DVC
    domains: Path
    blueprints: Path
    graphs: Path
    packs: Path
    author_timings: Path  # measured seconds of the model authors' calls (generator=llm)
    review: Path
    grown: Path  # recursive synthesis (``synthesis=rst``): the children and their lineage
    models: Path  # checkpoints: models/base, models/demo_sft, models/rft/seed-k
    demos: Path
    rollouts: Path
    trajectories: Path  # the rollouts' table, inside ``rollouts``
    rollout_timings: Path
    rollouts_work: Path  # resumable parts of an unfinished rollouts stage
    judge: Path
    accepted: Path
    interventions: Path  # rollout-time intervention (``intervention=rti``)
    interventions_work: Path  # resumable corrections of an unfinished intervene stage
    training_set: Path
    evaluation: Path
    evaluation_timings: Path
    evaluation_work: Path  # resumable runs of an unfinished evaluate stage
    rl_work: Path  # the rl stage's resumable trainer checkpoints and step log
    metrics: Path  # one ``<stage>.json`` per stage that reports numbers
    transfer: Path  # the headline of the evaluation: what a comparison of runs leads with
    timing: Path  # one ``<stage>.json`` per stage: its seconds (no stage reads them)
    plots: Path
    accept_plot: Path
    demo_sft_loss: Path
    train_loss: Path  # a folder: one loss curve per RFT seed
    grow_similarity_plot: Path
    intervene_domains_plot: Path
    intervene_nll_plot: Path  # a folder: the NLL histograms of accepted turns and corrections, the threshold
    evaluate_models_plot: Path
    evaluate_domains_plot: Path
    rl_plot: Path  # a folder: one TSV (step, value) per series

    # ------------------------------------------------------------------------- derived

    def model(self, name: str) -> Path:
        """A checkpoint folder: ``base``, ``demo_sft``, ``rft`` (its seeds inside)."""
        return self.models / name

    @property
    def base_model(self) -> Path:
        return self.model("base")

    @property
    def validation(self) -> Path:
        """The review's validation rollouts (a scripted noisy solver, or the starting policy)."""
        return self.review / "validation.parquet"

    @property
    def admitted(self) -> Path:
        return self.review / "admitted.parquet"

    @property
    def grown_blueprints(self) -> Path:
        return self.grown / "blueprints.parquet"

    @property
    def grown_graphs(self) -> Path:
        return self.grown / "graphs"

    @property
    def grown_packs(self) -> Path:
        return self.grown / "packs"

    @property
    def lineage(self) -> Path:
        return self.grown / "lineage.parquet"

    @property
    def verdicts(self) -> Path:
        """The review's per-task verdicts."""
        return self.review / "verdicts.parquet"

    @property
    def judgements(self) -> Path:
        """Both judges' verdicts on the rollouts (``agent``, ``text``, ``collateral``)."""
        return self.judge / "rollouts"

    @property
    def calibration(self) -> Path:
        """Both judges' verdicts on the review's validation rollouts (known completion gap)."""
        return self.judge / "calibration"

    @property
    def accepted_table(self) -> Path:
        return self.accepted / "trajectories.parquet"

    @property
    def interventions_table(self) -> Path:
        return self.interventions / "interventions.parquet"

    @property
    def training_table(self) -> Path:
        return self.training_set / "trajectories.parquet"

    @property
    def demos_table(self) -> Path:
        return self.demos / "trajectories.parquet"

    def metrics_of(self, stage: str) -> Path:
        return self.metrics / f"{stage}.json"

    def timing_of(self, stage: str) -> Path:
        return self.timing / f"{stage}.json"

    # ------------------------------------------------------------------------- elsewhere

    def under(self, root: Path | str) -> Paths:
        """The same layout in the repository at ``root`` (for readers started elsewhere)."""
        return Paths(**{name: Path(root) / value for name, value in self._fields().items()})

    def rebase(self, *, data: Path | str | None = None, metrics: Path | str | None = None) -> Paths:
        """The same layout with its data folder (and everything inside it) moved to ``data``, and
        its metrics folder to ``metrics``."""
        moves = [(old, Path(new)) for old, new in ((self.data, data), (self.metrics, metrics))
                 if new is not None]
        fields = {}
        for name, value in self._fields().items():
            for old, new in moves:
                if value == old or old in value.parents:
                    value = new / value.relative_to(old)
                    break
            fields[name] = value
        return Paths(**fields)

    def _fields(self) -> dict[str, Path]:
        return {name: getattr(self, name) for name in type(self).model_fields}

    def require(self, path: Path) -> Path:
        """``path``, or a :class:`MissingArtifacts` error that says how to make it."""
        if not self.data.is_dir():
            raise MissingArtifacts(f"no data directory {self.data}; run `dvc repro` first "
                                   "(or pass --data DIR)")
        if not path.exists():
            raise MissingArtifacts(f"{path} does not exist; run `dvc repro` first")
        return path
