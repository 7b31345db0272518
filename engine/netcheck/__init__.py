"""`ascendctl netcheck`: the multi-node network checks vllm-ascend's guides ask for by hand.

    report = run_netcheck()                         # this machine
    report = run_netcheck(root="recorded/tree")     # a recorded machine (doctor's --root trees)
    report.exit_code()                              # 0 clean / warnings, 1 errors

For every NPU NIC, hccn_tool's answers (link, net_health, ip, gateway, netdetect, lldp, fec, tls,
optical, link_stat) become one row per question, naming the NICs that fail; then /etc/hccn.conf
against the live addresses, HCCL_IF_IP and the *_SOCKET_IFNAME variables against this host's
interfaces, HCCL's timeouts, and reachability of the peers given (NPU NICs with `-ping`, host
ports with a TCP connect). What each state means and its fix live in verdicts.yaml.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from engine.data import load_yaml
from engine.doctor import host_name
from engine.doctor.model import CheckResult, DoctorReport, Outcome, Status, error, ok, skip, warn
from engine.i18n import N_, _
from engine.netcheck import hccn
from engine.system.host import Host
from engine.system.runner import ToolMissing, ToolTimeout

HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
# Queried on every NIC, in this order; `-ping` is asked per peer.
QUERIES = ("link", "net_health", "ip", "gateway", "netdetect", "lldp", "fec", "tls", "optical", "link_stat")
IFNAME_VARS = ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def verdicts() -> dict[str, Any]:
    return load_yaml("engine.netcheck", "verdicts.yaml")


@dataclass
class Nic:
    index: int
    answers: dict[str, str | None] = field(default_factory=dict)  # query -> stdout; None: no answer
    problems: dict[str, str] = field(default_factory=dict)  # query -> why there is no answer

    def fact(self) -> dict[str, Any]:
        a = self.answers
        ip, mask = hccn.ip_address(a.get("ip") or "")
        stat = hccn.link_stat(a.get("link_stat") or "")
        opt = hccn.optical(a.get("optical") or "")
        return {
            "nic": self.index,
            "link": hccn.link_status(a.get("link") or ""),
            "net_health": hccn.net_health(a.get("net_health") or ""),
            "ip": ip,
            "netmask": mask,
            "gateway": hccn.gateway(a.get("gateway") or ""),
            "netdetect": hccn.netdetect(a.get("netdetect") or ""),
            "lldp_ifname": hccn.lldp_ifname(a.get("lldp") or ""),
            "fec": hccn.fec_mode(a.get("fec") or ""),
            "tls_switch": hccn.tls_switch(a.get("tls") or ""),
            "optical_present": opt.present,
            "link_up_count": stat.up_count,
            "link_down_records": len(stat.downs),
        }


@dataclass
class NetContext:
    host: Host
    live: bool
    nics: list[Nic]
    tool: str | None
    interfaces: dict[str, list[str]] | None  # name -> addresses; None: unknown (a recording)
    peers_npu: Sequence[str] = ()
    peers_tcp: Sequence[tuple[str, int]] = ()
    connect: Callable[[str, int, float], None] | None = None
    timeout: float = 3.0
    npu: bool = True  # an NPU host (device nodes, npu-smi, driver or CANN); False: nothing for hccn_tool


def _ranges(ids: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out: list[str] = []
    ids = sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ", ".join(out)


def parse_nics(spec: str) -> list[int]:
    """ "0-7" / "3" / "0,2,4-5" -> the NIC indices. BadInput when malformed."""
    from engine.errors import BadInput

    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise BadInput(f"--nics {spec!r}: not a list of NIC indices", "write them as 0-7, 0-15 or 0,2,4")
        out.extend(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return sorted(set(out))


def nic_indices(host: Host, nics: Sequence[int] | None = None) -> list[int]:
    """Which NICs to ask: `nics` if given; else those /etc/hccn.conf configures; else the chips
    `npu-smi info -m` lists; else the /dev/davinciN nodes; else 0..7 (A2's eight)."""
    if nics:
        return sorted(set(nics))
    conf = host.read_text("/etc/hccn.conf")
    if conf:
        ids = sorted(i for i, v in hccn.hccn_conf(conf).items() if "address" in v)
        if ids:
            return ids
    try:
        res = host.runner.run(["npu-smi", "info", "-m"], timeout=10.0)
        ids = hccn.chip_logic_ids(res.stdout) if res.ok else []
        if ids:
            return ids
    except (ToolMissing, ToolTimeout):
        pass
    dev = host.path("/dev")
    try:
        ids = sorted(int(p.name[7:]) for p in dev.iterdir() if p.name[7:].isdigit() and p.name.startswith("davinci"))
    except OSError:
        ids = []
    return ids or list(range(8))


def find_tool(host: Host) -> str | None:
    found = host.runner.which("hccn_tool")
    if found:
        return found
    return HCCN_TOOL if host.path(HCCN_TOOL).is_file() else None


TIMED_OUT = N_("no answer within the timeout")
# The most of one hccn_tool answer that is read (a real one is a few hundred bytes).
ANSWER_LIMIT = 64 * 1024


def _ask(host: Host, tool: str, nic: int, *args: str, timeout: float = 10.0) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why there is no answer)."""
    try:
        res = host.runner.run([tool, "-i", str(nic), *args], timeout=timeout)
    except ToolTimeout:
        return None, TIMED_OUT
    except ToolMissing:
        return None, N_("not recorded")
    if not res.ok and not res.stdout.strip():
        return None, (res.stderr.strip() or f"exit status {res.returncode}").splitlines()[0][:120]
    # An answer is a few lines; a runaway one is cut so that parsing it costs nothing.
    return res.stdout[:ANSWER_LIMIT], None


def _collect_one(host: Host, tool: str, index: int, timeout: float) -> Nic:
    nic = Nic(index)
    for q in QUERIES:
        if TIMED_OUT in nic.problems.values():  # a NIC whose tool hangs once hangs again: stop asking
            nic.answers[q] = None
            nic.problems[q] = N_("not asked after a timeout")
            continue
        out, why = _ask(host, tool, index, f"-{q}", "-g", timeout=timeout)
        nic.answers[q] = out
        if why:
            nic.problems[q] = why
    return nic


def collect(host: Host, tool: str, indices: Sequence[int], workers: int = 4, timeout: float = 10.0) -> list[Nic]:
    """Every query on every NIC: one NIC's questions in turn, a few NICs at a time (16 NICs x 10
    questions one after another take long on a loaded host)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(indices)))) as pool:
        return list(pool.map(lambda i: _collect_one(host, tool, i, timeout), indices))


