"""doctor's check of the NPUs' HBM wear: pages isolated after multi-bit ECC errors, against the
count at which the chip must be taken out of service (engine/devices/views.yaml
`ecc_isolated_pages`). Pages npu-smi counts as next-isolated (newer drivers: `... Next-Isolated
Pages Count`) become isolated at the chip's next reset (Huawei's npu-smi reference, `info -t ecc`),
so they count too: a reset must not be what takes the chip past the limit. The fault codes
themselves are devices.faults."""

from __future__ import annotations

from typing import Mapping

from engine.doctor.checks import check
from engine.doctor.context import Context
from engine.doctor.device_checks import _table
from engine.doctor.model import Outcome, error, ok, skip, warn
from engine.i18n import N_, _

ECC_TIMEOUT = 10.0


def ecc_limits() -> Mapping[str, int]:
    from engine.devices.views import view_table

    return view_table()["ecc_isolated_pages"]


def ecc_verdict(
    pages: Mapping[str, float], limits: Mapping[str, int], pending: Mapping[str, float] | None = None
) -> Outcome:
    """`pages`: chip ("NPU 3 chip 0") -> HBM pages isolated after multi-bit (double-bit) errors;
    `pending`: chip -> pages that become isolated at its next reset (judged with them)."""
    warn_at, limit = limits["warn"], limits["limit"]
    pending = pending or {}
    total = {chip: n + (pending.get(chip) or 0) for chip, n in pages.items()}
    worn = sorted(((n, chip) for chip, n in total.items() if n >= warn_at), reverse=True)

    def shown(n: float, chip: str) -> str:
        later = pending.get(chip) or 0
        if later:
            return _("{chip}: {pages:g} (+{later:g} at the next reset)").format(chip=chip, pages=n - later, later=later)
        return f"{chip}: {n:g}"

    listed = ", ".join(shown(n, chip) for n, chip in worn[:4])
    if worn and worn[0][0] >= limit:
        return error(
            _("HBM pages isolated after multi-bit ECC errors at the limit ({limit}): {chips}").format(
                limit=limit, chips=listed
            ),
            _("isolate this NPU: move the engine to other NPUs and have the card repaired or replaced"),
        )
    if worn:
        return warn(
            _("HBM pages isolated after multi-bit ECC errors near the limit of {limit}: {chips}").format(
                limit=limit, chips=listed
            ),
            _(
                "plan the card's replacement; restart the engine on it if it reports ECC errors, and watch "
                "`npu-smi info -t ecc -i <npu>`: the chip must be isolated at the limit"
            ),
        )
    most = max(total.values(), default=0)
    return ok(
        _("{count} chip(s): at most {most:g} HBM page(s) isolated after multi-bit ECC errors (limit {limit})").format(
            count=len(pages), most=most, limit=limit
        )
    )


@check("devices.ecc", "devices", N_("HBM pages isolated after ECC errors, against the limit that retires the chip"))
def check_ecc(ctx: Context) -> Outcome:
    from engine.devices.npu_smi import NpuSmiError
    from engine.devices.views import parse_view

    table, s = _table(ctx)
    if s is not None:
        return s
    pages: dict[str, float] = {}
    pending: dict[str, float] = {}
    unread: list[str] = []
    for npu in sorted({c.npu for c in table.chips}):
        argv = [ctx.npu_smi_path or "npu-smi", "info", "-t", "ecc", "-i", str(npu)]
        try:
            result = ctx.host.runner.run(argv, timeout=ECC_TIMEOUT)
            chips = parse_view("ecc", result.stdout)
        except (NpuSmiError, OSError) as exc:
            unread.append(f"NPU {npu} ({getattr(exc, 'cause', exc)})")
            continue
        except Exception as exc:  # noqa: BLE001 - a recorded tree without the answer, a hung tool
            unread.append(f"NPU {npu} ({getattr(exc, 'cause', None) or type(exc).__name__})")
            continue
        for chip, view in chips.items():
            value = view.values.get("hbm_double_bit_isolated_pages_cnt")
            if value is not None:
                pages[f"NPU {npu} chip {chip}"] = value
                pending[f"NPU {npu} chip {chip}"] = view.values.get("hbm_double_bit_next_isolated_pages_cnt") or 0
    if not pages:
        if not ctx.live:
            return skip(_("npu-smi -t ecc not recorded"))
        why = _("; ").join(unread[:2]) or _("no HBM on these chips")
        return skip(_("npu-smi gave no HBM ECC counts ({why})").format(why=why))
    return ecc_verdict(pages, ecc_limits(), pending)
