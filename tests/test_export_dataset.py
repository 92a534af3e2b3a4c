"""`interlock export dataset`: the training set as a Hugging Face dataset that `datasets` loads and
TRL's SFTTrainer trains on, with every message read back exactly as the judge graded it."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from interlock.analysis.artifacts import repository_paths
from interlock.analysis.cli import main
from interlock.core import schemas
from interlock.core.backend import SampledTokens
from interlock.core.chat import Message, ToolCall
from interlock.core.errors import InterlockError
from interlock.core.io import write_table
from interlock.export.dataset import CARD, DATA_FILE, dvc_folder_md5, export_training_set, json_text
from interlock.models.chat_template import openai_tools
from interlock.rollout.engine import TOOLS
from interlock.rollout.runs import scripted_rollouts
from interlock.synthesis.stage import run_domains
from interlock.training.examples import encode_conversation

from helpers.repo import REPO, commit, dvc, run

datasets = pytest.importorskip("datasets")


def _odd_calls(trajectory, suffix: str, *arguments: dict):
    """The trajectory's system prompt and request, then one assistant turn calling ``append_record``
    with each of ``arguments``, a tool result per call, and a closing assistant turn."""
    calls = tuple(ToolCall("append_record", a) for a in arguments)
    results = [Message("tool", "ok", name="append_record") for _ in calls]
    messages = [*trajectory.messages[:2], Message("assistant", "", calls), *results,
                Message("assistant", "Done.")]
    return dataclasses.replace(trajectory, rollout_id=trajectory.rollout_id + suffix, messages=messages,
                               sampled=[])


def _training_row(trajectory, source: str = "policy", weight: float = 1.0, loss_from: int = 0) -> dict:
    return {**trajectory.to_row(), "source": source, "weight": weight, "loss_from_message": loss_from}


@pytest.fixture(scope="module")
def oracle(contexts, tmp_path_factory) -> list:
    """Oracle rollouts of two of the fixture's ``rft`` tasks."""
    rft = [c for c in contexts if c.pack.pool == "rft"][:2]
    return scripted_rollouts(rft, ["oracle"], seed=5, workdir=tmp_path_factory.mktemp("oracle"))


def _artifacts(folder, rows: list[dict]):
    """An artifacts folder with the catalog and a training set of ``rows``; its paths."""
    run_domains(folder / "domains.parquet")
    write_table(folder / "training_set" / "trajectories.parquet", rows, schemas.TRAINING_SET)
    return repository_paths(REPO, data=folder)


#: arguments that differ in keys from call to call, with nulls, nesting, key order and non-ASCII
HETEROGENEOUS = ({"path": "out/decisions.csv", "record": {"z": 1250.5, "a": None, "flags": [True, 2, "é"]}},
                 {"path": "out/empty.jsonl", "record": {}},
                 {"record": {"nested": {"k": [[], {}]}}, "path": "p"})


#: what a backend sampled for a first turn: log-probabilities of 17 significant digits (the JSON
#: decoder of ``datasets`` reads a third of such numbers back otherwise); not the oracle's text
#: (the export carries the record as the table holds it: training holds it to the text)
SAMPLED = SampledTokens((17, 4, 2), (-0.10000000149011612, -1.2345678901234567, -2.5e-08), stopped=True)


@pytest.fixture(scope="module")
def training_set(oracle, tmp_path_factory):
    """Paths of artifacts whose training set holds an accepted rollout, a correction (weight 0.7,
    loss from message 3) and a rollout with heterogeneous arguments; the rows as written."""
    first, second = oracle
    turns = sum(m.role == "assistant" for m in first.messages)
    first = dataclasses.replace(first, sampled=[SAMPLED, *[None] * (turns - 1)])
    corrected = dataclasses.replace(second, rollout_id=second.rollout_id + ".rti")
    rows = [_training_row(first), _training_row(corrected, "rti", 0.7, 3),
            _training_row(_odd_calls(first, ".odd", *HETEROGENEOUS))]
    return _artifacts(tmp_path_factory.mktemp("artifacts"), rows), rows


@pytest.fixture(scope="module")
def exported(training_set, tmp_path_factory):
    paths, _ = training_set
    out = tmp_path_factory.mktemp("export") / "dataset"
    return export_training_set(paths, out, repo=REPO)


