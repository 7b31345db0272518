"""What a support bundle hides beyond secrets: IP addresses, host names (every name with a domain,
the user and host of every URL, names learned from host-valued variables), user names, e-mail
addresses, serial numbers, UUIDs and MAC addresses, each replaced by a placeholder that is the same in every file.

Secrets follow the one rule of engine.redact (masked, no way back). The other values are replaced
sos-clean style: the same IP is the same placeholder in the engine log, the environment and npu-smi's
output, so a support engineer can still follow one peer through every file, and the mapping back to
the real values (`mapping()`) stays with the customer, beside the archive and never inside it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable

from engine.redact import MASK, is_secret_name, redact_value

# System accounts and names too short or too common to replace as words without wrecking text.
_KEEP_USERS = frozenset({"root", "nobody", "daemon", "admin", "user", "ubuntu", "ascend", "hwhiaiuser", "vllm"})
_KEEP_HOSTS = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# Loopback and "any" say how a server binds, which a support engineer needs and which identifies nobody.
_KEEP_IPS = re.compile(r"^(?:127\.|0\.0\.0\.0$|255\.255\.255\.)")

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# Not inside a longer dotted number (firmware "7.7.0.1.231"), nor a pinned version (`pkg==1.2.0.1`).
_IP = rf"(?<![\w.])(?<!==)(?<!~=){_OCTET}(?:\.{_OCTET}){{3}}(?!\.?\w)"
# IPv6 candidates (full or with ::), checked with the ipaddress module before they are replaced:
# clock times (09:28:34) and MACs look alike and are not addresses.
_IP6 = r"(?<![\w:.])(?:[0-9a-fA-F]{0,4}:){2,7}[0-9a-fA-F]{0,4}(?![\w:])"
_UUID = r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
_MAC = r"(?<![\w:])(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}(?![\w:])"
# npu-smi `-t board` prints `Serial Number : 033...`; MindCluster labels carry `vdie_id`.
_SERIAL = r"(?P<sk>(?:serial[ _]?(?:number|no\.?)?|\bSN|vdie[ _]?id|chip[ _]?id[ _]?sn)\s*[:=]\s*)(?P<sv>[^\s,;\"']+)"
# NAME=value / NAME: value / "name": "value" with a secret name, in logs, YAML and JSON.
_ASSIGN = r"(?P<an>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<aq>\"?\s*(?:=(?!=)|:\s)\s*\"?)(?P<av>[^\s\"',}]+)"
_URL_HOST = re.compile(r"[a-z][a-z0-9+.\-]*://(?:(?P<user>[^:/@\s]+)(?::[^@/\s]*)?@)?(?P<host>[A-Za-z0-9.\-_]+)", re.I)
# A host name with a domain (`node-17.corp.example`, `.corp.example` in NO_PROXY): its last label is a
# top-level domain, or one that sites use inside (corp, lan, internal). File names (`loggers.py`,
# `README.md`, `install.sh`, `version.info`, `x.mo`) and Python modules (`np.int`) end otherwise.
_TLDS = (
    "com|net|org|edu|gov|mil|biz|io|ai|co|app|dev|cloud|tech|online|site|xyz|top|arpa"
    "|local|localdomain|lan|internal|intranet|intra|corp|home|example|test|invalid|svc"
    "|cn|hk|tw|sg|jp|kr|uk|de|fr|ru|us|eu|ca|au|nl|se|ch|es|br|il|ie|nz|za|at|be|dk|fi|no"
)
_FQDN = (
    r"(?<![A-Za-z0-9\-@])(?<![A-Za-z0-9\-]\.)"
    rf"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{{0,61}}[A-Za-z0-9])?\.)+(?:{_TLDS})(?![A-Za-z0-9_\-])"
)
_EMAIL = r"(?<![\w.+\-])[A-Za-z0-9_+\-](?:[A-Za-z0-9_.+\-]*[A-Za-z0-9_\-])?@[A-Za-z][A-Za-z0-9\-]*(?:\.[A-Za-z0-9\-]+)*"
# The user and host of a URL: `scheme://user:****@host`, `s3://bucket/...`.
_URL = r"(?P<us>[a-z][a-z0-9+.\-]*://)(?:(?P<uu>[^:/@\s]+)(?P<up>:[^@/\s]*)?@)?(?P<uh>[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)"
# Public services a log names (downloads, registries): they identify nobody, and triage's rules read them.
_PUBLIC_HOSTS = (
    "pypi.org",
    "pythonhosted.org",
    "huggingface.co",
    "hf.co",
    "hf-mirror.com",
    "github.com",
    "githubusercontent.com",
    "pytorch.org",
    "modelscope.cn",
    "hiascend.com",
    "huawei.com",
    "huaweicloud.com",
    "gitee.com",
    "docker.io",
    "docker.com",
    "quay.io",
    "ghcr.io",
    "nvcr.io",
    "python.org",
    "vllm.ai",
    "kubernetes.io",
    "k8s.io",
)
# Variables and flags whose values are host names: learned before any file is written, so that a
# short name (`node-5`) is replaced in every file, not only where a domain shows it is a host.
_HOST_VALUE = re.compile(
    r"(?:^|[\s\"'{,])(?:--|-)?(?P<n>[A-Za-z_][A-Za-z0-9_.\-]*?(?:ADDR|ADDRESS|HOST|HOSTS|HOSTNAME|_IP|_IPS|PEERS|NODES|PROXY))"
    r"[\"']?(?:\s*[=:]\s*|\s+)[\"']?(?P<v>[^\s\"']+)",
    re.I,
)
_HOME = re.compile(r"/home/(?P<user>[A-Za-z0-9_][A-Za-z0-9_.\-]*)")
_VERSIONISH = re.compile(r"version|\bver\b|npu-smi", re.I)


class Redactor:
    """Replaces what identifies the customer, consistently; `enabled=False` keeps those values and
    masks secrets only (no file ascendctl writes ever holds a secret)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._maps: dict[str, dict[str, str]] = {
            "ip": {},
            "ip6": {},
            "host": {},
            "user": {},
            "serial": {},
            "uuid": {},
            "mac": {},
            "email": {},
        }
        self._names: dict[str, str] = {}  # known host and user names -> kind
        self._regex: dict[tuple[bool, ...], re.Pattern[str]] = {}

    # ---- what to look for

    def learn_host(self, name: str | None, own: bool = False, short: bool = True) -> None:
        """A host name to replace. Names guessed from text need 3 characters (a short word is more
        likely not a host); the machine's own name (`own`: /etc/hostname, HOSTNAME) is replaced
        whatever its length, since it identifies the customer. `short=False`: a domain (`.corp.example`
        in NO_PROXY), whose first label names no host."""
        shortest = 1 if own else 3
        for n in {name or "", (name or "").split(".")[0] if short else ""}:
            if len(n) >= shortest and n.lower() not in _KEEP_HOSTS and not re.fullmatch(r"[\d.]+", n):
                self._names.setdefault(n, "host")
                self._regex = {}

    def learn_user(self, name: str | None) -> None:
        if name and len(name) >= 3 and name.lower() not in _KEEP_USERS:
            self._names.setdefault(name, "user")
            self._regex = {}

    def learn(self, text: str) -> None:
        """Pick up user and host names from URLs and home paths, so that they are replaced in
        every file collected afterwards, not only where a URL shows them."""
        for m in _URL_HOST.finditer(text):
            self.learn_user(m.group("user"))
            host = m.group("host")
            if not re.fullmatch(r"[\d.]+", host) and "." in host or host.isalpha():
                self.learn_host(host)
        for m in _HOME.finditer(text):
            self.learn_user(m.group("user"))

    def learn_hosts_in(self, text: str) -> None:
        """Host names given as the values of NAME=value, `NAME: value` or `--name value` whose name
        says it holds hosts (MASTER_ADDR, HCCL_PEERS, NO_PROXY, --host), one or a list."""
        for m in _HOST_VALUE.finditer(text):
            for item in re.split(r"[,;\s]+", m.group("v")):
                domain = item.lstrip("[('\"").startswith(".")  # `.corp.example`: every host under it
                item = item.strip("[]()'\".").split(":")[0] if item.count(":") == 1 else item.strip("[]()'\".")
                # A name without a domain needs a digit or a '-' (node-5, gpu7): `true`, `auto` or
                # `master` in such a variable is a setting, and replacing the word everywhere would wreck text.
                dotted = "." in item
                if re.fullmatch(r"[A-Za-z][A-Za-z0-9\-]*(?:\.[A-Za-z0-9\-]+)*", item) and (
                    dotted or re.search(r"[\d\-]", item)
                ):
                    self.learn_host(item, short=not domain)
        self.learn(text)

    def learn_env(self, env: dict[str, str] | Iterable[tuple[str, str]]) -> None:
        items = env.items() if isinstance(env, dict) else env
        for name, value in items:
            if name in ("USER", "LOGNAME", "SUDO_USER"):
                self.learn_user(value)
            elif name in ("HOSTNAME", "HOST"):
                self.learn_host(value, own=True)
            else:
                self.learn_hosts_in(f"{name}={value}")
            self.learn(value)

    # ---- replacing

    def _placeholder(self, kind: str, value: str) -> str:
        table = self._maps[kind]
        if value not in table:
            n = len(table) + 1
            table[value] = {
                # IP-shaped, from the documentation ranges (RFC 5737), so parsers and rules still see an IP.
                "ip": lambda: (
                    f"{(192, 198, 203)[min((n - 1) // 250, 2)]}.{(0, 51, 0)[min((n - 1) // 250, 2)]}."
                    f"{(2, 100, 113)[min((n - 1) // 250, 2)]}.{(n - 1) % 250 + 1}"
                ),
                # From the IPv6 documentation prefix (RFC 3849).
                "ip6": lambda: f"2001:db8::{n:x}",
                "host": lambda: f"host-{n}",
                "user": lambda: f"user-{n}",
                "serial": lambda: f"SERIAL-{n}",
                "uuid": lambda: f"00000000-0000-4000-8000-{n:012d}",
                "mac": lambda: f"02:00:00:00:{n // 256 % 256:02x}:{n % 256:02x}",
                # RFC 2606: a domain that can never be anyone's.
                "email": lambda: f"email-{n}@example.invalid",
            }[kind]()
        return table[value]

    def _compiled(self, line: str) -> re.Pattern[str]:
        """The pattern for a line, without the alternatives that cannot match it (a log line
        seldom holds `://` or `@`): each one left out makes every line cheaper."""
        key = ("://" in line, "@" in line, "." in line, ":" in line)
        regex = self._regex.get(key)
        if regex is None:
            url, at, dot, colon = key
            parts = [rf"(?P<serial>{_SERIAL})", rf"(?P<assign>{_ASSIGN})"]
            if self.enabled:
                parts += [rf"(?P<url>{_URL})"] if url else []
                parts += [rf"(?P<email>{_EMAIL})"] if at else []
                parts += [rf"(?P<uuid>{_UUID})"]
                parts += [rf"(?P<mac>{_MAC})", rf"(?P<ip6>{_IP6})"] if colon else []
                parts += [rf"(?P<ip>{_IP})", rf"(?P<fqdn>{_FQDN})"] if dot else []
                if self._names:
                    names = sorted(self._names, key=len, reverse=True)  # longest first: the FQDN before its short name
                    parts.append(r"(?P<name>(?<![\w.\-])(?:" + "|".join(map(re.escape, names)) + r")(?![\w\-]))")
            regex = self._regex[key] = re.compile("|".join(parts), re.I)
        return regex

    def _sub(self, m: re.Match[str], line: str) -> str:
        kind = m.lastgroup
        if kind == "assign":
            if is_secret_name(m.group("an")):
                return m.group("an") + m.group("aq") + MASK
            # Not a secret: the value may still hold an IP or a name; redact it on its own.
            return m.group("an") + m.group("aq") + self._line(m.group("av"), line)
        if kind == "serial":
            if not self.enabled:
                return m.group(0)
            return m.group("sk") + self._placeholder("serial", m.group("sv"))
        value = m.group(0)
        if kind == "url":
            return self._url(m, line)
        if kind == "email":
            return self._placeholder("email", value.lower())
        if kind == "fqdn":
            return self._host(value)
        if kind == "ip":
            if _KEEP_IPS.match(value) or _VERSIONISH.search(line):
                return value
            return self._placeholder("ip", value)
        if kind == "ip6":
            try:
                addr = ipaddress.IPv6Address(value)
            except ValueError:
                return value  # a clock time or another colon-separated figure
            if addr.is_loopback or addr.is_unspecified:
                return value
            return self._placeholder("ip6", addr.compressed)
        if kind in ("uuid", "mac"):
            return self._placeholder(kind, value.lower())
        known = next((k for k in self._names if k.lower() == value.lower()), value)
        return self._placeholder(self._names.get(known, "host"), known)

    def _host(self, name: str) -> str:
        """A host name met in the text: kept when public or local, else replaced; its short name
        is learned, so that it is replaced where it shows without its domain."""
        low = name.lower().rstrip(".")
        if low in _KEEP_HOSTS or any(low == h or low.endswith("." + h) for h in _PUBLIC_HOSTS):
            return name
        known = next((k for k in self._names if k.lower() == low), None)
        if known is None:
            self.learn_host(name)
            known = name
        return self._placeholder("host", known)

    def _url(self, m: re.Match[str], line: str) -> str:
        scheme, user, pw, host = m.group("us"), m.group("uu"), m.group("up"), m.group("uh")
        out = scheme
        if user is not None:
            out += (user if user.lower() in _KEEP_USERS else self._placeholder("user", user)) + (pw or "") + "@"
        if re.fullmatch(_IP, host) or not re.search(r"[A-Za-z]", host):
            return out + self._line(host, line)
        if (
            "." not in host
            and scheme.lower().startswith(("http", "https", "ws", "wss", "grpc"))
            and host.lower() in _KEEP_HOSTS
        ):
            return out + host
        return out + self._host(host)

    def _line(self, line: str, context: str | None = None) -> str:
        regex = self._compiled(line)
        return regex.sub(lambda m: self._sub(m, context or line), line)

    def text(self, text: str) -> str:
        """Secrets masked (engine.redact), then identifying values replaced, line by line."""
        text = redact_value(text)
        return "\n".join(self._line(line) for line in text.split("\n"))

    def env(self, env: dict[str, str]) -> dict[str, str]:
        from engine.redact import redact_env

        return {k: self.text(v) for k, v in redact_env(env).items()}

    def argv(self, argv: Iterable[str]) -> list[str]:
        from engine.redact import redact_argv

        return [self.text(a) for a in redact_argv(argv)]

    def path(self, machine_path: str) -> str:
        """A machine path as it is stored in the bundle: a user name in it replaced like anywhere else."""
        return self._line(machine_path) if self.enabled else machine_path

    def mapping(self) -> dict[str, dict[str, str]]:
        """Placeholder -> real value, per kind: what the customer keeps to read the support answer."""
        return {kind: {v: k for k, v in table.items()} for kind, table in self._maps.items() if table}


__all__ = ["Redactor"]
