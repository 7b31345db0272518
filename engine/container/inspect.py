"""Reading what docker, podman and nerdctl print: `ps`, `stats`, `inspect`, `image inspect`.

The runtimes print the same facts in two shapes. podman prints one JSON array
(`ps --format json`, `stats --format json`); docker and nerdctl print one JSON object a line,
with labels as one `a=b,c=d` string and names as one string. `inspect` is a JSON array in all
three. Field names differ as well (`cpu_percent` / `CPUPerc`, `mem_usage` / `MemUsage`); each
parser below knows both.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from engine.container.runtime import LABEL_PROFILE, LABEL_RUN, LABEL_URL
from engine.redact import MASK, is_secret_name, redact_argv, redact_value


def json_documents(text: str) -> list[dict[str, Any]]:
    """The objects in a runtime's JSON output: one array (podman, `inspect`), or one object a line
    (docker's `--format json`). Lines that are not JSON objects are left out."""
    text = text.strip()
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        data = None
        out = []
        for line in text.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
            elif isinstance(item, list):
                out += [x for x in item if isinstance(x, dict)]
        return out
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return [x for x in data if isinstance(x, dict)]
    return []


def _labels(value: Any) -> dict[str, str]:
    """podman's {"k": "v"} or docker's "k=v,k2=v2"."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str) and value:
        out = {}
        for part in value.split(","):
            k, sep, v = part.partition("=")
            if sep:
                out[k.strip()] = v
        return out
    return {}


def _names(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(n).lstrip("/") for n in value]
    if isinstance(value, str) and value:
        return [n.strip().lstrip("/") for n in value.split(",")]
    return []


@dataclass(frozen=True)
class ContainerEntry:
    """A container `ps` listed with ascendctl's labels."""

    id: str
    name: str
    run_id: str
    profile: str | None
    url: str | None
    state: str  # running, exited, ...
    image: str | None = None


def parse_ps(text: str) -> list[ContainerEntry]:
    """Containers labelled with a run id, from `RUNTIME ps --filter label=ascendctl.run --format json`."""
    out = []
    for item in json_documents(text):
        labels = _labels(item.get("Labels"))
        run_id = labels.get(LABEL_RUN)
        if not run_id:
            continue
        names = _names(item.get("Names"))
        state = str(item.get("State") or "").lower() or ("running" if "Up" in str(item.get("Status", "")) else "")
        out.append(
            ContainerEntry(
                id=str(item.get("Id") or item.get("ID") or ""),
                name=names[0] if names else str(item.get("Id") or item.get("ID") or ""),
                run_id=run_id,
                profile=labels.get(LABEL_PROFILE) or None,
                url=labels.get(LABEL_URL) or None,
                state=state,
                image=str(item.get("Image")) if item.get("Image") else None,
            )
        )
    return out


_SIZE = re.compile(r"^\s*([0-9.]+)\s*([kKMGTP]?i?B)?\s*$")
_UNITS = {
    "B": 1,
    "kB": 1000,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "PB": 1000**5,
    "KiB": 1024,
    "kiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "PiB": 1024**5,
}


def parse_size(text: str) -> float | None:
    """Bytes of `585.7kB` (podman: decimal units) or `1.5MiB` (docker: binary units)."""
    m = _SIZE.match(text or "")
    if not m:
        return None
    unit = m.group(2) or "B"
    if unit not in _UNITS:
        return None
    try:
        return float(m.group(1)) * _UNITS[unit]
    except ValueError:
        return None


def _percent(text: Any) -> float | None:
    try:
        return float(str(text).strip().rstrip("%"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Usage:
    """A container's CPU and memory from `stats --no-stream`."""

    cpu_percent: float | None  # of one CPU: 200 means two CPUs busy
    memory_bytes: float | None
    memory_limit_bytes: float | None


def parse_stats(text: str) -> dict[str, Usage]:
    """{name and id: Usage} from `RUNTIME stats --no-stream --format json`."""
    out: dict[str, Usage] = {}
    for item in json_documents(text):
        mem = str(item.get("mem_usage") or item.get("MemUsage") or "")
        used, _, limit = mem.partition("/")
        usage = Usage(
            _percent(item.get("cpu_percent", item.get("CPUPerc"))),
            parse_size(used),
            parse_size(limit),
        )
        for key in ("name", "Name", "id", "ID", "Container"):
            if item.get(key):
                out[str(item[key]).lstrip("/")] = usage
    return out


def parse_device_list(raw: str | None) -> list[int] | None:
    """NPU ids of an `ASCEND_VISIBLE_DEVICES` value: `0-3,5` -> [0, 1, 2, 3, 5]. None when the
    value is unset or not a list of ids (`all`, a vNPU spec...)."""
    if raw is None or not raw.strip():
        return None
    ids: list[int] = []
    for part in raw.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        ids += range(lo, hi + 1)
    return sorted(set(ids))


def _env_map(env: Any) -> dict[str, str]:
    out = {}
    for item in env or []:
        k, sep, v = str(item).partition("=")
        if sep:
            out[k] = v
    return out


_DAVINCI = re.compile(r"^/dev/davinci(\d+)$")


def npus_given(inspect: Mapping[str, Any]) -> list[int] | None:
    """The NPUs a container was given: its `--device /dev/davinciN` flags (the quick start's
    way), else its ASCEND_VISIBLE_DEVICES (Ascend Docker Runtime's way). None when neither says."""
    host_config = inspect.get("HostConfig") or {}
    ids = set()
    for dev in host_config.get("Devices") or []:
        m = _DAVINCI.match(str((dev or {}).get("PathOnHost") or ""))
        if m:
            ids.add(int(m.group(1)))
    if ids:
        return sorted(ids)
    env = _env_map((inspect.get("Config") or {}).get("Env"))
    return parse_device_list(env.get("ASCEND_VISIBLE_DEVICES"))


_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\-]*)=(.*)$", re.S)


def _scrub(value: Any) -> Any:
    """Every string of a document through the one redactor: `NAME=value` with a secret name
    masked (environments, `-e HF_TOKEN=...` in podman's CreateCommand), command lines through
    redact_argv (`--api-key X`), values under secret-named keys masked, credentials inside the
    rest masked."""
    if isinstance(value, str):
        m = _ASSIGNMENT.match(value)
        if m and is_secret_name(m.group(1)) and m.group(2):
            return f"{m.group(1)}={MASK}"
        return redact_value(value)
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            value = redact_argv(value)
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(v, str) and v and is_secret_name(str(k)) else _scrub(v)) for k, v in value.items()
        }
    return value


