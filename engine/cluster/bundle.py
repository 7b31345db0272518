"""`ascendctl bundle --cluster`: a bundle from every node, in one archive with one redaction map.

    results = collect_ray(opts)                        # the profile's Ray cluster (doctor --cluster's way)
    results = collect_ssh([("node0", "10.0.0.10"), ...], opts)   # hosts without Ray: the user's ssh
    write_cluster_archive(results, opts)               # nodes/<name>/ + one manifest + one map

Each node builds an ordinary `ascendctl bundle` of itself, unredacted (secrets are always masked),
and sends it back; the collector redacts every node's files with ONE Redactor, so an IP address or
a host name has the same placeholder on every node and the cross-node story still reads (sos
`collect`'s single obfuscation map). Nodes are reached only through engines that exist: Ray tasks
pinned to each node (as doctor --cluster), or `ssh` with the user's own configuration (BatchMode:
never a password prompt), in parallel, each with a time limit; a node that does not answer is
listed with its reason, and the others are still collected.

Each node's clock offset against the collecting node is measured NTP-style (a round trip that
carries the node's time; offset = node time - midpoint, error = half the round trip, the best of
three) and recorded in the manifest, where `triage` reads it to align the nodes' events.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.bundle.layout import MANIFEST
from engine.bundle.redactor import Redactor
from engine.errors import BadInput, Unreachable
from engine.system.archive import ArchiveRefused, unpack

CLUSTER_KIND = "ascendctl-cluster-bundle"  # engine.incident.inputs reads it
CLUSTER_SCHEMA = 1
MAX_NODE_BYTES = 512 * 1024 * 1024  # what one node may send back
CLOCK_TRIES = 3
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes")


@dataclass(frozen=True)
class ClusterOptions:
    out: Path
    since_s: float | None = 2 * 3600.0
    max_bytes: int = 200 * 1024 * 1024  # per node
    timeout_s: float = 10.0  # per command inside a node's bundle
    node_timeout_s: float = 300.0  # the whole of one node's collection
    redact: bool = True
    profile: str | None = None
    run: str | None = None  # a run id, recorded for triage (a bundle of another run is told apart)
    ascendctl_version: str = "unknown"
    remote_command: str = "ascendctl"  # how `ascendctl` is started on an SSH host
    ssh_config: str | None = None  # ssh -F FILE (default: the user's own ~/.ssh/config)


@dataclass
class NodeResult:
    name: str  # the node's host name as it reported it, else how it was reached
    reached: str  # "ray:<node address>" or "ssh:<host>"
    status: str  # "ok" | "no answer" | "failed" | "timed out"
    reason: str = ""
    archive: bytes | None = field(default=None, repr=False)
    addresses: list[str] = field(default_factory=list)
    offset_s: float | None = None
    offset_error_s: float | None = None
    duration_s: float = 0.0
    named: bool = False  # the name is the user's own label (a hosts file's NAME): kept as it is
    host: str = ""  # the node's host name as it said it (learned by the redactor)


# ---------------------------------------------------------------------------------------- clocks


def measure_offset(ask: Callable[[], float], tries: int = CLOCK_TRIES) -> tuple[float, float]:
    """(offset, error) of a remote clock: `ask` returns the remote time; the round trip with the
    shortest time wins (its midpoint is the best estimate of when the remote read its clock)."""
    best: tuple[float, float] | None = None
    for _ in range(tries):
        sent = time.time()
        remote = ask()
        back = time.time()
        rtt = back - sent
        if best is None or rtt / 2 < best[1]:
            best = (remote - (sent + back) / 2, rtt / 2)
    assert best is not None
    return best


# ---------------------------------------------------------------------------- what a node runs


def node_bundle(since_s: float | None, max_bytes: int, timeout_s: float, version: str) -> dict[str, Any]:
    """Runs on the node (a Ray task): its own bundle, unredacted (the collector redacts all nodes
    with one map), as bytes. ASCENDCTL_CLUSTER_ROOT makes it bundle that recorded machine instead,
    as doctor --cluster does."""
    from engine.bundle.builder import BundleOptions, build_bundle
    from engine.cluster import ROOT_ENV
    from engine.system.host import Host

    root = os.environ.get(ROOT_ENV) or None
    if root:
        from engine.system.recorded import recorded_host

        host, env_known = recorded_host(root)
        live = False
    else:
        host, live, env_known = Host(), True, True
    tmp = Path(tempfile.mkdtemp(prefix=".ascendctl-node-bundle-"))
    try:
        out = tmp / "node.tar.gz"
        opts = BundleOptions(
            out=out, since_s=since_s, redact=False, max_bytes=max_bytes, timeout_s=timeout_s, ascendctl_version=version
        )
        build_bundle(opts, host=host, live=live, env_known=env_known)
        return {"host": socket.gethostname(), "addresses": _addresses(), "archive": out.read_bytes()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _addresses() -> list[str]:
    try:
        import psutil

        return sorted(
            {
                a.address
                for addrs in psutil.net_if_addrs().values()
                for a in addrs
                if a.family == socket.AF_INET and not a.address.startswith("127.")
            }
        )
    except Exception:  # noqa: BLE001 - the addresses help triage map peers; a bundle without them still counts
        return []


def node_clock() -> float:
    return time.time()


# ------------------------------------------------------------------------------------------ Ray


def collect_ray(opts: ClusterOptions, address: str | None = None) -> list[NodeResult]:
    """A bundle from every alive node of the Ray cluster (RAY_ADDRESS, else the local one)."""
    from engine.cluster import connect_ray

    ray, started_here = connect_ray(address)
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        bundle_task = ray.remote(num_cpus=0, max_retries=0)(node_bundle)
        clock_task = ray.remote(num_cpus=0, max_retries=0)(node_clock)
        results: list[NodeResult] = []
        pending = []
        for n in nodes:
            where = n.get("NodeManagerAddress", "?")
            pin = NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)
            res = NodeResult(name=where, reached=f"ray:{where}", status="ok")
            try:
                res.offset_s, res.offset_error_s = measure_offset(
                    lambda pin=pin: ray.get(clock_task.options(scheduling_strategy=pin).remote(), timeout=30)
                )
            except Exception as exc:  # noqa: BLE001 - no clock: the bundle may still come
                res.reason = f"clock not measured: {type(exc).__name__}"
            ref = bundle_task.options(scheduling_strategy=pin, name=f"ascendctl-bundle@{where}").remote(
                opts.since_s, opts.max_bytes, opts.timeout_s, opts.ascendctl_version
            )
            pending.append((res, ref, time.monotonic()))
            results.append(res)
        deadline = time.monotonic() + opts.node_timeout_s
        for res, ref, started in pending:
            try:
                got = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                res.status, res.reason = "timed out", f"no bundle within {opts.node_timeout_s:g} s"
                ray.cancel(ref, force=True)
            except ray.exceptions.RayError as exc:
                res.status, res.reason = "failed", str(exc).strip().splitlines()[-1][:300]
            else:
                res.name, res.addresses, res.archive = got["host"], got["addresses"], got["archive"]
                res.host = got["host"]
            res.duration_s = time.monotonic() - started
        return results
    finally:
        if started_here:
            ray.shutdown()


# ------------------------------------------------------------------------------------------ SSH


def read_hosts(path: str) -> list[tuple[str, str]]:
    """A hosts file: one node per line, `HOST` or `NAME HOST` (HOST as ssh takes it: an alias of
    the user's ssh config, `user@host`, an address); `#` starts a comment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(
            f"cannot read the hosts file {path}: {exc.strerror or exc}", "give --hosts a readable file"
        ) from None
    hosts: list[tuple[str, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2 or any(w.startswith("-") for w in words):
            raise BadInput(f"{path}:{n}: expected `HOST` or `NAME HOST`, got {line.strip()!r}", "one node per line")
        hosts.append((words[0], words[-1]))
    if not hosts:
        raise BadInput(f"the hosts file {path} names no host", "one node per line: `HOST` or `NAME HOST`")
    return hosts


def _ssh(opts: ClusterOptions, host: str) -> list[str]:
    cfg = ("-F", opts.ssh_config) if opts.ssh_config else ()
    connect = max(1, int(min(opts.node_timeout_s, 30)))
    return ["ssh", *cfg, *SSH_OPTIONS, "-o", f"ConnectTimeout={connect}", host]


def _remote_bundle_command(opts: ClusterOptions) -> str:
    since = f"{int(opts.since_s)}s" if opts.since_s else "100000d"
    inner = (
        f"{opts.remote_command} bundle --no-redact --since {since} --max-size {opts.max_bytes} "
        f'--timeout {opts.timeout_s:g} --out "$d/node.tar.gz" >/dev/null 2>"$d/err"'
    )
    return (
        "d=$(mktemp -d) || exit 97; trap 'rm -rf \"$d\"' EXIT; "
        f'if {inner}; then cat "$d/node.tar.gz"; else tail -c 600 "$d/err" >&2; exit 98; fi'
    )


def _run(argv: list[str], timeout: float, stdin: bytes | None = None) -> tuple[int | None, bytes, bytes]:
    """(exit code or None when it ran out of time, stdout, stderr); the whole process group is
    ended on a timeout, so no ssh is left behind."""
    p = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(stdin, timeout=timeout)
        return p.returncode, out[: MAX_NODE_BYTES + 1], err
    except subprocess.TimeoutExpired:
        _kill_group(p.pid)
        p.communicate()
        return None, b"", b""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass  # already gone


def _ssh_clock(opts: ClusterOptions, host: str) -> tuple[float, float, str]:
    """(offset, error, the node's host name): over one ssh session the node prints its name, then
    its time each time it reads a line, so the round trips measured carry no connection set-up."""
    argv = [*_ssh(opts, host), "hostname; for i in 0 1 2 3; do date +%s.%N; read x || exit 0; done"]
    p = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    assert p.stdin is not None and p.stdout is not None
    try:
        import threading

        timer = threading.Timer(min(opts.node_timeout_s, 30), _kill_group, (p.pid,))
        timer.start()
        try:
            name = p.stdout.readline().decode("utf-8", "replace").strip()
            first = p.stdout.readline()
            if not first:
                raise OSError("no answer")

            def ask() -> float:
                p.stdin.write(b"\n")  # type: ignore[union-attr]
                p.stdin.flush()  # type: ignore[union-attr]
                line = p.stdout.readline()  # type: ignore[union-attr]
                if not line:
                    raise OSError("no answer")
                return float(line)

            return (*measure_offset(ask), name)
        finally:
            timer.cancel()
    finally:
        try:
            p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill_group(p.pid)
            p.wait()


def _ssh_node(opts: ClusterOptions, name: str, host: str) -> NodeResult:
    res = NodeResult(name=name, reached=f"ssh:{host}", status="ok", named=name != host)
    started = time.monotonic()
    try:
        res.offset_s, res.offset_error_s, res.host = _ssh_clock(opts, host)
    except (OSError, ValueError) as exc:
        res.reason = f"clock not measured ({exc})"
    left = max(1.0, opts.node_timeout_s - (time.monotonic() - started))
    code, out, err = _run([*_ssh(opts, host), _remote_bundle_command(opts)], left)
    res.duration_s = time.monotonic() - started
    said = err.decode("utf-8", "replace").strip().splitlines()
    if code is None:
        res.status, res.reason = "timed out", f"no bundle within {opts.node_timeout_s:g} s"
    elif code == 255:  # ssh's own failure: the host never answered, or refused us
        res.status, res.reason = "no answer", (said[-1] if said else "ssh failed")[:300]
    elif code != 0:
        res.status, res.reason = "failed", f"exit {code}: " + (said[-1] if said else "")[:300]
    elif len(out) > MAX_NODE_BYTES:
        res.status, res.reason = "failed", f"sent more than {MAX_NODE_BYTES // (1 << 20)} MB"
    else:
        res.archive = out
    return res


def collect_ssh(hosts: Sequence[tuple[str, str]], opts: ClusterOptions, parallel: int = 16) -> list[NodeResult]:
    """A bundle from every host, in parallel, each within opts.node_timeout_s."""
    if shutil.which("ssh") is None:
        raise Unreachable("the nodes are reached with ssh, which is not installed", "install openssh-client")
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        return list(pool.map(lambda nh: _ssh_node(opts, nh[0], nh[1]), hosts))


# ---------------------------------------------------------------------------------- the archive


@dataclass(frozen=True)
class ClusterResult:
    archive: Path
    map_file: Path | None
    nodes: list[dict[str, Any]]
    bytes: int
    redacted: bool
    duration_s: float

    def summary(self) -> dict[str, Any]:
        return asdict(self) | {"archive": str(self.archive), "map": str(self.map_file) if self.map_file else None}


def write_cluster_archive(
    results: Sequence[NodeResult], opts: ClusterOptions, started: float | None = None
) -> ClusterResult:
    """nodes/<name>/ (each node's bundle, redacted with one map), manifest.json, and the map
    beside the archive. A node's archive that cannot be unpacked safely is listed as failed."""
    started = time.perf_counter() if started is None else started
    red = Redactor(enabled=opts.redact)
    for r in results:  # every node's host names first: replaced alike in every node's files
        for n in {r.host, "" if r.named else r.name}:
            if n and not n.replace(".", "").isdigit():
                red.learn_host(n, own=True)
    out = opts.out
    top = out.name.removesuffix(".tar.gz").removesuffix(".tgz") or "cluster"
    staging = Path(tempfile.mkdtemp(prefix=".ascendctl-cluster-"))
    part = out.with_name(f".{out.name}.part")
    entries: list[dict[str, Any]] = []
    used: set[str] = set()
    try:
        for r in results:
            name = _unique(_safe(red.text(r.name) if opts.redact and not r.named else r.name), used)
            entry: dict[str, Any] = {
                "name": name,
                "reached": red.text(r.reached) if opts.redact else r.reached,
                "status": r.status,
                "reason": red.text(r.reason) if opts.redact else r.reason,
                "clock_offset_s": None if r.offset_s is None else round(r.offset_s, 6),
                "clock_offset_error_s": None if r.offset_error_s is None else round(r.offset_error_s, 6),
                "addresses": [red.text(a) for a in r.addresses] if opts.redact else list(r.addresses),
                "duration_s": round(r.duration_s, 3),
                "dir": None,
            }
            if r.status == "ok" and r.archive is not None:
                problem = _place(r.archive, staging / top / "nodes" / name)
                if problem:
                    entry["status"], entry["reason"] = "failed", problem
                else:
                    entry["dir"] = f"nodes/{name}"
                    _learn(staging / top / "nodes" / name, red)
            entries.append(entry)
        if red.enabled:  # once every node's names are known: one map for all
            for e in entries:
                if e["dir"]:
                    _redact_tree(staging / top / e["dir"], red)
        manifest = {
            "schema_version": CLUSTER_SCHEMA,
            "kind": CLUSTER_KIND,
            "ascendctl": opts.ascendctl_version,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "profile": opts.profile,
            "run": opts.run,
            "redacted": opts.redact,
            "clock": "clock_offset_s: node clock minus the collecting node's, measured by round trips (error: half the best round trip)",
            "nodes": entries,
        }
        (staging / top).mkdir(parents=True, exist_ok=True)
        (staging / top / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        with tarfile.open(part, "w:gz", compresslevel=6) as tar:
            tar.add(staging / top, arcname=top, filter=_normalise)
        map_file = None
        if opts.redact:
            map_file = out.with_name(out.name + ".map.json")
            fd = os.open(map_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)
                json.dump({"archive": out.name, "mapping": red.mapping()}, f, indent=1)
        part.replace(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if part.exists():
            part.unlink()
    return ClusterResult(out, map_file, entries, out.stat().st_size, opts.redact, time.perf_counter() - started)


def _learn(tree: Path, red: Redactor) -> None:
    """The names a node's bundle shows of itself (its recorded /etc/hostname, its environment)."""
    from engine.system.archive import read_regular

    name = (read_regular(tree / "etc" / "hostname", limit=256) or b"").decode("utf-8", "replace").strip()
    if name:
        red.learn_host(name, own=True)
    try:
        env = json.loads(read_regular(tree / "env.json", limit=8 << 20) or b"{}")
    except ValueError:
        env = {}
    if isinstance(env, dict):
        red.learn_env({k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)})


def _redact_tree(tree: Path, red: Redactor) -> None:
    for root, _dirs, files in os.walk(tree):
        for f in files:
            p = Path(root) / f
            if p.is_symlink() or not p.is_file():
                continue
            raw = p.read_bytes()
            if b"\x00" in raw[:8192]:
                p.write_bytes(b"")  # binary: nothing a redactor can vouch for
                continue
            p.write_text(red.text(raw.decode("utf-8", "replace")), encoding="utf-8")


def _place(data: bytes, dest: Path) -> str:
    """Unpack one node's bundle (safely: engine.system.archive) into dest."""
    tmp = Path(tempfile.mkdtemp(prefix=".ascendctl-node-"))
    try:
        arc = tmp / "node.tar.gz"
        arc.write_bytes(data)
        box = tmp / "x"
        box.mkdir()
        try:
            unpack(arc, box)
        except (ArchiveRefused, tarfile.TarError, OSError, EOFError) as exc:
            return f"its bundle could not be unpacked safely: {exc}"
        entries = list(box.iterdir())
        src = entries[0] if len(entries) == 1 and entries[0].is_dir() else box
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dest))
        return ""
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-")[:63] or "node"


def _unique(name: str, used: set[str]) -> str:
    n, k = name, 2
    while n in used:
        n, k = f"{name}-{k}", k + 1
    used.add(n)
    return n


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


__all__ = [
    "CLUSTER_KIND",
    "ClusterOptions",
    "ClusterResult",
    "NodeResult",
    "collect_ray",
    "collect_ssh",
    "measure_offset",
    "node_bundle",
    "read_hosts",
    "write_cluster_archive",
]
