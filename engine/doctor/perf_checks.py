"""doctor's `perf` group: how fast this host can serve, not only whether it can.

Each check comes from a cited source (engine/doctor/perf.yaml holds the source, the level it
gives, the value it recommends, the effect it states and the exact fix). Every value is read
through the host layer, so a recorded tree (`--root`) replays: /sys and /proc files at their paths,
the environment from `.recorded/env`. A file the host hides (containers often mask /sys) is
"unknown", a skip naming the file, never an error.

The values found go into the report's facts (`facts.perf`), which `doctor --compare` compares
across nodes.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.doctor.checks import check
from engine.doctor.context import Context
from engine.doctor.model import Outcome, Status, ok, skip, warn
from engine.i18n import N_, _
from engine.system.host import Host

GOVERNOR = "/sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor"
THP = "/sys/kernel/mm/transparent_hugepage/enabled"
SWAPPINESS = "/proc/sys/vm/swappiness"
SWAPS = "/proc/swaps"
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
MIGRATION = ("/proc/sys/kernel/sched_migration_cost_ns", "/sys/kernel/debug/sched/migration_cost_ns")
OSRELEASE = "/proc/sys/kernel/osrelease"
CPU_ONLINE = "/sys/devices/system/cpu/online"
ALLOCATORS = ("libjemalloc", "libtcmalloc")
MAX_PROCS = 4096  # /proc entries looked at for the engine's processes
MAX_TASKS = 64  # threads of one engine process whose binding is read


# Checks whose value is one variable of the environment: `doctor --compare` shows the variable.
VARIABLE_CHECKS = (
    "perf.task_queue",
    "perf.hccl_expansion",
    "perf.cpu_affinity",
    "perf.npu_alloc",
    "perf.launch_blocking",
)


@lru_cache(maxsize=None)
def spec() -> dict[str, dict[str, Any]]:
    from engine.data import load_yaml

    return load_yaml("engine.doctor", "perf.yaml")["checks"]


def _facts(ctx: Context) -> dict[str, Any]:
    """The perf values of this run, kept on the context for the report's facts."""
    found = ctx.__dict__.get("perf_facts")
    if found is None:
        found = ctx.__dict__["perf_facts"] = {}
    return found


def _applies(ctx: Context, cid: str) -> Outcome | None:
    where = spec()[cid]["platforms"]
    if ctx.platform in where:
        return None
    names = {"ascend": N_("Ascend NPU hosts"), "cpu": N_("CPU engine hosts"), "cuda": N_("CUDA hosts")}
    return skip(_("applies to {hosts}").format(hosts=_(" and ").join(_(names[p]) for p in where)))


def _judge(ctx: Context, cid: str, value: str | None, good: bool | None, found: str, unknown: str = "") -> Outcome:
    """The row of check `cid`: the value found against the source's recommendation. `good` None:
    the value could not be read (`unknown` says which file and why)."""
    s = spec()[cid]
    status = Status.SKIP if good is None else (Status.OK if good else Status.WARN)
    _facts(ctx)[cid] = {
        "value": value,
        "recommended": str(s["recommended"]),
        "level": s["level"],
        "source": s["source"],
        "effect": s.get("effect"),
        "status": status.value,
    }
    if good is None:
        return skip(_("unknown: {why}").format(why=unknown))
    if good:
        return ok(found)
    # effect, fix and the recommended value are perf.yaml's texts, in the catalogue through babel.cfg (a value
    # that is a number or a setting is its own translation); the level is one of LEVELS
    return warn(
        _("{found}; recommended: {value} ({level}, {source}): {effect}").format(
            found=found, value=_(str(s["recommended"])), level=_(s["level"]), source=s["source"], effect=_(s["effect"])
        ),
        _(str(s["fix"])),
    )


LEVELS = (N_("recommendation"), N_("warning"))  # perf.yaml's levels, as a row shows them


def _read(ctx: Context, path: str) -> str | None:
    text = ctx.host.read_text(path)
    return None if text is None else text.strip()


def _why_unreadable(ctx: Context, path: str) -> str:
    if ctx.live and ctx.host.path(path).exists():
        return _("{path} is not readable here (a container or a non-root user)").format(path=path)
    if not ctx.live:
        return _("{path} is not recorded").format(path=path)
    return _("{path} is not present").format(path=path)


