"""OpenMetrics pages (``# EOF``, ``# UNIT``, ``_created``, exemplars) read by the one parser:
the sweep's server block and the exporter's reading agree with the same page in the
Prometheus text format."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.openmetrics.exposition import generate_latest as om_generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

from exporter.vllm_metrics import extract, keep
from specload.promtext import PromTextError, parse
from specload.sweep.server_metrics import snapshot
from tests.fixtures.exporter import vllm_page

pytestmark = pytest.mark.unit

_TYPE = re.compile(r"^# (HELP|TYPE) (\S+)(.*)$")


def to_openmetrics(page: str) -> str:
    """A vLLM page (Prometheus text 0.0.4) as OpenMetrics 1.0 would write it: counters typed
    without ``_total``, ``_created`` inside its family, ``# UNIT`` for seconds, exemplars on
    every bucket and counter sample, ``# EOF``."""
    out: list[str] = []
    for line in page.rstrip("\n").split("\n"):
        m = _TYPE.match(line)
        if m is not None:
            kind, name, rest = m.groups()
            if name.endswith("_created"):
                continue  # 0.0.4's separate gauge family; OpenMetrics keeps it in the family
            if rest.strip() == "counter" or (kind == "HELP" and name.endswith("_total")):
                name = name.removesuffix("_total")
            out.append(f"# {kind} {name}{rest}")
            if kind == "TYPE" and name.endswith("_seconds") and rest.strip() == "histogram":
                out.append(f"# UNIT {name} seconds")
            continue
        sample = line.split("{", 1)[0].split(" ", 1)[0]
        if line and not line.startswith("#") and sample.endswith(("_bucket", "_total")):
            out.append(line + ' # {trace_id="4bf92f3577b34da6",span="a # {b}"} 0.042 1700000000.1')
        else:
            out.append(line)
    return "\n".join(out) + "\n# EOF\n"


@pytest.mark.parametrize("kind", ["ngram", "plain"])
def test_sweep_and_exporter_read_openmetrics_as_the_text_format(kind: str) -> None:
    plain = vllm_page(kind)
    om = to_openmetrics(plain)
    assert " # {trace_id=" in om and "# EOF" in om and "# UNIT " in om
    # The sweep's view (every family parsed, buckets and exemplars included).
    assert snapshot(om) == snapshot(plain)
    # The exporter's view (its families only, no buckets).
    fast_om = extract(parse(om, keep, buckets=False), 1.0)
    assert fast_om == extract(parse(plain, keep, buckets=False), 1.0)
    assert fast_om.generation_tokens is not None and fast_om.process_start_s is not None
    # The full parse agrees family by family on every value (exemplars are not values).
    full_om, full_plain = parse(om), parse(plain)
    for name, fam in full_plain.items():
        if name.endswith("_created") and fam.type == "gauge":
            continue
        om_fam = full_om.get_family(name)
        assert om_fam is not None, name
        assert om_fam.total() == fam.total() or fam.type in ("histogram", "summary"), name


def test_prometheus_clients_openmetrics_with_exemplars_reads_back_exactly() -> None:
    registry = CollectorRegistry()
    counter = Counter("om_things", "things", ["who"], registry=registry)
    hist = Histogram("om_latency_seconds", "lat", buckets=(0.5, 5.0), registry=registry)
    counter.labels("a").inc(3, exemplar={"trace_id": "abc"})
    counter.labels("b").inc(4.5)
    hist.observe(0.2, exemplar={"trace_id": "x#1"})
    hist.observe(7.0, exemplar={"trace_id": "y"})
    text = om_generate_latest(registry).decode()
    assert " # {" in text and text.endswith("# EOF\n")
    fams = parse(text)
    truth = {s.name: s.value for f in om_families(text) for s in f.samples if "who" not in s.labels}
    assert fams.get_family("om_things").total() == 7.5  # type: ignore[union-attr]
    assert fams.get_family("om_things").by_label("who") == {"a": 3.0, "b": 4.5}  # type: ignore[union-attr]
    h = fams["om_latency_seconds"].histogram()
    assert h is not None
    assert (h.sum, h.count) == (truth["om_latency_seconds_sum"], truth["om_latency_seconds_count"])
    assert h.buckets == ((0.5, 1.0), (5.0, 1.0), (float("inf"), 2.0))


def test_openmetrics_timestamps_are_seconds() -> None:
    fams = parse("# TYPE g gauge\ng 1 1700000000.5\n# EOF\n")
    assert fams["g"].samples[0].timestamp_ms == pytest.approx(1_700_000_000_500.0)
    fams = parse("# TYPE g gauge\ng 1 1700000000500\n")
    assert fams["g"].samples[0].timestamp_ms == 1_700_000_000_500.0


@pytest.mark.parametrize(
    "line",
    [
        'c_total 1 # trace_id="x" 1\n',  # exemplar labels without braces
        'c_total 1 # {trace_id="x"}\n',  # exemplar without a value
        'c_total 1 # {trace_id="x"} zz\n',
        'c_total 1 # {trace_id="x"} 1 2 3\n',
        'c_total{a="1"} 1 # {trace_id="x" 1\n',
    ],
)
def test_malformed_exemplar_names_the_line(line: str) -> None:
    text = "# TYPE c counter\n" + line
    with pytest.raises(PromTextError, match="line 2"):
        parse(text)
    with pytest.raises(PromTextError, match="line 2"):
        parse(text, keep=lambda name: name == "c")
