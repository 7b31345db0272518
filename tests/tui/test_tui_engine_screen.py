"""`top`'s engine screen: Enter on an engine, its figures, history, profile and plan, diagnostics
and marked log tail; Escape back. Fed by recorded /metrics bodies and a recorded engine log in a
run directory like the one `ascendctl serve` leaves."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from textual.geometry import Region
from top_fakes import BUSY, IDLE, RUN_ID, down_error, make_collector, serve_run, settle, text_of

from ascendctl.tui.app import TopApp
from ascendctl.tui.chart import ChartPanel, ChartView
from ascendctl.tui.diagnostics import DetailScreen
from ascendctl.tui.engine_screen import NO_RUN, EngineScreen
from engine.telemetry import Target
from engine.telemetry.collector import target_of

pytestmark = pytest.mark.timeout(120)

URL = "http://a:8000"


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A serve run of cpu-tiny at URL, under relative paths (the screen shows them)."""
    monkeypatch.chdir(tmp_path)
    return serve_run(Path("."), URL)


def served_and_plain(run, b_script=(IDLE, down_error())):
    """The run's engine (a) and an engine given by URL (b)."""
    targets = [target_of(run), Target("http://b:8000", "b:8000")]
    return make_collector({URL: [IDLE, BUSY], "http://b:8000": list(b_script)}, targets)


async def test_enter_opens_the_engine_with_its_profile_plan_and_marked_log_and_escape_returns(run):
    app = TopApp(served_and_plain(run).poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        # The cursor starts on the first engine, named by its profile (the run id is in its plan).
        assert "▶ cpu-tiny " in text_of(app, "#engines") and RUN_ID not in text_of(app, "#engines")
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, EngineScreen)
        header = text_of(screen, "#engine-header")
        assert "cpu-tiny" in header and "up" in header and URL in header and "phase ready" in header
        plan = text_of(screen, "#engine-plan")
        assert "profile cpu-tiny" in plan and f"run {RUN_ID}" in plan and "model model as tiny" in plan
        assert "tp 1  dp 1  max_model_len 512  max_num_seqs 8" in plan
        assert "KV blocks planned 8192  actual 8192 (metrics)  100% of plan" in plan
        assert "last 200 lines, 5 marked" in text_of(screen, "#engine-log-title")
        log = screen.query_one("#engine-log-lines").text.plain
        assert (
            "● (APIServer pid=22676) ERROR 11-29 21:08:51 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError"
            in log
        )
        assert "  ↳ vllm-engine-dead: The engine died while serving" in log
        # The engine's own diagnostics: the known issues the collector found in the same log.
        rows = [str(r[1]) for r in map(screen.query_one("#engine-diagnostics").get_row_at, range(3))]
        assert any("CPU attention kernel" in r for r in rows)
        assert "generation N/A" in text_of(screen, "#engine-figures")

        await pilot.press("r")  # the screen follows the app's snapshots
        await settle(pilot, app, 2)
        figures = text_of(screen, "#engine-figures")
        assert "TTFT p50 35ms p90" in figures and "total 8192" in figures
        # Its charts: the app's history of this engine, the four engine charts under its name.
        charts = screen.query_one(ChartPanel)
        assert charts.subject == RUN_ID and "cpu-tiny · last 5 min" in text_of(charts, "TextPanel")
        painted = "\n".join(s.text for v in charts.query(ChartView) for s in v.render_lines(Region(0, 0, *v.size)))
        assert all(view.chart.title in painted for view in charts.query(ChartView)) and len(charts.charts) == 4

        await pilot.press("escape")
        assert not isinstance(app.screen, EngineScreen) and app.is_running
        await pilot.press("enter")  # q leaves the engine screen, not the dashboard
        await pilot.press("q")
        assert not isinstance(app.screen, EngineScreen) and app.is_running


async def test_down_and_tab_choose_what_enter_opens(run):
    app = TopApp(served_and_plain(run, b_script=[down_error()]).poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("down")
        assert "▶ b:8000 DOWN" in text_of(app, "#engines")
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, EngineScreen) and "b:8000 DOWN" in text_of(screen, "#engine-header")
        assert NO_RUN in text_of(screen, "#engine-plan")
        assert "no log (engine not started by ascendctl serve)" in text_of(screen, "#engine-log-title")
        # Enter on one of its diagnostics opens the details, Escape comes back to the engine.
        assert "b:8000 unreachable" in str(screen.query_one("#engine-diagnostics").get_row_at(0)[1])
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen) and "start the engine" in text_of(app.screen, "#detail")
        await pilot.press("escape")
        assert app.screen is screen
        await pilot.press("escape")
        await pilot.press("tab")  # from the engines to the dashboard's diagnostics
        assert app.focused is app.query_one("#diagnostics")
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)


