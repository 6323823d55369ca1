#!/usr/bin/env bash
# Images for the local cluster's real nodes, built on this machine (no registry is reachable):
#
#   hack/image.sh base     the debian:12-slim base: a debootstrap minbase of bookworm, as an OCI image
#   hack/image.sh bert     images/bert-training/Dockerfile.cpu, built by buildah FROM that base
#   hack/image.sh pause    the pod sandbox image: the static pause program of hack/node-bin/pause
#   hack/image.sh suite    images/suite/Dockerfile (the suite itself, no torch), FROM that base
#   hack/image.sh all      pause, bert and suite; each prints the docker-archive file it wrote or found
#   hack/image.sh clean    remove the builder's storage (the archives stay cached)
#
# Every image is a docker-archive file under the cache (~/.cache/rollcall/images), named by a hash of
# what went into it, so it is built once per machine and input; the nodes import these files.
# buildah's storage lives under the cache too and is wiped after each build.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${ROLLCALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall}
IMAGES=$CACHE/images
STORE=$CACHE/buildah
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
UV_CACHE=${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}
#: The names the nodes know the images by.
BASE_NAME=docker.io/library/debian:12-slim
BERT_NAME=rollcall.local/rollcall-bert:cpu
PAUSE_NAME=rollcall.local/pause:1
SUITE_NAME=rollcall.local/rollcall-suite:1

log() { printf '[image] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

buildah() { command buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs "$@"; }

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found: apt-get install -y debootstrap buildah"
  done
}

hash_of() { # FILE... : a short hash of the files' contents and names
  local f
  for f in "$@"; do
    echo "$f"
    cat "$ROOT/$f"
  done | sha256sum | cut -c1-16
}

wipe_store() {
  buildah rm --all >/dev/null 2>&1 || true
  buildah rmi --all --force >/dev/null 2>&1 || true
  if [[ -d $STORE ]]; then
    grep -o " $STORE[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "$STORE"
  fi
}

# export_image NAME FILE: write NAME from the builder's storage to FILE (docker-archive), atomically.
export_image() {
  local name=$1 file=$2
  rm -f "$file.part"
  buildah push --quiet "$name" "docker-archive:$file.part:$name" >/dev/null
  mv -f "$file.part" "$file"
}

cmd_base() {
  local file=$IMAGES/debian-12-slim-$SUITE.tar
  if [[ -f $file ]]; then
    echo "$file"
    return
  fi
  need debootstrap buildah
  mkdir -p "$IMAGES"
  local start=$SECONDS rootfs ctr mnt
  rootfs=$(mktemp -d "$CACHE/.rootfs.XXXXXX")
  # shellcheck disable=SC2064 # expand now
  trap "rm -rf '$rootfs'; wipe_store" EXIT
  log "debootstrap --variant=minbase $SUITE (about 75 s)"
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"$CACHE/.debootstrap.log" 2>&1 ||
    { tail -20 "$CACHE/.debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/.debootstrap.log)"; }
  # As in Debian's own slim images: no apt caches, no docs.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/*
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$rootfs/." "$mnt/"
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash "$ctr"
  buildah commit --quiet "$ctr" "$BASE_NAME" >/dev/null
  export_image "$BASE_NAME" "$file"
  log "base image $BASE_NAME in $((SECONDS - start))s: $(du -h "$file" | cut -f1)"
  echo "$file"
}

