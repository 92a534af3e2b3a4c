"""The training set as a Hugging Face dataset that TRL's ``SFTTrainer`` trains on without this package.

``interlock export dataset -o DIR`` writes the ``sample`` stage's training set (accepted rollouts and
kept RTI corrections, with their weights) to ``DIR/data/train-00000-of-00001.parquet``, one row per
example, and a dataset card, ``DIR/README.md``, that says where each column comes from, which pools
and domains the rows cannot come from (checked row by row here), and the run that made it.

Each message, and each tool schema, is one JSON value: Arrow's canonical ``arrow.json`` extension
type, stored as Parquet's JSON logical type, which ``datasets`` reads as its ``Json`` feature and
decodes to the dict that was written (same keys, key order and types). Not a struct: Parquet and
``datasets`` give a list of structs one struct type, the union of every key seen, so a call of
``read_file`` would read back as ``{"path": ..., "content": null, "record": null, ...}``, a user
message with ``"tool_calls": null, "name": null``, and a chat template would render those nulls
into the text a trainer learns. Tool-call arguments stay objects, as TRL and chat templates take
them (OpenAI's JSON-string arguments would survive Parquet too, but templates that ``tojson`` them
would write a quoted string).

A value is written only if it reads back unchanged through the JSON decoder ``datasets`` uses
(pandas' ujson, :func:`pandas.io.json.ujson_loads`): it stops at 64-bit integers, rounds some
floats of 16 or more significant digits, and JSON has no NaN or infinity. A row holding such a
value is left out and named in the card, never written altered.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from pandas.io.json import ujson_loads  # what datasets' Json feature decodes with

from interlock.core import schemas
from interlock.core.config import load_params
from interlock.core.errors import InterlockError
from interlock.core.io import atomic_output, batched, dumps, read_rows
from interlock.core.paths import Paths
from interlock.core.types import POOLS
from interlock.models.chat_template import openai_tools
from interlock.rollout.engine import TOOLS
from interlock.rollout.trajectory import BadRow, iter_rows
from interlock.training.examples import TrainingItem, training_item

DATA_FILE = "data/train-00000-of-00001.parquet"  # the one split's one shard, named as the Hub names them
CARD = "README.md"
#: the pools a training set may draw from: RFT trains on its own rollouts of the ``rft`` tasks
TRAINED_POOLS = ("rft",)
ROW_GROUP = 256
UNPORTABLE = ("a message or tool-call argument that would not read back as written: NaN or infinity "
              "(not JSON), an integer beyond 64 bits or a float the `datasets` JSON decoder rounds")

_JSON_LIST = pa.list_(pa.json_())
#: the exported table (not a pipeline artifact: nothing downstream reads it, so it is not in
#: :mod:`interlock.core.schemas`, whose every change would re-run the whole pipeline)
SCHEMA = pa.schema([
    ("messages", _JSON_LIST), ("tools", _JSON_LIST), ("rollout_id", pa.string()), ("task_id", pa.string()),
    ("domain_id", pa.string()), ("policy", pa.string()), ("source", pa.string()), ("weight", pa.float64()),
    ("loss_from_message", pa.int32()),
    # numbers as Parquet's own types, not JSON: a log-probability's 17 digits would not read back
    # through the JSON decoder of ``datasets`` (a third of them do not)
    ("sampled", pa.list_(pa.struct([("ids", pa.list_(pa.int32())), ("logprobs", pa.list_(pa.float64())),
                                    ("stopped", pa.bool_())]))),
])
# pyarrow builds no extension column from Python values: rows go in as strings and are cast
_STORAGE = pa.schema([(f.name, pa.list_(pa.string()) if f.type == _JSON_LIST else f.type) for f in SCHEMA])


@dataclass(frozen=True)
class Provenance:
    """The run an export came from: the code's commit and the training set's hash, as dvc.lock
    records it and as read."""

    commit: str | None  # git HEAD (None: not a git checkout)
    dirty: bool | None  # tracked files changed since that commit
    locked_md5: str | None  # the training-set folder's hash in dvc.lock (None: no entry)
    read_md5: str  # the same hash (DVC's directory md5) of the folder the export read

    @property
    def matches_lock(self) -> bool:
        return self.read_md5 == self.locked_md5


@dataclass(frozen=True)
class LeftOut:
    rollout_id: str
    reason: str


@dataclass(frozen=True)
class Contents:
    """What a written dataset holds, and what was left out of it."""

    by_source: dict[str, int]  # examples per source (``policy``, ``rti``)
    domains: int
    tasks: int
    left_out: tuple[LeftOut, ...]

    @property
    def rows(self) -> int:
        return sum(self.by_source.values())

    @property
    def sources(self) -> str:
        """Examples per source in words (``2 policy, 1 rti``)."""
        return ", ".join(f"{n} {source}" for source, n in self.by_source.items()) or "none"


@dataclass(frozen=True)
class DatasetExport:
    out: Path
    contents: Contents
    provenance: Provenance


def dataset_row(item: TrainingItem) -> dict:
    """One example as a dataset row, its messages as the project renders them for training (and as
    the trajectory table stores them) and the tool schemas every rollout was offered."""
    trajectory = item.trajectory
    return {"messages": [m.to_dict() for m in trajectory.messages], "tools": openai_tools(TOOLS),
            "rollout_id": trajectory.rollout_id, "task_id": trajectory.task_id,
            "domain_id": trajectory.domain_id, "policy": trajectory.policy,
            "source": item.source, "weight": item.weight,
            "loss_from_message": item.loss_from_message,
            "sampled": [None if s is None else s.to_dict() for s in trajectory.sampled]}


def json_text(value: object) -> str | None:
    """``value`` as JSON text if ``datasets`` decodes that text back to ``value`` exactly (same
    keys in the same order, same types and digits); None if it would not."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text if dumps(ujson_loads(text), sort_keys=False) == text else None
    except ValueError:  # NaN or infinity; an integer beyond 64 bits; a lone surrogate
        return None


