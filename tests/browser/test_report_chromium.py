"""report.html as a person sees it: rendered by headless Chromium (Debian's ``chromium`` package).

The report is opened from disk with no network; a copy with a probe script appended records each grid cell's
computed colour and size in the DOM that ``--dump-dom`` prints, and where each part of a test's section sits
(root cause, failure summary, rank grid, timeline, throughput bars). A screenshot of the failed run's report is
kept under ``artifacts/browser/`` (``ROLLCALL_BROWSER_ARTIFACTS`` moves it) for CI to publish.

Without a Chromium binary these tests are skipped, except under ``CI=true``, where they fail: CI must
install it (``apt-get install -y chromium``). ``ROLLCALL_CHROMIUM`` names a binary explicitly.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rollcall.evidence.baseline import Baselines
from rollcall.page.report import REPORT_FILE, write_report
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


#: Marks the parts of a test's section a person reads top to bottom (``data-part``, with its top edge), the
#: first line of the root cause and of the failure summary, and the rank labels under the throughput bars.
PARTS_PROBE = """<script>
const parts = {
  'root-cause': 'p.root-cause', 'failure': 'pre.failure', 'grid': 'div.grid', 'timeline': 'svg.timeline',
  'no-timeline': 'p.no-timeline', 'throughput': 'svg.bars:not(.compute)',
};
for (const [part, selector] of Object.entries(parts)) {
  const el = document.querySelector(selector);
  if (!el) continue;
  el.setAttribute('data-part', part);
  el.setAttribute('data-top', String(el.getBoundingClientRect().top));
  if (el.tagName !== 'svg') el.setAttribute('data-first-line', el.textContent.split('\\n')[0]);
  const labels = [...el.querySelectorAll('text.rank-label')].map((t) => t.textContent);
  if (labels.length) el.setAttribute('data-labels', labels.join(' '));
}
</script>"""


def parts_of(dom: Elements) -> dict[str, dict[str, str]]:
    """The parts ``PARTS_PROBE`` marked, by name."""
    return {a["data-part"]: a for _, a in dom.tags if "data-part" in a}


def assert_top_to_bottom(parts: dict[str, dict[str, str]], *order: str) -> None:
    """The named parts are all on the page, each below the one before."""
    assert set(order) <= set(parts), (order, sorted(parts))
    tops = [float(parts[p]["data-top"]) for p in order]
    assert all(a < b for a, b in itertools.pairwise(tops)), dict(zip(order, tops, strict=True))


def assert_tiles(dom: Elements, states: dict[int, str]) -> None:
    """One grid tile per rank, in rank order, each carrying its state as a class and as ``data-state``."""
    tiles = [a for _, a in dom.tags if "data-rank" in a and "rank" in a.get("class", "").split()]
    assert [int(t["data-rank"]) for t in tiles] == sorted(states)
    for tile in tiles:
        state = states[int(tile["data-rank"])]
        assert tile["data-state"] == state and state in tile["class"].split(), tile


def failed_report_states() -> dict[int, str]:
    """The tiles of ``failed_report``: ranks 3 and 12-15 missing, rank 9 a straggler."""
    return {r: "missing" if r in {3, 12, 13, 14, 15} else "straggler" if r == 9 else "ok" for r in range(16)}


def assert_reads_as_the_failed_report(dom: Elements) -> None:
    """The first failure first, then the failure summary, one tile per rank, the no-timeline note, and the
    throughput bars. No rank reported an error, and the missing events follow from another problem: the first
    failure is the first problem that does not (its line begins ``first failure``)."""
    parts = parts_of(dom)
    assert parts["root-cause"]["data-first-line"].startswith("first failure"), parts["root-cause"]
    assert_top_to_bottom(parts, "root-cause", "failure", "grid", "no-timeline", "throughput")
    assert parts["failure"]["data-first-line"] == (
        "roll call: 11 of 16 ranks answered, 1 of them too slow (2 nodes x 8 procs)"
    )
    assert parts["throughput"]["data-labels"] == " ".join(map(str, range(16)))
    assert_tiles(dom, failed_report_states())


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
        # the page is self-contained: Chromium itself must make no request of its own either
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--no-proxy-server",
        "--no-pings",
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
    probed.write_text(failed_report.read_text().replace("</body>", PROBE + PARTS_PROBE + "</body>"))
    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", probed.as_uri())
    assert_reads_as_the_failed_report(Elements(dom))

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
    # the page in the screenshot, as the same browser laid it out at the same size
    assert_reads_as_the_failed_report(
        probed_dom(chromium, failed_report, tmp_path, "--window-size=1280,1400")
    )


# -- the timeline, the tiles' roles, the rank axis, the trend page ----------------------------------

#: Records what a person sees of the page's new parts: each tile's colour and outline, each row's lane
#: colour, each axis label's horizontal extent, each timeline tick's and trend point's box.
LAYOUT_PROBE = """<script>
const box = (el) => el.getBoundingClientRect();
for (const cell of document.querySelectorAll('.rank[data-rank]')) {
  const style = getComputedStyle(cell);
  cell.setAttribute('data-bg', style.backgroundColor);
  cell.setAttribute('data-outline', style.outlineStyle + ' ' + style.outlineColor);
}
for (const lane of document.querySelectorAll('svg.timeline g.row rect.lane')) {
  lane.parentNode.setAttribute('data-fill', getComputedStyle(lane).fill);
}
for (const el of document.querySelectorAll('text.rank-label, text.run-label, line.tick, circle.point')) {
  const b = box(el);
  el.setAttribute('data-left', String(b.left));
  el.setAttribute('data-right', String(b.right));
  el.setAttribute('data-shown', String(b.width > 0 || b.height > 0));  // a tick is a vertical line
}
const svg = document.querySelector('svg.timeline');
if (svg) { const b = box(svg); svg.setAttribute('data-box', [b.left, b.right].join(' ')); }
</script>"""


def probed_dom(chromium: str, page: Path, tmp_path: Path, *args: str) -> Elements:
    probed = page.with_name("probed-" + page.name)
    probed.write_text(page.read_text().replace("</body>", LAYOUT_PROBE + PARTS_PROBE + "</body>"))
    return Elements(run_chromium(chromium, tmp_path / "profile", *args, "--dump-dom", probed.as_uri()))


def test_the_root_cause_its_echo_and_a_rank_that_exited_nonzero_look_different(chromium, tmp_path):
    from tests.unit.test_htmlreport import roles_record

    root = tmp_path / "roles"
    root.mkdir()
    write_report(root / REPORT_FILE, [roles_record(root)], {"backend": "scripted", "started": 0})
    dom = probed_dom(chromium, root / REPORT_FILE, tmp_path)
    parts = parts_of(dom)
    assert_top_to_bottom(parts, "root-cause", "failure", "grid", "timeline", "throughput")
    assert parts["root-cause"]["data-first-line"].startswith(
        "first failure: rank 1 (node 0) reported an error: injected failure on rank 1 [pod test-roles-0,"
    )
    assert parts["throughput"]["data-labels"] == "0 1 2 3"
    assert_tiles(dom, {0: "ok", 1: "raised", 2: "raised", 3: "failed"})
    cells = {int(a["data-rank"]): a for _, a in dom.tags if "data-bg" in a}
    colours = {r: rgb(cells[r]["data-bg"]) for r in (1, 2, 3)}
    assert len(set(colours.values())) == 3, colours  # root, echo and exited non-zero: three colours
    assert cells[1]["data-outline"].startswith("solid")  # the root cause is outlined
    r, g, b = colours[2]
    assert r > 200 and g > 130 and b > 130, colours[2]  # the echo: pale red
    rows = {a["data-row"]: a for _, a in dom.tags if "data-fill" in a}
    assert rows["1"]["data-fill"] != rows["0"]["data-fill"]  # the root cause's row stands out
    ticks = [a for tag, a in dom.tags if tag == "line" and "data-event" in a]
    assert ticks and all(t["data-shown"] == "true" for t in ticks)
    left, right = map(
        float, next(a for tag, a in dom.tags if tag == "svg" and "data-box" in a)["data-box"].split()
    )
    assert all(left <= float(t["data-left"]) and float(t["data-right"]) <= right for t in ticks)
    assert any(t["data-event"] == "ended" for t in ticks) and any(t["data-event"] == "error" for t in ticks)


@pytest.mark.parametrize(("nodes", "ppn"), [(1, 2), (256, 8)])
def test_the_rank_labels_under_the_bars_never_overlap(chromium, tmp_path, nodes, ppn):
    from tests.unit.test_htmlreport import stamped_record

    root = tmp_path / "axis"
    root.mkdir()
    record = stamped_record(root, "test_axis", nodes=nodes, ppn=ppn, step=0.001)
    write_report(root / REPORT_FILE, [record], {"backend": "scripted", "started": 0})
    dom = probed_dom(chromium, root / REPORT_FILE, tmp_path)
    labels = [a for tag, a in dom.tags if tag == "text" and a.get("class") == "rank-label"]
    ranks = [int(a["data-rank"]) for a in labels]
    assert ranks[0] == 0 and ranks[-1] == nodes * ppn - 1
    if nodes * ppn == 2:
        assert ranks == [0, 1]
    assert all(a["data-shown"] == "true" for a in labels)
    extents = [(float(a["data-left"]), float(a["data-right"])) for a in labels]
    assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(extents)), extents
    rows = [a for tag, a in dom.tags if tag == "g" and a.get("class") == "row"]
    assert len(rows) == (nodes * ppn if nodes * ppn <= 64 else nodes)
    assert_top_to_bottom(parts_of(dom), "grid", "timeline", "throughput")
    assert_tiles(dom, dict.fromkeys(range(nodes * ppn), "ok"))


def test_the_trend_page_draws_every_run_and_links_each_to_its_report(chromium, tmp_path):
    from rollcall.cli import main
    from tests.unit.test_baseline import attempt_of
    from tests.unit.test_history import DAY, NIGHT, nightly

    runs = [
        nightly(tmp_path, "n1", NIGHT, ("test_roll", attempt_of())),
        nightly(tmp_path, "n2", NIGHT + DAY, ("test_roll", attempt_of(skip={3: ("throughput", "complete")}))),
        nightly(tmp_path, "n3", NIGHT + 2 * DAY, ("test_roll", attempt_of(tp={0: 45.0}))),
    ]
    for run in runs:
        (run / REPORT_FILE).write_text("<!DOCTYPE html><title>report</title>")
    page = tmp_path / "site" / "trend.html"
    assert main(["history", "--html", str(page), *map(str, runs)]) == 0
    dom = probed_dom(chromium, page, tmp_path)
    points = [a for tag, a in dom.tags if tag == "circle" and "point" in a.get("class", "")]
    assert len(points) == 3 and all(p["data-shown"] == "true" for p in points)
    assert [p["class"] for p in points] == ["point passed", "point failed", "point passed"]
    links = [a["href"] for tag, a in dom.tags if tag == "a" and "point-link" in a.get("class", "")]
    assert [(page.parent / href).resolve() for href in links] == [(r / REPORT_FILE).resolve() for r in runs]
    labels = [a for tag, a in dom.tags if tag == "text" and a.get("class") == "run-label"]
    extents = [(float(a["data-left"]), float(a["data-right"])) for a in labels]
    assert len(labels) == 3 and all(p[1] <= n[0] for p, n in itertools.pairwise(extents)), extents

    out = Path(os.environ.get("ROLLCALL_BROWSER_ARTIFACTS", ROOT / "artifacts" / "browser"))
    out.mkdir(parents=True, exist_ok=True)
    shot = out / "trend.png"
    shot.unlink(missing_ok=True)
    run_chromium(
        chromium, tmp_path / "shot", "--window-size=1280,1200", f"--screenshot={shot}", page.as_uri()
    )
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
