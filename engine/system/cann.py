"""Finding the CANN toolkit and reading its version from the files CANN itself writes.

Layouts: classic `/usr/local/Ascend/ascend-toolkit/<ver>` with a `latest` link (CANN <= 8.3), the
`/usr/local/Ascend/cann-<ver>` tree of CANN 8.5+ (with `cann` and `ascend-toolkit/latest` as
compatibility links), and custom prefixes named by ASCEND_TOOLKIT_HOME / ASCEND_HOME_PATH.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Mapping

from engine.system import paths
from engine.system.host import Host
from engine.system.keyvalue import parse_equals
from engine.versions import cann_key, looks_like_version

ASCEND = "/usr/local/Ascend"
HOME_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
_CANN_DIR = re.compile(r"^cann-(\d.*)$")
_RELEASE_ONLY = re.compile(r"\d+\.\d+\.(\d+|RC\d+)([.-](alpha|beta)[.\d]*)?", re.I)
_CFG = re.compile(r"^(toolkit|runtime)_running_version=\[[^:\]]*:([^\]]+)\]", re.M)


@dataclass(frozen=True)
class CannToolkit:
    home: str  # as found (may be a link such as .../ascend-toolkit/latest)
    real_home: str  # after following links
    layout: str  # "classic" | "cann-<ver>" | "custom"
    found_by: str  # the variable that named it, or "default path"
    version: str | None
    version_source: str | None  # the file the version came from
    innerversion: str | None = None
    compatible_version: str | None = None
    arch: str | None = None
    set_env: str | None = None  # the set_env.sh that belongs to this toolkit
    bad_version: str | None = None  # what version_source holds where a version should be, when it is not one

    @property
    def family(self) -> str | None:
        return family_code(self.innerversion)


def family_code(innerversion: str | None) -> str | None:
    """`V100R001C23SPC002B210` -> `C23` (the release family shared by CANN and the driver)."""
    m = re.search(r"R\d+(C\d+)", innerversion or "")
    return m.group(1) if m else None


def _candidates(host: Host) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for var in HOME_VARS:
        value = host.env.get(var, "").strip()
        if value:
            out.append((value.rstrip("/") or "/", var))
    cann_dirs = [n for n in paths.listdir(host, ASCEND) if _CANN_DIR.match(n)]
    cann_dirs.sort(key=lambda n: cann_key(_CANN_DIR.match(n).group(1)), reverse=True)  # type: ignore[union-attr]
    out += [(f"{ASCEND}/cann", "default path")]
    out += [(f"{ASCEND}/{n}", "default path") for n in cann_dirs]
    out.append((f"{ASCEND}/ascend-toolkit/latest", "default path"))
    home = host.env.get("HOME", "").rstrip("/")
    if home:
        out += [(f"{home}/Ascend/ascend-toolkit/latest", "default path"), (f"{home}/Ascend/cann", "default path")]
    return out


def _read_version(host: Host, home: str) -> tuple[dict[str, str], str | None, str | None]:
    """(install.info fields, version, source file). Order: ascend_toolkit_install.info,
    runtime/version.info (version_dir=, or Version= on 9.x), version.cfg, the directory name."""
    infos = [f"{home}/{d}/ascend_toolkit_install.info" for d in paths.listdir(host, home) if d.endswith("-linux")]
    infos.append(f"{home}/ascend_toolkit_install.info")
    for info in infos:
        fields = parse_equals(paths.read_text(host, info))
        if fields.get("version"):
            return fields, fields["version"], info
    for component in ("runtime", "toolkit", "compiler"):
        vi = f"{home}/{component}/version.info"
        fields = parse_equals(paths.read_text(host, vi))
        if fields.get("version_dir"):
            return {}, fields["version_dir"], vi
        # Up to 8.3 `Version=` is an internal build number (7.8.T5.0.B028, 8.2.0.0.201); from 9.x
        # it is the release itself (9.0.0).
        if _RELEASE_ONLY.fullmatch(fields.get("Version", "")):
            return {}, fields["Version"], vi
    for cfg in (f"{home}/version.cfg", f"{posixpath.dirname(home)}/latest/version.cfg"):
        m = _CFG.search(paths.read_text(host, cfg) or "")
        if m:
            return {}, m.group(2), cfg
    name = posixpath.basename(paths.realpath(host, home))
    m = _CANN_DIR.match(name)
    if m:
        return {}, m.group(1), f"{posixpath.dirname(home)}/{name} (directory name)"
    if re.match(r"^\d+\.\d+\.(\d+|RC\d+)", name, re.I):
        return {}, name, f"{home} (directory name)"
    return {}, None, None


def _layout(home: str, real_home: str) -> str:
    if _CANN_DIR.match(posixpath.basename(real_home)):
        return "cann-<ver>"
    if "/ascend-toolkit/" in real_home + "/":
        return "classic"
    return "custom"


def _set_env(host: Host, home: str, real_home: str) -> str | None:
    for candidate in (
        f"{posixpath.dirname(home)}/set_env.sh",  # .../ascend-toolkit/set_env.sh next to latest
        f"{home}/set_env.sh",
        f"{real_home}/set_env.sh",
        f"{posixpath.dirname(real_home)}/set_env.sh",
        f"{ASCEND}/cann/set_env.sh",
        f"{ASCEND}/ascend-toolkit/set_env.sh",
    ):
        if paths.exists(host, candidate):
            return candidate
    return None


def find_toolkit(host: Host) -> CannToolkit | None:
    """The toolkit in use: the one the environment names, else the default locations."""
    for home, found_by in _candidates(host):
        if not paths.is_dir(host, home):
            continue
        real_home = paths.realpath(host, home)
        fields, version, source = _read_version(host, home)
        if version is None and found_by == "default path" and not paths.listdir(host, home):
            continue
        # A damaged or hostile file must not pass as a version nor flood a report.
        bad = None if version is None or looks_like_version(version) else version
        inner = fields.get("innerversion")
        return CannToolkit(
            home=home,
            real_home=real_home,
            layout=_layout(home, real_home),
            found_by=found_by,
            version=None if bad else version,
            version_source=source,
            innerversion=inner if looks_like_version(inner) else None,
            compatible_version=fields.get("compatible_version"),
            arch=fields.get("arch"),
            set_env=_set_env(host, home, real_home),
            bad_version=bad,
        )
    return None


def default_set_env(host: Host) -> str:
    """Where set_env.sh is on a standard install (for fix messages when no toolkit is found)."""
    for candidate in (f"{ASCEND}/ascend-toolkit/set_env.sh", f"{ASCEND}/cann/set_env.sh"):
        if paths.exists(host, candidate):
            return candidate
    return f"{ASCEND}/ascend-toolkit/set_env.sh"


def process_log_dir(env: Mapping[str, str]) -> str:
    """Where CANN writes its process logs (plogs): ASCEND_PROCESS_LOG_PATH, else ~/ascend/log."""
    return env.get("ASCEND_PROCESS_LOG_PATH") or posixpath.join(env.get("HOME") or "/root", "ascend", "log")
