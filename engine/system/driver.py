"""The NPU driver and firmware versions (their version.info files) and the driver <-> CANN pairing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.i18n import _
from engine.system import paths
from engine.system.cann import CannToolkit, family_code
from engine.system.host import Host
from engine.system.keyvalue import parse_equals
from engine.versions import looks_like_version, release_tuple

ASCEND = "/usr/local/Ascend"
INSTALL_INFO = "/etc/ascend_install.info"


@dataclass(frozen=True)
class DriverInfo:
    path: str
    version: str | None  # package_version, else Version
    innerversion: str | None
    compatible_version: str | None  # CANN families this driver accepts
    compatible_fw: tuple[str, str] | None  # firmware range [min,max]
    bad_version: str | None = None  # what the file holds where a version should be, when it is not one

    @property
    def family(self) -> str | None:
        return family_code(self.innerversion)


@dataclass(frozen=True)
class FirmwareInfo:
    path: str
    version: str | None
    package_version: str | None
    bad_version: str | None = None  # what the file holds where a version should be, when it is not one


def install_prefix(host: Host, component: str = "Driver") -> str:
    """The driver / firmware prefix recorded by the installer (custom --install-path), else the default."""
    fields = parse_equals(paths.read_text(host, INSTALL_INFO))
    prefix = fields.get(f"{component}_Install_Path_Param", "").rstrip("/")
    return prefix or ASCEND


def read_driver(host: Host) -> DriverInfo | None:
    path = f"{install_prefix(host, 'Driver')}/driver/version.info"
    text = paths.read_text(host, path)
    if text is None:
        return None
    f = parse_equals(text)
    fw = re.findall(r"[\d.]+", f.get("compatible_version_fw", ""))
    raw = f.get("package_version") or f.get("Version") or f.get("DriverVersion") or f.get("version")
    version, bad = _checked(raw)
    return DriverInfo(
        path=path,
        version=version,
        innerversion=_checked(f.get("Innerversion"))[0],
        compatible_version=f.get("compatible_version"),
        compatible_fw=(fw[0], fw[1]) if len(fw) >= 2 else None,
        bad_version=bad,
    )


def read_firmware(host: Host) -> FirmwareInfo | None:
    path = f"{install_prefix(host, 'Firmware')}/firmware/version.info"
    text = paths.read_text(host, path)
    if text is None:
        return None
    f = parse_equals(text)
    version, bad = _checked(f.get("Version"))
    return FirmwareInfo(
        path=path, version=version, package_version=_checked(f.get("package_version"))[0], bad_version=bad
    )


def _checked(raw: str | None) -> tuple[str | None, str | None]:
    """(version, None) when `raw` looks like a version, (None, raw) when it does not: a damaged
    file must not pass as a version nor flood a report."""
    if not raw:
        return None, None
    return (raw, None) if looks_like_version(raw) else (None, raw)


def families(compatible: str | None) -> set[int] | None:
    """The family numbers a `compatible_version=` list accepts: `[V100R001C15],[V100R001C18]`
    -> {15, 18}; a bracket holding two codes is an inclusive range (`[V100R001C13,V100R001C19]`)."""
    if not compatible:
        return None
    out: set[int] = set()
    for group in re.findall(r"\[([^\]]*)\]", compatible):
        nums = [int(n) for n in re.findall(r"C(\d+)", group)]
        if len(nums) == 2:
            out.update(range(min(nums), max(nums) + 1))
        else:
            out.update(nums)
    return out or None


def firmware_in_range(firmware: str | None, bounds: tuple[str, str] | None) -> bool | None:
    if not firmware or not bounds:
        return None
    v = release_tuple(firmware)
    return release_tuple(bounds[0]) <= v <= release_tuple(bounds[1])


@dataclass(frozen=True)
class Pairing:
    verdict: str  # "ok" | "mismatch" | "unknown"
    reason: str


def pair(toolkit: CannToolkit, driver: DriverInfo, huawei: bool | None) -> Pairing:
    """Driver <-> CANN: the two sides list each other's families in `compatible_version`.

    Both files carry the V100R001Cxx family. When either side lists the other, the pair is
    accepted; when both lists exist and neither does, it is a mismatch. CANN 9.x toolkit files
    carry no codes: then Huawei's published compatibility table decides (`huawei`: True when it
    lists the pair, False when it marks it incompatible, None when it does not say).
    """
    drv_fam, cann_fam = driver.family, toolkit.family
    cann_accepts = families(toolkit.compatible_version)
    drv_accepts = families(driver.compatible_version)
    if drv_fam and cann_accepts is not None and int(drv_fam[1:]) in cann_accepts:
        return Pairing(
            "ok",
            _("CANN {cann} lists driver family {family} as compatible").format(cann=toolkit.version, family=drv_fam),
        )
    if cann_fam and drv_accepts is not None and int(cann_fam[1:]) in drv_accepts:
        return Pairing(
            "ok",
            _("driver {driver} lists CANN family {family} as compatible").format(
                driver=driver.version, family=cann_fam
            ),
        )
    if huawei:
        return Pairing(
            "ok",
            _("Huawei's compatibility table lists driver {driver} for CANN {cann}").format(
                driver=driver.version, cann=toolkit.version
            ),
        )
    if huawei is False:
        return Pairing(
            "mismatch",
            _("Huawei's compatibility table marks driver {driver} incompatible with CANN {cann}").format(
                driver=driver.version, cann=toolkit.version
            ),
        )
    if drv_fam and cann_fam and cann_accepts is not None and drv_accepts is not None:
        return Pairing(
            "mismatch",
            f"driver {driver.version} ({drv_fam}) and CANN {toolkit.version} ({cann_fam}) do not list each other",
        )
    return Pairing("unknown", f"no compatibility codes to compare driver {driver.version} with CANN {toolkit.version}")
