"""The ``rollcall`` console script.

``rollcall check-logs --world-size N [--format auto|rollcall|neuron-legacy] [--json] FILE...``
parses each file on its own and exits 0 when every rank ``0..N-1`` reported throughput, an epoch time and
completion, 1 when any is missing, and 2 on a usage error (unreadable file, N < 1). Ranks outside the world
are listed but do not change the exit code. This interface is a contract other tools depend on.

``rollcall history [--json] PATH...`` reads several runs' ``results.json`` (each PATH a run's artifacts
directory or the file itself) and prints throughput over time per configuration; exit 0, or 2 when a PATH
holds no readable results (see :mod:`rollcall.history`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from rollcall.ranklog import FORMATS, REQUIRED_EVENTS, RollCall, ranges

EXIT_OK, EXIT_MISSING, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits 2 on usage errors already; keep the wording ours
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"rollcall: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = _Parser(prog="rollcall", description="Check that every training rank answered the roll call.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser("check-logs", help="check rank logs (one file per pod or node)")
    check.add_argument("--world-size", type=_positive_int, required=True, help="ranks expected (N >= 1)")
    check.add_argument("--format", choices=FORMATS, default="auto", help="log format (default: auto)")
    check.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    check.add_argument("files", nargs="+", metavar="FILE", help="log files, one per pod or node")
    history = sub.add_parser(
        "history", help="throughput over time per configuration, from results.json files"
    )
    history.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    history.add_argument(
        "paths", nargs="+", metavar="PATH", help="runs' artifacts directories (or their results.json files)"
    )
    return parser


def summary(roll: RollCall, world_size: int) -> dict[str, Any]:
    """The ``--json`` object of check-logs."""
    ranks: dict[str, dict[str, Any]] = {}
    total = 0.0
    for r in range(world_size):
        report = roll.ranks.get(r)
        tp = report.throughput if report else None
        if tp is not None and math.isfinite(tp):
            total += tp
        ranks[str(r)] = {
            "throughput": tp,
            "epoch_time": report.epoch_time if report else None,
            "complete": bool(report and report.complete),
        }
    return {
        "world_size": world_size,
        "missing": roll.missing(world_size),
        "unexpected_ranks": roll.unexpected(world_size),
        "ranks": ranks,
        "throughput_total": total,
    }


def check_logs(args: argparse.Namespace) -> int:
    """Run check-logs; return its exit code."""
    roll = RollCall()
    for path in args.files:
        try:
            roll.read_file(path, args.format, source=path)
        except OSError as exc:
            print(f"rollcall: cannot read log file {path!r}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
    result = summary(roll, args.world_size)
    missing = result["missing"]
    if args.json:
        print(json.dumps(result, sort_keys=False))
    else:
        n = args.world_size
        for event in REQUIRED_EVENTS:
            ranks = missing[event]
            have = n - len(ranks)
            tail = f"; missing on ranks {ranges(ranks)}" if ranks else ""
            print(f"{event:<11} {have}/{n} ranks{tail}")
        if result["unexpected_ranks"]:
            print(f"unexpected  ranks outside 0..{n - 1}: {ranges(result['unexpected_ranks'])}")
        print(f"throughput  total {result['throughput_total']:.2f} samples/s")
    return EXIT_MISSING if any(missing.values()) else EXIT_OK


def show_history(args: argparse.Namespace) -> int:
    """Run history; return its exit code."""
    from rollcall.history import HistoryError, as_json, collect, table

    try:
        runs = collect(args.paths)
    except HistoryError as exc:
        print(f"rollcall: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(as_json(runs)))
    else:
        for line in table(runs):
            print(line)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    if args.command == "check-logs":
        return check_logs(args)
    if args.command == "history":
        return show_history(args)
    return EXIT_USAGE  # pragma: no cover - argparse requires a known command


if __name__ == "__main__":
    sys.exit(main())
