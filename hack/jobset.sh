#!/usr/bin/env bash
# The JobSet controller (kubernetes-sigs/jobset) as a local process against a cluster of hack/cluster.sh,
# built from its Go module, its webhooks served over TLS with a CA made here.
#
# The apiserver reaches the webhooks at https://127.0.0.1:PORT (a URL clientConfig, no Service): the
# controller's own certificate management is off, and this script makes a CA and a serving certificate for
# 127.0.0.1 (openssl), then registers the webhook configurations (hack/jobset/webhooks.yaml) with that CA.
# The CRD is the module's own. See docs/control-plane.md.
#
#   hack/jobset.sh build               build or reuse the cached binary and CRD
#   hack/jobset.sh up [--name NAME]    the CRD, the certificates, the controller and its webhooks for cluster NAME
#   hack/jobset.sh down [--name NAME]  delete every JobSet, the webhooks and the CRD, and stop it
#   hack/jobset.sh status [--name NAME]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HACK=$ROOT/hack
# The version hack/jobset-bin/go.mod requires: v0.12.0, the newest the Go module proxy serves here (v0.12.1
# and later are refused).
JOBSET_VERSION=$(sed -n 's#^require sigs.k8s.io/jobset ##p' "$HACK/jobset-bin/go.mod")
CACHE_DIR=${ROLLCALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall}/jobset-$JOBSET_VERSION
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
NAME=${CLUSTER_NAME:-rollcall}

