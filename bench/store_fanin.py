"""The TCPStore fan-in of init_process_group: N ranks joining one store at once, as torchrun's do.

Usage: python bench/store_fanin.py [--clients 256 1024 2048] [--runs 3] [--procs 8]
                                   [--timeout 600]

What a rank does in ``init_process_group`` with torchrun's env:// rendezvous (torch 2.11): node 0's agent hosts
the TCPStore (the static rendezvous's ``TCPStore(..., is_master=True, multi_tenant=True)``, libuv's event loop),
and every rank, node 0's included, is a client of it
(``TORCHELASTIC_USE_AGENT_STORE=True``): ``rendezvous._create_c10d_store`` builds
``TCPStore(host, port, world_size, is_master=False, timeout=timeout)``, whose constructor connects (retrying with
backoff while the listen backlog is full), validates, pings and adds 1 to ``init/``; then the store is wrapped in
``PrefixStore("default_pg", ...)``. Here each client calls that same function and then torch's own
``distributed_c10d._store_based_barrier(rank, store, "0", world_size, timeout)`` (the default group's name is
``"0"``): ``add(store_based_barrier_key:0, 1)``, ``add(.., 0)``, the last to arrive ``set``s ``..:last_worker``,
every rank ``wait``s for that key. In torch 2.11 ``init_process_group`` runs that barrier only with
``TORCH_DIST_INIT_BARRIER=1``; by default a rank's store traffic is the connection and then the backend's own
exchange through the same store (NCCL: each rank ``get``s the unique id rank 0 ``set``, a one-to-all wait like the
barrier's second half; gloo: each rank reads every other's address, N**2 reads in all), so the barrier is the
all-to-one-to-all bound on what the store itself must serve.

Like a fleet: the server is torch's own (the same libuv event loop, one thread), every client is torch's own
C++ client on its own TCP connection (one ``TCPStore`` object per client thread), with the rank's timeout, and
the keys and operations are torch's. All clients are released at the same instant (a herd: real ranks arrive
spread over their import times, which is gentler). Not like a fleet: one machine's loopback (no network
between hosts: a fleet adds a round trip to each of a rank's handful of operations, and can lose a SYN), and
the clients share this machine's 2 cores with the server, where a fleet's store has node 0's cores to itself.
Ranks are threads, ``--procs`` processes of N/procs threads each, not N processes.
NCCL's own initialisation (communicator setup between GPUs over the network) is not here at all.

Names: both sides of the store look up the peer's address (``getnameinfo``, a reverse lookup): each client the
store's before it connects, the server each accepted client's in its one event-loop thread, which serves no
other client until the answer comes; torch stops looking up for the rest of a process once a lookup fails
(pytorch#159007), not when one is merely slow. The address a client sees here is ``::ffff:127.0.0.1``, which
this machine's ``/etc/hosts`` does not name, so each lookup is a DNS query; one the resolver drops is asked
again after glibc's 5 s and fails after 10 s. The benchmark runs in a private mount namespace (``unshare --user
--map-root-user --mount``) whose ``/etc/hosts`` names the loopback addresses, so no lookup leaves the machine:
the store's own cost. (What a fleet whose DNS drops some of a burst of PTR queries pays instead was measured
once against this machine's resolver, bench/NOTES.md; the project's tools no longer query it.)

Printed per run: the fan-in (first client's start to the last client past the barrier), each client's time to
connect (the constructor) and then to pass the barrier (median, p99, max), how many clients took over 1 s to
connect, the server process's CPU seconds over the run and its peak RSS (and how far it grew past the idle
store), and the clients' CPU seconds.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from typing import Any

HOST = "127.0.0.1"
HOSTS_FILE = "127.0.0.1 localhost\n::1 localhost\n::ffff:127.0.0.1 localhost\n"
NAMESPACE_FLAG = "--in-namespace"
#: the default group's barrier counter as the clients' PrefixStore("default_pg", ...) names it
BARRIER_KEY = "default_pg/store_based_barrier_key:0"


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def serve(conn: Any, timeout_s: float) -> None:
    """The agent's store on node 0: torch's TCPStore server (libuv), counting only its own agent."""
    import torch.distributed as dist

    store = dist.TCPStore(HOST, 0, 1, True, timedelta(seconds=timeout_s), multi_tenant=True)
    idle_rss = _rss_kib("VmRSS")
    cpu0 = _cpu_s()
    conn.send(store.port)
    conn.recv()  # the clients are done
    conn.send(
        {
            "cpu_s": _cpu_s() - cpu0,
            "peak_kib": _rss_kib("VmHWM"),
            "idle_kib": idle_rss,
            "joined": int(store.add(BARRIER_KEY, 0)),
        }
    )
    conn.recv()


def clients(
    port: int, world: int, ranks: list[int], timeout_s: float, ready: Any, go: Any, conn: Any
) -> None:
    """Ranks ``ranks`` as threads, each its own TCPStore client, released together by ``go``."""
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = str(True)
    from torch.distributed import PrefixStore
    from torch.distributed.distributed_c10d import _store_based_barrier
    from torch.distributed.rendezvous import _create_c10d_store

    timeout = timedelta(seconds=timeout_s)
    release = threading.Event()
    rows: list[tuple[int, float, float, float, str]] = []
    held: list[Any] = []
    lock = threading.Lock()

    def rank_main(rank: int) -> None:
        release.wait()
        t0 = time.monotonic()
        t1 = t2 = float("nan")
        err = ""
        try:
            store = _create_c10d_store(HOST, port, rank, world, timeout)
            t1 = time.monotonic()
            store.set_timeout(timeout)
            _store_based_barrier(rank, PrefixStore("default_pg", store), "0", world, timeout)
            t2 = time.monotonic()
            with lock:
                held.append(store)  # a rank keeps its store for the run
        except Exception as e:  # reported per client, as a rank would fail
            err = f"{type(e).__name__}: {e}"[:200]
        with lock:
            rows.append((rank, t0, t1, t2, err))

    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    cpu0 = _cpu_s()
    ready.wait()
    go.wait()
    release.set()
    for t in threads:
        t.join()
    conn.send({"rows": rows, "cpu_s": _cpu_s() - cpu0, "peak_kib": _rss_kib("VmHWM")})
    conn.recv()  # hold every connection until all processes are done
    held.clear()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def one_run(world: int, procs: int, timeout_s: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    s_parent, s_child = ctx.Pipe()
    server = ctx.Process(target=serve, args=(s_child, timeout_s))
    server.start()
    port = s_parent.recv()
    procs = min(procs, world)
    ready = ctx.Barrier(procs + 1)
    go = ctx.Event()
    workers = []
    for i in range(procs):
        parent, child = ctx.Pipe()
        ranks = list(range(i, world, procs))
        p = ctx.Process(target=clients, args=(port, world, ranks, timeout_s, ready, go, child))
        p.start()
        workers.append((p, parent))
    ready.wait(timeout=300)  # every process has imported torch and started its threads
    go.set()
    results = [parent.recv() for _, parent in workers]
    s_parent.send("done")
    srv = s_parent.recv()
    for p, parent in workers:
        parent.send("exit")
        p.join(timeout=60)
    s_parent.send("exit")
    server.join(timeout=60)
    rows = [r for res in results for r in res["rows"]]
    errors = [r[4] for r in rows if r[4]]
    ok = [r for r in rows if not r[4]]
    connect = [t1 - t0 for _, t0, t1, _, _ in ok]
    barrier = [t2 - t1 for _, _, t1, t2, _ in ok]
    return {
        "clients": world,
        "ok": len(ok),
        "errors": errors,
        "fanin": max(r[3] for r in ok) - min(r[1] for r in rows) if ok else float("nan"),
        "connect": connect,
        "barrier": barrier,
        "slow": sum(c > 1.0 for c in connect),
        "server": srv,
        "client_cpu": sum(res["cpu_s"] for res in results),
    }


def in_namespace(argv: list[str]) -> None:
    """Run this script again in a private mount namespace whose /etc/hosts names the loopback addresses."""
    unshare = shutil.which("unshare")
    if unshare is None:
        sys.exit("store_fanin needs util-linux's unshare")
    with tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False) as f:
        f.write(HOSTS_FILE)
    script = 'mount --bind "$0" /etc/hosts && exec "$@"'
    cmd = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script, f.name]
    cmd += [sys.executable, os.path.abspath(__file__), *argv, NAMESPACE_FLAG]
    try:
        rc = subprocess.call(cmd)
    finally:
        os.unlink(f.name)
    if rc:
        print(
            f"store_fanin: exit {rc}; it needs a user and mount namespace (unshare) so that no name lookup "
            "reaches the machine's resolver: allow them (see tests/unit/test_full_disk.py's message for how)",
            file=sys.stderr,
        )
    sys.exit(rc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[256, 1024, 2048])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--procs", type=int, default=8, help="client processes (ranks are threads in them)")
    ap.add_argument("--timeout", type=float, default=600.0, help="each rank's store timeout (NCCL's default)")
    ap.add_argument(NAMESPACE_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.in_namespace:
        in_namespace(sys.argv[1:])
    import torch

    load = os.getloadavg()
    print(
        f"torch {torch.__version__}, {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"names: a private /etc/hosts, {args.procs} client processes, timeout {args.timeout:.0f}s"
    )
    head = (
        f"{'clients':>7} {'run':>3} {'fan-in s':>8} {'conn med':>8} {'p99':>6} {'max':>6} {'>1s':>4} "
        f"{'barr med':>8} {'p99':>6} {'max':>6} {'srv cpu s':>9} {'srv MiB':>7} {'grew':>5} {'cli cpu s':>9}"
    )
    print(head)
    summary = []
    for world in args.clients:
        fanins = []
        for run in range(1, args.runs + 1):
            r = one_run(world, args.procs, args.timeout)
            srv = r["server"]
            if r["errors"]:
                print(f"{world:>7} {run:>3} {len(r['errors'])} clients failed, first: {r['errors'][0]}")
            if not r["ok"]:
                continue
            fanins.append(r["fanin"])
            c, b = r["connect"], r["barrier"]
            print(
                f"{world:>7} {run:>3} {r['fanin']:>8.2f} {statistics.median(c):>8.3f} {pct(c, 0.99):>6.2f} "
                f"{max(c):>6.2f} {r['slow']:>4} {statistics.median(b):>8.3f} {pct(b, 0.99):>6.2f} {max(b):>6.2f} "
                f"{srv['cpu_s']:>9.2f} {srv['peak_kib'] / 1024:>7.0f} {(srv['peak_kib'] - srv['idle_kib']) / 1024:>5.0f} "
                f"{r['client_cpu']:>9.2f}",
                flush=True,
            )
            if srv["joined"] != world:
                print(f"        the barrier counted {srv['joined']} ranks, not {world}")
        if fanins:
            summary.append((world, statistics.median(fanins), max(fanins)))
    for world, med, worst in summary:
        print(
            f"{world} clients: fan-in median {med:.2f}s, worst {worst:.2f}s of {args.runs}; "
            f"{args.timeout:.0f}s timeout leaves {args.timeout / worst:.0f}x"
        )


if __name__ == "__main__":
    main()
