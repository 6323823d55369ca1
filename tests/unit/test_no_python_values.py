"""No report says a Python value: no ``None``, ``False`` or ``True`` where a value is written, crash or pass.

An unknown is left out; a boolean is ``true`` or ``false`` (JSON's own ``null``, ``true`` and ``false`` are
JSON, not Python's words). Each report of a judged crash and of a judged pass is written and read as text.
"""

import json
import re
import xml.etree.ElementTree as ET

import pytest

from rollcall import nodeverdicts, reports
from rollcall.metrics.prometheus import write_textfile
from rollcall.page.report import write_report
from tests.unit.test_metrics import record_of
from tests.unit.test_rank_states_agree import crash_record

PYTHON = re.compile(r"\b(None|False|True)\b")


def json_strings(value):
    """Every string a JSON document holds, keys and values."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from json_strings(v)
    elif isinstance(value, str):
        yield value


def written(tmp_path, record):
    """Each report of ``record``'s session: its name -> the values it writes, as text."""
    reports.write_results(tmp_path / "results.json", [record], {})
    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record])
    write_report(tmp_path / "report.html", [record], {})
    write_textfile(tmp_path / "metrics.prom", [record], finished=1_700_000_000.0)
    nodes, breaker = nodeverdicts.of_records([record], ttl_s=3600.0)
    nodeverdicts.write_nodes(tmp_path / "nodes.json", nodes, 3600.0, breaker)
    junit = ET.parse(tmp_path / "ranks.junit.xml").getroot()
    return {
        "junit properties": [v for _, v in reports.junit_properties(record)],
        "results.json": list(json_strings(json.loads((tmp_path / "results.json").read_text()))),
        "nodes.json": list(json_strings(json.loads((tmp_path / "nodes.json").read_text()))),
        "ranks.junit.xml": [v for e in junit.iter() for v in (*e.attrib.values(), e.text or "")],
        "report.html": re.findall(r'="([^"]*)"|>([^<]+)<', (tmp_path / "report.html").read_text()),
        "metrics": re.findall(r'="([^"]*)"|\} (\S+)$', (tmp_path / "metrics.prom").read_text(), re.M),
        "terminal": reports.summary_table([record]) + reports.perf_summary([record]),
    }


@pytest.mark.parametrize("which", ["crash", "pass"])
def test_no_report_writes_none_false_or_true_as_a_value(tmp_path, which):
    record = crash_record(tmp_path) if which == "crash" else record_of(nodes=2, ppn=2)
    assert record.result.passed is (which == "pass")
    for name, values in written(tmp_path, record).items():
        texts = [" ".join(v) if isinstance(v, tuple) else v for v in values]
        assert texts, name  # it wrote something to read
        said = [t for t in texts if PYTHON.search(t)]
        assert said == [], f"{name} writes a Python value: {said[:5]}"


def test_pytests_own_properties_leave_an_unknown_out_and_say_booleans_in_lower_case(tmp_path):
    props = dict(reports.junit_properties(crash_record(tmp_path)))
    assert props["flaky"] == "false"  # a boolean, as JUnit's readers spell it
    assert "epoch_time_mean" in props and "throughput_total" not in props  # nothing measured: left out
    assert all(isinstance(v, str) for v in props.values())