# -- the kernel and the CPU -----------------------------------------------------------------------


def online_cpus(ctx: Context) -> list[int] | None:
    text = _read(ctx, CPU_ONLINE)
    return None if text is None else expand_cpus(text)


def expand_cpus(text: str) -> list[int] | None:
    """`0-3,8,10-11` -> [0, 1, 2, 3, 8, 10, 11]; None when it is not such a list."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m:
            return None
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        cpus.extend(range(lo, hi + 1))
    return cpus


@check("perf.governor", "perf", N_("CPU frequency governor is `performance` on every core"))
def check_governor(ctx: Context) -> Outcome:
    cid = "perf.governor"
    cpus = online_cpus(ctx) or [0]
    found: dict[str, int] = {}
    for cpu in cpus:
        value = _read(ctx, GOVERNOR.format(cpu))
        if value:
            found[value] = found.get(value, 0) + 1
    if not found:
        why = _why_unreadable(ctx, GOVERNOR.format(cpus[0]))
        if ctx.live and not ctx.host.path(GOVERNOR.format(cpus[0])).exists():
            why = "no cpufreq on this machine (a VM or a container without /sys/devices/system/cpu/cpu0/cpufreq)"
        return _judge(ctx, cid, None, None, "", why)
    value = ",".join(sorted(found))
    said = "; ".join(_("{governor} on {count} core(s)").format(governor=g, count=n) for g, n in sorted(found.items()))
    return _judge(ctx, cid, value, set(found) == {"performance"}, _("governor {said}").format(said=said))


@check("perf.thp", "perf", N_("Transparent huge pages are `always`"))
def check_thp(ctx: Context) -> Outcome:
    cid = "perf.thp"
    if (out := _applies(ctx, cid)) is not None:
        return out
    text = _read(ctx, THP)
    if text is None:
        return _judge(ctx, cid, None, None, "", _why_unreadable(ctx, THP))
    m = re.search(r"\[(\w+)\]", text)
    value = m.group(1) if m else text
    return _judge(
        ctx,
        cid,
        value,
        value == "always",
        _("transparent huge pages: {value} ({path}: {text})").format(value=value, path=THP, text=text),
    )


def _swap_active(ctx: Context) -> bool | None:
    text = _read(ctx, SWAPS)
    if text is None:
        return None
    return any(line.strip() for line in text.splitlines()[1:])


@check("perf.swap", "perf", N_("The kernel avoids swapping (vm.swappiness 0 or 1, or no swap)"))
def check_swap(ctx: Context) -> Outcome:
    cid = "perf.swap"
    text = _read(ctx, SWAPPINESS)
    active = _swap_active(ctx)
    if text is None or not text.isdigit():
        if active is False:
            return _judge(ctx, cid, "no swap", True, "no swap device or file is active")
        return _judge(ctx, cid, None, None, "", _why_unreadable(ctx, SWAPPINESS))
    value = int(text)
    if value <= 1:
        return _judge(ctx, cid, text, True, f"vm.swappiness {value}")
    if active is False:
        return _judge(
            ctx, cid, f"{text} (no swap)", True, _("vm.swappiness {value}, but no swap is active").format(value=value)
        )
    found = _("vm.swappiness {value} with swap active") if active else "vm.swappiness {value}"
    return _judge(ctx, cid, text, False, found.format(value=value))


@check("perf.numa_balancing", "perf", N_("Automatic NUMA balancing is off on multi-node hosts"))
def check_numa_balancing(ctx: Context) -> Outcome:
    cid = "perf.numa_balancing"
    text = _read(ctx, NUMA_BALANCING)
    nodes = _numa_nodes(ctx)
    if text is None:
        if ctx.live and not ctx.host.path(NUMA_BALANCING).exists():
            return _judge(ctx, cid, "absent", True, "this kernel has no automatic NUMA balancing")
        return _judge(ctx, cid, None, None, "", _why_unreadable(ctx, NUMA_BALANCING))
    if text == "0":
        return _judge(ctx, cid, text, True, "kernel.numa_balancing 0")
    if nodes == 1:
        return _judge(
            ctx,
            cid,
            text,
            True,
            _("kernel.numa_balancing {value}, on one NUMA node: nothing to move").format(value=text),
        )
    where = _(" on {count} NUMA nodes").format(count=nodes) if nodes else ""
    return _judge(ctx, cid, text, False, f"kernel.numa_balancing {text}{where}")


def _numa_nodes(ctx: Context) -> int | None:
    text = _read(ctx, "/sys/devices/system/node/online")
    cpus = expand_cpus(text) if text else None
    return len(cpus) if cpus else None


@check("perf.sched_migration", "perf", N_("The scheduler's migration cost is 50,000-100,000 ns"))
def check_sched_migration(ctx: Context) -> Outcome:
    cid = "perf.sched_migration"
    if (out := _applies(ctx, cid)) is not None:
        return out
    for path in MIGRATION:
        text = _read(ctx, path)
        if text and text.isdigit():
            value = int(text)
            good = 50000 <= value <= 100000
            return _judge(ctx, cid, text, good, f"sched_migration_cost_ns {value:,} ({path})")
    return _judge(
        ctx,
        cid,
        None,
        None,
        "",
        _("neither {first} nor {second} is readable (debugfs needs root)").format(
            first=MIGRATION[0], second=MIGRATION[1]
        ),
    )


@check("perf.kernel", "perf", N_("Kernel 5.10 or newer"))
def check_kernel(ctx: Context) -> Outcome:
    cid = "perf.kernel"
    if (out := _applies(ctx, cid)) is not None:
        return out
    text = _read(ctx, OSRELEASE)
    m = re.match(r"(\d+)\.(\d+)", text or "")
    if not m:
        return _judge(ctx, cid, None, None, "", _why_unreadable(ctx, OSRELEASE))
    good = (int(m.group(1)), int(m.group(2))) >= (5, 10)
    return _judge(ctx, cid, text, good, f"kernel {text}")


# -- the engine's processes -----------------------------------------------------------------------


def engine_pids(ctx: Context) -> list[int]:
    """The running vLLM processes (API server, engine core, workers), from /proc; read once."""
    if "perf_engine_pids" not in ctx.__dict__:
        ctx.__dict__["perf_engine_pids"] = _scan_engine_pids(ctx)
    return ctx.__dict__["perf_engine_pids"]


def _plain(ctx: Context) -> bool:
    """This machine, read by doctor itself: /proc files are read plainly (hundreds of them per
    run: the host layer's checks, made for untrusted recorded trees, cost more). A bundle's
    recording host sees what it reads, so that the archive replays."""
    return type(ctx.host) is Host and ctx.host.root == Path("/")


def _proc(ctx: Context, path: str, limit: int = 4096) -> str | None:
    if _plain(ctx):
        return _read_plainly(path, limit)
    return ctx.host.read_text(path)


def _read_plainly(path: str, limit: int) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _cmdline(ctx: Context, pid: str) -> str | None:
    """Every process's command line is looked at, and none is noted by a bundle: only the
    engine's processes are (other programs' arguments may hold secrets)."""
    if ctx.host.root == Path("/"):
        return _read_plainly(f"/proc/{pid}/cmdline", 4096)
    unseen = ctx.host if type(ctx.host) is Host else Host(root=ctx.host.root, env={})  # the tree, unrecorded
    return unseen.read_text(f"/proc/{pid}/cmdline")


def _scan_engine_pids(ctx: Context) -> list[int]:
    proc = ctx.host.path("/proc")
    pids: list[int] = []
    try:
        entries = [e.name for e in proc.iterdir() if e.name.isdigit()][:MAX_PROCS]
    except OSError:
        return []
    for name in entries:
        cmd = _cmdline(ctx, name)
        if not cmd or "vllm" not in cmd.lower():
            continue
        words = [w for w in re.split(r"[\0\n]", cmd) if w]  # a bundle stores one word a line
        first = words[0].rsplit("/", 1)[-1] if words else ""
        if (
            first.startswith("VLLM::")
            or first == "vllm"
            or (len(words) > 1 and words[1].rsplit("/", 1)[-1] == "vllm")
            or any(w.startswith("vllm.entrypoints") for w in words[1:3])
        ):
            pids.append(int(name))
            if not _plain(ctx):
                ctx.host.read_text(f"/proc/{name}/cmdline")  # a bundle keeps this one
    return sorted(pids)


def _allowed(ctx: Context, status_path: str) -> list[int] | None:
    """The cores a task may run on: on this machine asked of the kernel (a system call, no file),
    in a recorded tree from the `Cpus_allowed_list:` line of its status file."""
    if _plain(ctx):
        import os

        try:
            return sorted(os.sched_getaffinity(int(status_path.split("/")[-2])))
        except (OSError, ValueError):
            return None
    text = ctx.host.read_text(status_path) or ""
    m = re.search(r"^Cpus_allowed_list:\s*(\S+)", text, re.M)
    return expand_cpus(m.group(1)) if m else None


@check("perf.allocator", "perf", N_("jemalloc or tcmalloc is preloaded (LD_PRELOAD)"))
def check_allocator(ctx: Context) -> Outcome:
    cid = "perf.allocator"
    if (out := _applies(ctx, cid)) is not None:
        return out
    for pid in engine_pids(ctx)[:1]:  # a running engine: what it actually mapped
        maps = _proc(ctx, f"/proc/{pid}/maps", 16 * 2**20)
        if maps is not None:
            libs = sorted({m.group(0) for m in re.finditer(r"lib(?:jemalloc|tcmalloc)[\w.]*\.so[\d.]*", maps)})
            return _judge(
                ctx,
                cid,
                ",".join(libs) or "glibc malloc",
                bool(libs),
                _("the running engine (pid {pid}) uses {libs}").format(pid=pid, libs=", ".join(libs) or "glibc malloc"),
            )
    if not ctx.env_known:
        return _judge(ctx, cid, None, None, "", _("the environment was not recorded (.recorded/env)"))
    preload = [p for p in re.split(r"[:\s]+", ctx.host.env.get("LD_PRELOAD", "")) if p]
    libs = [p for p in preload if any(a in p.rsplit("/", 1)[-1] for a in ALLOCATORS)]
    if not libs:
        have = installed_allocator(ctx.host)
        found = (
            _("LD_PRELOAD has no allocator ({preload})").format(preload=":".join(preload))
            if preload
            else _("LD_PRELOAD is empty: glibc malloc")
        )
        if have:
            found += _("; {lib} is installed").format(lib=have)
        return _judge(ctx, cid, "glibc malloc", False, found)
    missing = [p for p in libs if "/" in p and ctx.host.read_text(p) is None and not ctx.host.path(p).exists()]
    if missing:
        return _judge(
            ctx,
            cid,
            ",".join(libs),
            False,
            _("LD_PRELOAD names {libs}, which does not exist").format(libs=", ".join(missing)),
        )
    return _judge(
        ctx,
        cid,
        ",".join(p.rsplit("/", 1)[-1] for p in libs),
        True,
        _("LD_PRELOAD has {libs}").format(libs=", ".join(libs)),
    )


def installed_allocator(host: Any) -> str | None:
    """The path of a jemalloc or tcmalloc library installed on the host, for the row and --write-env."""
    dirs = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
    for d in dirs:
        for name in ("libjemalloc.so.2", "libtcmalloc.so.4", "libtcmalloc_minimal.so.4"):
            if host.path(f"{d}/{name}").exists():
                return f"{d}/{name}"
    return None


@check("perf.cpu_binding", "perf", N_("The running engine's processes are bound to CPU cores"))
def check_cpu_binding(ctx: Context) -> Outcome:
    cid = "perf.cpu_binding"
    if (out := _applies(ctx, cid)) is not None:
        return out
    pids = engine_pids(ctx)
    if not pids:
        return skip(_("no engine is running: its CPU binding is checked while it runs"))
    online = online_cpus(ctx)
    if online is None:
        return _judge(ctx, cid, None, None, "", _why_unreadable(ctx, CPU_ONLINE))
    bound: list[str] = []
    bound_pids: set = set()
    for pid in pids:
        try:
            tasks = sorted((t.name for t in ctx.host.path(f"/proc/{pid}/task").iterdir()), key=int)[:MAX_TASKS]
        except (OSError, ValueError):
            tasks = []
        lists = [_allowed(ctx, f"/proc/{pid}/task/{t}/status") for t in tasks]
        lists = lists or [_allowed(ctx, f"/proc/{pid}/status")]
        narrow = [cpus for cpus in lists if cpus is not None and set(cpus) < set(online)]
        if narrow:
            cores = min(len(c) for c in narrow)
            bound_pids.add(pid)
            bound.append(
                _("{pid} ({threads} thread(s) on {cores}+ core(s))").format(pid=pid, threads=len(narrow), cores=cores)
            )
    value = f"{len(bound)}/{len(pids)} bound"
    if len(bound) == len(pids):
        return _judge(ctx, cid, value, True, _("every engine process is bound: {pids}").format(pids=", ".join(bound)))
    free = [str(p) for p in pids if p not in bound_pids]
    return _judge(
        ctx,
        cid,
        value,
        False,
        _("engine process(es) {pids} may run on any of the {count} online cores").format(
            pids=", ".join(free), count=len(online)
        ),
    )


# -- the variables that change NPU throughput ----------------------------------------------------


def _variable(ctx: Context, cid: str, name: str) -> Outcome:
    if (out := _applies(ctx, cid)) is not None:
        return out
    if not ctx.env_known:
        return _judge(ctx, cid, None, None, "", _("the environment was not recorded (.recorded/env)"))
    value = ctx.host.env.get(name)
    accept = [str(a) for a in spec()[cid].get("accept", ())]
    shown = "unset" if value is None else value
    return _judge(
        ctx,
        cid,
        shown,
        value in accept,
        f"{name}={shown}" if value is not None else _("{name} is unset").format(name=name),
    )


@check("perf.task_queue", "perf", N_("TASK_QUEUE_ENABLE dispatches operators through the queue (2, or 1)"))
def check_task_queue(ctx: Context) -> Outcome:
    return _variable(ctx, "perf.task_queue", "TASK_QUEUE_ENABLE")


@check("perf.hccl_expansion", "perf", N_("HCCL_OP_EXPANSION_MODE is AIV"))
def check_hccl_expansion(ctx: Context) -> Outcome:
    return _variable(ctx, "perf.hccl_expansion", "HCCL_OP_EXPANSION_MODE")


@check("perf.cpu_affinity", "perf", N_("CPU_AFFINITY_CONF binds torch_npu's threads (1 or 2)"))
def check_cpu_affinity(ctx: Context) -> Outcome:
    cid = "perf.cpu_affinity"
    if (out := _applies(ctx, cid)) is not None:
        return out
    if not ctx.env_known:
        return _judge(ctx, cid, None, None, "", _("the environment was not recorded (.recorded/env)"))
    value = ctx.host.env.get("CPU_AFFINITY_CONF")
    mode = (value or "").split(",")[0].strip()
    shown = "unset" if value is None else value
    return _judge(
        ctx,
        cid,
        shown,
        mode in ("1", "2"),
        f"CPU_AFFINITY_CONF={shown}" if value else _("{name} is unset").format(name="CPU_AFFINITY_CONF"),
    )


@check("perf.npu_alloc", "perf", N_("PYTORCH_NPU_ALLOC_CONF uses expandable segments (or max_split_size_mb)"))
def check_npu_alloc(ctx: Context) -> Outcome:
    cid = "perf.npu_alloc"
    if (out := _applies(ctx, cid)) is not None:
        return out
    if not ctx.env_known:
        return _judge(ctx, cid, None, None, "", _("the environment was not recorded (.recorded/env)"))
    value = ctx.host.env.get("PYTORCH_NPU_ALLOC_CONF")
    if value is None:  # vllm-ascend's platform sets expandable_segments:True itself when unset
        return _judge(
            ctx, cid, "unset", True, _("PYTORCH_NPU_ALLOC_CONF unset: vllm-ascend sets expandable_segments:True")
        )
    good = "expandable_segments:true" in value.replace(" ", "").lower() or "max_split_size_mb" in value
    return _judge(ctx, cid, value, good, f"PYTORCH_NPU_ALLOC_CONF={value}")


@check("perf.launch_blocking", "perf", N_("ASCEND_LAUNCH_BLOCKING is not set"))
def check_launch_blocking(ctx: Context) -> Outcome:
    cid = "perf.launch_blocking"
    if (out := _applies(ctx, cid)) is not None:
        return out
    if not ctx.env_known:
        return _judge(ctx, cid, None, None, "", _("the environment was not recorded (.recorded/env)"))
    value = ctx.host.env.get("ASCEND_LAUNCH_BLOCKING")
    good = value in (None, "", "0")
    return _judge(
        ctx,
        cid,
        value or "unset",
        good,
        f"ASCEND_LAUNCH_BLOCKING={value}" if value else _("{name} is unset").format(name="ASCEND_LAUNCH_BLOCKING"),
    )


# -- doctor --write-env -------------------------------------------------------------------------


def env_file(platform: str, host: Any, profile: Any = None, profile_name: str | None = None) -> tuple[str, int]:
    """The text of a shell file exporting the variables the perf group recommends for this host
    (and `profile`), each with a comment saying why; and how many it exports. Secret-named
    variables of the profile are never written."""
    import shlex

    from engine.redact import is_secret_name

    where = {"ascend": "an Ascend NPU host", "cpu": "a CPU engine host", "cuda": "a CUDA host"}.get(platform, platform)
    lines = [
        "# Written by `ascendctl doctor --write-env`"
        + (f" for profile {profile_name}" if profile_name else "")
        + f" on {where}.",
        "# Source it before starting the engine: . THIS_FILE",
        "",
    ]
    exported = 0
    tp = getattr(getattr(profile, "engine", None), "tensor_parallel_size", 1) or 1
    several = tp > 1 or getattr(profile, "nodes", None) is not None
    wanted = dict(getattr(profile, "env", None) or {})
    for cid, s in spec().items():
        name = s.get("env")
        if not name or platform not in s["platforms"]:
            continue
        why = f"# {cid}: {s['effect']} ({s['level']}: {s['source']})"
        if name in wanted:
            lines += [
                why,
                f"# the profile sets {name} itself; its value is kept",
                f"export {name}={shlex.quote(str(wanted.pop(name)))}",
                "",
            ]
            exported += 1
            continue
        if name == "LD_PRELOAD":
            lib = installed_allocator(host)
            if lib is None:
                lines += [
                    why,
                    "# no jemalloc or tcmalloc installed: sudo apt install libjemalloc2 (yum install jemalloc), then:",
                    "# export LD_PRELOAD=/usr/lib/$(uname -m)-linux-gnu/libjemalloc.so.2${LD_PRELOAD:+:$LD_PRELOAD}",
                    "",
                ]
                continue
            lines += [why, f"export LD_PRELOAD={shlex.quote(lib)}${{LD_PRELOAD:+:$LD_PRELOAD}}", ""]
            exported += 1
            continue
        if name == "HCCL_OP_EXPANSION_MODE" and profile is not None and not several:
            lines += [
                why,
                f"# profile {profile_name} runs on one NPU (tensor_parallel_size 1): no collectives to speed up",
                f"# export {name}={shlex.quote(str(s['recommended']))}",
                "",
            ]
            continue
        lines += [why, f"export {name}={shlex.quote(str(s['recommended']))}", ""]
        exported += 1
    blocking = host.env.get("ASCEND_LAUNCH_BLOCKING")
    if platform == "ascend" and blocking not in (None, "", "0") and "ASCEND_LAUNCH_BLOCKING" not in wanted:
        s = spec()["perf.launch_blocking"]
        lines += [
            f"# perf.launch_blocking: {s['effect']} ({s['level']}: {s['source']})",
            "unset ASCEND_LAUNCH_BLOCKING",
            "",
        ]
    for name, value in sorted(wanted.items()):
        if is_secret_name(name):
            lines += [
                f"# {name}: a secret of profile {profile_name}, not written here; set it from your secret store",
                "",
            ]
            continue
        lines += [f"# from profile {profile_name}'s env: section", f"export {name}={shlex.quote(str(value))}", ""]
        exported += 1
    return "\n".join(lines).rstrip("\n") + "\n", exported
