#!/usr/bin/env bash
# Karpenter, with its kwok cloud provider, as a local process against a cluster of hack/cluster.sh.
#
# Karpenter's kwok provider "launches" a NodeClaim by creating a Node object annotated
# kwok.x-k8s.io/node=fake, which the cluster's own kwok then makes Ready and whose pods it runs,
# like the fake nodes of hack/profiles. Its instance types are hack/karpenter/instance-types.json
# (trn1.32xlarge with NeuronCores and EFA, p5.48xlarge with GPUs, m5.large); NodePools refer to
# the KWOKNodeClass `default` (hack/karpenter/nodeclass.yaml). See docs/control-plane.md.
#
#   hack/karpenter.sh build               build or reuse the cached binary
#   hack/karpenter.sh up [--name NAME]    CRDs, the node class, and Karpenter running for cluster NAME
#   hack/karpenter.sh down [--name NAME]  delete every NodePool and NodeClaim (so their nodes), stop it
#   hack/karpenter.sh status [--name NAME]
set -euo pipefail

KARPENTER_VERSION=v1.14.1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HACK=$ROOT/hack
CACHE_DIR=${ROLLCALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall}/karpenter-$KARPENTER_VERSION
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
NAME=${CLUSTER_NAME:-rollcall}

log() { printf '[karpenter] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
# shellcheck source=hack/lib.sh
. "$HACK/lib.sh"

parse_opts() { controller_opts karpenter "$@"; }
kubectl() { "$("$HACK/cluster.sh" bin-dir)/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# ---------------------------------------------------------------- build

build_stamp() { echo "$KARPENTER_VERSION $("$GO" env GOVERSION)" | sha256sum | cut -d' ' -f1; }

build_into() {
  local tmp=$1 mod
  log "building Karpenter $KARPENTER_VERSION (kwok provider) with $("$GO" env GOVERSION) into $CACHE_DIR"
  log "(once per machine: ~4 min on 2 cores when cold)"
  if ! GOTOOLCHAIN=local GOFLAGS= GOBIN=$tmp "$GO" install -v -ldflags "-s -w" \
    "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION" >"$tmp/build.log" 2>&1; then
    tail -n 30 "$tmp/build.log" >&2
    die "karpenter build failed (full log: $tmp/build.log)"
  fi
  mv -f "$tmp/kwok" "$tmp/karpenter"
  # The CRDs of exactly this version, from the module just built.
  rm -rf "$CACHE_DIR/crds"
  mkdir -p "$CACHE_DIR/crds"
  mod=$("$GO" env GOMODCACHE)/sigs.k8s.io/karpenter@$KARPENTER_VERSION
  cp "$mod"/kwok/charts/crds/*.yaml "$mod"/kwok/apis/crds/*.yaml "$CACHE_DIR/crds/"
  chmod u+w "$CACHE_DIR"/crds/*.yaml
}

cmd_build() {
  [[ -x $GO ]] || die "go not found (set GO=/path/to/go)"
  cached_build "$CACHE_DIR" karpenter "$(build_stamp)" build_into
}

# ---------------------------------------------------------------- run


cmd_up() {
  parse_opts "$@"
  [[ -f $KUBECONFIG_FILE ]] || die "no cluster '$NAME' (start one with hack/cluster.sh up --name $NAME)"
  running && die "karpenter already runs for cluster '$NAME'; run: $0 down --name $NAME"
  cmd_build >/dev/null
  mkdir -p "$STATE"
  kubectl apply --server-side -f "$CACHE_DIR/crds" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s -f "$CACHE_DIR/crds" >/dev/null
  kubectl apply -f "$HACK/karpenter/nodeclass.yaml" >/dev/null
  local metrics health
  metrics=$(free_port)
  health=$(free_port)
  # One instance: no leader election. Metrics and health probes on free ports (Karpenter binds
  # them on every address; nothing outside reaches this machine's test clusters). Short batching
  # windows: pending pods are provisioned for within seconds.
  env KUBECONFIG="$KUBECONFIG_FILE" SYSTEM_NAMESPACE=kube-system \
    DISABLE_LEADER_ELECTION=true LOG_LEVEL=info \
    METRICS_PORT="$metrics" HEALTH_PROBE_PORT="$health" \
    BATCH_IDLE_DURATION=1s BATCH_MAX_DURATION=3s \
    INSTANCE_TYPES_FILE_PATH="$HACK/karpenter/instance-types.json" \
    setsid "$CACHE_DIR/karpenter" >"$STATE/karpenter.log" 2>&1 </dev/null &
  echo $! >"$STATE/pid"
  echo "$health" >"$STATE/health-port"
  local deadline=$((SECONDS + 120))
  until curl -fsS "http://127.0.0.1:$health/readyz" >/dev/null 2>&1; do
    running || {
      tail -n 30 "$STATE/karpenter.log" >&2
      die "karpenter exited (log: $STATE/karpenter.log)"
    }
    ((SECONDS < deadline)) || die "karpenter not ready after 120s (log: $STATE/karpenter.log)"
    sleep 0.5
  done
  log "karpenter $KARPENTER_VERSION runs for cluster '$NAME' (pid $(cat "$STATE/pid"), log $STATE/karpenter.log)"
}

cmd_down() {
  parse_opts "$@"
  if [[ ! -d $STATE ]]; then
    log "karpenter does not run for cluster '$NAME'"
    return
  fi
  # Karpenter itself removes its finalizers, deleting the nodes: delete while it still runs.
  if running && [[ -f $KUBECONFIG_FILE ]]; then
    kubectl delete nodepools.karpenter.sh --all --wait=false >/dev/null 2>&1 || true
    kubectl delete nodeclaims.karpenter.sh --all --timeout=120s >/dev/null 2>&1 ||
      log "NodeClaims still terminating after 120s"
  fi
  stop_pidfile "$STATE/pid"
  rm -rf "$STATE"
  log "karpenter for cluster '$NAME' stopped"
}

cmd_status() {
  parse_opts "$@"
  running || {
    log "karpenter does not run for cluster '$NAME'"
    return 1
  }
  log "karpenter runs (pid $(cat "$STATE/pid"))"
  kubectl get nodepools,nodeclaims
}

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
  build) cmd_build "$@" ;;
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  status) cmd_status "$@" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}

main "$@"
