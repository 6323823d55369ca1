#!/usr/bin/env bash
# A real Kubernetes control plane on this machine for rollcall's own tests.
#
# Upstream kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd are
# built from their Go modules (hack/k8s-bin, hack/etcd-bin) and run by kwokctl as local
# processes bound to 127.0.0.1; kwok stands in for kubelets (fake nodes from
# hack/profiles); real nodes (hack/realnodes.sh) run pods for real. See docs/control-plane.md.
#
#   hack/cluster.sh build                      build or reuse the cached binaries
#   hack/cluster.sh up [--nodes N] [--profile P] [--name NAME] [--kubeconfig PATH]
#                      [--pod-run-ms MS]       start a cluster (env NODES/PROFILE/POD_RUN_MS too)
#                      [--real-nodes N]        and N real nodes: kubelet, containerd, CNI, CoreDNS
#                      [--log-max-size SIZE]   the real kubelets' containerLogMaxSize (default 10Mi)
#   hack/cluster.sh add-nodes [--nodes N] [--profile P] [--name NAME]
#   hack/cluster.sh restart-apiserver [--name NAME]
#   hack/cluster.sh stop-node [--name NAME] I  stop real node I's kubelet and runtime (a lost node)
#   hack/cluster.sh start-node [--name NAME] I start them again
#   hack/cluster.sh ctr [--name NAME] I ARGS... containerd's ctr against real node I
#   hack/cluster.sh status [--name NAME]
#   hack/cluster.sh down [--name NAME]         stop every process, remove every file
#   hack/cluster.sh bin-dir                    print the directory holding the binaries
#   hack/cluster.sh version                    print the Kubernetes version K8S_VERSION resolves to
#
# K8S_VERSION picks the Kubernetes: newest (the default) or oldest, by name or by version (v1.32 or
# v1.32.13); each has its consumer module and cache. Real nodes (kubelets) run the newest only. A command on
# an existing cluster (down, status, add-nodes, ...) uses the version it was started with.
set -euo pipefail

# The Kubernetes versions the suite is tested against, declared here only (README.md's "Kubernetes versions"
# says them; a unit test holds it, hack/k8s-bin*/go.mod and the date together): the newest release, built
# from hack/k8s-bin, and the oldest minor EKS still supports, extended support included, built from
# hack/k8s-bin-1.MINOR. EKS ends that minor's extended support on K8S_OLDEST_EKS_END: move it on before then.
K8S_NEWEST=v1.36.3
K8S_OLDEST=v1.32.13
K8S_OLDEST_EKS_END=2027-03-23
# The same etcd for both: 1.32 shipped with etcd 3.5.16, and etcd 3.6 serves 3.5's clients the same v3 API.
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0

minor_of() { # v1.32.13 -> 32
  local m=${1#v1.}
  echo "${m%%.*}"
}

# resolve_version NAME-OR-VERSION: the pinned version it names; dies on any other.
resolve_version() {
  local v=$1
  case $v in
  newest | "$K8S_NEWEST" | "v1.$(minor_of "$K8S_NEWEST")" | "1.$(minor_of "$K8S_NEWEST")") echo "$K8S_NEWEST" ;;
  oldest | "$K8S_OLDEST" | "v1.$(minor_of "$K8S_OLDEST")" | "1.$(minor_of "$K8S_OLDEST")") echo "$K8S_OLDEST" ;;
  *)
    printf '[cluster] error: K8S_VERSION=%s: this suite builds %s (newest) and %s (oldest) only\n' \
      "$v" "$K8S_NEWEST" "$K8S_OLDEST" >&2
    return 1
    ;;
  esac
}