def _load(out):
    return datasets.load_dataset("parquet", data_files=str(out / "data" / "*.parquet"), split="train")


def test_messages_read_back_exactly_as_the_judge_graded_them(training_set, exported) -> None:
    _, rows = training_set
    data = _load(exported.out)
    assert len(data) == len(rows) == exported.contents.rows
    assert exported.contents.by_source == {"policy": 2, "rti": 1} and not exported.contents.left_out
    for row, written in zip(data, rows, strict=True):
        judged = json.loads(written["messages"])
        # same values, key order and types (1250.5 stays a float, None stays an explicit null)
        assert json.dumps(row["messages"]) == json.dumps(judged)
        assert row["tools"] == openai_tools(TOOLS)
        assert {k: row[k] for k in ("rollout_id", "task_id", "domain_id", "policy", "source", "weight",
                                    "loss_from_message")} == \
               {k: written[k] for k in ("rollout_id", "task_id", "domain_id", "policy", "source", "weight",
                                        "loss_from_message")}
        assert row["sampled"] == json.loads(written["sampled"])  # the numbers exact
    assert data[0]["sampled"] == [SAMPLED.to_dict(), *[None] * (len(data[0]["sampled"]) - 1)]
    assert [len(sampled) for sampled in data["sampled"][1:]] == [0, 0]  # no record: an empty list
    odd = next(row for row in data if row["rollout_id"].endswith(".odd"))
    assert [c["function"]["arguments"] for c in odd["messages"][2]["tool_calls"]] == list(HETEROGENEOUS)
    tool = ["content", "name", "role"]
    assert [sorted(m) for m in odd["messages"][2:]] == [["content", "role", "tool_calls"], tool, tool, tool,
                                                        ["content", "role"]]


def test_parquet_structs_would_pad_the_arguments_with_null_keys(tmp_path) -> None:
    """Why the JSON type: calls stored as inferred structs come back with every key of every call."""
    arguments = [{"path": "a.csv"}, {"path": "out/b.csv", "content": "x"}, {}]
    calls = [{"type": "function", "function": {"name": "write_file", "arguments": a}} for a in arguments]
    pq.write_table(pa.Table.from_pylist([{"tool_calls": calls}]), tmp_path / "structs.parquet")
    back = datasets.load_dataset("parquet", data_files=str(tmp_path / "structs.parquet"), split="train")
    padded = [{"path": "a.csv", "content": None}, {"path": "out/b.csv", "content": "x"},
              {"path": None, "content": None}]
    assert [c["function"]["arguments"] for c in back[0]["tool_calls"]] == padded


def test_a_value_that_would_not_read_back_as_written_is_left_out_and_named(oracle, tmp_path) -> None:
    assert json_text({"b": 1, "a": [1.0, 2, None]}) == '{"b":1,"a":[1.0,2,null]}'
    assert json_text(1250.75) == "1250.75"
    for value in (math.nan, math.inf, 2**70, 0.23796462709189137):  # the last: datasets' decoder rounds it
        assert json_text({"x": value}) is None
    first = oracle[0]
    bad = [_odd_calls(first, f".bad{i}", {"path": "p", "record": {"x": v}})
           for i, v in enumerate((math.nan, 2**70, 0.23796462709189137))]
    paths = _artifacts(tmp_path / "data", [_training_row(t) for t in (first, *bad)])
    result = export_training_set(paths, tmp_path / "out", repo=REPO)
    assert result.contents.rows == 1 and [x.rollout_id for x in result.contents.left_out] == \
           [t.rollout_id for t in bad]
    assert [r["rollout_id"] for r in _load(tmp_path / "out")] == [first.rollout_id]
    card = (tmp_path / "out" / CARD).read_text()
    assert all(f"`{t.rollout_id}`" in card for t in bad)


def test_a_row_of_an_excluded_pool_or_a_heldout_domain_is_refused(oracle, catalog, tmp_path) -> None:
    first = oracle[0]
    heldout = next(d.id for d in catalog.domains if d.split == "heldout")
    pool = dataclasses.replace(first, pool="dev", rollout_id="dev.a0")
    domain = dataclasses.replace(first, domain_id=heldout, rollout_id="held.a0")
    for name, trajectory, error in (("pool", pool, "pool: 'dev' is no trained pool"),
                                    ("domain", domain, "domain_id: .* is no training domain")):
        paths = _artifacts(tmp_path / name, [_training_row(first), _training_row(trajectory)])
        result = export_training_set(paths, tmp_path / f"{name}-out", repo=REPO)
        assert result.contents.rows == 1  # the other row is written
        [left] = result.contents.left_out
        assert left.rollout_id == trajectory.rollout_id and re.search(error, left.reason), left
        assert trajectory.rollout_id in (tmp_path / f"{name}-out" / CARD).read_text()


