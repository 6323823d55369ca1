import json
import subprocess
import sys

import pytest

from rollcall.cli import main
from tests.unit.helpers import node_log


@pytest.fixture
def logs(tmp_path):
    a, b = tmp_path / "pod-0.log", tmp_path / "pod-1.log"
    a.write_text(node_log(0, 2, 2))
    b.write_text(node_log(1, 2, 2, skip={3: ("complete",)}, tp={2: 20.0}))
    return a, b


def test_exit_0_when_every_rank_reported(logs, capsys):
    assert main(["check-logs", "--world-size", "2", str(logs[0])]) == 0
    out = capsys.readouterr().out
    assert "throughput  2/2 ranks" in out


def test_exit_1_and_json_shape_when_a_rank_is_missing(logs, capsys):
    assert main(["check-logs", "--world-size", "4", "--json", *map(str, logs)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["world_size"] == 4
    assert doc["missing"] == {"throughput": [], "epoch_time": [], "complete": [3]}
    assert doc["unexpected_ranks"] == []
    assert doc["ranks"]["2"] == {"throughput": 20.0, "epoch_time": pytest.approx(0.45), "complete": True}
    assert doc["ranks"]["3"]["complete"] is False
    assert doc["throughput_total"] == 170.0


def test_unexpected_ranks_are_listed_without_changing_the_exit_code(logs, capsys):
    assert main(["check-logs", "--world-size", "2", "--json", str(logs[0]), str(logs[1])]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unexpected_ranks"] == [2, 3]
    assert doc["throughput_total"] == 100.0


@pytest.mark.parametrize("args", [["--world-size", "0"], ["--world-size", "x"], []])
def test_usage_errors_exit_2(logs, args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check-logs", *args, str(logs[0])])
    assert exc.value.code == 2
    assert "world-size" in capsys.readouterr().err


def test_unreadable_file_exits_2(tmp_path, capsys):
    assert main(["check-logs", "--world-size", "1", str(tmp_path / "nope.log")]) == 2
    assert "nope.log" in capsys.readouterr().err


def test_legacy_format(tmp_path, capsys):
    f = tmp_path / "legacy.log"
    f.write_text(
        "[Rank 0] - local_samples=78.1, total_time=2.00s, local_throughput=50.00 samples/s, "
        "local_avg_epoch_time=0.40s\n[Rank 0] training complete. Exiting main().\n"
    )
    assert main(["check-logs", "--world-size", "1", "--format", "neuron-legacy", "--json", str(f)]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"]["0"]["throughput"] == 50.0


def test_console_script_is_installed(logs):
    exe = [sys.executable, "-m", "rollcall.cli"]
    proc = subprocess.run(
        [*exe, "check-logs", "--world-size", "4", *map(str, logs)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "complete    3/4 ranks; missing on ranks 3" in proc.stdout
