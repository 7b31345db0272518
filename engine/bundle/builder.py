"""`ascendctl bundle`: build the redacted archive a support engineer can act on.

    result = build_bundle(BundleOptions(out=Path("b.tar.gz")), host=Host())

What the archive holds, and where, is engine.bundle.layout. Every collector runs with a time limit
and within the size cap; one that fails or hangs is a row of the manifest and the others go on.
The archive is written under a temporary name and renamed at the end: an interruption leaves a
complete archive or none.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.bundle.layout import (
    BUNDLE_SCHEMA,
    DEVICE_LOG_DIR,
    DMESG_FILE,
    MANIFEST,
    NPU_INFO_FILE,
    OUR_TOP,
    PROCESS_LOG_DIR,
    RUN_DIR,
)
from engine.bundle.output import check_out, default_name, top_name
from engine.bundle.recording import CommandRecorder, RecordingHost
from engine.bundle.redactor import Redactor
from engine.bundle.staging import Source, Stage, json_bytes, reason_of, timed
from engine.errors import BadInput
from engine.i18n import N_
from engine.system.archive import read_regular, term_as_interrupt
from engine.system.cann import process_log_dir
from engine.system.host import Host
from engine.system.recorded import RECORD_DIR, RecordedRunner, command_key, write_transcript
from engine.system.runner import SubprocessRunner, ToolMissing, ToolTimeout

DEFAULT_MAX_BYTES = 200 * 1024 * 1024
DEFAULT_TIMEOUT_S = 10.0
TRANSCRIBED = ("npu-smi", "hccn_tool")  # the programs of FaultDiag's environment check
# msnpureport ships with the driver; it is often not on PATH.
MSNPUREPORT = "/usr/local/Ascend/driver/tools/msnpureport"
# It talks to every card in turn and pulls their logs over HDC: minutes, not seconds. Its limit is
# this many times --timeout (300 s by default).
DEVICE_LOG_TIMEOUT_FACTOR = 30
# A file doctor only looked at (exists? a directory?) is stored empty unless it is small text:
# libraries and firmware images are what a support engineer needs the name of, not the bytes.
SMALL_FILE = 256 * 1024
# A directory a probe listed (engine.system.paths.listdir) is stored with its entries (empty) when
# it has at most this many: /dev and the toolkit's version folders, not /usr/lib64.
LIST_LIMIT = 1024
# Never listed, whatever a probe asked: other users' files and the machine's scratch space.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/home", "/root", "/run/user", "/dev/shm")
# The share of a collector's time limit that redacting a big log may take: what is left over when
# it runs out is the log's older part, left out and said (a tail in time beats no log at all).
REDACT_SHARE = 0.5
# Per-card npu-smi views worth having beside `npu-smi info`.
# Kernel lines worth a support engineer's time: the NPU driver's modules, OOM kills, crashes.
_DMESG_KEEP = re.compile(
    r"davinci|npu|hisi|ascend|drv_|devmm|hdc|tsdrv|out of memory|oom[-_ ]kill|oom_reaper|killed process"
    r"|segfault|general protection|call trace|hung_task|blocked for more than|lockup",
    re.I,
)
NPU_SMI_VIEWS = ("usages", "health", "board")  # board: versions and serial numbers (masked)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BundleOptions:
    out: Path
    since_s: float | None = 2 * 3600.0  # plogs modified within this window; None: all
    run: str | None = None  # a run id or run directory; None: the newest run (live machine only)
    redact: bool = True
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S  # per command and per collector
    ascendctl_version: str = "unknown"
    device_logs: bool = False  # run msnpureport (slow; opt-in)


@dataclass(frozen=True)
class BundleResult:
    archive: Path
    map_file: Path | None
    top: str  # the folder inside the archive
    sources: list[Source]
    bytes: int  # archive size
    collected_bytes: int  # before compression
    redacted: bool
    duration_s: float

    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for s in self.sources:
            counts[s.status] = counts.get(s.status, 0) + 1
        return {
            "archive": str(self.archive),
            "map": str(self.map_file) if self.map_file else None,
            "bytes": self.bytes,
            "collected_bytes": self.collected_bytes,
            "redacted": self.redacted,
            "duration_s": round(self.duration_s, 3),
            "counts": counts,
            "sources": [dataclasses.asdict(s) for s in self.sources],
        }


class _Builder:
    def __init__(self, opts: BundleOptions, host: Host, live: bool, env_known: bool, progress: Progress | None) -> None:
        self.opts = opts
        self.live = live
        self.env_known = env_known
        self.progress = progress or (lambda _m: None)
        self.red = Redactor(enabled=opts.redact)
        self.recorder = CommandRecorder(host.runner, opts.timeout_s)
        self.base = host
        self.host = RecordingHost(host, self.recorder)
        self.sources: list[Source] = []
        self.logs: list[str] = []  # members to triage
        self.env_keys: set[str] = set()
        self.unreadable: list[str] = []  # machine paths the probes saw but this user cannot read

    # ---- helpers

    def text(self, s: str) -> bytes:
        return self.red.text(s).encode("utf-8", "surrogateescape")

    def collect(
        self,
        name: str,
        kind: str,
        what: str,
        fn: Callable[[Source], None],
        timeout: float | None = None,
        inline: bool = False,
    ) -> None:
        """`inline`: run `fn` in this thread, for a collector whose one long command has its own
        limit: a Ctrl-C then reaches the runner, which kills the tool's process group, instead of
        leaving it running behind an abandoned worker thread."""
        self.progress(name)
        src = Source(name, kind, self.red.text(what))
        started = time.perf_counter()
        if inline:
            error, hung = None, False
            try:
                fn(src)
            except Exception as exc:  # reported as the collector's failure, as in a worker thread
                error = exc
        else:
            _, error, hung = timed(lambda: fn(src), timeout or self.opts.timeout_s * 3)
        src.duration_s = round(time.perf_counter() - started, 3)
        if hung:
            self.stage.abandon(src)
            src.status, src.why = "failed", f"did not finish within {timeout or self.opts.timeout_s * 3:g} s"
            for member in src.members:  # what it wrote before: half a file is worse than none
                (self.stage.top / member).unlink(missing_ok=True)
            src.members, src.bytes = [], 0
        elif error is not None:
            if isinstance(error, KeyboardInterrupt):
                raise error
            src.status, src.why = "failed", self.red.text(f"{type(error).__name__}: {reason_of(error)}")
        self.sources.append(src)

    # ---- collectors

    def learn_names(self) -> None:
        env = dict(self.base.env)
        self.red.learn_env(env)
        hostname = self.base.read_text("/etc/hostname")
        self.red.learn_host((hostname or "").strip() or None, own=True)
        if self.live:
            import getpass
            import socket

            self.red.learn_host(socket.gethostname(), own=True)
            try:
                self.red.learn_user(getpass.getuser())
            except Exception:  # no user name for this uid (a container): nothing to hide
                pass

    def doctor(self, src: Source) -> None:
        from engine.doctor import run_doctor

        report = run_doctor(host=self.host, env_known=self.env_known)
        src.rc = report.exit_code()
        self.stage.write("doctor.json", self.text(json.dumps(_plain(report.to_dict()), indent=2) + "\n"), src)

    def dmesg(self, src: Source) -> None:
        """The kernel's lines about the NPU driver, OOM kills and crashes: only those, so the rest
        of the kernel log (other devices, other tenants) stays on the machine."""
        try:
            result = self.base.runner.run(["dmesg"], timeout=self.opts.timeout_s)
        except ToolMissing as exc:
            src.status, src.why = "skipped", reason_of(exc)
            return
        src.rc = result.returncode
        if not result.ok:  # as a non-root user: "Operation not permitted" (kernel.dmesg_restrict)
            src.status, src.why = "failed", (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
            return
        lines = [line for line in result.stdout.splitlines() if _DMESG_KEEP.search(line)]
        if not lines:
            src.status, src.why = "skipped", N_("no kernel line about the NPU driver, OOM kills or crashes")
            return
        self.stage.write(DMESG_FILE, self.text("\n".join(lines) + "\n"), src)
        self.logs.append(DMESG_FILE)

    def netcheck(self, src: Source) -> None:
        """netcheck's report; its hccn_tool answers are recorded, so `netcheck --root` replays them."""
        from engine.netcheck import HCCN_TOOL, run_netcheck
        from engine.system import paths

        if not self.recorder.which("hccn_tool") and not paths.exists(self.base, HCCN_TOOL):
            src.status, src.why = "skipped", N_("hccn_tool not found (no NPU NICs to check)")
            return
        report = run_netcheck(host=self.host, live=self.live, timeout=self.opts.timeout_s)
        src.rc = report.exit_code()
        self.stage.write("netcheck.json", self.text(json.dumps(_plain(report.to_dict()), indent=2) + "\n"), src)

    def env_report(self, src: Source) -> None:
        from engine.doctor.envreport import env_report

        report = env_report(self.opts.ascendctl_version, self.host, live=self.live)
        data = report.to_dict()
        self.stage.write("env.json", self.text(json.dumps(_plain(data), indent=2) + "\n"), src)
        self.stage.write("env.txt", self.text(report.text() + "\n"), src)
        versions = {
            "ascendctl": self.opts.ascendctl_version,
            "cann": data.get("cann"),
            "driver": data.get("driver"),
            "firmware": data.get("firmware"),
            "python": data["engine"].get("python"),
            "packages": data["engine"].get("packages"),
        }
        self.stage.write("versions.json", self.text(json.dumps(versions, indent=2) + "\n"), src)

    def command(self, argv: list[str]) -> Callable[[Source], None]:
        def fn(src: Source) -> None:
            try:
                result = self.recorder.run(argv, timeout=self.opts.timeout_s, env=dict(self.base.env))
            except ToolMissing as exc:
                src.status, src.why = "skipped", reason_of(exc)
                return
            src.rc = result.returncode
            if not result.ok:
                src.status, src.why = "failed", f"exit code {result.returncode}"
            src.bytes = len(result.stdout.encode()) + len(result.stderr.encode())
            src.members.append(f"{RECORD_DIR}/commands/{command_key(argv)}.out")

        return fn

    def npu_smi(self) -> None:
        from engine.devices.npu_smi import parse_info

        if not self.recorder.which("npu-smi"):
            self.sources.append(Source("npu-smi info", "command", "npu-smi info", "skipped", "npu-smi not found"))
            return
        self.collect("npu-smi info", "command", "npu-smi info", self.command(["npu-smi", "info"]))
        got = self.recorder.commands.get(command_key(["npu-smi", "info"]))
        if not got or got[0] is None:
            return
        # The chips' logic ids (the device-OS logs' and plogs' `device-N`) beside their NPU IDs:
        # triage names a device-log fault by the NPU ID the operator sees.
        self.collect("npu-smi info -m", "command", "npu-smi info -m", self.command(["npu-smi", "info", "-m"]))
        try:
            cards = sorted({c.npu for c in parse_info(got[0].stdout).chips})
        except Exception:  # an odd table: the per-card views are skipped, `info` itself is kept
            cards = []
        for view in NPU_SMI_VIEWS:
            for card in cards:
                # `-i N` first, as FaultDiag's environment check runs them: its parser keys on that order.
                argv = ["npu-smi", "info", "-i", str(card), "-t", view]
                self.collect(" ".join(argv), "command", " ".join(argv), self.command(argv))
                if self.sources[-1].status == "skipped":  # this npu-smi lacks the view: one row says so
                    break

    def version_files(self, src: Source) -> None:
        from engine.system import paths

        found = []
        for p in (
            "/usr/local/Ascend/driver/version.info",
            "/usr/local/Ascend/firmware/version.info",
            "/usr/local/Ascend/ascend-toolkit/latest/version.cfg",
            "/usr/local/Ascend/ascend-toolkit/latest/version.info",
            "/usr/local/Ascend/ascend-toolkit/latest/runtime/version.info",
            "/usr/local/Ascend/cann/version.info",
            "/etc/ascend_install.info",
            "/etc/os-release",
            "/etc/hccn.conf",
        ):
            if paths.read_text(self.host, p) is not None:
                found.append(p)
        src.what = ", ".join(found) or "none found"
        if not found:
            src.status, src.why = "skipped", N_("no driver, firmware or CANN version file on this machine")

    def find_run(self) -> None:
        """The run to bundle, found before anything is collected (its names are learned first)."""
        self.run_info = None
        self.run_note: tuple[str, str] | None = None
        if self.opts.run:
            self.run_info = find_run(self.opts.run)
        elif not self.live:
            self.run_note = ("skipped", N_("a recorded machine: name its run with --run"))
        else:
            from engine.runs import list_runs

            runs = list_runs()
            if runs:
                self.run_info = runs[0]
            else:
                self.run_note = ("skipped", N_("no `ascendctl serve` run found"))
        run = self.run_info
        if run is not None and self.opts.redact:
            from engine.runs import PROFILE_FILE

            self.red.learn_hosts_in(" ".join(run.argv))
            self.red.learn(" ".join(run.argv))
            profile = read_regular(Path(run.directory) / PROFILE_FILE, SMALL_FILE)
            if profile:
                self.red.learn_hosts_in(profile.decode("utf-8", "replace"))

    def run_files(self, src: Source) -> None:
        from engine.runs import LOG_FILE, PROFILE_FILE

        run = self.run_info
        if run is None:
            src.status, src.why = self.run_note or ("skipped", N_("no run"))
            return
        d = Path(run.directory)
        src.what = self.red.path(str(d))
        info = dataclasses.asdict(run)
        info["argv"] = self.red.argv(run.argv)
        self.stage.write(f"{RUN_DIR}/run.json", self.text(json.dumps(info, indent=2) + "\n"), src)
        links = [n for n in (PROFILE_FILE, LOG_FILE) if (d / n).is_symlink()]
        profile = read_regular(d / PROFILE_FILE, SMALL_FILE)
        if profile is not None:
            self.stage.write(f"{RUN_DIR}/{PROFILE_FILE}", self.text(profile.decode("utf-8", "replace")), src)
        data = _tail(d / LOG_FILE, self.stage.left())
        if data is not None:
            whole, data = data
            deadline = time.monotonic() + self.opts.timeout_s * 3 * REDACT_SHARE
            text, kept = self.redact_tail(data, deadline)
            self.stage.write(f"{RUN_DIR}/{LOG_FILE}", text, src, tail=True)
            if kept < whole and src.status == "ok":
                why = "size cap" if kept == len(data) else "redaction time limit"
                src.status, src.why = "cut", f"{why}: kept the last {kept} of {whole} bytes of the log"
            self.logs.append(f"{RUN_DIR}/{LOG_FILE}")
        if links:
            note = f"not followed (a symbolic link): {', '.join(links)}"
            src.why = f"{src.why}; {note}" if src.why else note

    def redact_tail(self, data: bytes, deadline: float, block: int = 1 << 20) -> tuple[bytes, int]:
        """(the redacted end of `data`, how many of its bytes that is): redacted block by block from
        the end, whole lines, until `deadline`; the older part is what is left out."""
        done: list[bytes] = []
        end = len(data)
        while end > 0:
            start = max(0, end - block)
            if start > 0:
                nl = data.rfind(b"\n", start, end)
                start = nl + 1 if nl >= 0 and nl + 1 < end else start
            done.append(self.text(data[start:end].decode("utf-8", "surrogateescape")))
            end = start
            if time.monotonic() > deadline:
                break
        return b"".join(reversed(done)), len(data) - end

    def metrics(self, src: Source) -> None:
        from engine.metrics.prom import scrape

        run = getattr(self, "run_info", None)
        if run is None or not run.url or not run.alive():
            src.status, src.why = "skipped", N_("no running engine")
            return
        text = scrape(run.url, timeout=min(self.opts.timeout_s, 5.0), parse=lambda t: t)
        self.stage.write(f"{RUN_DIR}/metrics.txt", self.text(text), src)

    def plogs(self, src: Source) -> None:
        """CANN's host and device-side app logs of the window, in FaultDiag's `process_log/` (its
        `debug/plog/plog-{pid}_{time}.log`, `debug/device-N/device-{pid}_{time}.log` kept as CANN wrote them)."""
        base = process_log_dir(self.base.env)
        src.what = self.red.path(base)
        local = self.base.path(base)
        if not local.is_dir():
            src.status, src.why = "skipped", N_("no CANN log directory")
            return
        since = time.time() - self.opts.since_s if self.opts.since_s else None
        files = []
        links = 0
        for dirpath, _dirs, names in os.walk(local):  # a linked folder is not walked into
            for n in names:
                p = Path(dirpath) / n
                try:
                    st = p.lstat()  # a link is not followed out of the log folder
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                elif stat.S_ISREG(st.st_mode) and (since is None or st.st_mtime >= since):
                    files.append((st.st_mtime, p))
        if not files:
            src.status, src.why = "skipped", N_("no CANN log inside the time window")
            return
        files.sort(reverse=True)  # newest first: those are kept when the cap bites
        unreadable: list[str] = []
        deadline = time.monotonic() + self.opts.timeout_s * 6 * REDACT_SHARE
        for _, p in files:
            if self.stage.left() == 0:
                src.status, src.why = "cut", f"size cap reached: {len(files) - len(src.members)} older plog(s) left out"
                break
            if time.monotonic() > deadline:
                src.status = "cut"
                src.why = f"redaction time limit: {len(files) - len(src.members)} older plog(s) left out"
                break
            member = f"{PROCESS_LOG_DIR}/" + self.red.path(p.relative_to(local).as_posix())
            try:
                got = _tail(p, self.stage.left())
            except OSError as exc:  # unreadable as non-root: said, and the rest goes on
                got = None
                unreadable.append(
                    f"{exc.strerror}: {self.red.path(posixpath.join(base, p.relative_to(local).as_posix()))}"
                )
            if got is None:
                continue
            text, _kept = self.redact_tail(got[1], deadline)
            self.stage.write(member, text, src, tail=True)
            self.logs.append(member)
        notes = []
        if unreadable:
            notes.append(_unreadable(unreadable))
        if links:
            notes.append(f"{links} symbolic link(s) not followed")
        if notes and src.status == "ok":
            src.why = "; ".join(notes)

    def device_logs(self, src: Source) -> None:
        """msnpureport's export of every card's logs (slog, hisi_logs, ...), copied into FaultDiag's
        `device_log/` as the tool laid it out. Slow, so only with --with-device-logs."""
        from engine.system import paths

        runner = self.base.runner
        if isinstance(runner, RecordedRunner) or not isinstance(runner, SubprocessRunner):
            src.status, src.why = "skipped", N_("a recorded machine: msnpureport runs on the machine itself")
            return
        exe = runner.which("msnpureport") or (
            str(self.base.path(MSNPUREPORT)) if paths.exists(self.base, MSNPUREPORT) else None
        )
        if exe is None:
            src.status, src.why = "skipped", f"msnpureport not found (the Ascend driver installs it as {MSNPUREPORT})"
            return
        if self.live and hasattr(os, "geteuid") and os.geteuid() != 0:
            # It checks geteuid() == 0 and otherwise only writes "Not have permission to export files."
            # to syslog: say it here instead of reporting a bare exit code.
            src.status, src.why = (
                "skipped",
                N_("msnpureport exports device logs only as root: run the bundle with sudo"),
            )
            return
        cwd = self.scratch / "msnpureport"
        cwd.mkdir(parents=True, exist_ok=True)
        limit = self.opts.timeout_s * DEVICE_LOG_TIMEOUT_FACTOR
        src.what = f"{self.red.path(exe)} (in an empty folder; {limit:g} s limit)"
        try:
            result = runner.run([exe], timeout=limit, env=dict(self.base.env), cwd=cwd)
        except ToolTimeout:
            src.status, src.why = "failed", f"msnpureport did not finish within {limit:g} s"
            return
        src.rc = result.returncode
        said = (result.stdout + result.stderr).strip()
        self.stage.write(f"{DEVICE_LOG_DIR}/msnpureport.txt", self.text(said + "\n"), src)
        out_dir = _export_dir(said, cwd)
        if out_dir is None:
            last = said.splitlines()[-1] if said else f"exit code {result.returncode}, no output"
            src.status, src.why = "failed", self.red.text(f"no export folder: {last}")[:300]
            return
        skipped_binary = 0
        unreadable: list[str] = []
        for p in sorted(q for q in out_dir.rglob("*") if q.is_file() and not q.is_symlink()):
            if self.stage.left() == 0:
                src.status, src.why = "cut", f"size cap of {self.opts.max_bytes} bytes reached"
                break
            rel = p.relative_to(out_dir).as_posix()
            raw = read_regular(p, self.stage.left() + 1)
            if raw is None:
                unreadable.append(f"unreadable: {rel}")
                continue
            if b"\0" in raw[:8192]:  # core dumps and binary registers: nothing to redact in them is visible
                skipped_binary += 1
                continue
            member = f"{DEVICE_LOG_DIR}/{self.red.path(rel)}"
            self.stage.write(member, self.text(raw.decode("utf-8", "surrogateescape")), src, tail=True)
            self.logs.append(member)
        notes = []
        if result.returncode:
            notes.append(f"msnpureport exit code {result.returncode} (partial export)")
        if skipped_binary:
            notes.append(f"{skipped_binary} binary file(s) left out (stackcore, register dumps)")
        if unreadable:
            notes.append(_unreadable(unreadable))
        if notes and src.status == "ok":
            src.why = "; ".join(notes)

    def environment_check(self, src: Source) -> None:
        """The npu-smi and hccn_tool answers as FaultDiag's environment-check transcript."""
        blocks = [
            (result.argv, result.stdout)
            for result, hung in self.recorder.commands.values()
            if result is not None and not hung and posixpath.basename(result.argv[0]) in TRANSCRIBED
        ]
        if not blocks:
            src.status, src.why = "skipped", N_("no npu-smi or hccn_tool answer to transcribe")
            return
        self.stage.write(NPU_INFO_FILE, self.text(write_transcript(blocks)), src)

    def triage(self, src: Source) -> None:
        from engine.triage import scan_paths

        if not self.logs:
            src.status, src.why = "skipped", N_("no log collected")
            return
        report = scan_paths([str(self.stage.top / m) for m in self.logs])
        data = _plain(dataclasses.asdict(report))
        data.update(_plain(report.verdict()))  # root_cause, likely: as `ascendctl triage --json` says them
        top = str(self.stage.top) + "/"
        data["inputs"] = [i.replace(top, "") for i in data["inputs"]]
        data["unreadable"] = [i.replace(top, "") for i in data["unreadable"]]
        src.rc = 1 if report.at_or_above("error") else 0  # as `ascendctl triage` exits (--fail-on error)
        self.stage.write("triage.json", json_bytes(data), src)

    # ---- the recorded machine

    def write_recorded(self) -> None:
        src = Source("recorded machine", "file", "files and commands probed")
        if self.env_known:  # a tree recorded without its environment stays so: doctor then skips, not fails
            env = {k: v for k, v in self.base.env.items() if _keep_var(k, self.env_keys)}
            lines = "".join(f"{k}={v.replace(chr(10), ' ')}\n" for k, v in sorted(self.red.env(env).items()))
            self.stage.write(f"{RECORD_DIR}/env", lines.encode("utf-8", "surrogateescape"), src)
        if self.base.partial:
            self.stage.write(f"{RECORD_DIR}/partial", b"", src)
        for key, (result, hung) in sorted(self.recorder.commands.items()):
            base = f"{RECORD_DIR}/commands/{self.red.path(key)}"
            if hung:
                self.stage.write(f"{base}.hang", b"", src)
                continue
            assert result is not None
            self.stage.write(f"{base}.out", self.text(result.stdout), src)
            if result.stderr:
                self.stage.write(f"{base}.err", self.text(result.stderr), src)
            if result.returncode:
                self.stage.write(f"{base}.rc", f"{result.returncode}\n".encode(), src)
        for key in sorted(self.recorder.found - {k.split("_")[0] for k in self.recorder.commands}):
            self.stage.write(f"{RECORD_DIR}/commands/{key}.which", b"", src)
        listed = self.host.listed  # type: ignore[attr-defined]
        for p in sorted(self.host.seen):  # type: ignore[attr-defined]
            self._copy_path(p, src, listing=p in listed and not _private(p, self.base.env))
        src.what = f"{len(self.host.seen)} paths, {len(self.recorder.commands)} commands"  # type: ignore[attr-defined]
        if self.unreadable:
            src.why = _unreadable(self.unreadable)
        self.sources.append(src)

    def _copy_path(self, machine: str, src: Source, listing: bool, content: bool = True) -> None:
        """`listing`: a folder a probe listed, stored with its entries; `content`: a path a probe
        asked for. An entry of a listed folder is stored empty (the listing is what it needed); a
        folder only passed through (/etc on the way to /etc/os-release) is stored without its
        entries: /etc's neighbours, shadow included, are none of our business."""
        local = self.base.path(machine)
        member = self.red.path(machine).lstrip("/")
        if not member or member.split("/")[0] in (RECORD_DIR, MANIFEST, RUN_DIR, *OUR_TOP):
            return
        target = self.stage.top / member
        try:
            if local.is_symlink():
                if not target.is_symlink() and not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(self.red.path(os.readlink(local)))
            elif local.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                if listing and machine != "/":
                    entries = os.listdir(local)
                    if len(entries) <= LIST_LIMIT:
                        for e in entries:
                            self._copy_path(posixpath.join(machine, e), src, listing=False, content=False)
            elif local.is_file():
                if target.exists() and target.stat().st_size:
                    return
                size = local.stat().st_size
                data = b""
                if content and size <= SMALL_FILE:
                    raw = read_regular(local, SMALL_FILE)
                    if raw is None:
                        raise PermissionError(
                            13, "Permission denied" if not os.access(local, os.R_OK) else "unreadable"
                        )
                    if machine.startswith("/proc/") and machine.endswith("/cmdline"):
                        raw = raw.replace(b"\0", b"\n")  # NUL-separated words: text, one word a line
                    if b"\0" not in raw[:8192]:
                        data = self.text(raw.decode("utf-8", "surrogateescape"))
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists() or data:
                    self.stage.write(member, data, src)
        except OSError as exc:  # unreadable as non-root, gone meanwhile: the bundle holds what it could read
            self.unreadable.append(f"{exc.strerror}: {self.red.path(machine)}")

    # ---- all of it

    def build(self, staging: Path) -> tuple[list[Source], int]:
        self.stage = Stage(staging, self.opts.max_bytes)
        self.scratch = staging.parent  # outside the archive's folder, removed with it
        self.learn_names()
        self.find_run()
        t = self.opts.timeout_s
        self.collect("doctor", "report", "ascendctl doctor --json", self.doctor, timeout=t * 6)
        self.collect("env", "report", "ascendctl env --json", self.env_report, timeout=t * 3)
        self.collect("versions files", "file", "driver, firmware and CANN version files", self.version_files)
        self.npu_smi()
        self.collect("dmesg", "command", "dmesg (NPU driver, OOM and crash lines only)", self.dmesg)
        self.collect(
            "netcheck", "report", "ascendctl netcheck --json (hccn_tool per NIC)", self.netcheck, timeout=t * 6
        )
        from engine.system.enginepy import engine_interpreter

        py = engine_interpreter(self.base)
        self.collect("pip freeze", "command", f"{py} -m pip freeze", self.command([py, "-m", "pip", "freeze"]))
        self.collect(
            "environment check",
            "file",
            "npu-smi and hccn_tool answers as FaultDiag's transcript",
            self.environment_check,
        )
        self.collect("serve run", "run", self.opts.run or "the newest ascendctl serve run", self.run_files)
        self.collect("metrics", "metrics", "GET /metrics of the run", self.metrics)
        from engine.bundle import containers

        self.collect("container", "run", "the run's engine container", lambda src: containers.collect(self, src))
        self.collect("CANN plogs", "log", "~/ascend/log", self.plogs, timeout=t * 6)
        if self.opts.device_logs:
            self.collect("device logs", "log", "msnpureport (slow)", self.device_logs, inline=True)
        else:
            self.sources.append(
                Source("device logs", "log", "msnpureport", "skipped", N_("not asked: add --with-device-logs (slow)"))
            )
        self.collect("triage", "report", "ascendctl triage of the collected logs", self.triage, timeout=t * 6)
        self.write_recorded()
        self.stage.close()  # a collector still running behind writes nothing into the archive
        return self.sources, self.stage.used


