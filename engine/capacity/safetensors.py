"""Exact weight bytes from safetensors headers; no tensor data is read.

A safetensors file is an 8-byte little-endian header length, a JSON header mapping each tensor
name to its dtype, shape and data offsets, then the raw data.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import BadInput

# Bytes per element. Packed 4-bit and 6-bit floats are handled by the packing in their shape.
DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
MAX_HEADER = 100 * 2**20  # real headers are kilobytes to a few MB; more means a damaged file
INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True)
class Weights:
    """Totals over every safetensors file of a model directory."""

    total_bytes: int
    parameters: int
    files: int
    tensors: int
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    # Routed MoE experts (`...mlp.experts.N...`; shared experts are not among them): what expert
    # parallelism splits over TP x DP ranks instead of TP alone.
    expert_bytes: int = 0


def read_header(path: Path) -> dict[str, dict]:
    """The tensor entries of one safetensors file (the `__metadata__` entry left out)."""
    blob = header_bytes(path)
    try:
        header = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadInput(
            f"{path}: the safetensors header is not valid JSON", "re-download the model; the file is damaged"
        )
    if not isinstance(header, dict):
        raise BadInput(f"{path}: the safetensors header is not a mapping", "re-download the model")
    return {k: v for k, v in header.items() if k != "__metadata__"}


def header_bytes(path: Path) -> bytes:
    """The raw JSON header of one safetensors file, as stored (what `doctor --compare` hashes)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise BadInput(
                    f"{path} is not a safetensors file (shorter than 8 bytes)",
                    "re-download the model; the file is truncated",
                )
            (length,) = struct.unpack("<Q", raw)
            if length == 0 or length > MAX_HEADER:
                raise BadInput(
                    f"{path} is not a safetensors file (header length {length})",
                    "re-download the model; the file is damaged",
                )
            blob = f.read(length)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}", "check the model directory and its permissions")
    if len(blob) < length:
        raise BadInput(f"{path}: the safetensors header is cut short", "re-download the model; the file is truncated")
    return blob


def model_files(model_dir: Path) -> list[Path]:
    """The weight files: those named by the index when there is one, else every *.safetensors."""
    index = model_dir / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise BadInput(f"{index} is damaged (no weight_map)", "re-download the model's index file")
        missing = [n for n in names if not (model_dir / n).is_file()]
        if missing:
            raise BadInput(
                f"{model_dir}: {len(missing)} of {len(names)} weight shards named by the index are missing "
                f"(first: {missing[0]})",
                "finish the download of the model",
            )
        return [model_dir / n for n in names]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise BadInput(
            f"no *.safetensors weights in {model_dir}",
            "point --model at a Hugging Face model directory with safetensors weights",
        )
    return files


def is_routed_expert(name: str) -> bool:
    return ".experts." in name


def weights(model_dir: Path) -> Weights:
    total = params = tensors = experts = 0
    by_dtype: dict[str, int] = {}
    files = model_files(model_dir)
    for path in files:
        for name, entry in read_header(path).items():
            try:
                dtype, shape = entry["dtype"], entry["shape"]
                numel = 1
                for dim in shape:
                    numel *= int(dim)
            except (KeyError, TypeError, ValueError):
                raise BadInput(f"{path}: tensor {name} has no valid dtype/shape", "re-download the model")
            if dtype not in DTYPE_BYTES:
                raise BadInput(
                    f"{path}: tensor {name} has dtype {dtype}, which the planner does not know",
                    "report it; the planner needs its size in bytes",
                )
            nbytes = numel * DTYPE_BYTES[dtype]
            total += nbytes
            if is_routed_expert(name):
                experts += nbytes
            params += numel
            tensors += 1
            by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
    return Weights(total, params, len(files), tensors, by_dtype, experts)