def redact_inspect(inspect: Mapping[str, Any]) -> dict[str, Any]:
    """A container's `inspect` for a bundle: its environment, command lines and labels through
    the one redactor (engine.redact); the caller's document is left as it was."""
    return _scrub(json.loads(json.dumps(inspect)))


@dataclass(frozen=True)
class ImageFacts:
    """An engine image's versions: from its labels when it has them, else read from its tag."""

    reference: str
    vllm_ascend: str | None
    cann: str | None
    chip: str | None  # a2, a3, 310p, 950
    source: str  # "labels", "tag" or "unknown"


# Labels an image may carry its versions under (ours and the OCI one for the image's version).
VLLM_ASCEND_LABELS = ("vllm-ascend.version", "vllm_ascend_version", "org.opencontainers.image.version")
CANN_LABELS = ("cann.version", "cann_version", "CANN_VERSION")
# quay.io/ascend/vllm-ascend:v0.11.0rc1-a3-openeuler (vllm-ascend docs: -a3, -310p, -950dt /
# -a5, -openeuler suffixes); cann images quay.io/ascend/cann:8.3.rc2-a3-ubuntu22.04-py3.11.
_TAG = re.compile(r"^v?(?P<version>\d+\.\d+\.\d+(?:\.post\d+)?(?:rc\d+)?)(?P<rest>(?:-[a-z0-9.]+)*)$", re.I)
_CHIPS = {"a3": "a3", "310p": "310p", "950dt": "950", "a5": "950", "910b": "a2"}


def split_reference(reference: str) -> tuple[str, str | None]:
    """(repository, tag) of `registry/repo:tag` (`@digest` dropped)."""
    ref = reference.split("@", 1)[0]
    repo, sep, tag = ref.rpartition(":")
    if sep and "/" not in tag:
        return repo, tag
    return ref, None


def image_facts(reference: str, labels: Mapping[str, str] | None = None) -> ImageFacts:
    labels = dict(labels or {})
    repo, tag = split_reference(reference)
    chip = None
    tag_version = None
    if tag:
        m = _TAG.match(tag)
        if m:
            tag_version = m.group("version")
            for word in m.group("rest").lower().split("-"):
                chip = _CHIPS.get(word, chip)
    is_vllm_ascend = "vllm-ascend" in repo
    label_vllm = next((labels[k] for k in VLLM_ASCEND_LABELS if labels.get(k)), None)
    if label_vllm and not is_vllm_ascend and "vllm-ascend.version" not in labels:
        label_vllm = None  # the OCI version of some other image is not a vllm-ascend release
    label_cann = next((labels[k] for k in CANN_LABELS if labels.get(k)), None)
    if label_vllm or label_cann:
        return ImageFacts(reference, (label_vllm or "").lstrip("v") or None, label_cann, chip, "labels")
    if is_vllm_ascend and tag_version:
        return ImageFacts(reference, tag_version, None, chip or "a2", "tag")
    return ImageFacts(reference, None, None, chip, "unknown")
