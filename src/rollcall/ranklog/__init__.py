"""The rank-log parser: what each rank said, read from every log as it streams in.

Every rank of the workload prints one line per event, written with a single ``write`` and flushed::

    ROLLCALL {"event":"start","rank":3,"local_rank":3,"node_rank":0,"world_size":64,"host":"h","device":"cuda:3"}
    ROLLCALL {"event":"epoch_time","rank":3,"world_size":64,"epoch":1,"seconds":0.31,"steps":50,"loss":9.71,"param_digest":"9f86d081884c7d65"}
    ROLLCALL {"event":"throughput","rank":3,"world_size":64,"samples_per_sec":49.97,"compute_ms":41.2,"compute_ms_p90":41.9}
    ROLLCALL {"event":"bandwidth","rank":3,"world_size":64,"scope":"node","ranks":"0-7","nodes":"0","bytes":67108864,"iters":20,"seconds":0.00031,"algbw_gbps":216.5,"busbw_gbps":378.9,"checked":20,"mismatch":null}
    ROLLCALL {"event":"facts","rank":3,"world_size":64,"host":"h","kernel":"6.8.0","driver":"580.159.04","unknown":{"retired_pending":"Not Supported"}}
    ROLLCALL {"event":"complete","rank":3,"world_size":64,"param_digest":"9f86d081884c7d65"}
    ROLLCALL {"event":"error","rank":3,"world_size":64,"message":"...","time":1764576001.25}
    ROLLCALL {"event":"stack","rank":3,"world_size":64,"dump":1,"thread":"MainThread","main":true,"threads":2,"phase":"epoch 2 barrier","stalled_s":61.0,"hang_after":60.0,"frames":[["train.py",1490,"run","acc.barrier(...)",true]],"dropped":0}
    ROLLCALL {"event":"resumed","rank":3,"world_size":64,"dump":1,"stalled_s":75.2,"phase":"epoch 2 step 1"}

Every event of the workload carries ``time`` (wall clock, seconds since the epoch); each rank keeps, per event
(per epoch, per bandwidth group), when it said it last (:attr:`RankReport.marks`), for the page's timeline.

A rank answers the roll call when it reported ``throughput``, at least one ``epoch_time`` and ``complete``;
``compute_ms`` / ``compute_ms_p90`` (this rank's compute per step, without communication) and ``bandwidth``
(one per all-reduce group the rank was in) are optional figures. So are the proofs that the rank trained
correctly: each epoch's ``loss`` and ``steps``, the ``param_digest`` of its parameters after each epoch and at
``complete`` (a replica that diverged has another), and each ``bandwidth`` record's check of what the rank
received (``checked``, and a ``mismatch`` when a result was not the exact sum).

Each event is read through its record in :mod:`rollcall_workload.contract` (``docs/contract.md``): a line as the
workload writes it is decoded straight into its record by msgspec; any other is decoded as JSON and taken through
the same record (:func:`rollcall_workload.contract.read`), with the same result.

Parsing rules:

- anything may stand before the marker (torchrun's ``[default3]:`` prefix, RFC 3339 timestamps, ANSI colour);
- one physical line may hold several markers (processes' writes interleaved): each complete object counts;
- a record counts only when its JSON object parses completely, so a truncated number never becomes a value;
- CRLF endings are fine; a repeated event (a restarted worker, or the same epoch again) keeps the last record;
- an optional field of the wrong type is dropped, never the record: a ``throughput`` whose ``compute_ms`` is not
  a number still counts (without a compute time);
- a ``loss`` of null is a loss that was not finite (the workload writes NaN and infinities as null): it is kept
  as NaN; a ``param_digest`` counts when it is a string;
- a ``mismatch`` counts when it is an object; each of its fields that is not a number is None (a wrong
  result is never dropped for a garbled detail);
- a ``bandwidth`` record counts only when whole: ``scope`` one of world/node/pair, ``ranks`` and ``nodes``
  compact ranges (``"0-7,16"``), ``bytes`` a positive integer and ``algbw_gbps``, ``busbw_gbps`` numbers; one is
  kept per rank and group (scope and nodes), the last;
- ``stack`` events (the workload's watchdog found the rank stalled) are kept per dump: a dump with a higher
  ``dump`` number replaces the one before, a ``resumed`` event withdraws every dump up to its number (the rank
  made progress again), and a stack event of a withdrawn dump is ignored; a frame counts only when whole
  (``[file, line, function, code, own]``), and a stack event without a ``dump`` number or a thread is dropped;
  a dump's ``source`` says who took it (the rank's watchdog, or faulthandler's timer read by the node's
  monitor);
- a ``silent`` event (the node's monitor found the rank's heartbeat and progress stopped while its process
  lives) is kept, the last one, as :attr:`RankReport.silent`, until a ``resumed`` withdraws it;
- a ``throughput``'s ``compile_cache`` (``hit``, ``miss`` or ``off``: what the first step, which compiles, found
  in the compiler's cache) is kept as :attr:`RankReport.compile_cache` with ``compile_s`` and the cache's hit and
  miss counts (each None unless a number); any other value is no compile-cache report;
- a ``facts`` event (what the rank read about its device and stack) is kept whole, the last one, as
  :attr:`RankReport.facts`: each fact under its name, and ``unknown`` (fact name to the reason it could not be
  read; dropped unless a mapping of text to text) apart, as :attr:`RankReport.unknown`;
- a ``samples`` event (the rank's GPU sampled while it trained) with a positive ``samples`` is kept, the last
  one, as :attr:`RankReport.samples` (:class:`Sampled`);
- the legacy aws-k8s-tester Neuron format is read too (``auto``: up to the log's first rollcall record at
  least, in the piece of the log that holds it; after that piece the log is read as the rollcall
  workload's, one scan instead of two), where one line carries both values::

      [Rank 12] - local_samples=100.0, total_time=2.00s, local_throughput=50.00 samples/s, local_avg_epoch_time=0.40s
      [Rank 12] training complete. Exiting main().

  and each value counts only if it is complete up to and including its unit (a line cut inside the epoch
  time still gives the throughput before it).

Each log (one pod, one node) gets its own :class:`LogParser` (:mod:`.parser`), fed in chunks as bytes arrive;
all of them write into one :class:`RollCall`, which knows, for every rank, what it reported and in which log
(:class:`RankReport`, :mod:`.report`). What each event changes is its keeper's (:mod:`.keep`).
"""

from __future__ import annotations

from rollcall.ranklog.parser import FORMATS, LEGACY_MARKER, MARKER, Format, LogParser, RollCall, parse_files
from rollcall.ranklog.report import (
    MARKED_EVENTS,
    BandwidthRecord,
    CollectiveMismatch,
    CompileCache,
    Exited,
    FlightRecord,
    Frame,
    GpuHeard,
    LauncherHeard,
    Mark,
    Part,
    RankError,
    RankProcessHeard,
    RankReport,
    Receipt,
    Sampled,
    Silence,
    StackDump,
    ThreadStack,
)

__all__ = [
    "FORMATS",
    "LEGACY_MARKER",
    "MARKED_EVENTS",
    "MARKER",
    "BandwidthRecord",
    "CollectiveMismatch",
    "CompileCache",
    "Exited",
    "FlightRecord",
    "Format",
    "Frame",
    "GpuHeard",
    "LauncherHeard",
    "LogParser",
    "Mark",
    "Part",
    "RankError",
    "RankProcessHeard",
    "RankReport",
    "Receipt",
    "RollCall",
    "Sampled",
    "Silence",
    "StackDump",
    "ThreadStack",
    "parse_files",
]