async def test_an_engine_that_vanishes_while_open_shows_as_gone(run):
    collector = served_and_plain(run)
    polls = iter(range(100))

    def feed():
        snap = collector.poll()
        return snap if next(polls) == 0 else dataclasses.replace(snap, engines=snap.engines[1:])

    app = TopApp(feed, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("enter")
        await pilot.press("r")
        await settle(pilot, app, 2)
        screen = app.screen
        assert isinstance(screen, EngineScreen) and app.is_running
        header = text_of(screen, "#engine-header")
        assert "cpu-tiny" in header and "GONE" in header and "display failed" not in text_of(app, "#status")
        await pilot.press("escape")
        assert "▶ b:8000" in text_of(app, "#engines")  # the cursor moved to what is left


async def test_the_log_pane_follows_new_lines_and_a_rotated_log(run):
    app = TopApp(served_and_plain(run).poll, interval=None)
    log = run.log_path
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("enter")
        screen = app.screen
        lines = screen.query_one("#engine-log-lines").text.plain.splitlines()
        marked = [n for n, line in enumerate(lines) if line.startswith("● ")]
        view = screen.query_one("#engine-log")
        assert view.scroll_y == view.max_scroll_y > 0  # it opens on the newest lines
        above = [n for n in marked if n < view.scroll_y]
        await pilot.press("m")  # up to the marked lines above the view, nearest first
        assert view.scroll_y == above[-1]
        await pilot.press("m")
        assert view.scroll_y == above[-2]
        with log.open("a") as f:  # a recorded line of another run, with a colour escape around it
            f.write("\x1b[31m(APIServer pid=22676) ERROR 11-29 21:08:52 [launcher.py:113] EngineDeadError\x1b[0m\n")
        await pilot.press("r")
        await settle(pilot, app, 2)
        lines = screen.query_one("#engine-log-lines").text.plain.splitlines()
        assert lines[-2] == "● (APIServer pid=22676) ERROR 11-29 21:08:52 [launcher.py:113] EngineDeadError"
        assert "6 marked" in text_of(screen, "#engine-log-title")
        log.write_text("a new engine log\n")  # rotated: the pane starts over
        await pilot.press("r")
        await settle(pilot, app, 3)
        assert screen.query_one("#engine-log-lines").text.plain == "  a new engine log"
        assert "last 1 lines, 0 marked" in text_of(screen, "#engine-log-title")


async def test_a_click_selects_an_engine_and_a_double_click_opens_it(run):
    app = TopApp(served_and_plain(run, b_script=[down_error()]).poll, interval=None)
    async with app.run_test(size=(140, 60)) as pilot:
        await settle(pilot, app, 1)
        lines = text_of(app, "#engines").splitlines()
        b_line = next(n for n, line in enumerate(lines) if line.startswith("b:8000"))
        await pilot.click("#engines", offset=(4, b_line + 2))  # on one of b's figure lines
        assert "▶ b:8000 DOWN" in text_of(app, "#engines") and not isinstance(app.screen, EngineScreen)
        await pilot.double_click("#engines", offset=(4, 1))
        assert isinstance(app.screen, EngineScreen) and "cpu-tiny" in text_of(app.screen, "#engine-header")


async def test_a_remote_engine_has_no_profile_or_log_here(run):
    collector = served_and_plain(run)

    def feed():  # as an exporter of another host reports its run: a log path of that host
        snap = collector.poll()
        remote = dataclasses.replace(snap.engines[1], label="hostB/run1", log_path="/srv/runs/run1/engine.log")
        return dataclasses.replace(snap, engines=(remote,))

    app = TopApp(feed, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("enter")
        assert "no profile: its run (/srv/runs/run1/engine.log) is not on this host" in text_of(
            app.screen, "#engine-plan"
        )
        assert "/srv/runs/run1/engine.log is not on this host" in text_of(app.screen, "#engine-log-title")


def test_engine_screen_snapshot(snap_compare, run, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    collector = served_and_plain(run)
    snaps = [collector.poll(), collector.poll()]
    feed = iter(snaps)
    app = TopApp(lambda: next(feed, snaps[-1]), interval=None)

    async def open_engine(pilot):
        await pilot.pause(0.2)
        await pilot.press("r")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(130, 48), run_before=open_engine)


async def test_an_engine_found_in_a_container_shows_its_container_and_reads_its_runs_log(run):
    """A container labelled with the run's id and URL (no run.json needed): the engine screen
    shows the container's CPU, memory and NPUs, and tails the run directory's log."""
    from top_fakes import ScriptedScrape

    from engine.container.discover import ContainerEngine
    from engine.container.inspect import ContainerEntry, Usage
    from engine.telemetry import Collector, Thresholds
    from engine.telemetry.collector import with_containers

    name = f"ascendctl-{RUN_ID}"
    entry = ContainerEntry("abc123", name, RUN_ID, "cpu-tiny", URL, "running")
    found = ContainerEngine("podman", entry, (0, 1), "quay.io/ascend/vllm-ascend:v0.13.0", run.log_path.as_posix())
    targets = with_containers([], [], [found])
    tick = iter(range(1_800_000_000, 1_900_000_000))
    collector = Collector(
        targets,
        None,
        Thresholds.defaults(),
        scrape_fn=ScriptedScrape({URL: [IDLE, BUSY]}),
        clock=lambda: float(next(tick)),
        wall=lambda: float(next(tick)),
        usage_fn=lambda runtime: {name: Usage(212.0, 3.5 * 1024**3, 16 * 1024**3)},
    )
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, EngineScreen)
        figures = text_of(screen, "#engine-figures")
        assert f"podman container {name}  CPU 212%  memory 3.5 GiB / 16.0 GiB  NPUs 0,1" in figures
        assert "profile cpu-tiny" in text_of(screen, "#engine-plan")
        assert "5 marked" in text_of(screen, "#engine-log-title")


async def test_the_engine_screen_names_a_hang_and_the_restart_it_caused(run):
    from engine import runs

    hang = runs.HangRecord(at=1.0, summary="probe timed out 3x in 90 s", evidence_dir="runs/x/hang-1", action="restart")
    runs.write_run(dataclasses.replace(run, restarts=1, restart_reason="hang", hangs=[hang]))
    app = TopApp(served_and_plain(run).poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("enter")
        plan = text_of(app.screen, "#engine-plan")
        assert "restarts 1 (last: hang)" in plan
        assert "hung 1x, last: probe timed out 3x in 90 s; evidence in runs/x/hang-1" in plan


async def test_the_engine_screen_shows_the_faults_of_the_npus_its_engine_uses(run):
    """A container given NPUs 0 and 1; npu-smi (recorded) reports chip 0 unhealthy and its health
    answer (recorded) the code 80E01801: the header's `faults:` line says what to do."""
    from top_fakes import ReplayRunner, ScriptedScrape, npu_text

    from engine.container.discover import ContainerEngine
    from engine.container.inspect import ContainerEntry
    from engine.devices import NpuSmiSource
    from engine.telemetry import Collector, Thresholds
    from engine.telemetry.collector import with_containers

    entry = ContainerEntry("abc123", f"ascendctl-{RUN_ID}", RUN_ID, "cpu-tiny", URL, "running")
    found = ContainerEngine("podman", entry, (0, 1), "quay.io/ascend/vllm-ascend:v0.13.0", run.log_path.as_posix())
    runner = ReplayRunner(
        npu_text("info/s16_310b4_alarm_trailing_spaces.txt"), health=npu_text("health/h2_warning.txt")
    )
    tick = iter(range(1_800_000_000, 1_900_000_000))
    collector = Collector(
        with_containers([], [], [found]),
        NpuSmiSource(runner, usages=False),
        Thresholds.defaults(),
        scrape_fn=ScriptedScrape({URL: [IDLE, BUSY]}),
        clock=lambda: float(next(tick)),
        wall=lambda: float(next(tick)),
        usage_fn=lambda runtime: {},
    )
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 1)
        assert "restart-engine 0x80E01801 (RestartBusiness)" in text_of(app, "#devices")
        await pilot.press("enter")
        header = text_of(app.screen, "#engine-header")
        assert "faults: NPU 0: 0x80E01801" in header
        assert "(RestartBusiness); that is the engine on NPUs 0-1" in header.replace("\n", " ")