def _private(machine: str, env: Any) -> bool:
    """A folder never listed into a bundle: scratch space and home folders."""
    home = str(env.get("HOME") or "").rstrip("/")
    p = machine.rstrip("/") or "/"
    return p == home or any(p == d or p.startswith(d + "/") for d in PRIVATE_DIRS)


def find_run(spec: str) -> Any:
    """The serve run `spec` names (a run id or its directory); BadInput when there is none."""
    from engine.runs import load_run, runs_dir

    d = Path(spec)
    if not d.is_dir():
        d = runs_dir() / spec
    run, why = load_run(d) if d.is_dir() else (None, None)
    if run is None:
        raise BadInput(
            why or f"--run {spec}: no such run (no run.json in {d})",
            f"name a run folder under {runs_dir()} (its id) or a run directory",
        )
    return run


def _keep_var(name: str, accessed: set[str]) -> bool:
    from engine.doctor.envreport import PREFIXES

    return (
        name.startswith(PREFIXES)
        or name in ("HOME", "USER", "LOGNAME", "SHELL", "LANG", "container")
        or name in accessed
    )


def _unreadable(items: list[str]) -> str:
    """What a user could not read, said once: how many, and the first few."""
    shown = "; ".join(items[:3])
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return f"{len(items)} unreadable (run as root to include them): {shown}{more}"


