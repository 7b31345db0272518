"""Which image runs the engine: the one a profile names, else the official one for this host.

The official vllm-ascend images are named <repository>:v<release><chip suffix><os suffix>
(container.yaml says where each part comes from). The release is the newest final row of the
compatibility matrix built for the host's chip whose CANN the host's driver supports, so the
image's CANN and the host driver pair the way doctor checks them on a host install.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.data import load_yaml
from engine.errors import BadInput
from engine.stacks.matrix import Release, load_matrix
from engine.system import paths
from engine.system.host import Host
from engine.system.keyvalue import parse_equals
from engine.versions import release_tuple

if TYPE_CHECKING:  # doctor imports this module: the profile schema (and YAML) only when a profile is read
    from engine.profiles import Profile


def facts() -> dict[str, Any]:
    return load_yaml("engine.container", "container.yaml")


@dataclass(frozen=True)
class ImageChoice:
    image: str
    why: str  # one line for the operator: where the name came from
    vllm: str | None = None  # the vLLM release inside, where known (flags are gated by it)


def chip_family(profile: Profile) -> str:
    """A2, A3, 310P or 950 from device.kind (npu-smi's names: 910B3, Ascend910, 310P3, ...);
    A2, the most common server, when the profile does not say."""
    kind = profile.device.kind.strip()
    chip = load_matrix().chip(kind)
    if chip is not None and chip.supported:
        return chip.family
    lowered = kind.lower()
    for family in ("A3", "310P", "950", "A2"):
        if family.lower() in lowered:
            return family
    return "A2"


def host_os(host: Host) -> str | None:
    """The ID of /etc/os-release (ubuntu, openEuler, ...), None when unknown."""
    fields = parse_equals(paths.read_text(host, "/etc/os-release"))
    return fields.get("ID") or None


def _driver_fits(row: Release, driver: str | None) -> bool:
    return load_matrix().driver_compatible(driver, row.cann) is not False


def ascend_release(family: str, driver: str | None) -> Release | None:
    """The newest final vllm-ascend release with an image for `family` whose CANN the driver
    does not rule out."""
    rows = [r for r in load_matrix().releases if r.final and family in r.hardware and _driver_fits(r, driver)]
    return max(rows, key=lambda r: release_tuple(r.vllm_ascend, 4), default=None)


def official_image(family: str, vllm_ascend: str, os_id: str | None = None) -> str:
    """The official vllm-ascend image of a release for a chip family (A2, A3, 310P, 950) and a
    host OS (the ID of /etc/os-release; None: the Ubuntu image): serve's default image and the one
    `deploy` writes into its manifests, named in one place (container.yaml)."""
    data = facts()["ascend"]
    return f"{data['repository']}:v{vllm_ascend.lstrip('v')}{data['chip_suffix'][family]}{data['os_suffix'].get(os_id or '', '')}"


def default_image(profile: Profile, host: Host, host_vllm: str | None = None) -> ImageChoice:
    """The image for a profile that names none. BadInput where there is no official one."""
    data = facts()
    if profile.platform == "ascend":
        from engine.system.driver import read_driver

        family = chip_family(profile)
        found = read_driver(host)
        driver = found.version if found is not None else None
        row = ascend_release(family, driver)
        if row is None:
            raise BadInput(
                f"no vllm-ascend release in the matrix has an image for {family} that driver {driver} supports",
                "name the image in the profile: container.image: quay.io/ascend/vllm-ascend:<tag>",
            )
        os_id = host_os(host)
        image = official_image(family, row.vllm_ascend, os_id)
        on = f" on {os_id}" if os_id in data["ascend"]["os_suffix"] else ""
        return ImageChoice(image, f"the official vllm-ascend {row.vllm_ascend} image for {family}{on}", row.vllm)
    if profile.platform == "cuda" and host_vllm:
        version = host_vllm.split("+", 1)[0]
        return ImageChoice(f"{data['cuda']['repository']}:v{version}", f"vLLM's image of {version}", version)
    raise BadInput(
        f"profile {profile.name} names no container image and platform {profile.platform} has no official one "
        "ascendctl can pick",
        "set container.image in the profile (or --set container.image=NAME)",
    )


def choose_image(profile: Profile, host: Host, host_vllm: str | None = None) -> ImageChoice:
    container = profile.container
    if container is not None and container.image:
        return ImageChoice(container.image, "named by the profile", host_vllm if profile.platform != "ascend" else None)
    return default_image(profile, host, host_vllm)
