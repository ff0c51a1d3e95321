"""A :class:`~specload_boards.model.Board` as Grafana's dashboard JSON.

Everything every board shares is here: the datasource, model and variant
variables, the reload annotation, the links between boards, and each panel
type's options. Keys keep one order so the committed files only change where a
board does.
"""

from __future__ import annotations

from typing import Any

from specload_boards.model import Board, Item, Link, Panel, Query, Row, Threshold, Variable
from specload_boards.queries import MODELS, VARIANTS

#: Every panel and query reads the datasource the board's variable selects.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TAG = "specload"  # every board: the boards' own links list boards by this tag
SCHEMA_VERSION = 39
GRID_COLUMNS = 24

MODEL = Variable("model", "Model", "label_values(model)")
VARIANT = Variable("variant", "Variant", f"label_values({{{MODELS}}}, variant)")


def dashboard(board: Board) -> dict[str, Any]:
    return {
        "uid": board.address.uid,
        "title": board.address.title,
        "description": board.description,
        "tags": [TAG, board.folder],
        "editable": True,
        "graphTooltip": 1,  # shared crosshair
        "timezone": "browser",
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "links": [_links_to_every_board()],
        "annotations": {"list": [_grafana_annotations(), _reloads()]},
        "templating": {
            "list": [
                _datasource_variable(),
                *(_variable(var) for var in (MODEL, VARIANT, *board.extra_variables)),
            ]
        },
        "panels": _layout(board.items),
    }


# --------------------------------------------------------------------------- board parts


def _datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        # The datasource grafana/provisioning/datasources/specload.yml creates.
        "current": {
            "selected": True,
            "text": "specload Prometheus",
            "value": "specload-prometheus",
        },
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def _variable(variable: Variable) -> dict[str, Any]:
    current: dict[str, Any] = (
        {"selected": True, "text": ["All"], "value": ["$__all"]}
        if variable.include_all and variable.default is None
        else {"selected": True, "text": variable.default or "", "value": variable.default or ""}
    )
    out: dict[str, Any] = {
        "name": variable.name,
        "label": variable.label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": variable.query,  # the classic form; every Grafana since 7 reads it
        "definition": variable.query,
        "refresh": 2,  # on time range change: variants come and go
        "sort": 1,
        "multi": variable.multi,
        "includeAll": variable.include_all,
        "current": current,
        "options": [],
        "hide": 0,
        "regex": "",
    }
    if variable.include_all:
        out["allValue"] = ".+"  # a regex over the label, not a list of the values seen
    return out


def _grafana_annotations() -> dict[str, Any]:
    """Grafana's own annotations and alerts, as a new board has them (hidden)."""
    return {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }


def _reloads() -> dict[str, Any]:
    """A mark over every reload of a selected variant, on every board."""
    return {
        "name": "Reloads",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "orange",
        "expr": f"max by (variant) (specload_target_reload_in_progress{{{VARIANTS}}}) > 0",
        "step": "10s",
        "titleFormat": "reload of {{variant}}",
        "textFormat": "variant {{variant}} reloading",
        "tagKeys": "variant",
        "useValueForTime": False,
    }


def _links_to_every_board() -> dict[str, Any]:
    return {
        "title": "specload boards",
        "type": "dashboards",
        "tags": [TAG],
        "asDropdown": False,
        "includeVars": True,
        "keepTime": True,
        "targetBlank": False,
        "icon": "external link",
        "tooltip": "",
        "url": "",
    }


# --------------------------------------------------------------------------- panels


def _layout(items: list[Item]) -> list[dict[str, Any]]:
    """Panels left to right, a new line when one does not fit or at a row header;
    ids in order, from 1."""
    out: list[dict[str, Any]] = []
    x = y = line_height = 0
    for panel_id, item in enumerate(items, start=1):
        if isinstance(item, Row):
            if x:
                y, x, line_height = y + line_height, 0, 0
            out.append(
                {
                    "id": panel_id,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y},
                    "panels": [],
                }
            )
            y += 1
            continue
        if x + item.width > GRID_COLUMNS:
            y, x, line_height = y + line_height, 0, 0
        grid = {"h": item.height, "w": item.width, "x": x, "y": y}
        out.append(_panel(item, panel_id, grid))
        x += item.width
        line_height = max(line_height, item.height)
    return out


def _panel(panel: Panel, panel_id: int, grid: dict[str, int]) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "thresholds": _thresholds(panel.thresholds),
        "mappings": _value_mappings(panel.value_names),
        "color": {
            # Single values take the threshold colour; lines one colour each.
            "mode": "thresholds" if panel.kind in ("stat", "state-timeline") else "palette-classic"
        },
    }
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10 if panel.stacked else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
        }
    out: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "targets": [_target(query, index) for index, query in enumerate(panel.queries)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": _options(panel.kind),
    }
    if panel.kind == "table" and len(panel.queries) > 1:
        # One table row per series: the queries' values side by side.
        out["transformations"] = [{"id": "merge", "options": {}}]
    if panel.links:
        out["links"] = [_link(link) for link in panel.links]
    return out


def _options(kind: str) -> dict[str, Any]:
    legend = {"displayMode": "list", "placement": "bottom", "showLegend": True}
    match kind:
        case "timeseries":
            return {"legend": legend, "tooltip": {"mode": "multi", "sort": "desc"}}
        case "stat":
            return {
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "background",
                "graphMode": "area",
                "textMode": "auto",
                "orientation": "auto",
                "justifyMode": "auto",
            }
        case "state-timeline":
            return {
                "showValue": "auto",
                "mergeValues": True,
                "alignValue": "left",
                "rowHeight": 0.9,
                "legend": legend,
                "tooltip": {"mode": "single", "sort": "none"},
            }
        case "table":
            return {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    raise ValueError(f"no options for panel type {kind!r}: add them here")


def _target(query: Query, index: int) -> dict[str, Any]:
    target: dict[str, Any] = {
        "datasource": DATASOURCE,
        "refId": chr(ord("A") + index),
        "expr": query.expr,
        "legendFormat": query.legend,
        "range": not query.instant,
        "instant": query.instant,
        "editorMode": "code",
    }
    if query.instant:
        target["format"] = "table"
    return target


def _thresholds(steps: list[Threshold]) -> dict[str, Any]:
    return {
        "mode": "absolute",
        "steps": [{"color": color, "value": value} for color, value in steps],
    }


def _value_mappings(names: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    if not names:
        return []
    options = {
        str(value): {"text": text, "color": color, "index": value}
        for value, (text, color) in enumerate(names)
    }
    return [{"type": "value", "options": options}]


def _link(link: Link) -> dict[str, Any]:
    board = link.board
    return {
        "title": link.title or f"Open {board.title}",
        "url": f"/d/{board.uid}/{board.slug}?"
        + "${__url_time_range}&${model:queryparam}&${variant:queryparam}",
    }