# --- checks: each returns an Outcome, the runner adds id and category -----------------------------


def _fix(template: str, nics: Sequence[int]) -> str:
    """A fix for the NICs named: a command runs once per NIC (`$i`, then `for i in ...`); a sentence
    names them (`NIC 0-3`). `template` is the English (verdicts.yaml's or ours), translated here."""
    if not template.startswith("hccn_tool"):
        return _(template).replace("{nic}", _ranges(nics))
    return _(template).replace("{nic}", str(nics[0]) if len(nics) == 1 else "$i") + (
        f"  (for i in {' '.join(map(str, nics))})" if len(nics) > 1 else ""
    )


def state_verdict(table: str, state: str) -> dict[str, Any] | None:
    """verdicts.yaml's entry for a state word of hccn_tool (`same_as` followed); None when unknown."""
    data = verdicts()[table]
    entry = data.get(state)
    if entry and "same_as" in entry:
        entry = data[entry["same_as"]]
    return entry


def _state_check(ctx: NetContext, query: str, table: str, parse: Callable[[str], str | None], label: str) -> Outcome:
    by_state: dict[str, list[int]] = {}
    unknown: list[int] = []
    for n in ctx.nics:
        state = parse(n.answers.get(query) or "")
        if state is None:
            unknown.append(n.index)
        else:
            by_state.setdefault(state, []).append(n.index)
    if not by_state:
        return skip(_("no NIC answered `-{query} -g`").format(query=query))
    entries = {s: state_verdict(table, s) for s in by_state}
    # A word verdicts.yaml does not list is an error: never taken for ok.
    status = {s: (e or {}).get("status", "error") for s, e in entries.items()}
    bad = [(s, ids) for s, ids in by_state.items() if status[s] != "ok"]
    tail = _("; no answer from NIC {nics}").format(nics=_ranges(unknown)) if unknown else ""
    label = _(label)
    if not bad:
        states = _(", ").join(_on_nics(s, ids) for s, ids in by_state.items())
        if unknown:
            return warn(
                _("{label} {states}").format(label=label, states=states) + tail,
                _("query `hccn_tool -i N -{query} -g` on NIC {nics} by hand").format(
                    query=query, nics=_ranges(unknown)
                ),
            )
        return ok(_("{label} {states}").format(label=label, states=states))
    worst = Status.ERROR if any(status[s] == "error" for s, _ in bad) else Status.WARN
    parts, fixes = [], []
    for s, ids in bad:
        entry = entries[s]
        meaning = _(entry["meaning"]) if entry else _("a state netcheck does not know")
        parts.append(_("{state} on NIC {nics} ({meaning})").format(state=s, nics=_ranges(ids), meaning=meaning))
        fixes.append(
            _fix(entry["fix"], ids)
            if entry and entry.get("fix")
            else _("look up `{state}` in the hccn_tool manual").format(state=s)
        )
    summary = _("{label} {states}").format(label=label, states=_("; ").join(parts)) + tail
    return Outcome(worst, summary, _("; ").join(fixes))


