"""The ``rollcall`` console script.

``rollcall check-logs --world-size N [--format auto|rollcall|neuron-legacy] [--json] FILE...``
parses each file on its own and exits 0 when every rank ``0..N-1`` reported throughput, an epoch time and
completion, 1 when any is missing, and 2 on a usage error (unreadable file, N < 1). Ranks outside the world
are listed but do not change the exit code. This interface is a contract other tools depend on.

``rollcall history [--json | --html OUT] PATH...`` reads several runs' ``results.json`` (each PATH a run's
artifacts directory or the file itself) and prints throughput over time per configuration, or with ``--html``
writes the trend page to OUT; exit 0, or 2 when a PATH holds no readable results or OUT cannot be written
(see :mod:`rollcall.page.history`).

``rollcall run [pytest arguments]`` runs the roll call the package installs: it becomes ``python -m pytest
--pyargs rollcall.e2e [pytest arguments]``, so every suite option, ``-x``, ``--junitxml`` and any
plugin apply as they do to pytest, and its exit status is pytest's (0 only on a pass; 4 on a bad option).
pytest stays the interface (a CI system already reads its exit codes, junit and plugins); ``run`` only spares
the user the package's path, as one command does for aws-k8s-tester's users.

``rollcall render [--backend kubernetes|slurm] [suite options]`` prints what a run would submit, from the
suite's own options (``--nodes``, ``--procs-per-node``, ``--accelerator``, ``--toleration``, ...; each also
read from ``ROLLCALL_<NAME>``). For kubernetes (the default) that is the run's Namespace (none with
``--namespace``), Service and Job as a multi-document YAML stream, as ``kubectl create --dry-run=client -o
yaml`` prints objects; with the layout given (``--accelerator`` and ``--procs-per-node``, or ``--accelerator
cpu``) no cluster is contacted (and no EFA device requested: ``--efa on`` needs discovery), else discovery
reads the nodes of the kubeconfig's cluster. For slurm it is the sbatch script, without contacting Slurm
(the layout must be given). Exit 0, or 4 (pytest's code for a usage error) when an option is bad or the
objects cannot be rendered.

``rollcall render --cronjob SCHEDULE --suite-image IMAGE --image IMAGE [--results-pvc NAME] [suite options]``
prints instead the suite itself as a CronJob of the cluster, with its ServiceAccount and the RBAC of
``manifests/rbac/`` (see :mod:`rollcall.backends.kubernetes.nightly`); the suite options given are the pod's
``ROLLCALL_*`` environment, and no cluster is contacted.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rollcall import __version__
from rollcall.ranges import ranges
from rollcall.ranklog import FORMATS, RollCall
from rollcall_workload.contract import CONTRACT_VERSION, REQUIRED_EVENTS, WORKLOAD_VERSION

if TYPE_CHECKING:
    from rollcall.backends import Wing
    from rollcall.jobspec import JobSpec
    from rollcall.options import Options

EXIT_OK, EXIT_MISSING, EXIT_USAGE = 0, 1, 2
#: ``render`` takes the suite's options and answers a bad one as the suite does (pytest's usage error).
EXIT_RENDER_USAGE = 4
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class _Parser(argparse.ArgumentParser):
    usage_exit = EXIT_USAGE

    def error(self, message: str) -> Any:  # argparse exits 2 on usage errors already; keep the wording ours
        self.print_usage(sys.stderr)
        self.exit(self.usage_exit, f"rollcall: error: {message}\n")


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
    parser.add_argument(
        "--version",
        action="version",
        version=f"rollcall {__version__} (workload {WORKLOAD_VERSION}, rank-log contract {CONTRACT_VERSION})",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_check_logs, _add_history, _add_run, _add_render, _add_nodes):
        add(sub)
    return parser


def _add_check_logs(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``rollcall check-logs``: the rank logs of a run, judged offline."""
    check = sub.add_parser("check-logs", help="check rank logs (one file per pod or node)")
    check.add_argument("--world-size", type=_positive_int, required=True, help="ranks expected (N >= 1)")
    check.add_argument("--format", choices=FORMATS, default="auto", help="log format (default: auto)")
    check.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    check.add_argument("files", nargs="+", metavar="FILE", help="log files, one per pod or node")


