#!/usr/bin/env bash
# A real Slurm on this machine for rollcall's own tests: munged, slurmctld and slurmd from Debian's
# packages (slurm-wlm, munge), started by hand (no systemd), configured for the CPU, every daemon bound to
# 127.0.0.1, every file (config, munge key, sockets, state, logs) under one state directory.
#
#   hack/slurm.sh up       start munged, slurmctld and the node daemons; wait until the nodes are idle
#   hack/slurm.sh status   the daemons, sinfo and squeue
#   hack/slurm.sh down     cancel every job, stop every daemon of this cluster, remove the state directory
#   hack/slurm.sh env      print the environment clients need (eval "$(hack/slurm.sh env)")
#
# Nodes: Debian's slurmd is built with --enable-multiple-slurmd (it takes -N NODENAME), so `up` starts
# SLURM_NODES (default 2) slurmd processes, rc1..rcN, each its own Slurm node on its own port. They share
# this host's cores: each is declared with nproc/N CPUs (at least 1).
# Partitions: `rollcall` (default, up) and `held` (the same nodes, State=DOWN: jobs sent there stay PENDING
# with reason PartitionDown, for tests of a job that cannot start).
# Environment: ROLLCALL_SLURM_STATE (state directory, default <repo>/.slurm), SLURM_NODES,
# ROLLCALL_SLURM_PORT (slurmctld's port, default 16817; node i listens on PORT+i, srun on PORT+100..+199).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${ROLLCALL_SLURM_STATE:-$ROOT/.slurm}
NODES=${SLURM_NODES:-2}
PORT=${ROLLCALL_SLURM_PORT:-16817}
HOST=$(hostname -s)
CONF=$STATE/etc/slurm.conf
SOCKET=$STATE/munge/munge.socket
# Every daemon carries this mark in its environment (inherited by slurmstepd and job processes), so `down`
# can find what this cluster started, and nothing else.
MARK="ROLLCALL_SLURM_CLUSTER=$STATE"

log() { printf '[slurm] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

node_names() { local i; for ((i = 1; i <= NODES; i++)); do echo "rc$i"; done; }

client_env() {
  echo "export SLURM_CONF=$CONF"
}

need_packages() {
  local b missing=()
  for b in munged slurmctld slurmd sbatch squeue scontrol sinfo scancel; do
    command -v "$b" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || die "missing ${missing[*]}: apt-get install slurm-wlm munge"
}

# Pids of live processes carrying this cluster's mark (daemons, slurmstepd, job processes).
marked_pids() {
  local p
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" ]] && continue
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "$MARK"; then echo "${p#/proc/}"; fi
  done
}

write_config() {
  local cpus mem i
  cpus=$(($(nproc) / NODES))
  ((cpus >= 1)) || cpus=1
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / NODES / 2))
  mkdir -p "$STATE"/{etc,munge,ctld,spool,log,run}
  chmod 700 "$STATE/munge"
  cat >"$CONF" <<CONF
# Written by hack/slurm.sh: a single-host cluster for rollcall's tests, bound to 127.0.0.1.
ClusterName=rollcall
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SrunPortRange=$((PORT + 100))-$((PORT + 199))
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# cgroup v1 here and no systemd: track processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
MaxNodeCount=$NODES
CONF
  for ((i = 1; i <= NODES; i++)); do
    echo "NodeName=rc$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=$cpus RealMemory=$mem State=UNKNOWN" >>"$CONF"
  done
  cat >>"$CONF" <<CONF
PartitionName=rollcall Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=held Nodes=ALL Default=NO MaxTime=INFINITE State=DOWN
CONF
}

start_munge() {
  if [[ ! -f $STATE/munge/munge.key ]]; then
    (umask 077 && dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none)
  fi
  env "$MARK" /usr/sbin/munged --force --socket="$SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
    --seed-file="$STATE/munge/munged.seed" --num-threads=2
}

wait_until() { # SECONDS WHAT CMD...
  local limit=$1 what=$2 start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - start < limit)) || return 1
    sleep 0.5
  done
}