def _on_nics(value: Any, ids: Sequence[int]) -> str:
    """ "Success on NIC 0-7" """
    return _("{value} on NIC {nics}").format(value=value, nics=_ranges(ids))


def check_tool(ctx: NetContext) -> Outcome:
    if ctx.tool is None and not ctx.npu:
        return skip(_("no NPU on this host: no NPU NIC for hccn_tool to ask"))
    if ctx.tool is None:
        return error(
            _("hccn_tool not found (not on PATH, not at {path})").format(path=HCCN_TOOL),
            _("install the Ascend driver, or mount /usr/local/Ascend/driver/tools into the container"),
        )
    where = _("hccn_tool at {path}").format(path=ctx.tool) if ctx.live else _("hccn_tool answers recorded")
    silent = [n for n in ctx.nics if n.answers and all(v is None for v in n.answers.values())]
    if ctx.nics and len(silent) == len(ctx.nics):
        # Every check below would skip: a node whose NICs could not be checked must not pass.
        why = next((p for n in silent for p in n.problems.values() if p), N_("no answer"))
        return error(
            _("{where} answered no question on NIC {nics}: {why}").format(
                where=where, nics=_ranges([n.index for n in silent]), why=_(why)
            ),
            _(
                "run `hccn_tool -i 0 -link -g` by hand; a busy or hung driver answers nothing "
                "(check `npu-smi info`, dmesg, and that no other job holds the NPUs)"
            ),
        )
    return ok(_("{where}; NIC(s) {nics}").format(where=where, nics=_ranges([n.index for n in ctx.nics])))


def check_link(ctx: NetContext) -> Outcome:
    return _state_check(ctx, "link", "link", hccn.link_status, N_("link"))


def check_health(ctx: NetContext) -> Outcome:
    return _state_check(ctx, "net_health", "net_health", hccn.net_health, N_("net health"))


def check_fec(ctx: NetContext) -> Outcome:
    return _state_check(ctx, "fec", "fec", hccn.fec_mode, N_("FEC mode"))


def check_ip(ctx: NetContext) -> Outcome:
    facts = {n.index: hccn.ip_address(n.answers.get("ip") or "") for n in ctx.nics}
    answered = [n.index for n in ctx.nics if n.answers.get("ip") is not None]
    if not answered:
        return skip(_("no NIC answered `-{query} -g`").format(query="ip"))
    missing = [i for i in answered if facts[i][0] is None]
    seen: dict[str, list[int]] = {}
    for i, (ip, _mask) in facts.items():
        if ip:
            seen.setdefault(ip, []).append(i)
    dups = {ip: ids for ip, ids in seen.items() if len(ids) > 1}
    if missing:
        return error(
            _("no address on NIC {nics}").format(nics=_ranges(missing)),
            _fix(
                N_(
                    "hccn_tool -i {nic} -ip -s address <A> netmask <M>, and address_{nic}= / netmask_{nic}= in "
                    "/etc/hccn.conf"
                ),
                missing,
            ),
        )
    if dups:
        ip, ids = next(iter(dups.items()))
        return error(
            _("NICs {nics} share the address {ip}").format(nics=_ranges(ids), ip=ip),
            _("give every NIC its own address in /etc/hccn.conf"),
        )
    got = ", ".join(f"{i}={facts[i][0]}" for i in answered)
    return ok(_("addresses: {addresses}").format(addresses=got))


