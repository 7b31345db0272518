"""Device nodes an NPU process needs, and whether we run inside a container."""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.system import paths
from engine.system.host import Host

# Every NPU process opens its /dev/davinciN plus these three (vllm-ascend docker run lines).
SHARED_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")
_DAVINCI = re.compile(r"^davinci(\d+)$")


@dataclass(frozen=True)
class DeviceNodes:
    davinci: tuple[int, ...]  # N of each /dev/davinciN
    shared: dict[str, bool]  # davinci_manager / devmm_svm / hisi_hdc -> present

    @property
    def missing_shared(self) -> list[str]:
        return [f"/dev/{n}" for n, ok in self.shared.items() if not ok]

    @property
    def any(self) -> bool:
        return bool(self.davinci) or any(self.shared.values())


def device_nodes(host: Host) -> DeviceNodes:
    names = paths.listdir(host, "/dev")
    davinci = sorted(int(m.group(1)) for n in names if (m := _DAVINCI.match(n)))
    return DeviceNodes(tuple(davinci), {n: n in names for n in SHARED_NODES})


def in_container(host: Host) -> bool:
    return (
        paths.exists(host, "/.dockerenv")
        or paths.exists(host, "/run/.containerenv")
        or bool(host.env.get("container"))
        or bool(host.env.get("KUBERNETES_SERVICE_HOST"))
    )


def visible_devices(host: Host) -> list[int] | None:
    """The NPUs a process may use when ASCEND_RT_VISIBLE_DEVICES limits them (None: no limit)."""
    raw = host.env.get("ASCEND_RT_VISIBLE_DEVICES", "").strip()
    if not raw:
        return None
    return [int(x) for x in re.findall(r"\d+", raw)]
