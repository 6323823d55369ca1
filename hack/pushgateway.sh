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

build_stamp() { echo "$PUSHGATEWAY_VERSION $("$GO" env GOVERSION)" | sha256sum | cut -d' ' -f1; }

cmd_build() {
  [[ -x $GO ]] || die "go not found (set GO=/path/to/go)"
  mkdir -p "$CACHE_DIR"
  {
    flock 9
    if [[ -x $CACHE_DIR/pushgateway && -f $CACHE_DIR/.stamp && $(cat "$CACHE_DIR/.stamp") == "$(build_stamp)" ]]; then
      log "pushgateway is cached in $CACHE_DIR"
    else
      local tmp start=$SECONDS
      tmp=$(mktemp -d "$CACHE_DIR/.build.XXXXXX")
      log "building Pushgateway $PUSHGATEWAY_VERSION with $("$GO" env GOVERSION) into $CACHE_DIR"
      # Downloaded, then built inside its own module (its go.mod and go.sum pin every dependency); `go
      # install MODULE@VERSION` would also ask the proxy for the module's version list, which it may refuse.
      local src
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
      mv -f "$tmp/pushgateway" "$CACHE_DIR/pushgateway"
      build_stamp >"$CACHE_DIR/.stamp"
      rm -rf "$tmp"
      log "built in $((SECONDS - start))s"
    fi
  } 9>"$CACHE_DIR/.lock"
  echo "$CACHE_DIR"
}

case ${1:-} in
build) cmd_build ;;
*) die "usage: $0 build" ;;
esac