def _same_everywhere(
    ctx: NetContext, query: str, parse: Callable[[str], str | None], what: str, fix: str, address: bool = False
) -> Outcome:
    values = {n.index: parse(n.answers.get(query) or "") for n in ctx.nics if n.answers.get(query) is not None}
    if not values:
        return skip(_("no NIC answered `-{query} -g`").format(query=query))
    what = _(what)
    missing = [i for i, v in values.items() if v is None]
    if missing:
        return warn(_("no {what} on NIC {nics}").format(what=what, nics=_ranges(missing)), _fix(fix, missing))
    if address:
        bad = {i: v for i, v in values.items() if not _is_address(v)}
        if bad:
            return error(
                _("{what} is not an IP address: {values}").format(what=what, values=_grouped(bad)), _fix(fix, list(bad))
            )
    return ok(_("{what}: {values}").format(what=what, values=_grouped(values)))


def _is_address(value: str | None) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(value or "")
    except ValueError:
        return False
    return True


def _grouped(values: Mapping[int, Any]) -> str:
    """{0: "a", 1: "a", 2: "b"} -> "a on NIC 0-1, b on NIC 2"."""
    by: dict[Any, list[int]] = {}
    for i, v in values.items():
        by.setdefault(v, []).append(i)
    return _(", ").join(_on_nics(v, ids) for v, ids in by.items())


def check_gateway(ctx: NetContext) -> Outcome:
    return _same_everywhere(
        ctx,
        "gateway",
        hccn.gateway,
        N_("gateway"),
        N_("hccn_tool -i {nic} -gateway -s gateway <G>, and gateway_{nic}= in /etc/hccn.conf"),
        address=True,
    )


def check_netdetect(ctx: NetContext) -> Outcome:
    return _same_everywhere(
        ctx,
        "netdetect",
        hccn.netdetect,
        N_("detect address"),
        N_("hccn_tool -i {nic} -netdetect -s address <gateway>, and netdetect_{nic}= in /etc/hccn.conf"),
        address=True,
    )


def check_lldp(ctx: NetContext) -> Outcome:
    return _same_everywhere(
        ctx,
        "lldp",
        hccn.lldp_ifname,
        N_("switch port (LLDP)"),
        N_("check that the cable of NIC {nic} reaches a switch port with LLDP enabled"),
    )


def check_tls(ctx: NetContext) -> Outcome:
    values = {
        n.index: hccn.tls_switch(n.answers.get("tls") or "") for n in ctx.nics if n.answers.get("tls") is not None
    }
    known = {i: v for i, v in values.items() if v is not None}
    if not known:
        return skip(_("no NIC answered `-tls -g` with a tls switch"))
    odd = {i: v[:20] for i, v in known.items() if v not in ("0", "1")}
    if odd:
        return error(
            _("TLS switch value netcheck does not know (0 or 1 expected): {values}").format(values=_grouped(odd)),
            _("read `hccn_tool -i N -tls -g` by hand; set one value on every NIC: hccn_tool -i $i -tls -s enable 0"),
        )
    if len(set(known.values())) > 1:
        on = [i for i, v in known.items() if v == "1"]
        return error(
            _("TLS differs between NICs: enabled on {on}, disabled on {off}").format(
                on=_ranges(on), off=_ranges([i for i in known if i not in on])
            ),
            _(
                "use one setting on every NIC of every node (the guides use 0): for i in 0..N: hccn_tool -i $i -tls "
                "-s enable 0"
            ),
        )
    v = next(iter(known.values()))
    state = _("TLS switch {value} (enabled) on NIC {nics}; it must match on every node")
    if v != "1":
        state = _("TLS switch {value} (disabled) on NIC {nics}; it must match on every node")
    return ok(state.format(value=v, nics=_ranges(list(known))))


