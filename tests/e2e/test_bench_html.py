"""The HTML report in a real headless browser: it loads offline with no console error and every
plot holds data. Runs bench against the stub (a burst that queues, some failures)."""

from __future__ import annotations

import json
import time

from helpers import headless_browser

from ascendctl.cli import main
from engine.bench.stub import StubConfig, StubThread

SCENARIO = """\
name: tiny-burst
phases:
  - {name: before, duration_s: 1, concurrency: 2}
  - {name: burst, duration_s: 1.5, concurrency: 12}
  - {name: after, duration_s: 1.5, concurrency: 2}
drain_after: burst
prompt_tokens: 16
max_tokens: 12
goodput: {ttft: 200, e2el: 1000}
"""

# Every plot div: its traces, and how many points each holds (plotly keeps `data` on the div).
PLOTS_JS = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
  traces: (d.data || []).length,
  points: (d.data || []).map(t => (t.x || []).length),
}));
"""


def test_the_html_report_loads_offline_with_data_in_every_plot(tmp_path, capsys):
    browser = headless_browser()
    try:
        scenario = tmp_path / "burst.yaml"
        scenario.write_text(SCENARIO)
        page, report = tmp_path / "report.html", tmp_path / "report.json"
        cfg = StubConfig(token_delay_s=0.01, max_running=4, fail_every=9, max_model_len=1024)
        with StubThread(cfg) as stub:
            code = main(["bench", stub.url, "--scenario", str(scenario), "--html", str(page), "--out", str(report)])
        capsys.readouterr()
        doc = json.loads(report.read_text())
        assert code in (0, 1) and doc["failed"] > 0 and max(doc["samples"]["engine"]["waiting"]) > 0
        text = page.read_text()
        assert "<script src=" not in text  # nothing to fetch: the plotting script is in the page

        browser.get(page.as_uri())
        # The plots are drawn by the page's scripts after load; a loaded runner may take a while.
        deadline = time.monotonic() + 30
        while not (plots := browser.execute_script(PLOTS_JS)) and time.monotonic() < deadline:
            time.sleep(0.5)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        browser.quit()
    assert not errors, errors
    assert len(plots) == 4, plots  # CDFs, TTFT and tokens/s over time, engine queue, outcomes
    for plot in plots:
        assert plot["traces"] > 0 and all(n > 0 for n in plot["points"]), plots
