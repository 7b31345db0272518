"""Commands given hostile files and servers: too deep JSON, damaged bench reports, a recording
with a NaN time, an engine that trickles, credentials in URLs. Each is refused or shown as DOWN
with exit 2 or 3, never "unexpected error" (exit 70), and never waits for ever."""

from __future__ import annotations

import copy
import json
import time

import pytest
from helpers import FIXTURES
from hostile_pages import VLLM_PAGE, HostileServer

from ascendctl.cli import main

pytestmark = pytest.mark.timeout(60)

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_deeply_nested_json_is_refused_as_not_a_recording_or_report(capsys, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP + "\n")
    for argv in (
        ["top", "--replay", str(deep), "--once"],
        ["bench", "compare", str(deep), str(deep)],
        ["doctor", "--compare", str(deep), str(deep)],
    ):
        code, _, err = _run(capsys, *argv)
        assert code == 2, (argv, err)
        assert "unexpected error" not in err and "RecursionError" not in err


def test_an_exporter_snapshot_nested_too_deep_is_a_url_down(capsys):
    snapshot = '{"kind": "ascendctl-exporter-snapshot", "host": "h", "snapshot": ' + DEEP + "}"
    with HostileServer({"deep": snapshot}) as pages:
        code, out, err = _run(capsys, "top", "--once", "--no-devices", pages.url + "/deep")
    assert code == 3 and "unexpected error" not in err


def _bench(tmp_path, name: str, change) -> str:
    doc = json.loads((FIXTURES / "bench" / "base.json").read_text())
    doc = copy.deepcopy(doc)
    change(doc)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(
    "name, change, words",
    [
        ("nan", lambda d: d["samples"].__setitem__("ttft_ms", [float("nan")] * 262), "samples.ttft_ms[0] is nan"),
        ("short", lambda d: d["samples"].__setitem__("ttft_ms", [1.0] * 3), "samples.ttft_ms is not a list as long"),
        ("strings", lambda d: d["samples"].__setitem__("e2e_ms", ["x"] * 262), "samples.e2e_ms[0] is 'x'"),
        ("duration", lambda d: d.__setitem__("duration_s", 1e12), "duration_s is 1000000000000.0"),
        ("schema", lambda d: d.__setitem__("schema_version", 99), "schema_version 99"),
    ],
)
def test_a_damaged_or_newer_bench_report_is_refused_naming_the_field(capsys, tmp_path, name, change, words):
    base = str(FIXTURES / "bench" / "base.json")
    code, _, err = _run(capsys, "bench", "compare", base, _bench(tmp_path, name, change))
    assert code == 2 and words in err and f"{name}.json" in err, err


def test_a_long_bench_report_compares_quickly(capsys, tmp_path):
    """An hour at 32 requests/s (115k samples) took about 40 s: the shares were resampled request
    by request. Now they are drawn by their count."""

    def grow(d):
        s, n, m = d["samples"], 115_000, len(d["samples"]["sent_s"])
        for k in ("phase", "error", "ttft_ms", "tpot_ms", "e2e_ms", "output_tokens"):
            s[k] = [s[k][i % m] for i in range(n)]
        s["sent_s"] = [i / 32 for i in range(n)]
        d["duration_s"] = d["phases"][0]["duration_s"] = n / 32 + 1

    big = _bench(tmp_path, "big", grow)
    start = time.monotonic()
    code, out, err = _run(capsys, "bench", "compare", str(FIXTURES / "bench" / "base.json"), big, "--json")
    assert code == 0 and json.loads(out)["figures"], err
    assert time.monotonic() - start < 8  # about 2 s here; it was about 20 s


def test_a_recording_with_a_nan_time_skips_that_line(capsys, tmp_path):
    with HostileServer({"ok": VLLM_PAGE}) as pages:
        rec = tmp_path / "rec.ndjson"
        url = pages.url + "/ok"
        assert main(["top", url, "--once", "--interval", "0.1", "--no-devices", "--record", str(rec)]) == 0
    capsys.readouterr()
    good = rec.read_text().splitlines()
    first = json.loads(good[0])
    first["time"] = float("nan")
    rec.write_text("\n".join([json.dumps(first), *good]) + "\n")
    from engine.telemetry.record import RecordingIndex

    skipped: list[str] = []
    index = RecordingIndex(rec, 1, skipped)  # what the dashboard (and its charts) plays
    assert len(index) == len(good) and all(t == t for t in index.times)
    assert skipped and "time nan is not a finite number" in skipped[0]
    code, _, err = _run(capsys, "top", "--replay", str(rec), "--once")
    assert code == 0 and f"{rec}:1: not a top snapshot" in err


def test_top_once_on_a_trickling_engine_returns_and_says_down(capsys):
    with HostileServer() as pages:
        start = time.monotonic()
        code, out, err = _run(capsys, "top", "--once", "--no-devices", pages.url + "/trickle")
    assert code == 3 and "did not answer in full" in out + err
    # one deadline (10 s) and the exporter check (1 s): a dead URL is not polled twice
    assert time.monotonic() - start < 15


def test_top_json_and_the_exporter_banner_carry_no_url_password(capsys, tmp_path):
    import subprocess
    import sys

    with HostileServer({"ok": VLLM_PAGE}) as pages:
        url = pages.url.replace("://", "://alice:URLPW0@") + "/ok"
        code, out, err = _run(capsys, "top", "--json", "--no-devices", url, "http://carol:DOWNPW9@127.0.0.1:1/x")
    assert code == 3 and "127.0.0.1" in out
    assert "URLPW0" not in out + err and "DOWNPW9" not in out + err
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ascendctl", "exporter", "--listen", f"127.0.0.1:{port}", "--no-devices",
         "--no-doctor", "http://alice:URLPW0@127.0.0.1:1/x"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(3)
    finally:
        proc.terminate()
        _, banner = proc.communicate(timeout=20)
    assert "engine http://127.0.0.1:1/x" in banner and "URLPW0" not in banner and "alice" not in banner


def test_no_devices_with_a_remote_exporter_shows_its_devices(capsys):
    from engine.devices.sample import DeviceSample
    from engine.telemetry.snapshot import REMOTE_KIND, Snapshot

    chip = DeviceSample("npu0", "npu", "910B2", mem_used_mb=1024.0, mem_total_mb=65536.0)
    doc = {"kind": REMOTE_KIND, "host": "node7", "snapshot": Snapshot(1.0, 1, devices=(chip,)).to_dict()}
    with HostileServer({"exp": json.dumps(doc)}) as pages:
        code, out, err = _run(capsys, "top", "--once", "--no-devices", pages.url + "/exp")
    assert "1 devices" in out and "node7/npu0" in out and "Devices: not polled" not in out, out + err