def check_optical(ctx: NetContext) -> Outcome:
    answered = [n for n in ctx.nics if n.answers.get("optical") is not None]
    if not answered:
        return skip(_("no NIC answered `-{query} -g`").format(query="optical"))
    errors, warns = [], []
    for n in answered:
        o = hccn.optical(n.answers["optical"] or "")
        if o.present is False:
            errors.append(_("NIC {nic}: module reported not present").format(nic=n.index))
        los = [f"{k} LOS {v}" for k, v in (("Tx", o.tx_los), ("Rx", o.rx_los)) if v not in (None, "0x0", "NA")]
        if los:
            errors.append(_("NIC {nic}: {what}").format(nic=n.index, what=", ".join(los)))
        if o.out_of_range:
            warns.append(_("NIC {nic}: {what}").format(nic=n.index, what=", ".join(o.out_of_range)))
    fix = _(
        "reseat or replace the optical module and cable; compare with `hccn_tool -i N -optical -g` on a healthy NIC"
    )
    if errors:
        return error(_("; ").join(errors + warns), fix)
    if warns:
        return warn(_("optical power outside its thresholds: {nics}").format(nics=_("; ").join(warns)), fix)
    return ok(
        _("optical modules present, no loss of signal on NIC {nics}").format(nics=_ranges([n.index for n in answered]))
    )


def check_flaps(ctx: NetContext) -> Outcome:
    answered = [n for n in ctx.nics if n.answers.get("link_stat") is not None]
    if not answered:
        return skip(_("no NIC answered `-{query} -g`").format(query="link_stat"))
    flapped, still_down = {}, []
    for n in answered:
        st = hccn.link_stat(n.answers["link_stat"] or "")
        if st.downs:
            flapped[n.index] = st
        if st.latest == "LINK DOWN":
            still_down.append(n.index)
    if flapped:
        downs = _("NIC {nic}: {count} down(s), last at {last}")
        parts = _("; ").join(downs.format(nic=i, count=len(s.downs), last=s.downs[0]) for i, s in flapped.items())
        if still_down:
            return error(
                _("the newest record is LINK DOWN (no LINK UP since) on NIC {nics}; {records}").format(
                    nics=_ranges(still_down), records=parts
                ),
                _(
                    "the link went down and stayed down: check `-link -g`, then the module and cable "
                    "(`-optical -g`) and the switch port; `hccn_tool -i N -cfg recovery` once the cause is fixed"
                ),
            )
        return warn(
            _("link went down since boot: {records}").format(records=parts),
            _(
                "a link that keeps flapping breaks HCCL mid-run: check the module and cable; watch `-link_stat -g` "
                "for new records"
            ),
        )
    return ok(_("no LINK DOWN records on NIC {nics}").format(nics=_ranges([n.index for n in answered])))


def check_hccn_conf(ctx: NetContext) -> Outcome:
    text = ctx.host.read_text("/etc/hccn.conf")
    if text is None:
        if ctx.host.partial:
            return skip(_("/etc/hccn.conf not recorded"))
        return warn(
            _("/etc/hccn.conf missing: NIC addresses set by hand are lost at reboot"),
            _("write address_N, netmask_N, netdetect_N, gateway_N for every NIC into /etc/hccn.conf"),
        )
    conf = hccn.hccn_conf(text)
    diffs = []
    for n in ctx.nics:
        live_ip, _mask = hccn.ip_address(n.answers.get("ip") or "")
        want = conf.get(n.index, {}).get("address")
        if want is None:
            diffs.append(_("NIC {nic} has no address_{nic}").format(nic=n.index))
        elif live_ip is not None and live_ip != want:
            differs = _("NIC {nic}: address_{nic}={want} but the NIC has {live}")
            diffs.append(differs.format(nic=n.index, want=want, live=live_ip))
    if diffs:
        return warn(
            "/etc/hccn.conf: " + _("; ").join(diffs), _("make /etc/hccn.conf and `hccn_tool -i N -ip -g` agree")
        )
    return ok(_("/etc/hccn.conf configures NIC {nics}").format(nics=_ranges(sorted(conf))))


