"""A fingerprint of a model's weights, for `doctor --compare`: every node of one serving group
must load the same bytes, and a shard copied short or a re-quantised file shows up here.

By default each safetensors file counts with its name, its size and a SHA-256 of its JSON header
(tensor names, dtypes, shapes and offsets: engine.capacity.safetensors reads them), and every
other small file of the directory (config.json, the tokenizer) is hashed whole: seconds for a
model of hundreds of GB, since no tensor data is read. `full=True` hashes every byte of every
file instead (minutes: what a changed value inside a tensor needs).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

SMALL = 16 * 2**20  # other files hashed whole up to this size; larger ones count by their size
CHUNK = 4 * 2**20


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def fingerprint(model_dir: Path, full: bool = False) -> dict[str, Any]:
    """{"digest", "mode", "files", "bytes", "per_file": {name: digest}} of the model directory.

    Raises engine.errors.BadInput when the directory holds no safetensors weights or a header is
    damaged (the same messages as `ascendctl plan`)."""
    from engine.capacity.safetensors import header_bytes, model_files

    weights = {p.name for p in model_files(model_dir)}
    per_file: dict[str, str] = {}
    total = 0
    for path in sorted(p for p in model_dir.iterdir() if p.is_file() and not p.name.startswith(".")):
        size = path.stat().st_size
        total += size
        if full:
            digest = _file_digest(path)
        elif path.name in weights:
            digest = hashlib.sha256(header_bytes(path)).hexdigest()
        elif size <= SMALL:
            digest = _file_digest(path)
        else:
            digest = "size-only"
        per_file[path.name] = f"{size}:{digest[:16]}"
    whole = hashlib.sha256("\n".join(f"{n}={d}" for n, d in sorted(per_file.items())).encode()).hexdigest()
    return {
        "digest": whole[:16],
        "mode": "full" if full else "headers",
        "files": len(per_file),
        "bytes": total,
        "per_file": per_file,
    }