nodes_idle() {
  local states
  states=$(SLURM_CONF=$CONF sinfo -h -N -p rollcall -o '%T' 2>/dev/null) || return 1
  [[ $(grep -cx idle <<<"$states") == "$NODES" ]]
}

failed_up() {
  local rc=$?
  if [[ ${KEEP_FAILED:-} == 1 ]]; then
    log "KEEP_FAILED=1: leaving the half-started cluster in $STATE"
  else
    cmd_down || true
  fi
  exit "$rc"
}

cmd_up() {
  need_packages
  if [[ -f $CONF ]] && SLURM_CONF=$CONF scontrol ping >/dev/null 2>&1; then
    log "already up ($STATE)"
    client_env
    return 0
  fi
  [[ -z $(marked_pids) ]] || die "processes of a half-started cluster remain; run hack/slurm.sh down first"
  if ((NODES > 1)) && ! /usr/sbin/slurmd -h 2>&1 | grep -q -- '-N node'; then
    log "this slurmd was built without multiple-slurmd support: one node, whose CPUs the ranks share"
    NODES=1
  fi
  write_config
  # A start that fails half-way stops what it started (KEEP_FAILED=1 keeps it, with its logs).
  trap 'failed_up' EXIT
  start_munge
  wait_until 10 munge test -S "$SOCKET" || die "munged did not start; see $STATE/log/munged.log"
  # -c: a fresh controller, no job or node state from an earlier cluster in this directory.
  env "$MARK" SLURM_CONF="$CONF" /usr/sbin/slurmctld -f "$CONF" -c
  wait_until 20 slurmctld env SLURM_CONF="$CONF" scontrol ping ||
    die "slurmctld did not answer within 20s: $(tail -n 3 "$STATE/log/slurmctld.log" 2>/dev/null)"
  local n
  for n in $(node_names); do
    if ((NODES > 1)); then
      env "$MARK" SLURM_CONF="$CONF" /usr/sbin/slurmd -f "$CONF" -N "$n"
    else # a single slurmd finds its node by NodeHostname
      env "$MARK" SLURM_CONF="$CONF" /usr/sbin/slurmd -f "$CONF"
    fi
  done
  if ! wait_until 60 nodes nodes_idle; then
    SLURM_CONF=$CONF sinfo -N -l >&2 || true
    tail -n 20 "$STATE"/log/*.log >&2 || true
    die "the nodes did not become idle within 60s (logs: $STATE/log)"
  fi
  trap - EXIT
  log "up: $NODES node(s) ($(node_names | tr '\n' ' ')), state in $STATE"
  client_env
}

cmd_status() {
  [[ -f $CONF ]] || {
    log "down (no $CONF)"
    return 1
  }
  local pids
  pids=$(marked_pids | tr '\n' ' ')
  log "processes: ${pids:-none}"
  SLURM_CONF=$CONF scontrol ping
  SLURM_CONF=$CONF sinfo -N -l
  SLURM_CONF=$CONF squeue
}

stop_pidfile() { # FILE
  local pid
  [[ -f $1 ]] || return 0
  pid=$(cat "$1")
  [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
}

cmd_down() {
  if [[ -f $CONF ]] && SLURM_CONF=$CONF scontrol ping >/dev/null 2>&1; then
    SLURM_CONF=$CONF scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    wait_until 30 jobs test -z "$(SLURM_CONF=$CONF squeue -h 2>/dev/null)" || log "jobs still listed after 30s"
  fi
  local f left
  for f in "$STATE"/run/slurmd-*.pid "$STATE/run/slurmctld.pid" "$STATE/run/munged.pid"; do
    stop_pidfile "$f"
  done
  wait_until 20 daemons test -z "$(marked_pids)" || true
  left=$(marked_pids | tr '\n' ' ')
  if [[ -n $left ]]; then
    log "killing what is left: $left"
    # shellcheck disable=SC2086 # one pid per word
    kill -KILL $left 2>/dev/null || true
    wait_until 10 kill test -z "$(marked_pids)" || die "processes remain: $(marked_pids | tr '\n' ' ')"
  fi
  rm -rf "$STATE"
  log "down: no process of this cluster remains"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) client_env ;;
*)
  echo "usage: $0 up|down|status|env" >&2
  exit 2
  ;;
esac
