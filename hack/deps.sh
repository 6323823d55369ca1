#!/usr/bin/env bash
# Debian packages the tests need, installed when missing (as root): Chromium for the report's browser
# test; runc, the CNI plugins, debootstrap, buildah, socat, iproute2 and curl for the real nodes; Slurm and
# munge for tests/slurm.
set -euo pipefail
PACKAGES=(chromium runc containernetworking-plugins debootstrap buildah socat iproute2 curl slurm-wlm munge)
missing=()
for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
((${#missing[@]})) || exit 0
if ((EUID != 0)); then
  echo "missing Debian packages: ${missing[*]}; run as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "== installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