def test_the_card_names_the_sources_the_exclusions_and_the_run(training_set, exported) -> None:
    paths, _ = training_set
    text = (exported.out / CARD).read_text()
    header = yaml.safe_load(text.split("\n---\n")[0].removeprefix("---\n"))
    lock = yaml.safe_load((REPO / "dvc.lock").read_text())
    locked = next((o["md5"] for s in lock["stages"].values() for o in s.get("outs", [])
                   if o["path"] == "data/training_set"), None)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    provenance = header["provenance"]
    assert provenance["git_commit"] == head.strip() and provenance["dvc_lock_md5"] == locked
    assert provenance["read_md5"] == dvc_folder_md5(paths.training_set) != locked
    assert provenance["matches_dvc_lock"] is False and "**different**" in text  # this is not the run's data
    assert header["excluded_pools"] == ["demo", "dev", "indist", "benchmark"]
    assert header["excluded_domains"] and "benchmark" in text and "held-out" in text
    assert header["rows"] == 3 and header["by_source"] == {"policy": 2, "rti": 1}
    for column in ("messages", "tools", "rollout_id", "source", "weight", "loss_from_message"):
        assert f"`{column}`" in text
    # the header's configs tell `datasets` (and the Hub) where the data is
    by_card = datasets.load_dataset(str(exported.out), split="train")
    assert by_card[0]["messages"] == _load(exported.out)[0]["messages"]


def test_an_export_replaces_an_export_but_no_other_folder(training_set, exported, tmp_path) -> None:
    paths, _ = training_set
    again = export_training_set(paths, exported.out, repo=REPO)
    assert (again.out / DATA_FILE).is_file()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(InterlockError, match="not a dataset export"):
        export_training_set(paths, tmp_path / "notes", repo=REPO)
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"


def test_the_folder_hash_is_the_one_dvc_writes(tmp_path) -> None:
    run(["git", "init", "-q"], tmp_path)
    dvc("init", "-q", cwd=tmp_path)
    commit(tmp_path, "init")
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "b.parquet").write_bytes(b"\x00\x01" * 1000)
    (tmp_path / "data" / "sub" / "a.txt").write_text("é\r\n")
    dvc("add", "-q", "data", cwd=tmp_path)
    assert yaml.safe_load((tmp_path / "data.dvc").read_text())["outs"][0]["md5"] == \
           dvc_folder_md5(tmp_path / "data")


def test_the_command_writes_the_dataset(training_set, tmp_path, capsys) -> None:
    paths, _ = training_set
    assert main(["--data", str(paths.data), "export", "dataset", "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "3 examples (2 policy, 1 rti)" in out and "not the one dvc.lock records" in out
    assert len(_load(tmp_path / "out")) == 3


def test_trl_trains_a_step_on_the_export_with_the_projects_assistant_mask(exported, tiny_checkpoint,
                                                                           tmp_path) -> None:
    """One step of TRL's SFTTrainer (assistant-only loss) on the tiny model, CPU, fp32, on what
    `load_dataset` reads; TRL's loss mask is the project's (the trailing tool result aside)."""
    trl = pytest.importorskip("trl")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = _load(exported.out)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    config = trl.SFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, max_length=None,
                           max_steps=1, per_device_train_batch_size=3, learning_rate=1e-3, logging_steps=1,
                           save_strategy="no", report_to="none", use_cpu=True, bf16=False, fp16=False,
                           gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)
    for prepared, row in zip(trainer.train_dataset, data, strict=True):
        ids, mask = encode_conversation(tokenizer, row["messages"])  # every assistant turn, as TRL
        assert prepared["input_ids"][:len(ids)] == ids
        trailing = [False] * (len(prepared["labels"]) - len(ids))  # the last tool result: context
        assert [label != -100 for label in prepared["labels"]] == mask + trailing
    trainer.train()
    (log,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.state.global_step == 1 and math.isfinite(log["loss"]) and log["loss"] > 0