def encode_row(row: dict) -> dict | None:
    """A :func:`dataset_row` with its JSON values as text (None if one would not read back as is)."""
    encoded = {name: [json_text(v) for v in row[name]] for name in ("messages", "tools")}
    if any(text is None for texts in encoded.values() for text in texts):
        return None
    return {**row, **encoded}


def write_dataset(items: Iterable[TrainingItem | BadRow], folder: Path) -> Contents:
    """Write the examples to the Parquet file under ``folder``; a bad row is left out, with its
    reason."""
    by_source: Counter = Counter()
    domains, tasks, left_out = set(), set(), []
    path = folder / DATA_FILE
    path.parent.mkdir(parents=True)
    with pq.ParquetWriter(path, SCHEMA, compression="zstd") as writer:
        for group in batched(items, ROW_GROUP):
            rows = []
            for item in group:
                if isinstance(item, BadRow):
                    left_out.append(LeftOut(item.rollout_id or f"row {item.row}",
                                            f"bad row: {item.field}: {item.reason}"))
                    continue
                row = encode_row(dataset_row(item))
                if row is None:
                    left_out.append(LeftOut(item.trajectory.rollout_id, UNPORTABLE))
                    continue
                rows.append(row)
                by_source[row["source"]] += 1
                domains.add(row["domain_id"])
                tasks.add(row["task_id"])
            if rows:
                table = pa.Table.from_pylist(rows, schema=_STORAGE).cast(SCHEMA)
                writer.write_table(table, row_group_size=table.num_rows)
    return Contents(dict(sorted(by_source.items())), len(domains), len(tasks), tuple(left_out))


def checked_items(table: Path, splits: dict[str, str]) -> Iterable[TrainingItem | BadRow]:
    """The training set's rows, each refused (as the :class:`BadRow` it is) unless it is a
    trajectory of a trained pool's task and of a domain of the catalog's training split
    (``splits``: domain -> split): the card's exclusions hold because every row was checked."""
    for group in iter_rows(table, schemas.TRAINING_SET):
        for row in group:
            item = training_item(row, str(table))
            trajectory = item.trajectory if isinstance(item, TrainingItem) else None
            if trajectory is not None and trajectory.pool not in TRAINED_POOLS:
                item = row.refused(str(table), "pool", f"{trajectory.pool!r} is no trained pool (a training "
                                                       f"set holds {', '.join(TRAINED_POOLS)} tasks)").parsed
            elif trajectory is not None and splits.get(trajectory.domain_id) != "train":
                item = row.refused(str(table), "domain_id",
                                   f"{trajectory.domain_id!r} is no training domain of the catalog").parsed
            yield item


