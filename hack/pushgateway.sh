#!/usr/bin/env bash
# The Prometheus Pushgateway, built from its Go module once per machine, for the tests of --pushgateway.
#
# The tests start it themselves, on 127.0.0.1 and a free port, and stop it; this script only builds it.
#
#   hack/pushgateway.sh build   build or reuse the cached binary; prints the directory that holds it
set -euo pipefail

PUSHGATEWAY_VERSION=v1.11.1

CACHE_DIR=${ROLLCALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall}/pushgateway-$PUSHGATEWAY_VERSION
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}

log() { printf '[pushgateway] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
# shellcheck source=hack/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

build_stamp() { echo "$PUSHGATEWAY_VERSION $("$GO" env GOVERSION)" | sha256sum | cut -d' ' -f1; }

# Downloaded, then built inside its own module (its go.mod and go.sum pin every dependency); `go install
# MODULE@VERSION` would also ask the proxy for the module's version list, which it may refuse.
build_into() {
  local tmp=$1 src
  log "building Pushgateway $PUSHGATEWAY_VERSION with $("$GO" env GOVERSION) into $CACHE_DIR"
  if ! src=$(GOTOOLCHAIN=local GOFLAGS= "$GO" mod download -json \
    "github.com/prometheus/pushgateway@$PUSHGATEWAY_VERSION" 2>"$tmp/build.log" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || [[ -z $src ]]; then
    tail -n 30 "$tmp/build.log" >&2
    die "pushgateway download failed (full log: $tmp/build.log)"
  fi
  if ! (cd "$src" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$GO" build -v -ldflags "-s -w" \
    -o "$tmp/pushgateway" .) >>"$tmp/build.log" 2>&1; then
    tail -n 30 "$tmp/build.log" >&2
    die "pushgateway build failed (full log: $tmp/build.log)"
  fi
}

cmd_build() {
  [[ -x $GO ]] || die "go not found (set GO=/path/to/go)"
  cached_build "$CACHE_DIR" pushgateway "$(build_stamp)" build_into
}

case ${1:-} in
build) cmd_build ;;
*) die "usage: $0 build" ;;
esac