# msnpureport prints "<time> Start exporting logs and files to path: <cwd>/<YYYY-MM-DD-HH-MM-SS>"
# (hicann/runtime msnpureport_report.c); a version that words it otherwise still makes one folder in its cwd.
_EXPORT_PATH = re.compile(r"exporting logs and files to path:\s*(\S.*?)\s*$", re.M)


def _export_dir(said: str, cwd: Path) -> Path | None:
    """The folder msnpureport exported to: the one it names, else the one it made in its empty cwd."""
    m = _EXPORT_PATH.search(said)
    if m:
        named = Path(m.group(1))
        named = named if named.is_absolute() else cwd / named
        if named.is_dir():
            return named
    made = [p for p in cwd.iterdir() if p.is_dir()]
    return made[0] if len(made) == 1 else None


def _plain(data: Any) -> Any:
    """Enums and paths as plain JSON values (the engine cannot use the shell's to_jsonable)."""
    return json.loads(json.dumps(data, default=lambda o: getattr(o, "value", None) or str(o)))


def _tail(path: Path, limit: int) -> tuple[int, bytes] | None:
    """(the file's size, its last `limit` bytes from a line start), or None when it is missing, a
    symbolic link (not followed) or not a regular file; OSError when it cannot be read."""
    import errno

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
            return None
        raise  # unreadable: the caller names it
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size = st.st_size
        if size > limit:
            f.seek(size - limit)
            data = f.read(limit)
            nl = data.find(b"\n")
            return size, (data[nl + 1 :] if 0 <= nl < len(data) - 1 else data)
        return size, f.read(limit)