def export_training_set(paths: Paths, out: Path | str, *, repo: Path) -> DatasetExport:
    """Write the training set at ``paths`` to ``out`` as a dataset with its card (atomically: a
    failed export leaves ``out`` as it was); ``repo``: the checkout whose commit and dvc.lock made it."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not _is_export(out):
        raise InterlockError("exists and is not a dataset export; give a new or empty folder", file=str(out))
    table = paths.require(paths.training_table)
    domains = read_rows(paths.require(paths.domains), schemas.DOMAINS)
    splits = {row["domain_id"]: row["split"] for row in domains}
    locked = load_params(repo / "params.yaml").paths.training_set.as_posix()
    provenance = Provenance(*_git_state(repo), _locked_md5(repo, locked), dvc_folder_md5(paths.training_set))
    with atomic_output(out) as tmp:
        result = DatasetExport(out, write_dataset(checked_items(table, splits), tmp), provenance)
        data_sha256 = _file_digest(tmp / DATA_FILE, "sha256")
        heldout = sorted(d for d, split in splits.items() if split != "train")
        (tmp / CARD).write_text(card(result, locked, heldout, data_sha256), encoding="utf-8")
    return result


# ----------------------------------------------------------------------------- provenance

def dvc_folder_md5(folder: Path) -> str:
    """DVC's hash of a folder, as dvc.lock writes it (``<md5>.dir``), computed by DVC's own
    ``dvc_data`` (nothing stored: a dry run into a throwaway object database)."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    fs = LocalFileSystem()
    with tempfile.TemporaryDirectory(prefix="interlock-hash-") as scratch:
        _, _, tree = build(HashFileDB(fs, scratch), str(folder), fs, "md5", dry_run=True)
    return tree.hash_info.value


def _file_digest(path: Path, algorithm: str) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def _locked_md5(repo: Path, path: str) -> str | None:
    """The hash dvc.lock records for the output ``path``, as DVC reads its pipeline (None: no DVC
    repository, no lock, or no stage writes it)."""
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo

    try:
        with Repo(str(repo)) as dvc:
            return next((out.hash_info.value for stage in dvc.index.stages for out in stage.outs
                         if out.def_path == path and out.hash_info), None)
    except NotDvcRepoError:
        return None


def _git_state(repo: Path) -> tuple[str | None, bool | None]:
    """HEAD's commit and whether tracked files differ from it (None, None: not a git checkout)."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)

    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return None, None
    return head.stdout.strip(), bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())


# ----------------------------------------------------------------------------- the card

def _is_export(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier export (which a new one may replace)."""
    path = folder / CARD
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    end = text.find("\n---\n", 4)
    try:
        header = yaml.safe_load(text[4:end]) if text.startswith("---\n") and end > 0 else None
    except yaml.YAMLError:
        return False
    return isinstance(header, dict) and header.get("interlock_export") == "dataset"


#: the card's fixed part: what each column is and where it comes from, and why the JSON type
COLUMNS = """## Columns

- `messages` (list of JSON objects): the trajectory exactly as the judge graded it (the training
  set's `messages`, written by `accept` for a policy rollout, by `intervene` for a correction):
  system prompt, request, assistant turns (`content`, and `tool_calls` as `{"type": "function",
  "function": {"name": ..., "arguments": {...}}}`, arguments an object), tool results (`role: tool`,
  `name`: the tool). Rendered with the checkpoint's chat template, they are the project's training
  text.
- `tools` (list of JSON objects): the tool schemas every rollout was offered
  (`interlock.rollout.engine.TOOLS`, OpenAI's function form); the same list in every row.
- `rollout_id`, `task_id`, `domain_id`, `policy` (string): the trajectory's id, its task, the task's
  domain, the checkpoint that wrote it.
- `source` (string): `policy`, a rollout the judge accepted; `rti`, a rejected rollout corrected
  from its intervention point, verified and kept (rollout-time intervention).
- `weight` (float64): the example's training weight: 1 for an accepted rollout; for a correction,
  `exp(median reference NLL - its NLL)`, capped (the `intervene` stage's distribution-shift filter).
- `loss_from_message` (int32): the first message whose assistant turns carry loss (0: all). A
  correction learns only its corrected turns; to train the same with TRL, split `messages` there
  into `prompt` and `completion` (TRL's prompt-completion type).
- `sampled` (list of structs or nulls): per assistant message, in order, what its backend
  sampled: `ids` (int32, the token ids, the stop token last where `stopped`), `logprobs` (float64,
  each id's log-probability at the sampling temperature, or null where the engine gave none); null for a
  turn no model sampled (a scripted or carried-over one); an empty list where the trajectory
  records none. The project trains a turn on these ids, not on its text tokenized again, once they
  decode to the turn's text with the policy's tokenizer (`interlock.training.examples.sampled_turn_ids`):
  a trainer that uses them should hold them to the same check.

**Why JSON values, not structs.** Parquet stores a list of dicts as one struct type, the union of
every key seen: the arguments of `read_file` would come back as `{"path": ..., "content": null,
"record": null, ...}`, a user message with `"tool_calls": null`, and a chat template renders those
nulls into the text a trainer learns. As Arrow's `arrow.json` type (Parquet's JSON logical type),
each message and tool schema reads back through `datasets` (its `Json` feature) as the dict that
was written: same keys, order and types. TRL and chat templates take `arguments` as objects. A
reader that goes through pandas (verl's multi-turn SFT dataset) gets each element as JSON text:
decode it with `json.loads` first.
"""


