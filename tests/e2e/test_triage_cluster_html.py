"""`triage --html` across nodes in a real headless browser: the page opens offline with no
console error, the timeline has one lane per node, and the first node to fail is marked on its
own lane at the time of its root event (the recorded clock-skew case, offsets from the manifest)."""

from __future__ import annotations

import time

from helpers import FIXTURES, headless_browser

from ascendctl.cli import main

# The timeline div: its lanes, each trace's name with the lanes and times of its points, and what
# the browser drew (the lane labels and the markers of the SVG).
TIMELINE_JS = """
const d = document.querySelector('.js-plotly-plot');
if (!d || !d.data) return null;
return {
  lanes: d.layout.yaxis.categoryarray,
  traces: d.data.map(t => ({name: t.name, y: Array.from(t.y || []), x: Array.from(t.x || [])})),
  text: document.body.innerText,
  ticks: Array.from(d.querySelectorAll('.ytick text')).map(t => t.textContent),
  points: d.querySelectorAll('.scatterlayer .point').length,
};
"""


def test_the_cluster_timeline_page_has_a_lane_per_node_and_marks_the_first_to_fail(tmp_path, capsys):
    browser = headless_browser()
    try:
        page = tmp_path / "incident.html"
        code = main(["triage", str(FIXTURES / "cluster" / "clock_skew"), "--html", str(page)])
        capsys.readouterr()
        assert code == 1
        assert "<script src=" not in page.read_text()  # nothing to fetch: it opens offline

        browser.get(page.as_uri())
        deadline = time.monotonic() + 30
        while not (seen := browser.execute_script(TIMELINE_JS)) and time.monotonic() < deadline:
            time.sleep(0.5)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        browser.quit()
    assert not errors, errors
    assert seen is not None, "the timeline was never drawn"
    assert sorted(seen["lanes"]) == ["node0", "node1", "node2", "node3"]
    assert sorted(seen["ticks"]) == ["node0", "node1", "node2", "node3"]  # drawn, not only in the data
    assert seen["points"] == sum(len(t["x"]) for t in seen["traces"]) > 0
    by_name = {t["name"]: t for t in seen["traces"]}
    star = by_name["first to fail"]
    # node2's clock runs 120 s ahead: its lost heartbeat is placed at 10:58:51 on the collector's
    # clock, before node0's own error at 10:59:21 (which the raw stamps would put first)
    assert star["y"] == ["node2"] and star["x"][0].startswith("2026-05-01T10:58:51"), star
    assert set(by_name["wait"]["y"]) >= {"node1", "node3"}
    assert "node2 (first to fail): npu-heartbeat-lost" in seen["text"]
