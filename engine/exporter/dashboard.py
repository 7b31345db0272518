"""`ascendctl exporter dashboard`: the Grafana dashboard of dashboard.yaml, built with
grafana-foundation-sdk (Grafana's own typed builders), not hand-edited JSON."""

from __future__ import annotations

import json
from typing import Iterator

from engine.data import load_yaml
from engine.errors import BadInput

# The data source is chosen on import: a variable, so one file fits every Grafana.
_DATASOURCE_VAR = "datasource"


def spec() -> dict:
    return load_yaml("engine.exporter", "dashboard.yaml")


def queries() -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) for every query of the dashboard."""
    for row in spec()["rows"]:
        for panel in row["panels"]:
            for q in panel["queries"]:
                yield panel["title"], q["expr"]


def dashboard_json() -> str:
    try:
        from grafana_foundation_sdk.builders import dashboard as gd
        from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models import dashboard as dm
        from grafana_foundation_sdk.models import prometheus as pm
    except ImportError as exc:  # Python 3.10, or a trimmed install
        raise BadInput(
            "the dashboard is built with grafana-foundation-sdk, which is not installed (it needs Python 3.11+)",
            "pip install grafana-foundation-sdk into ascendctl's environment (Python 3.11 or newer)",
        ) from exc
    data = spec()
    ds = dm.DataSourceRef(type_val="prometheus", uid="${" + _DATASOURCE_VAR + "}")
    board = (
        gd.Dashboard(data["title"])
        .uid(data["uid"])
        .tags(["ascendctl", "ascend", "vllm"])
        .refresh("30s")
        .time("now-1h", "now")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .with_variable(gd.DatasourceVariable(_DATASOURCE_VAR).label("Prometheus").type("prometheus"))
    )
    for var in data["variables"]:
        board = board.with_variable(
            gd.QueryVariable(var["name"])
            .label(var["label"])
            .query(var["query"])
            .datasource(ds)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(dm.VariableOption(selected=True, text="All", value="$__all"))
        )
    kinds = {"timeseries": timeseries.Panel, "stat": stat.Panel, "table": table.Panel}
    for row in data["rows"]:
        board = board.with_row(gd.Row(row["title"]))
        for p in row["panels"]:
            panel = kinds[p.get("type", "timeseries")]().title(p["title"]).datasource(ds).height(8).span(8)
            if p.get("unit"):
                panel = panel.unit(p["unit"])
            for i, q in enumerate(p["queries"]):
                target = prometheus.Dataquery().expr(q["expr"]).legend_format(q["legend"]).ref_id(chr(ord("A") + i))
                if q.get("instant"):  # tables show the current rows, not a history
                    target = target.instant().format(pm.PromQueryFormat.TABLE)
                panel = panel.with_target(target)
            board = board.with_panel(panel)
    return json.dumps(board.build(), cls=JSONEncoder, indent=2, sort_keys=False) + "\n"