# build_image NAME FILE DOCKERFILE CONTEXT [BUD ARGS...]: print FILE, the docker-archive of image NAME built
# from DOCKERFILE in CONTEXT FROM the base image, unless FILE is there already; the older archives of its
# kind (FILE's name up to its hash) are removed.
build_image() {
  local name=$1 file=$2 dockerfile=$3 context=$4
  shift 4
  if [[ -f $file ]]; then
    echo "$file"
    return
  fi
  need buildah
  local base start=$SECONDS
  base=$(cmd_base)
  trap wipe_store EXIT
  buildah pull --quiet "docker-archive:$base" >/dev/null
  log "building $name from ${dockerfile#"$ROOT/"} (its Python packages from uv's cache when it has them)"
  mkdir -p "$UV_CACHE"
  # The host's CA bundle (it may hold a TLS proxy's CA) for pip and uv during the build only.
  local tls=() bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
  if [[ -f $bundle ]]; then
    tls=(--volume "$bundle:/run/build-ca.crt:ro" --build-arg SSL_CERT_FILE=/run/build-ca.crt
      --build-arg PIP_CERT=/run/build-ca.crt)
  fi
  # chroot isolation: no daemon and no user namespace needed; the host's network reaches the package
  # registries. uv's cache is mounted so torch is not downloaded again.
  buildah bud --quiet --pull-never --isolation chroot --layers=false \
    --volume "$UV_CACHE:/root/.cache/uv" "${tls[@]}" "$@" \
    -f "$dockerfile" -t "$name" "$context" >"$CACHE/.bud.log" 2>&1 ||
    { tail -30 "$CACHE/.bud.log" >&2; die "buildah bud failed (log: $CACHE/.bud.log)"; }
  rm -f "${file%-*}"-*.tar
  export_image "$name" "$file"
  log "built $name in $((SECONDS - start))s: $(du -h "$file" | cut -f1)"
  echo "$file"
}

cmd_bert() {
  local dir=images/bert-training hash
  # shellcheck disable=SC2046 # one path per word
  hash=$(hash_of "$dir/Dockerfile.cpu" "$dir/Dockerfile.cpu.dockerignore" "$dir/requirements.cpu.txt" \
    "$dir/train.py" $(cd "$ROOT" && find src/rollcall_workload -name '*.py' | LC_ALL=C sort))
  build_image "$BERT_NAME" "$IMAGES/rollcall-bert-cpu-$hash.tar" "$ROOT/$dir/Dockerfile.cpu" "$ROOT" \
    --ignorefile "$ROOT/$dir/Dockerfile.cpu.dockerignore"
}

# The suite's build context (the repository root, less what its .dockerignore leaves out), as paths.
suite_inputs() {
  echo images/suite/Dockerfile images/suite/Dockerfile.dockerignore pyproject.toml README.md requirements.lock \
    tests/__init__.py
  (cd "$ROOT" && find src tests/e2e -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' |
    LC_ALL=C sort)
}

cmd_suite() {
  local hash
  # shellcheck disable=SC2046 # one path per word
  hash=$(hash_of $(suite_inputs))
  build_image "$SUITE_NAME" "$IMAGES/rollcall-suite-$hash.tar" "$ROOT/images/suite/Dockerfile" "$ROOT" \
    --ignorefile "$ROOT/images/suite/Dockerfile.dockerignore"
}

cmd_pause() {
  local hash file
  hash=$(hash_of hack/node-bin/pause/main.go hack/node-bin/pause/go.mod)
  file=$IMAGES/pause-$hash.tar
  if [[ -f $file ]]; then
    echo "$file"
    return
  fi
  need buildah
  mkdir -p "$IMAGES"
  local tmp ctr
  tmp=$(mktemp -d "$CACHE/.pause.XXXXXX")
  # shellcheck disable=SC2064 # expand now
  trap "rm -rf '$tmp'; wipe_store" EXIT
  CGO_ENABLED=0 GOTOOLCHAIN=local "$GO" -C "$ROOT/hack/node-bin/pause" build -trimpath -ldflags "-s -w" \
    -o "$tmp/pause" . || die "building the pause program failed"
  ctr=$(buildah from scratch)
  buildah copy --quiet "$ctr" "$tmp/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' "$ctr"
  buildah commit --quiet "$ctr" "$PAUSE_NAME" >/dev/null
  rm -f "$IMAGES"/pause-*.tar
  export_image "$PAUSE_NAME" "$file"
  echo "$file"
}

main() {
  local cmd=${1:-}
  mkdir -p "$CACHE"
  # One build at a time: they share the builder's storage.
  [[ -n ${ROLLCALL_IMAGE_LOCKED:-} ]] || exec env ROLLCALL_IMAGE_LOCKED=1 flock "$CACHE/.image.lock" "$0" "$@"
  case $cmd in
  base) cmd_base ;;
  bert) cmd_bert ;;
  pause) cmd_pause ;;
  suite) cmd_suite ;;
  all)
    (cmd_pause)
    (cmd_bert)
    (cmd_suite)
    ;;
  clean) wipe_store ;;
  names) printf '%s %s %s %s\n' "$BASE_NAME" "$BERT_NAME" "$PAUSE_NAME" "$SUITE_NAME" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}

main "$@"