def _add_history(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``rollcall history``: throughput over time per configuration, as tables, JSON or a page."""
    history = sub.add_parser(
        "history", help="throughput over time per configuration, from results.json files"
    )
    shown = history.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    shown.add_argument(
        "--html",
        metavar="OUT",
        help="write the trend page (throughput, compute time, bus bandwidth over the runs) to OUT instead",
    )
    history.add_argument(
        "paths", nargs="+", metavar="PATH", help="runs' artifacts directories (or their results.json files)"
    )


def _add_run(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``rollcall run``: the roll call itself, its arguments pytest's."""
    sub.add_parser(
        "run",
        help="run the roll call: pytest --pyargs rollcall.e2e with the arguments given (rollcall run --help: "
        "every option)",
        add_help=False,
    )


def _add_render(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``rollcall render``: what a run would submit, a CronJob of the suite, or the fit nodes' affinity."""
    render = sub.add_parser(
        "render",
        help="print what a run would submit: its Namespace, Service and Job as YAML (--backend slurm: "
        "the sbatch script)",
    )
    assert isinstance(render, _Parser)
    render.usage_exit = EXIT_RENDER_USAGE
    render.add_argument("--name", default="rollcall", help="the job's name (a DNS label; default rollcall)")
    render.add_argument(
        "--cronjob",
        metavar="SCHEDULE",
        help="print instead a CronJob running the suite in the cluster on this schedule (five cron fields, "
        "UTC), with its ServiceAccount and RBAC (manifests/rbac/); the other options are passed on to it",
    )
    render.add_argument(
        "--fit-affinity",
        action="store_true",
        help="print instead the nodeAffinity that keeps a job of yours to nodes rollcall found fit whose "
        "verdict still holds (--label-nodes), the current time written into its Gt term: render it at submit",
    )
    render.add_argument(
        "--suite-image", metavar="IMAGE", help="with --cronjob: the suite's image (images/suite/Dockerfile)"
    )
    render.add_argument(
        "--results-pvc",
        metavar="NAME",
        help="with --cronjob: keep the results on this PersistentVolumeClaim (default: an emptyDir)",
    )
    _suite_options(render)


def _add_nodes(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``rollcall nodes``: the verdicts and marks rollcall left on the nodes, or their removal."""
    nodes = sub.add_parser(
        "nodes",
        help="list the verdicts, expiries and marks rollcall left on the cluster's (or Slurm's) nodes; "
        "--clear removes them",
    )
    assert isinstance(nodes, _Parser)
    nodes.usage_exit = EXIT_RENDER_USAGE
    nodes.add_argument(
        "--clear",
        action="store_true",
        help="remove rollcall's verdict labels, its taint and annotation (kubernetes), resume its drains "
        "(slurm); never another's; the rights marking needs",
    )
    nodes.add_argument(
        "--node", action="append", default=[], metavar="NAME", help="only this node (repeatable; default all)"
    )
    nodes.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    _suite_options(nodes)


def _suite_options(parser: argparse.ArgumentParser) -> None:
    """Every option of the suite on ``parser`` (``--backend``, the cluster's and Slurm's settings...)."""
    from rollcall.options import OPTIONS

    for spec in OPTIONS:
        dest = "opt_" + spec.name
        if spec.switch:
            parser.add_argument(
                spec.flag, action="store_true", default=False, dest=dest, help=spec.argparse_help
            )
        elif spec.multiple:
            parser.add_argument(spec.flag, action="append", default=[], dest=dest, metavar=spec.placeholder)
        else:
            parser.add_argument(
                spec.flag, default=None, dest=dest, metavar=spec.placeholder, help=spec.argparse_help
            )


def summary(roll: RollCall, world_size: int) -> dict[str, Any]:
    """The ``--json`` object of check-logs: the roll call judged once against the checks that need no job."""
    from rollcall.judge import LOG_CHECKS, judge
    from rollcall.verdict import Layout, Observed

    verdict = judge(Observed(roll, Layout(1, world_size)), checks=LOG_CHECKS)
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
        "missing": verdict.missing,
        "unexpected_ranks": verdict.unexpected_ranks,
        "ranks": ranks,
        "throughput_total": total,
        # What the nodes' GPUs said during the run, tied to the rank on each GPU and classified (shown only).
        "gpu_events": [s.as_dict() for s in verdict.gpu_events],
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
        for seen in result["gpu_events"]:
            print(f"gpu event   {seen['message']} [{seen['class']}]")
    return EXIT_MISSING if any(missing.values()) else EXIT_OK


def show_history(args: argparse.Namespace) -> int:
    """Run history; return its exit code."""
    from rollcall.page.history import HistoryError, as_json, collect, table

    try:
        runs = collect(args.paths)
    except HistoryError as exc:
        print(f"rollcall: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.html:
        from pathlib import Path

        from rollcall.page.trend import write_trend

        out = Path(args.html)
        try:
            write_trend(out, runs)
        except OSError as exc:
            print(
                f"rollcall: cannot write --html {out}: {exc.strerror or exc}; name a writable file",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(f"trend page: {out}")
    elif args.json:
        print(json.dumps(as_json(runs)))
    else:
        for line in table(runs):
            print(line)
    return EXIT_OK


def fit_affinity(now: float) -> str:
    """The nodeAffinity (YAML) of nodes labelled fit whose ``rollcall/valid-until`` is after ``now``.

    nodeAffinity has no notion of now: the integer written here is the time the job is submitted.
    """
    from rollcall.jobspec import EXPIRES_LABEL, VERDICT_LABEL

    return (
        "affinity:\n"
        "  nodeAffinity:\n"
        "    requiredDuringSchedulingIgnoredDuringExecution:\n"
        "      nodeSelectorTerms:\n"
        "      - matchExpressions:\n"
        f"        - {{key: {VERDICT_LABEL}, operator: In, values: [fit]}}\n"
        f'        - {{key: {EXPIRES_LABEL}, operator: Gt, values: ["{int(now)}"]}}\n'
    )


def render_job(args: argparse.Namespace) -> int:
    """Run render; return its exit code."""
    import time

    from rollcall.backends import BackendError
    from rollcall.options import OptionError, resolve

    if args.fit_affinity:
        sys.stdout.write(fit_affinity(time.time()))
        return EXIT_OK
    cli = {k.removeprefix("opt_"): v for k, v in vars(args).items() if k.startswith("opt_")}
    try:
        options = resolve(cli)
        text = (
            _render_cronjob(options, cli, args) if args.cronjob is not None else _render(options, args.name)
        )
    except (OptionError, ValueError, BackendError) as exc:  # bad input, or a cluster that cannot be read
        print(f"rollcall render: {exc}", file=sys.stderr)
        return EXIT_RENDER_USAGE
    sys.stdout.write(text)
    return EXIT_OK


def show_nodes(args: argparse.Namespace) -> int:
    """``rollcall nodes``: what rollcall left on the nodes (or, with ``--clear``, clear it); its exit code."""
    from rollcall import suite
    from rollcall.backends import BackendError, wing_named
    from rollcall.backends.marks import ListsMarks
    from rollcall.options import OptionError, resolve

    cli = {k.removeprefix("opt_"): v for k, v in vars(args).items() if k.startswith("opt_")}
    try:
        options = resolve(cli)
        name, why = suite.choose_backend(options)
        wing = wing_named(name)
        if not isinstance(wing.load(), ListsMarks):
            raise ValueError(
                f"the {name} backend ({why}) leaves no mark on nodes; name the cluster's: --backend "
                "kubernetes (a kubeconfig) or --backend slurm (SLURM_CONF)"
            )
        backend, section = wing.load(), options.section(wing.section) if wing.section else None
        assert isinstance(backend, ListsMarks)
        if args.clear:
            done = backend.clear_marks(section, suite.backend_settings(options), args.node)
            print(json.dumps(done.as_dict()) if args.json else done.line())
            return EXIT_OK
        marks = backend.current_marks(section, suite.backend_settings(options))
        found = [m for m in marks if not args.node or m.name in args.node]
    except (OptionError, ValueError, BackendError) as exc:  # bad input, or nodes that cannot be read
        print(f"rollcall nodes: {exc}", file=sys.stderr)
        return EXIT_RENDER_USAGE
    if args.json:
        print(json.dumps({"nodes": [m.as_dict() for m in found]}))
        return EXIT_OK
    print(f"{'NODE':<24} {'VERDICT':<13} {'CHECKED AT':<21} {'VALID UNTIL':<30} {'MARKS':<12} REASON")
    for m in found:
        until = _when(m.valid_until) + (" (expired)" if m.expired() else "")
        held, checked = ",".join(m.marks) or "-", _when(m.checked_at)
        print(f"{m.name:<24} {m.verdict or '-':<13} {checked:<21} {until:<30} {held:<12} {m.reason}")
    return EXIT_OK


def _when(epoch: float | None) -> str:
    """Epoch seconds as UTC (``2026-12-07T21:03:50Z``), ``-`` for none."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)) if epoch is not None else "-"


def _wing_that(options: Options, capability: type, does: str, flag: str) -> Wing:
    """The wing ``--backend`` names (auto: the first that can) when its backend has ``capability``.

    ValueError naming the wings that can, where it has not.
    """
    from rollcall.backends import able, wing_named

    can = able(capability)
    asked = options.job.backend
    wing = wing_named(can[0] if asked == "auto" else asked)
    if not isinstance(wing.load(), capability):
        raise ValueError(
            f"{flag}--backend {asked}: the {asked} backend {does}; use --backend {' or '.join(can)}"
            + (", or leave --backend out" if flag else "")
        )
    return wing


def _render_cronjob(options: Options, cli: dict[str, Any], args: argparse.Namespace) -> str:
    """The CronJob of ``--cronjob`` and its RBAC; no cluster is contacted (the suite discovers in the pod)."""
    import os

    from rollcall.backends import SchedulesTheSuite
    from rollcall.jobspec import check_image
    from rollcall.options import given_environment

    wing = _wing_that(options, SchedulesTheSuite, "runs no suite on a schedule", "--cronjob with ").load()
    assert isinstance(wing, SchedulesTheSuite)
    if not args.suite_image:
        raise ValueError(
            "--cronjob needs --suite-image IMAGE, the suite's own image (images/suite/Dockerfile; "
            "hack/image.sh suite builds one here)"
        )
    if not options.job.image:
        raise ValueError("--cronjob needs --image IMAGE, the training image the suite's pods run")
    if args.results_pvc is not None and not _DNS_SUBDOMAIN.match(args.results_pvc):
        raise ValueError(
            f"--results-pvc {args.results_pvc!r} is not a claim's name; give a DNS subdomain such as "
            "rollcall-results"
        )
    try:
        suite_image = check_image(args.suite_image)
    except ValueError as exc:
        raise ValueError(f"--suite-image {args.suite_image!r}: {exc}") from None
    given = given_environment(options, cli, os.environ)
    return wing.render_schedule(args.cronjob, suite_image, given, args.results_pvc)


def _render(options: Options, name: str) -> str:
    """What a run would submit, as its backend renders it (:class:`~rollcall.backends.RendersManifest`)."""
    from rollcall import suite
    from rollcall.backends import Placement, RendersManifest

    wing = _wing_that(options, RendersManifest, "submits nothing to render", "")

    def spec_of(placement: Placement) -> JobSpec:
        return suite.job_spec(options, placement, name)  # looked up now: the suite's own

    backend = wing.load()
    assert isinstance(backend, RendersManifest)
    return backend.render_run(
        options.section(wing.section) if wing.section else None,
        suite.backend_settings(options),
        suite.placement_request(options),
        spec_of,
        options.reports.artifacts_dir / name,
    )


#: The package holding the roll call's test, as ``pytest --pyargs`` names it.
E2E_PACKAGE = "rollcall.e2e"


def run_suite(args: Sequence[str]) -> int:
    """``rollcall run``: this process becomes pytest on the installed roll call, with ``args``.

    A fresh interpreter, not ``pytest.main`` here: this module has imported the package's modules already,
    and pytest rewrites a plugin's asserts only in modules it imports itself.
    """
    import os

    command = [sys.executable, "-m", "pytest", "--pyargs", E2E_PACKAGE, *args]
    os.execv(sys.executable, command)
    return EXIT_USAGE  # pragma: no cover - execv returns only by raising


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["run"]:
        return run_suite(given[1:])
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command in ("render", "nodes"):
        print(f"rollcall {args.command}: unrecognized arguments: {' '.join(extra)}", file=sys.stderr)
        return EXIT_RENDER_USAGE
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "check-logs":
        return check_logs(args)
    if args.command == "history":
        return show_history(args)
    if args.command == "render":
        return render_job(args)
    if args.command == "nodes":
        return show_nodes(args)
    return EXIT_USAGE  # pragma: no cover - argparse requires a known command


if __name__ == "__main__":
    sys.exit(main())