log() { printf '[jobset] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
# shellcheck source=hack/lib.sh
. "$HACK/lib.sh"

parse_opts() { controller_opts jobset "$@"; }
kubectl() { "$("$HACK/cluster.sh" bin-dir)/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# ---------------------------------------------------------------- build

build_stamp() {
  { echo "$JOBSET_VERSION $("$GO" env GOVERSION)"; cat "$HACK/jobset-bin/go.mod" "$HACK/jobset-bin/go.sum"; } |
    sha256sum | cut -d' ' -f1
}

build_into() {
  local tmp=$1 mod
  log "building JobSet $JOBSET_VERSION with $("$GO" env GOVERSION) into $CACHE_DIR (once per machine: ~2 min cold)"
  # In a copy of hack/jobset-bin, a module requiring it: the proxy serves v0.12.0 but not the module's
  # version list, which `go install sigs.k8s.io/jobset@v0.12.0` reads. -mod=mod fills the copy's go.mod.
  mkdir -p "$tmp/src"
  cp "$HACK/jobset-bin/go.mod" "$HACK/jobset-bin/go.sum" "$tmp/src/"
  if ! GOTOOLCHAIN=local GOFLAGS=-mod=mod "$GO" -C "$tmp/src" build -v -trimpath -ldflags "-s -w" \
    -o "$tmp/jobset" sigs.k8s.io/jobset >"$tmp/build.log" 2>&1; then
    tail -n 30 "$tmp/build.log" >&2
    die "jobset build failed (full log: $tmp/build.log)"
  fi
  # The CRD of exactly this version, from the module just built.
  mod=$("$GO" env GOMODCACHE)/sigs.k8s.io/jobset@$JOBSET_VERSION
  rm -rf "$CACHE_DIR/crds"
  mkdir -p "$CACHE_DIR/crds"
  cp "$mod"/config/components/crd/bases/*.yaml "$CACHE_DIR/crds/"
  chmod u+w "$CACHE_DIR"/crds/*.yaml
}

cmd_build() {
  [[ -x $GO ]] || die "go not found (set GO=/path/to/go)"
  cached_build "$CACHE_DIR" jobset "$(build_stamp)" build_into
}

# ---------------------------------------------------------------- run


make_certs() { # DIR: a CA, and a serving certificate for 127.0.0.1 it signed (tls.crt, tls.key)
  local dir=$1
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=rollcall-jobset-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/tls.key" -out "$dir/tls.csr" \
    >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/ext.cnf"
  openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
    -extfile "$dir/ext.cnf" -out "$dir/tls.crt" >/dev/null 2>&1
}

cmd_up() {
  parse_opts "$@"
  [[ -f $KUBECONFIG_FILE ]] || die "no cluster '$NAME' (start one with hack/cluster.sh up --name $NAME)"
  running && die "jobset already runs for cluster '$NAME'; run: $0 down --name $NAME"
  command -v openssl >/dev/null || die "openssl not found: apt-get install -y openssl"
  cmd_build >/dev/null
  mkdir -p "$STATE/certs"
  make_certs "$STATE/certs"
  kubectl apply --server-side -f "$CACHE_DIR/crds" >/dev/null
  # Established, read as a value: `kubectl wait` fails at once on a CRD whose status has no conditions yet
  local deadline=$((SECONDS + 60)) crd=jobsets.jobset.x-k8s.io
  until [[ $(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' \
    2>/dev/null) == True ]]; do
    ((SECONDS < deadline)) || die "CRD $crd not Established after 60s"
    sleep 0.5
  done
  local webhook metrics health
  webhook=$(free_port)
  metrics=$(free_port)
  health=$(free_port)
  cat >"$STATE/config.yaml" <<CONFIG
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: $webhook
  certDir: $STATE/certs
metrics:
  bindAddress: 127.0.0.1:$metrics
health:
  healthProbeBindAddress: 127.0.0.1:$health
CONFIG
  env KUBECONFIG="$KUBECONFIG_FILE" POD_NAMESPACE=kube-system \
    setsid "$CACHE_DIR/jobset" --config "$STATE/config.yaml" --kubeconfig "$KUBECONFIG_FILE" \
    >"$STATE/jobset.log" 2>&1 </dev/null &
  echo $! >"$STATE/pid"
  deadline=$((SECONDS + 120))
  until curl -fsS "http://127.0.0.1:$health/readyz" >/dev/null 2>&1; do
    running || {
      tail -n 30 "$STATE/jobset.log" >&2
      die "jobset exited (log: $STATE/jobset.log)"
    }
    ((SECONDS < deadline)) || die "jobset not ready after 120s (log: $STATE/jobset.log)"
    sleep 0.5
  done
  local ca
  ca=$(base64 -w0 <"$STATE/certs/ca.crt")
  sed -e "s#__URL__#https://127.0.0.1:$webhook#g" -e "s#__CA__#$ca#g" "$HACK/jobset/webhooks.yaml" |
    kubectl apply -f - >/dev/null
  log "jobset $JOBSET_VERSION runs for cluster '$NAME' (pid $(cat "$STATE/pid"), webhooks on 127.0.0.1:$webhook, log $STATE/jobset.log)"
}

cmd_down() {
  parse_opts "$@"
  if [[ ! -d $STATE ]]; then
    log "jobset does not run for cluster '$NAME'"
    return
  fi
  # The webhooks first: with the controller gone they would refuse every JobSet (and its pods).
  if [[ -f $KUBECONFIG_FILE ]]; then
    kubectl delete mutatingwebhookconfiguration rollcall-jobset-mutating --ignore-not-found >/dev/null 2>&1 || true
    kubectl delete validatingwebhookconfiguration rollcall-jobset-validating --ignore-not-found >/dev/null 2>&1 || true
    kubectl delete jobsets.jobset.x-k8s.io --all --all-namespaces --timeout=60s >/dev/null 2>&1 || true
    kubectl delete -f "$CACHE_DIR/crds" --ignore-not-found --timeout=60s >/dev/null 2>&1 || true
  fi
  stop_pidfile "$STATE/pid"
  rm -rf "$STATE"
  log "jobset for cluster '$NAME' stopped"
}

cmd_status() {
  parse_opts "$@"
  running || {
    log "jobset does not run for cluster '$NAME'"
    return 1
  }
  log "jobset runs (pid $(cat "$STATE/pid"))"
  kubectl get jobsets --all-namespaces
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