def _own_addresses(ctx: NetContext) -> set[str]:
    return {a for addrs in (ctx.interfaces or {}).values() for a in addrs}


def check_if_ip(ctx: NetContext) -> Outcome:
    value = ctx.host.env.get("HCCL_IF_IP")
    if not value:
        return skip(_("HCCL_IF_IP not set"))
    if ctx.interfaces is None:
        return skip(_("this recording holds no interface list"))
    if value not in _own_addresses(ctx):
        return error(
            _("HCCL_IF_IP={value} is not an address of this host").format(value=value),
            _("set HCCL_IF_IP to this node's own address on the network the nodes share (`ip -4 addr`)"),
        )
    name = next(n for n, addrs in ctx.interfaces.items() if value in addrs)
    return ok(f"HCCL_IF_IP={value} ({name})")


def _ifname_matches(value: str, names: Sequence[str], prefix: bool) -> list[str]:
    """The parts of an *_SOCKET_IFNAME value that name no interface. Accepts "eth0,eth1", and
    HCCL's "=eth0" (exact) and "^=eth0" / "^eth" (exclude) forms; excluded names are not checked."""
    missing = []
    for part in value.split(","):
        part = part.strip()
        if not part or part.startswith("^"):
            continue
        exact = part.startswith("=")
        part = part.lstrip("=")
        if part in names or (prefix and not exact and any(n.startswith(part) for n in names)):
            continue
        missing.append(part)
    return missing


def check_ifnames(ctx: NetContext) -> Outcome:
    set_vars = {v: ctx.host.env[v] for v in IFNAME_VARS if ctx.host.env.get(v)}
    if not set_vars:
        return skip(_("no *_SOCKET_IFNAME variable set"))
    if ctx.interfaces is None:
        return skip(_("this recording holds no interface list"))
    names = sorted(ctx.interfaces)
    # HCCL matches a name as a prefix unless written `=name`; Gloo and TensorPipe want exact names.
    bad = {v: m for v, val in set_vars.items() if (m := _ifname_matches(val, names, prefix=v == "HCCL_SOCKET_IFNAME"))}
    if bad:
        names_of = _("{var} names {names}")
        what = _("; ").join(names_of.format(var=v, names=", ".join(m)) for v, m in bad.items())
        return error(
            _("{what}: no such interface here (interfaces: {names})").format(what=what, names=", ".join(names)),
            _("set them to the interface that holds HCCL_IF_IP on this node; names differ between nodes"),
        )
    return ok(", ".join(f"{v}={val}" for v, val in set_vars.items()))


def check_timeouts(ctx: NetContext) -> Outcome:
    defaults = verdicts()["timeouts"]
    parts, bad = [], []
    for name, default in defaults.items():
        raw = ctx.host.env.get(name)
        if raw is None:
            parts.append(_("{name} {seconds} s (default)").format(name=name, seconds=default))
            continue
        try:
            value = int(raw)
        except ValueError:
            bad.append(_("{name}={value} is not a whole number of seconds").format(name=name, value=repr(raw)))
            continue
        parts.append(_("{name} {seconds} s").format(name=name, seconds=value))
    if bad:
        return error(_("; ").join(bad), _("give the timeouts in whole seconds, e.g. HCCL_CONNECT_TIMEOUT=1200"))
    connect = ctx.host.env.get("HCCL_CONNECT_TIMEOUT")
    if connect is None and (ctx.peers_npu or ctx.peers_tcp):
        return warn(
            _("{timeouts}: nodes that start more than 120 s apart fail to link").format(timeouts=_("; ").join(parts)),
            _("export HCCL_CONNECT_TIMEOUT larger than the gap between the nodes' start-ups (e.g. 1200) on every node"),
        )
    return ok(_("; ").join(parts))