def build_bundle(
    opts: BundleOptions,
    host: Host | None = None,
    live: bool = True,
    progress: Progress | None = None,
    env_known: bool = True,
) -> BundleResult:
    """Collect, redact and write the archive to opts.out (and its map beside it when redacting).
    `host`: the machine (default this one); `live=False` for a recorded tree, whose `env_known`
    says whether its environment was recorded."""
    started = time.perf_counter()
    host = host or Host()
    out = check_out(Path(opts.out))
    top = top_name(out)
    builder = _Builder(opts, host, live, env_known, progress)
    with term_as_interrupt():  # a SIGTERM cleans up as Ctrl-C does: no staging folder, no .part
        staging = Path(tempfile.mkdtemp(prefix=".ascendctl-bundle-"))
        part = out.with_name(f".{out.name}.part")
        return _write(opts, builder, out, top, staging, part, live, started)


def _write(
    opts: BundleOptions, builder: _Builder, out: Path, top: str, staging: Path, part: Path, live: bool, started: float
) -> BundleResult:
    progress = builder.progress
    try:
        sources, used = builder.build(staging / top)
        manifest = {
            "schema_version": BUNDLE_SCHEMA,
            "kind": "ascendctl-bundle",
            "ascendctl": opts.ascendctl_version,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "recorded_machine": not live,
            "redacted": opts.redact,
            "kept": None if opts.redact else "IP addresses, host names, user names, serial numbers (secrets masked)",
            "since_s": opts.since_s,
            "max_bytes": opts.max_bytes,
            "collected_bytes": used,
            "logs": builder.logs,
            "sources": [dataclasses.asdict(s) for s in sources],
        }
        (staging / top / MANIFEST).write_bytes(json_bytes(manifest))
        progress("writing the archive")
        with tarfile.open(part, "w:gz", compresslevel=6) as tar:
            tar.add(staging / top, arcname=top, filter=_normalise)
        map_file: Path | None = None
        if opts.redact:
            map_file = out.with_name(out.name + ".map.json")
            fd = os.open(map_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)  # an existing map keeps no looser mode
                f.write(json_bytes({"archive": out.name, "mapping": builder.red.mapping()}))
        part.replace(out)  # the rename is the commit: before it, no archive
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if part.exists():
            part.unlink()
    return BundleResult(
        archive=out,
        map_file=map_file,
        top=top,
        sources=sources,
        bytes=out.stat().st_size,
        collected_bytes=used,
        redacted=opts.redact,
        duration_s=time.perf_counter() - started,
    )


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owner names or ids of the machine in the archive."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


__all__ = [
    "BundleOptions",
    "BundleResult",
    "DEFAULT_MAX_BYTES",
    "DEVICE_LOG_TIMEOUT_FACTOR",
    "Source",
    "build_bundle",
    "default_name",
]
