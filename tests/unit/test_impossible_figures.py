"""A figure past its physical bound is flagged with the peak it was held to, never printed as a measure.

An H200 that calls itself an A10G is held to the A10G's peak: its MFU comes out above 100%. The terminal's
table, results.json, the page, pytest's junit properties and the metrics each say the flag (the value kept
only under ``untrusted_mean``), and a true MFU is still printed as a figure.
"""

import json
import re

import pytest

from rollcall import reports
from rollcall.evidence.perf import Mfu
from rollcall.jobspec import JobSpec
from rollcall.metrics.prometheus import write_textfile
from rollcall.page.report import render
from rollcall.runner import RunResult
from rollcall_workload.shape import peak_flops
from tests.unit.helpers import event, judged, roll_of

H200_FLOPS = 989.4e12


def log(name, mfu, tflops=None, world=2):
    """One node's log of ``world`` ranks on a device named ``name`` whose ranks said ``mfu``."""
    tflops = tflops if tflops is not None else mfu * peak_flops(name) / 1e12
    lines = []
    for r in range(world):
        lines += [
            f"[{r}]:" + e
            for e in (
                event("start", r, world, local_rank=r, node_rank=0, device="cuda:0", device_name=name),
                event("epoch_time", r, world, epoch=1, seconds=0.4),
                event("throughput", r, world, samples_per_sec=50.0, mfu=mfu, tflops=tflops),
                event("complete", r, world),
            )
        ]
    return "".join(line + "\n" for line in lines)


def record_of(name, mfu, tflops=None):
    attempt = judged(roll_of(log(name, mfu, tflops)), JobSpec("mfu", 1, 2, accelerator="gpu"))
    return reports.TestRecord("t.py::test_mfu", RunResult("local", [attempt]), "gpu")


def as_h200_named(name):
    """A true H200 at 45% of its peak, calling itself ``name``: held to that name's peak."""
    tflops = 0.45 * H200_FLOPS / 1e12
    return record_of(name, round(tflops * 1e12 / peak_flops(name), 4), tflops)


@pytest.mark.parametrize(("name", "shown"), [("NVIDIA A10G", "636.0%"), ("NVIDIA L4", "368.0%")])
def test_an_mfu_above_100_percent_is_flagged_with_the_peak_and_its_source_everywhere(tmp_path, name, shown):
    record = as_h200_named(name)
    mfu = record.result.last.verdict.mfu
    assert mfu is not None and not mfu.trusted
    key = name.split()[-1]
    peak = f"{peak_flops(name) / 1e12:.4g}"
    flag = f"{shown} of the {name}'s {peak} TFLOPS peak, from the table's {key} entry: above 100%"
    assert mfu.flag.startswith(flag) and mfu.flag.endswith("the GPU's name or its peak is wrong")

    _, row = reports.summary_table([record])
    assert f"- ({flag}" in row and f" {shown} " not in row.replace(f"({shown}", "")  # not a bare figure

    reports.write_results(tmp_path / "results.json", [record], {})
    (test,) = json.loads((tmp_path / "results.json").read_text())["tests"]
    assert test["mfu_mean"] is None  # no figure that cannot be
    said = test["mfu"]
    assert "mean" not in said and said["untrusted_mean"] == pytest.approx(mfu.value)
    assert said["flag"] == mfu.flag and said["peak_from"] == f"the table's {key} entry"
    assert said["peak_tflops"] == pytest.approx(peak_flops(name) / 1e12, rel=1e-3) and said["device"] == name

    page = render([record], {"backend": "local"}, tmp_path)
    assert f"- ({flag}" in page.replace("&#39;", "'")

    props = dict(reports.junit_properties(record))
    assert "mfu_mean" not in props and props["mfu_flag"] == mfu.flag

    write_textfile(tmp_path / "m.prom", [record], finished=1.0)
    text = (tmp_path / "m.prom").read_text()
    assert "rollcall_run_mfu_ratio{" not in text  # not exported as a value
    (untrusted,) = re.findall(r"rollcall_run_figure_untrusted\{([^}]*)\} 1\.0", text)
    assert 'figure="mfu"' in untrusted and f'peak="{peak} TFLOPS"' in untrusted
    assert f'peak_from="the table\'s {key} entry"' in untrusted


def test_a_true_mfu_is_a_figure_in_every_report(tmp_path):
    record = as_h200_named("NVIDIA H200")
    mfu = record.result.last.verdict.mfu
    assert mfu is not None and mfu.trusted and mfu.flag is None and mfu.text == "45.0%"
    assert " 45.0% " in reports.summary_table([record])[1]
    reports.write_results(tmp_path / "results.json", [record], {})
    (test,) = json.loads((tmp_path / "results.json").read_text())["tests"]
    assert test["mfu_mean"] == pytest.approx(0.45) and test["mfu"]["mean"] == pytest.approx(0.45)
    assert dict(reports.junit_properties(record))["mfu_mean"] == str(mfu.value)
    write_textfile(tmp_path / "m.prom", [record], finished=1.0)
    text = (tmp_path / "m.prom").read_text()
    assert re.search(r"rollcall_run_mfu_ratio\{[^}]*\} 0\.45", text) and "figure_untrusted{" not in text
    assert "45.0%" in render([record], {"backend": "local"}, tmp_path)


def test_a_peak_the_table_does_not_give_came_from_the_option_and_a_negative_share_is_flagged():
    given = Mfu(1.5, 100.0, "NVIDIA H200")  # --peak-tflops 100 on an H200 (the table says 989.4)
    assert (
        given.peak_from == "--peak-tflops" and "100 TFLOPS peak, from --peak-tflops: above 100%" in given.flag
    )
    unknown = Mfu(-0.2, None, None)
    assert unknown.peak_from == "unknown" and unknown.text.startswith("- (-20.0% of the device's peak")
    assert "below 0%" in unknown.flag
    assert Mfu(1.0, 989.4, "NVIDIA H200").flag is None  # exactly the peak can be