def check_npu_peers(ctx: NetContext) -> Outcome:
    if not ctx.peers_npu:
        return skip(_("no --peer-npu address given"))
    if ctx.tool is None:
        return skip(_("hccn_tool not found"))
    lost: dict[str, list[str]] = {"all_lost": [], "some_lost": []}
    unknown, good = [], 0
    for addr in ctx.peers_npu:
        for n in ctx.nics:
            out, why = _ask(ctx.host, ctx.tool, n.index, "-ping", "-g", "address", addr, timeout=30.0)
            result = hccn.ping(out or "")
            if result is None:
                reason = _(why or N_("no ping summary"))
                unknown.append(f"NIC {n.index} -> {addr}: {reason}")
            elif result.received == 0 and result.sent > 0:
                lost["all_lost"].append(f"NIC {n.index} -> {addr}")
            elif result.received < result.sent:
                loss = _("{pct} loss").format(pct=f"{result.loss_pct:g}%")
                lost["some_lost"].append(f"NIC {n.index} -> {addr}: {loss}")
            else:
                good += 1
    table = verdicts()["ping"]
    found = [(kind, where) for kind, where in lost.items() if where]
    if found:
        parts = [
            _("{meaning}: {where}").format(meaning=_(table[kind]["meaning"]), where=", ".join(where))
            for kind, where in found
        ]
        return error(_("; ").join(parts + unknown), _("; ").join(_(table[kind]["fix"]) for kind, _where in found))
    if unknown:
        return warn(_("; ").join(unknown), _("ping those addresses by hand: hccn_tool -i N -ping -g address X"))
    return ok(_("{count} NIC-to-peer ping(s) without loss").format(count=good))


def _tcp_connect(host: str, port: int, timeout: float) -> None:
    with socket.create_connection((host, port), timeout=timeout):
        pass


def check_tcp_peers(ctx: NetContext) -> Outcome:
    if not ctx.peers_tcp:
        return skip(_("no --peer HOST:PORT given"))
    if not ctx.live:
        return skip(_("a recorded machine cannot reach its peers"))
    connect = ctx.connect or _tcp_connect
    failed, good = [], []
    for host, port in ctx.peers_tcp:
        try:
            connect(host, port, ctx.timeout)
            good.append(f"{host}:{port}")
        except OSError as exc:
            failed.append(f"{host}:{port} ({exc.strerror or type(exc).__name__})")
    if failed:
        return error(
            _("cannot connect to {peers}").format(peers=", ".join(failed)),
            _(
                "start the peer's listener first (vLLM's rank 0, Ray's head) and open the port in the firewall "
                "between nodes"
            ),
        )
    return ok(_("reached {peers}").format(peers=", ".join(good)))


# id, category, needs NIC answers, function
CHECKS: tuple[tuple[str, str, bool, Callable[[NetContext], Outcome]], ...] = (
    ("hccn.tool", "npu-nic", False, check_tool),
    ("nic.link", "npu-nic", True, check_link),
    ("nic.net_health", "npu-nic", True, check_health),
    ("nic.ip", "npu-nic", True, check_ip),
    ("nic.gateway", "npu-nic", True, check_gateway),
    ("nic.netdetect", "npu-nic", True, check_netdetect),
    ("nic.lldp", "npu-nic", True, check_lldp),
    ("nic.fec", "npu-nic", True, check_fec),
    ("nic.tls", "npu-nic", True, check_tls),
    ("nic.optical", "npu-nic", True, check_optical),
    ("nic.link_flaps", "npu-nic", True, check_flaps),
    ("hccn.conf", "npu-nic", True, check_hccn_conf),
    ("env.hccl_if_ip", "host-net", False, check_if_ip),
    ("env.socket_ifname", "host-net", False, check_ifnames),
    ("env.hccl_timeouts", "host-net", False, check_timeouts),
    ("peer.npu_ping", "peers", True, check_npu_peers),
    ("peer.tcp", "peers", False, check_tcp_peers),
)