# use_version VERSION: the module, binaries and cache of that (resolved) version.
use_version() {
  K8S_VERSION=$1
  if [[ $K8S_VERSION == "$K8S_NEWEST" ]]; then
    K8S_MODULE=$HACK/k8s-bin
    K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
  else
    K8S_MODULE=$HACK/k8s-bin-1.$(minor_of "$K8S_VERSION")
    K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  fi
  BINARIES=("${K8S_CMDS[@]}" etcd kwok kwokctl)
  CACHE_DIR=$CACHE_ROOT/k8s-$K8S_VERSION
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HACK=$ROOT/hack
STATE_ROOT=$ROOT/.cluster
CACHE_ROOT=${ROLLCALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
K8S_MODULE= CACHE_DIR= K8S_CMDS=() BINARIES=()
K8S_VERSION=$(resolve_version "${K8S_VERSION:-newest}") || exit 2
use_version "$K8S_VERSION"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ---------------------------------------------------------------- build

# The cache is valid for exactly these versions and module files.
build_stamp() {
  {
    echo "$K8S_VERSION $ETCD_VERSION $KWOK_VERSION $("$GO" env GOVERSION)"
    cat "$K8S_MODULE/go.mod" "$K8S_MODULE/go.sum" "$HACK/etcd-bin/go.mod" "$HACK/etcd-bin/go.sum"
  } | sha256sum | cut -d' ' -f1
}

cache_ok() {
  local b
  [[ -f $CACHE_DIR/.stamp && $(cat "$CACHE_DIR/.stamp") == "$(build_stamp)" ]] || return 1
  for b in "${BINARIES[@]}"; do [[ -x $CACHE_DIR/$b ]] || return 1; done
}

# run_with_progress LABEL TOTAL LOG CMD... : run a `go build -v` style command, printing
# how many packages it has compiled every 20 seconds (a cold build takes many minutes).
run_with_progress() {
  local label=$1 total=$2 logfile=$3 pid start=$SECONDS next=20
  shift 3
  "$@" >"$logfile" 2>&1 &
  pid=$!
  # shellcheck disable=SC2064 # expand pid now
  trap "kill $pid 2>/dev/null" INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if ((SECONDS - start >= next)); then
      log "  $label: $(grep -vc '^go: ' "$logfile")${total:+ of ~$total} packages compiled, $((SECONDS - start))s"
      next=$((next + 20))
    fi
  done
  trap - INT TERM
  if ! wait "$pid"; then
    tail -n 30 "$logfile" >&2
    die "$label build failed (full log: $logfile)"
  fi
  log "  $label: done in $((SECONDS - start))s"
}

count_deps() { # DIR PKG... : number of packages a build would compile (upper bound)
  local dir=$1
  shift
  "$GO" -C "$dir" list -deps "$@" | wc -l
}

cmd_build() {
  [[ -x $GO ]] || die "go not found (set GO=/path/to/go)"
  mkdir -p "$CACHE_DIR"
  # The lock fd must not leak into the cluster's daemons, hence the group redirect.
  {
    flock 9
    build_locked
  } 9>"$CACHE_DIR/.lock"
  # Real nodes run the newest Kubernetes only.
  [[ $K8S_VERSION != "$K8S_NEWEST" ]] || build_real
}

build_locked() {
  if cache_ok; then
    log "binaries are cached in $CACHE_DIR"
    echo "$CACHE_DIR"
    return
  fi
  local tmp start=$SECONDS total
  tmp=$(mktemp -d "$CACHE_DIR/.build.XXXXXX")
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
  log "building Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION with $("$GO" env GOVERSION)"
  log "into $CACHE_DIR (once per machine: ~10-15 min on 2 cores when cold)"

  local minor
  minor=$(minor_of "$K8S_VERSION")
  local k8s_ld=(-s -w)
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ld+=(-X "$pkg.gitVersion=$K8S_VERSION" -X "$pkg.gitMajor=1" -X "$pkg.gitMinor=$minor"
      -X "$pkg.gitTreeState=clean")
  done
  local k8s_pkgs=()
  for pkg in "${K8S_CMDS[@]}"; do
    k8s_pkgs+=("k8s.io/kubernetes/cmd/$pkg")
  done
  log "resolving modules (downloads from the Go module proxy on a cold machine)"
  total=$(count_deps "$K8S_MODULE" "${k8s_pkgs[@]}") || die "cannot resolve the modules of ${K8S_MODULE#"$ROOT"/}"
  run_with_progress "kubernetes" "$total" "$tmp/k8s.log" \
    "$GO" -C "$K8S_MODULE" build -v -trimpath -ldflags "${k8s_ld[*]}" -o "$tmp/" "${k8s_pkgs[@]}"

  total=$(count_deps "$HACK/etcd-bin" go.etcd.io/etcd/server/v3) || die "cannot resolve the modules of hack/etcd-bin"
  run_with_progress "etcd" "$total" "$tmp/etcd.log" \
    "$GO" -C "$HACK/etcd-bin" build -v -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3

  run_with_progress "kwok" "" "$tmp/kwok.log" \
    env GOFLAGS= GOBIN="$tmp" "$GO" install -v -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"

  local b
  for b in "${BINARIES[@]}"; do
    [[ -x $tmp/$b ]] || die "build produced no $b"
    mv -f "$tmp/$b" "$CACHE_DIR/$b"
  done
  build_stamp >"$CACHE_DIR/.stamp"
  rm -rf "$tmp"
  log "built in $((SECONDS - start))s: $("$CACHE_DIR/kube-apiserver" --version), $("$CACHE_DIR/etcd" --version | head -1)"
  echo "$CACHE_DIR"
}

# The real nodes' binaries and images (hack/realnodes.sh): `build` makes them too, unless NO_REAL=1.
build_real() {
  [[ -n ${NO_REAL:-} ]] || "$HACK/realnodes.sh" build >/dev/null
}

# ---------------------------------------------------------------- cluster

NAME=${CLUSTER_NAME:-rollcall}
NODES=${NODES:-2}
PROFILE=${PROFILE:-trn1.32xlarge}
POD_RUN_MS=${POD_RUN_MS:-2000}
REAL_NODES=${REAL_NODES:-0}
LOG_MAX_SIZE=${LOG_MAX_SIZE:-10Mi}
KUBECONFIG_OUT=
ARGS=()

parse_opts() {
  while (($#)); do
    case $1 in
    --name) NAME=${2:?}; shift ;;
    --nodes) NODES=${2:?}; shift ;;
    --profile) PROFILE=${2:?}; shift ;;
    --kubeconfig) KUBECONFIG_OUT=${2:?}; shift ;;
    --pod-run-ms) POD_RUN_MS=${2:?}; shift ;;
    --real-nodes) REAL_NODES=${2:?}; shift ;;
    --log-max-size) LOG_MAX_SIZE=${2:?}; shift ;;
    -*) die "unknown option $1 (see the header of $0)" ;;
    *) ARGS+=("$1") ;;
    esac
    shift
  done
  [[ $NAME =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "bad cluster name '$NAME'"
  [[ $NODES =~ ^[0-9]+$ ]] || die "--nodes must be a number"
  [[ $POD_RUN_MS =~ ^[0-9]+$ ]] || die "--pod-run-ms must be a number"
  [[ $REAL_NODES =~ ^[0-8]$ ]] || die "--real-nodes must be a number from 0 to 8"
  [[ $LOG_MAX_SIZE =~ ^[0-9]+[KMG]i$ ]] || die "--log-max-size must be a size such as 1Mi or 10Mi"
  STATE=$STATE_ROOT/$NAME
  # An existing cluster is driven with the binaries of the version it was started with.
  [[ ! -f $STATE/k8s-version ]] || use_version "$(cat "$STATE/k8s-version")"
  # One kwok work dir for all clusters, so that kwokctl sees the ports the others use.
  export KWOK_WORKDIR=$STATE_ROOT/kwok
  CLUSTER_DIR=$KWOK_WORKDIR/clusters/$NAME
}

kwokctl() { "$CACHE_DIR/kwokctl" --name "$NAME" "$@"; }
kubectl() { "$CACHE_DIR/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }
cluster_exists() { [[ -d $CLUSTER_DIR ]]; }

profile_file() {
  local f=$HACK/profiles/$1.yaml known=("$HACK"/profiles/*.yaml)
  known=("${known[@]##*/}")
  [[ -f $f ]] || die "no node profile '$1' (have: ${known[*]%.yaml})"
  echo "$f"
}

# add_nodes COUNT PROFILE: nodes are named <profile>-<i>, numbering on from existing ones.
add_nodes() {
  local count=$1 profile=$2 file first i
  file=$(profile_file "$profile")
  ((count > 0)) || return 0
  first=$(kubectl get nodes -l "node.kubernetes.io/instance-type=$profile" -o name | wc -l)
  for ((i = first; i < first + count; i++)); do
    echo "---"
    sed "s/__NODE_NAME__/${profile//./-}-$i/g" "$file"
  done | kubectl apply -f - >/dev/null
  log "added $count $profile node(s); waiting for Ready"
  kubectl wait --for=condition=Ready node -l "node.kubernetes.io/instance-type=$profile" --timeout=180s >/dev/null
}

cmd_up() {
  parse_opts "$@"
  profile_file "$PROFILE" >/dev/null
  ((REAL_NODES == 0)) || [[ $K8S_VERSION == "$K8S_NEWEST" ]] ||
    die "real nodes run the newest Kubernetes only ($K8S_NEWEST), not K8S_VERSION=$K8S_VERSION"
  cmd_build >/dev/null
  cluster_exists && die "cluster '$NAME' already exists; run: $0 down --name $NAME"
  [[ -n $KUBECONFIG_OUT ]] || KUBECONFIG_OUT=$STATE_ROOT/kubeconfig
  [[ $NAME == rollcall || $KUBECONFIG_OUT != "$STATE_ROOT/kubeconfig" ]] || KUBECONFIG_OUT=$STATE/kubeconfig
  KUBECONFIG_OUT=$(realpath -m "$KUBECONFIG_OUT")
  local start=$SECONDS
  mkdir -p "$STATE"
  echo "$KUBECONFIG_OUT" >"$STATE/kubeconfig-path"
  echo "$K8S_VERSION" >"$STATE/k8s-version"
  {
    cat "$HACK/kwok/kwokctl.yaml"
    echo "---"
    sed "s/__POD_RUN_MS__/$POD_RUN_MS/g" "$HACK/kwok/stages.yaml"
  } >"$STATE/kwok.yaml"

  log "starting cluster '$NAME' (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION)"
  # Leave nothing behind when a later step fails (KEEP_FAILED=1 keeps it for debugging).
  [[ -n ${KEEP_FAILED:-} ]] ||
    trap 'log "removing the half-started cluster"; cmd_down --name "$NAME" >/dev/null 2>&1 || true' EXIT
  # Every binary is a local path: kwokctl must not download anything. Creates are
  # serialised so that concurrent ones do not pick the same free ports (flock -o: the
  # lock is not inherited by the cluster's processes).
  if ! KWOK_KUBE_VERSION=$K8S_VERSION KWOK_ETCD_VERSION=${ETCD_VERSION#v} \
    KWOK_KUBECTL_BINARY=$CACHE_DIR/kubectl \
    flock -o "$STATE_ROOT/.create.lock" "$CACHE_DIR/kwokctl" --name "$NAME" \
    -c "$STATE/kwok.yaml" create cluster --runtime binary --kubeconfig "" \
    --etcd-binary "$CACHE_DIR/etcd" \
    --kube-apiserver-binary "$CACHE_DIR/kube-apiserver" \
    --kube-controller-manager-binary "$CACHE_DIR/kube-controller-manager" \
    --kube-scheduler-binary "$CACHE_DIR/kube-scheduler" \
    --kwok-controller-binary "$CACHE_DIR/kwok" \
    --wait 2m >"$STATE/create.log" 2>&1; then
    cat "$STATE/create.log" >&2
    die "kwokctl create cluster failed"
  fi
  kwokctl get kubeconfig >"$STATE/kubeconfig"
  log "control plane running after $((SECONDS - start))s"
  add_nodes "$NODES" "$PROFILE"
  wait_settled
  if ((REAL_NODES > 0)); then
    log "starting $REAL_NODES real node(s) ($PROFILE's labels and accelerator capacity)"
    "$HACK/realnodes.sh" up "$STATE/real" "$STATE/kubeconfig" "$REAL_NODES" "$PROFILE" "$LOG_MAX_SIZE"
    log "real nodes Ready after $((SECONDS - start))s"
  fi
  mkdir -p "$(dirname "$KUBECONFIG_OUT")"
  [[ $KUBECONFIG_OUT == "$STATE/kubeconfig" ]] || cp "$STATE/kubeconfig" "$KUBECONFIG_OUT"
  trap - EXIT
  log "cluster '$NAME' is up in $((SECONDS - start))s: $(kubectl get --raw /version | grep -o '"gitVersion": *"[^"]*"' | cut -d'"' -f4)"
  kubectl get nodes -L node.kubernetes.io/instance-type -o wide >&2
  echo "export KUBECONFIG=$KUBECONFIG_OUT"
}

cmd_node() { # stop-node|start-node OPTIONS INDEX
  local verb=$1
  shift
  parse_opts "$@"
  cluster_exists || die "no cluster '$NAME'"
  ((${#ARGS[@]} == 1)) || die "usage: $0 $verb [--name NAME] INDEX"
  "$HACK/realnodes.sh" "$verb" "$STATE/real" "${ARGS[0]}"
}

cmd_add_nodes() {
  parse_opts "$@"
  cluster_exists || die "no cluster '$NAME'"
  add_nodes "$NODES" "$PROFILE"
}

cmd_restart_apiserver() {
  parse_opts "$@"
  cluster_exists || die "no cluster '$NAME'"
  local component pidfile pid i start=$SECONDS
  # kube-apiserver gets SIGKILL, like a crash (a graceful stop holds connections for up to
  # 60s). The scheduler and controller-manager are restarted with it, or their reconnect
  # back-off could leave pods unscheduled for tens of seconds. kwok keeps running: a new
  # kwok could not take over the node leases of the old one before they expire.
  for component in kube-apiserver kube-scheduler kube-controller-manager; do
    pidfile=$CLUSTER_DIR/pids/$component.pid
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill -9 "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$pidfile"
  done
  # `start cluster` starts only the components that are not running.
  kwokctl start cluster >"$STATE/start.log" 2>&1 || {
    cat "$STATE/start.log" >&2
    die "kwokctl start cluster failed"
  }
  wait_settled
  log "kube-apiserver of '$NAME' restarted in $((SECONDS - start))s"
}

# probe_ok NAME: the cluster works end to end: the controller-manager has made the default
# ServiceAccount, and a probe pod is scheduled, runs, and kwok serves its log.
probe_ok() {
  local probe=$1
  kubectl get serviceaccount default -n kube-system >/dev/null 2>&1 || return 1
  if [[ ! -f $STATE/$probe.log ]]; then
    kubectl apply -f - >/dev/null 2>&1 <<YAML || return 1
apiVersion: v1
kind: Pod
metadata: {name: $probe, namespace: kube-system}
spec:
  containers: [{name: probe, image: registry.invalid/probe}]
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: $probe, namespace: kube-system}
spec:
  logs: [{logsFile: $STATE/$probe.log}]
YAML
    printf '%s stdout F %s\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" "$probe" >"$STATE/$probe.log"
  fi
  [[ $(kubectl logs -n kube-system "$probe" 2>/dev/null) == "$probe" ]]
}

# Wait for probe_ok, starting again any component that gave up while kube-apiserver was
# starting (kube-controller-manager does, on a busy machine).
wait_settled() {
  local probe=probe-$RANDOM i=0 deadline=$((SECONDS + 300))
  until probe_ok "$probe"; do
    ((SECONDS < deadline)) || die "cluster '$NAME' did not settle (see $CLUSTER_DIR/logs)"
    if ((++i % 50 == 0)); then
      kwokctl start cluster >>"$STATE/start.log" 2>&1 || true
    fi
    sleep 0.2
  done
  kubectl delete -n kube-system "pod/$probe" "logs.kwok.x-k8s.io/$probe" --wait=false >/dev/null
  rm -f "$STATE/$probe.log"
}

cmd_status() {
  parse_opts "$@"
  [[ -x $CACHE_DIR/kwokctl ]] || die "binaries not built; run: $0 build"
  cluster_exists || {
    log "no cluster '$NAME'"
    return 1
  }
  kwokctl get components
  kubectl get nodes -L node.kubernetes.io/instance-type
  echo "export KUBECONFIG=$(cat "$STATE/kubeconfig-path")"
}

# Processes of this cluster: kwokctl starts each from a link in its bin/ dir.
cluster_pids() {
  local p
  for p in /proc/[0-9]*; do
    [[ $({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) == "$CLUSTER_DIR/bin/"* ]] &&
      echo "${p#/proc/}"
  done
  return 0
}

cmd_down() {
  parse_opts "$@"
  if [[ ! -d $STATE && ! -d $CLUSTER_DIR ]]; then
    log "no cluster '$NAME'"
    return
  fi
  # Karpenter (hack/karpenter.sh) first, while the API still answers: it deletes the nodes it made.
  [[ ! -d $STATE/karpenter ]] || "$HACK/karpenter.sh" down --name "$NAME" || true
  # The JobSet controller (hack/jobset.sh) likewise: its webhooks go before the controller does.
  [[ ! -d $STATE/jobset ]] || "$HACK/jobset.sh" down --name "$NAME" || true
  # Real nodes first: their kubelets and containers, mounts, namespaces, bridge, routes, sysctls.
  [[ ! -d $STATE/real ]] || "$HACK/realnodes.sh" down "$STATE/real"
  if cluster_exists && [[ -x $CACHE_DIR/kwokctl ]]; then
    kwokctl delete cluster >"$STATE/delete.log" 2>&1 || cat "$STATE/delete.log" >&2
  fi
  local pids i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(cluster_pids)
    [[ -z $pids ]] && break
    # shellcheck disable=SC2086 # one pid per word
    if ((i < 10)); then kill $pids 2>/dev/null || true; else kill -9 $pids 2>/dev/null || true; fi
    sleep 0.5
  done
  if [[ -f $STATE/kubeconfig-path ]]; then
    rm -f "$(cat "$STATE/kubeconfig-path")"
  fi
  rm -rf "$STATE" "$CLUSTER_DIR"
  # The shared parts go with the last cluster, under the lock that creates hold: test sessions (pytest-xdist
  # workers) start and remove clusters at the same time. A start makes its state directory before it waits
  # for the lock, so the lock file goes only while no other cluster's directory is there.
  if [[ -d $STATE_ROOT ]]; then
    {
      flock 9
      if rmdir "$KWOK_WORKDIR/clusters" 2>/dev/null; then
        rm -rf "$KWOK_WORKDIR"
      fi
      if [[ -z $(find "$STATE_ROOT" -mindepth 1 -maxdepth 1 ! -name .create.lock -print -quit) ]]; then
        rm -f "$STATE_ROOT/.create.lock"
      fi
    } 9>>"$STATE_ROOT/.create.lock"
  fi
  rmdir "$STATE_ROOT" 2>/dev/null || true
  log "cluster '$NAME' removed"
}

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
  build) cmd_build "$@" ;;
  bin-dir) echo "$CACHE_DIR" ;;
  version) echo "$K8S_VERSION" ;;
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  add-nodes) cmd_add_nodes "$@" ;;
  restart-apiserver) cmd_restart_apiserver "$@" ;;
  stop-node | start-node) cmd_node "$cmd" "$@" ;;
  ctr) # ctr [--name NAME] INDEX ARGS... : containerd's own client against real node INDEX
    local name=$NAME
    if [[ ${1:-} == --name ]]; then name=$2; shift 2; fi
    "$HACK/realnodes.sh" ctr "$STATE_ROOT/$name/real" "$@"
    ;;
  status) cmd_status "$@" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}

main "$@"
