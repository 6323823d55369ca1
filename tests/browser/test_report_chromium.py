"""report.html as a person sees it: rendered by headless Chromium (Debian's ``chromium`` package).

The report is opened from disk with no network; a copy with a probe script appended records each grid cell's
computed colour and size in the DOM that ``--dump-dom`` prints. A screenshot of the failed run's report is
kept under ``artifacts/browser/`` (``ROLLCALL_BROWSER_ARTIFACTS`` moves it) for CI to publish.

Without a Chromium binary these tests are skipped, except under ``CI=true``, where they fail: CI must
install it (``apt-get install -y chromium``). ``ROLLCALL_CHROMIUM`` names a binary explicitly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rollcall.baseline import Baselines
from rollcall.htmlreport import REPORT_FILE, write_report
from tests.ci import ci
from tests.unit.test_baseline import _fields
from tests.unit.test_htmlreport import Elements, record_of

BINARIES = ("chromium", "chromium-browser", "google-chrome", "chrome")
ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

PROBE = """<script>
for (const cell of document.querySelectorAll('.rank[data-rank]')) {
  const box = cell.getBoundingClientRect();
  cell.setAttribute('data-bg', getComputedStyle(cell).backgroundColor);
  cell.setAttribute('data-shown', String(box.width > 0 && box.height > 0));
}
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    named = os.environ.get("ROLLCALL_CHROMIUM")
    found = named or next((p for p in map(shutil.which, BINARIES) if p), None)
    if not found:
        reason = "headless Chromium is not installed (apt-get install -y chromium, or set ROLLCALL_CHROMIUM)"
        if ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


def run_chromium(binary: str, profile: Path, *args: str) -> str:
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",  # CI containers run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def rgb(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", text)[:3])


@pytest.fixture(scope="module")
def failed_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two nodes of 8 ranks: ranks 3 and 12-15 missed events (node 1 partly lost), rank 9 is a straggler."""
    root = tmp_path_factory.mktemp("report")
    skip = {
        3: ("throughput", "complete"),
        **{r: ("throughput", "epoch_time", "complete") for r in range(12, 16)},
    }
    key = "accelerator=cpu,instance_type=-,nodes=2,procs_per_node=8,model=tiny,seq_len=64"
    figures = {"throughput_total": 880.0, "throughput_median": 55.0, "epoch_time_mean": 0.44}
    entry = {**_fields(key), **figures}
    criteria = {
        "baselines": Baselines.from_dict({"version": 1, "entries": {key: entry}}),
        "baseline_file": "b.json",
    }
    record = record_of(
        root, "test_every_rank_answers", nodes=2, ppn=8, tp={9: 21.0}, skip=skip, criteria=criteria
    )
    write_report(root / REPORT_FILE, [record], {"backend": "scripted", "started": 0})
    return root / REPORT_FILE


def test_the_grid_shows_every_rank_and_the_missing_ones_in_red(chromium, failed_report, tmp_path):
    probed = failed_report.with_name("probed.html")
    probed.write_text(failed_report.read_text().replace("</body>", PROBE + "</body>"))
    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", probed.as_uri())

    cells = [attrs for tag, attrs in Elements(dom).tags if "data-bg" in attrs]
    assert [int(c["data-rank"]) for c in cells] == list(range(16))
    assert all(c["data-shown"] == "true" for c in cells)
    colour = {int(c["data-rank"]): rgb(c["data-bg"]) for c in cells}
    missing = {3, 12, 13, 14, 15}
    for rank, (r, g, b) in colour.items():
        if rank in missing:
            assert r > 180 and g < 90 and b < 90, (rank, colour[rank])  # red
        elif rank == 9:
            assert r > 200 and 120 < g < 190 and b < 60, (rank, colour[rank])  # amber
        else:
            assert g > r and g > b, (rank, colour[rank])  # green
    assert len({colour[r] for r in missing}) == 1


def test_a_screenshot_of_the_failed_run_is_kept(chromium, failed_report, tmp_path):
    out = Path(os.environ.get("ROLLCALL_BROWSER_ARTIFACTS", ROOT / "artifacts" / "browser"))
    out.mkdir(parents=True, exist_ok=True)
    shot = out / "report-failed.png"
    shot.unlink(missing_ok=True)
    run_chromium(
        chromium,
        tmp_path / "profile",
        "--window-size=1280,1400",
        f"--screenshot={shot}",
        failed_report.as_uri(),
    )
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