def card(result: DatasetExport, locked: str, heldout: list[str], data_sha256: str) -> str:
    """The dataset card: a YAML header the Hub and ``datasets`` read (where the data files are) with
    the provenance, what each column is and where it comes from, and what the rows exclude."""
    p, contents = result.provenance, result.contents
    header = {
        "pretty_name": "Interlock training set", "task_categories": ["text-generation"],
        "tags": ["tool-calling", "agents", "sft", "rejection-sampling"],
        "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*"}]}],
        "interlock_export": "dataset",
        "provenance": {"git_commit": p.commit, "git_dirty": p.dirty, "training_set": locked,
                       "dvc_lock_md5": p.locked_md5, "read_md5": p.read_md5,
                       "matches_dvc_lock": p.matches_lock, "data_sha256": data_sha256},
        "rows": contents.rows, "by_source": contents.by_source, "left_out": len(contents.left_out),
        "excluded_pools": [pool for pool in POOLS if pool not in TRAINED_POOLS],
        "excluded_domains": heldout,
    }
    commit = (f"`{p.commit}`" + (" with uncommitted changes to tracked files" if p.dirty else " (clean)")
              if p.commit else "unknown (not a git checkout)")
    lock = f"`{p.locked_md5}`" if p.locked_md5 else f"none (no `dvc.lock` entry for `{locked}`)"
    match = ("the same: this is the training set that run recorded" if p.matches_lock else
             "**different**: the training set read is not the one `dvc.lock` records")
    left = "".join(f"\n- `{x.rollout_id}`: {x.reason}" for x in contents.left_out) or " none."
    return f"""---
{yaml.safe_dump(header, sort_keys=False).strip()}
---

# Interlock training set

What rejection-sampling fine-tuning trained on in this run: {contents.rows} examples ({contents.sources}) of
{contents.tasks} tasks from {contents.domains} training domains, made by `interlock export dataset`
from the `sample` stage's `{locked}/trajectories.parquet`.

```python
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer

data = load_dataset("parquet", data_files="<this folder>/data/*.parquet", split="train")
trainer = SFTTrainer(model=model, train_dataset=data, processing_class=tokenizer,
                     args=SFTConfig(assistant_only_loss=True))
```

Reading the JSON columns needs `datasets` 4.8 or later (its `Json` feature). `assistant_only_loss`
needs a chat template with `{{% generation %}}` markers (every checkpoint the pipeline writes has
one). TRL's `SFTTrainer` has no per-example weight and ignores `weight` and `loss_from_message`
(below).

{COLUMNS}
## What it excludes

Every row was checked at export to be an `rft` task of a training domain. So it holds nothing from
the `demo` pool (the oracle demonstrations of the warm start), the `dev` pool, the `indist` pool
(unseen tasks of the training domains, evaluated in-distribution), the `benchmark` pool or the
catalog's {len(heldout)} held-out domains (`excluded_domains` in the header).

Left out of the export, each with the reason:{left}

## Provenance

- code: git commit {commit}
- input: `{locked}` as `dvc.lock` records it: {lock}; as read: `{p.read_md5}` (DVC's folder md5),
  {match}
- `{DATA_FILE}`: sha256 `{data_sha256}`
"""
