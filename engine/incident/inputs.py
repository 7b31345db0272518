"""Which nodes a cluster triage reads, from what the user hands over:

- a cluster archive written by `ascendctl bundle --cluster` (or that folder unpacked): one
  manifest (`kind: ascendctl-cluster-bundle`) naming each node's folder, its status and its clock
  offset against the collecting node;
- several single-node bundles (`ascendctl bundle`), each a node;
- `--node NAME=DIR` folders (or files) of logs.

Archives are unpacked only by engine.system.archive (the data filter: no member or link out of the
folder); a member it refuses is left out and named, the rest is read. Inside a folder, links are
never followed and nothing outside the folder is read. Bad input becomes one line in `problems`
and never stops the others: a node name given twice (the first is kept), a bundle of another
cluster (another profile or run than the first cluster archive), an unreadable archive.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from engine.bundle.layout import MANIFEST, triage_inputs
from engine.i18n import _
from engine.system.archive import ArchiveRefused, inside, read_regular, unpack

CLUSTER_KIND = "ascendctl-cluster-bundle"
BUNDLE_KIND = "ascendctl-bundle"
MAX_FILES = 10_000  # log files taken from one node's folder
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class NodeInput:
    name: str
    origin: str  # where it came from, for the report
    files: tuple[str, ...]  # the log files to read (regular files inside the input)
    status: str = "ok"  # the collector's word for a node it could not collect ("no answer", ...)
    offset_s: float | None = None  # node clock minus collector clock, when measured
    addresses: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()


@dataclass
class Inputs:
    nodes: list[NodeInput] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    cluster: dict[str, str] | None = None  # profile / run of the first cluster archive


def is_cluster(path: str) -> bool:
    """Whether `path` is a cluster archive or folder (a cheap look: the folder's manifest, or an
    archive's manifest member)."""
    p = Path(path)
    if p.is_dir():
        return _kind(p / MANIFEST) == CLUSTER_KIND
    try:
        if not (p.is_file() and tarfile.is_tarfile(p)):
            return False
        with tarfile.open(p) as t:
            for m in t:
                if m.isreg() and m.name.count("/") <= 1 and m.name.rsplit("/", 1)[-1] == MANIFEST:
                    f = t.extractfile(m)
                    data = json.loads(f.read(1 << 20)) if f else None
                    return isinstance(data, dict) and data.get("kind") == CLUSTER_KIND
    except (OSError, EOFError, tarfile.TarError, ValueError):
        return False
    return False


def _kind(manifest: Path) -> str | None:
    data = _manifest(manifest)
    return data.get("kind") if data else None


def _manifest(path: Path) -> dict | None:
    raw = read_regular(path, limit=8 << 20)
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def gather(paths: list[str], named: list[tuple[str, str]], workdir: Path) -> Inputs:
    """The nodes of every input; archives are unpacked under `workdir` (the caller removes it)."""
    out = Inputs()
    seen: dict[str, str] = {}

    def add(node: NodeInput) -> None:
        if node.name in seen:
            out.problems.append(
                _("node {node}: given twice ({first} and {second}); the second is left out").format(
                    node=node.name, first=seen[node.name], second=node.origin
                )
            )
            return
        seen[node.name] = node.origin
        out.nodes.append(node)

    shared: dict[str, set[Path]] = {}
    for raw in paths:
        shared.setdefault(_file_name(raw), set()).add(_resolved(raw))
    for i, raw in enumerate(paths):
        top = _open(raw, workdir / f"in{i}", out.problems)
        if top is None:
            continue
        data = _manifest(top / MANIFEST) or {}
        if data.get("kind") == CLUSTER_KIND:
            ident = {"profile": str(data.get("profile")), "run": str(data.get("run"))}
            if out.cluster is None:
                out.cluster = ident
            elif ident != out.cluster:
                out.problems.append(
                    _(
                        "{input}: a bundle of another cluster (profile {profile}, run {run}; the first is profile "
                        "{first_profile}, run {first_run}); left out"
                    ).format(
                        input=raw,
                        profile=ident["profile"],
                        run=ident["run"],
                        first_profile=out.cluster["profile"],
                        first_run=out.cluster["run"],
                    )
                )
                continue
            for node in _cluster_nodes(top, data, raw, out.problems):
                add(node)
        else:
            name = _safe_name(str(data.get("node") or _file_name(raw)))
            if not data.get("node") and len(shared.get(_file_name(raw), ())) > 1:
                # Bundles of one default name (made in the same second on two nodes), each in the
                # node's own folder: the folders tell them apart; the same path twice stays "twice".
                name = _safe_name(f"{_resolved(raw).parent.name}-{name}")
            add(NodeInput(name, raw, tuple(_files(top, raw, out.problems))))
    for name, raw in named:
        if not _NAME.fullmatch(name):
            bad_name = _("--node {name}={path}: a node name is letters, digits, '.', '_' or '-'; left out")
            out.problems.append(bad_name.format(name=name, path=raw))
            continue
        top = _open(raw, workdir / f"node-{name}", out.problems)
        if top is not None:
            add(NodeInput(name, f"--node {name}", tuple(_files(top, raw, out.problems))))
    return out


def _open(raw: str, dest: Path, problems: list[str]) -> Path | None:
    """A folder as it is; a file that is an archive unpacked into `dest`; a plain log file as a
    folder of one (returned as the file itself)."""
    p = Path(raw)
    try:
        if p.is_dir():
            return p
        if not p.is_file():
            problems.append(_("{input}: no such file or folder; left out").format(input=raw))
            return None
        if not tarfile.is_tarfile(p):
            return p  # a plain log
    except OSError as exc:
        problems.append(_("{input}: {error}; left out").format(input=raw, error=exc.strerror or exc))
        return None
    dest.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    try:
        unpack(p, dest, skipped=skipped)
    except (ArchiveRefused, tarfile.TarError, OSError, EOFError) as exc:
        problems.append(_("{input}: cannot unpack it ({error}); left out").format(input=raw, error=exc))
        return None
    for s in skipped[:20]:
        problems.append(_("{input}: member {member}").format(input=raw, member=s))
    if len(skipped) > 20:
        problems.append(_("{input}: {count} more members left out").format(input=raw, count=len(skipped) - 20))
    entries = [e for e in dest.iterdir()]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return dest


def _file_name(raw: str) -> str:
    return Path(raw.rstrip("/")).name.split(".")[0]


def _resolved(raw: str) -> Path:
    try:
        return Path(raw.rstrip("/")).resolve()
    except (OSError, RuntimeError):
        return Path(raw)


def _safe_name(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-")[:63]
    return name or "node"


def _cluster_nodes(top: Path, data: dict, raw: str, problems: list[str]) -> list[NodeInput]:
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        problems.append(_("{input}: its manifest lists no nodes; left out").format(input=raw))
        return []
    found = []
    for entry in nodes:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not _NAME.fullmatch(entry["name"]):
            problems.append(_("{input}: a node entry without a valid name; left out").format(input=raw))
            continue
        name = entry["name"]
        status = str(entry.get("status") or "ok")
        offset = entry.get("clock_offset_s")
        offset = float(offset) if isinstance(offset, (int, float)) and not isinstance(offset, bool) else None
        addresses = tuple(a for a in entry.get("addresses") or () if isinstance(a, str))[:64]
        ranks = tuple(r for r in entry.get("ranks") or () if isinstance(r, int) and not isinstance(r, bool))[:1024]
        rel = entry.get("dir")
        files: list[str] = []
        if status == "ok":
            if not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/"):
                outside = _("{input}: node {node}'s folder {folder} is outside the archive; not read")
                problems.append(outside.format(input=raw, node=name, folder=repr(rel)))
            else:
                d = top / rel
                if d.is_symlink() or not d.is_dir() or not inside(top, d):
                    missing = _("{input}: node {node}'s folder {folder} is missing (or a link); nothing read for it")
                    problems.append(missing.format(input=raw, node=name, folder=rel))
                else:
                    files = _files(d, f"{raw}:{rel}", problems)
        found.append(NodeInput(name, f"{raw}:{rel}", tuple(files), status, offset, addresses, ranks))
    return found


def _files(top: Path, raw: str, problems: list[str]) -> list[str]:
    """The log files of one node: what single-node triage reads of a bundle (its manifest's logs
    and its npu-smi transcript), else every regular file under the folder; links are never
    followed, nothing outside `top` is read."""
    if top.is_file():
        return [str(top)]
    data = _manifest(top / MANIFEST)
    if data and data.get("kind") == BUNDLE_KIND:
        return triage_inputs(top)
    files: list[str] = []
    links = 0
    for root, dirs, names in os.walk(top):
        dirs.sort()
        for d in [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            dirs.remove(d)
            links += 1
        for n in sorted(names):
            fp = os.path.join(root, n)
            if os.path.islink(fp):
                links += 1
                continue
            if n == MANIFEST and root == str(top):
                continue
            if os.path.isfile(fp) and len(files) < MAX_FILES:
                files.append(fp)
    if links:
        not_followed = _("{input}: {count} symbolic link(s) not followed (nothing outside the input is read)")
        problems.append(not_followed.format(input=raw, count=links))
    return files


__all__ = ["CLUSTER_KIND", "Inputs", "NodeInput", "gather", "is_cluster"]
