"""The NPU driver and firmware versions (their version.info files) and the driver <-> CANN pairing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.system import paths
from engine.system.cann import CannToolkit, family_code
from engine.system.host import Host
from engine.system.keyvalue import parse_equals
from engine.versions import release_tuple

ASCEND = "/usr/local/Ascend"
INSTALL_INFO = "/etc/ascend_install.info"


@dataclass(frozen=True)
class DriverInfo:
    path: str
    version: str | None  # package_version, else Version
    innerversion: str | None
    compatible_version: str | None  # CANN families this driver accepts
    compatible_fw: tuple[str, str] | None  # firmware range [min,max]

    @property
    def family(self) -> str | None:
        return family_code(self.innerversion)


@dataclass(frozen=True)
class FirmwareInfo:
    path: str
    version: str | None
    package_version: str | None


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
    return DriverInfo(
        path=path,
        version=f.get("package_version") or f.get("Version") or f.get("DriverVersion") or f.get("version"),
        innerversion=f.get("Innerversion"),
        compatible_version=f.get("compatible_version"),
        compatible_fw=(fw[0], fw[1]) if len(fw) >= 2 else None,
    )


def read_firmware(host: Host) -> FirmwareInfo | None:
    path = f"{install_prefix(host, 'Firmware')}/firmware/version.info"
    text = paths.read_text(host, path)
    if text is None:
        return None
    f = parse_equals(text)
    return FirmwareInfo(path=path, version=f.get("Version"), package_version=f.get("package_version"))


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


def pair(toolkit: CannToolkit, driver: DriverInfo, seen_working: bool | None) -> Pairing:
    """Driver <-> CANN: the two sides list each other's families in `compatible_version`.

    Both files carry the V100R001Cxx family. When either side lists the other, the pair is
    accepted; when both lists exist and neither does, it is a mismatch. CANN 9.x toolkit files
    carry no codes: then only pairs seen working in the field are vouched for.
    """
    drv_fam, cann_fam = driver.family, toolkit.family
    cann_accepts = families(toolkit.compatible_version)
    drv_accepts = families(driver.compatible_version)
    if drv_fam and cann_accepts is not None and int(drv_fam[1:]) in cann_accepts:
        return Pairing("ok", f"CANN {toolkit.version} lists driver family {drv_fam} as compatible")
    if cann_fam and drv_accepts is not None and int(cann_fam[1:]) in drv_accepts:
        return Pairing("ok", f"driver {driver.version} lists CANN family {cann_fam} as compatible")
    if seen_working:
        return Pairing("ok", f"driver {driver.version} with CANN {toolkit.version} is a pair seen working")
    if drv_fam and cann_fam and cann_accepts is not None and drv_accepts is not None:
        return Pairing(
            "mismatch",
            f"driver {driver.version} ({drv_fam}) and CANN {toolkit.version} ({cann_fam}) do not list each other",
        )
    return Pairing("unknown", f"no compatibility codes to compare driver {driver.version} with CANN {toolkit.version}")