def _run_one(
    ctx: NetContext, cid: str, category: str, needs_nics: bool, fn: Callable[[NetContext], Outcome]
) -> CheckResult:
    if needs_nics and ctx.tool is None:
        return CheckResult(cid, category, Status.SKIP, _("hccn_tool not found"))
    try:
        out = fn(ctx)
    except Exception as exc:  # one row, the report goes on
        return CheckResult(
            cid,
            category,
            Status.ERROR,
            _("check crashed: {error}").format(error=f"{type(exc).__name__}: {exc}")[:300],
            _("run with --debug and report it"),
        )
    return CheckResult(cid, category, out.status, out.summary, out.fix)


def live_interfaces() -> dict[str, list[str]]:
    import psutil

    return {
        name: [a.address.split("%")[0] for a in addrs if a.address] for name, addrs in psutil.net_if_addrs().items()
    }


def _recorded_interfaces(root: Path) -> dict[str, list[str]] | None:
    """`.recorded/interfaces`: one `NAME ADDRESS...` a line (what `ip -brief addr` prints, state column allowed)."""
    from engine.system.archive import read_regular

    raw = read_regular(root / ".recorded" / "interfaces")
    if raw is None:
        return None
    out: dict[str, list[str]] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        words = line.split()
        if words:
            out[words[0]] = [
                w.split("/")[0] for w in words[1:] if any(c.isdigit() for c in w) and ("." in w or ":" in w)
            ]
    return out


def parse_peer(value: str) -> tuple[str, int]:
    from engine.endpoints import split_host_port
    from engine.errors import BadInput

    split = split_host_port(value)
    if split is None or not split[0]:
        raise BadInput(f"--peer {value!r} is not HOST:PORT", "give the peer as HOST:PORT, e.g. 10.0.0.2:13389")
    return split


def run_netcheck(
    root: str | Path | None = None,
    *,
    host: Host | None = None,
    nics: Sequence[int] | None = None,
    peers_npu: Sequence[str] = (),
    peers_tcp: Sequence[str] = (),
    interfaces: Mapping[str, list[str]] | None = None,
    connect: Callable[[str, int, float], None] | None = None,
    live: bool | None = None,
    timeout: float = 10.0,
) -> DoctorReport:
    """Every network check against this machine, a recorded tree (`root`) or `host`.

    Raises Unreachable when `root` is not a recorded tree; BadInput for a malformed --peer.
    """
    tcp = [parse_peer(p) for p in peers_tcp]
    # A Host handed in is a recording unless the caller says it is this machine (tests of peers).
    live = (host is None and root is None) if live is None else live
    if root is not None:
        from engine.system.recorded import recorded_host, recorded_root

        host, _known = recorded_host(root)
        if interfaces is None:
            interfaces = _recorded_interfaces(recorded_root(root))
    elif host is None:
        host = Host()
    if interfaces is None and live:
        interfaces = live_interfaces()
    started = time.perf_counter()
    tool = find_tool(host)
    found = collect(host, tool, nic_indices(host, nics), timeout=timeout) if tool else []
    from engine.system.platform import detect_platform

    platform = "ascend" if tool else detect_platform(host)
    ctx = NetContext(
        host,
        live,
        found,
        tool,
        dict(interfaces) if interfaces is not None else None,
        tuple(peers_npu),
        tcp,
        connect,
        npu=platform == "ascend",
    )
    checks = [_run_one(ctx, *c) for c in CHECKS]
    errors = sum(c.status is Status.ERROR for c in checks)
    warns = sum(c.status is Status.WARN for c in checks)
    if errors:
        state = _("{errors} error(s), {warnings} warning(s): the network is not ready for multi-node serving")
    else:
        state = _("{warnings} warning(s), no errors") if warns else _("ready for multi-node serving")
    state = state.format(errors=errors, warnings=warns)
    return DoctorReport(
        platform=platform,
        headline=_("{count} NPU NIC(s); {state}").format(count=len(found), state=state),
        root=str(root) if root is not None and Path(root).is_file() else str(host.root),
        live=live,
        checks=tuple(checks),
        facts={
            "host": host_name(host, live),
            "npu": ctx.npu,
            "nics": [n.fact() for n in found],
            "unanswered": {n.index: n.problems for n in found if n.problems},
            "elapsed_s": round(time.perf_counter() - started, 3),
        },
    )


__all__ = ["CHECKS", "run_netcheck", "state_verdict", "verdicts"]
