#!/usr/bin/env bash
# The Debian packages a make target needs, installed when missing (as root), each known by what it puts on
# the machine: a package counts as present only when its command (or file) is there, so a package installed
# but off PATH is named, not assumed.
#
#   hack/deps.sh [GROUP...]     install what GROUP needs (every group when none is named)
#   hack/deps.sh --list GROUP   print GROUP's "package command" pairs (the tests read the table from here)
#
# Groups: browser (Chromium, for the report's browser test); nodes (the local cluster's real nodes: runc, the
# CNI plugins, debootstrap and buildah for the images, socat, iproute2, curl); slurm (Slurm and munge).
set -euo pipefail

declare -A NEEDS=(
  [browser]="chromium"
  [nodes]="runc containernetworking-plugins debootstrap buildah socat iproute2 curl"
  [slurm]="slurm-wlm munge"
)
# What each package provides: a command looked up on PATH, or an absolute path. The targets that use them run
# as root, whose PATH holds the sbin directories (runc, debootstrap and ip are there).
declare -A PROVIDES=(
  [chromium]=chromium [runc]=runc [containernetworking-plugins]=/usr/lib/cni/bridge [debootstrap]=debootstrap
  [buildah]=buildah [socat]=socat [iproute2]=ip [curl]=curl [slurm-wlm]=sbatch [munge]=munge
)

present() { # PACKAGE
  local what=${PROVIDES[$1]}
  if [[ $what == /* ]]; then [[ -e $what ]]; else command -v "$what" >/dev/null 2>&1; fi
}

if [[ ${1:-} == --list ]]; then
  for p in ${NEEDS[${2:?--list GROUP}]:?unknown group $2}; do echo "$p ${PROVIDES[$p]}"; done
  exit 0
fi
groups=("$@")
((${#groups[@]})) || groups=(browser nodes slurm)
missing=()
for g in "${groups[@]}"; do
  [[ -n ${NEEDS[$g]:-} ]] || { echo "hack/deps.sh: unknown group '$g' (browser, nodes, slurm)" >&2; exit 2; }
  for p in ${NEEDS[$g]}; do present "$p" || missing+=("$p"); done
done
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
fix="apt-get install -y ${missing[*]}"
if ((EUID != 0)); then
  echo "missing Debian packages: ${missing[*]}; run as root: $fix" >&2
  exit 1
fi
echo "== installing ${missing[*]}" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
  echo "hack/deps.sh: could not install ${missing[*]} ($fix failed)" >&2
  exit 1
fi
for p in "${missing[@]}"; do
  present "$p" || {
    echo "hack/deps.sh: $p is installed but ${PROVIDES[$p]} is not on PATH ($PATH)" >&2
    exit 1
  }
done
