#!/usr/bin/env bash
# The roll call from any CI system (GitLab, Jenkins, Buildkite, Tekton...): install the suite, run it against
# the cluster of a kubeconfig held as a secret, and leave both junit files and the HTML report in one folder
# for the CI system to publish. It runs in the repository it lies in; extra arguments go to pytest.
#
#   KUBECONFIG_DATA   the kubeconfig's content, from the CI's secret store (or set KUBECONFIG to a file path,
#                     e.g. a GitLab "File" variable)
#   ROLLCALL_IMAGE    the training image; any other ROLLCALL_* option variable works too (see docs/options.md)
#   BASELINE          optional baseline file: gate throughput against it
#   OUT               where reports go (default: artifacts)
#   PYTHON            a python that already has the suite installed (skips making a venv)
#
# Publish: $OUT/junit.xml (per test), $OUT/ranks.junit.xml (per rank), $OUT/report.html, $OUT/results.json.
# Exit status: pytest's (0 only when every rank of every test answered).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-artifacts}

python=${PYTHON:-}
if [[ -z $python ]]; then
  python3 -m venv .rollcall-ci
  .rollcall-ci/bin/pip install -q --constraint requirements.lock .
  python=.rollcall-ci/bin/python
fi

if [[ -n ${KUBECONFIG_DATA:-} ]]; then
  KUBECONFIG=$(umask 077 && mktemp)
  export KUBECONFIG
  trap 'rm -f "$KUBECONFIG"' EXIT
  printf '%s\n' "$KUBECONFIG_DATA" >"$KUBECONFIG"
fi

args=(--backend kubernetes --artifacts-dir "$out" --junitxml "$out/junit.xml")
if [[ -n ${BASELINE:-} ]]; then args+=(--baseline "$BASELINE"); fi

status=0
"$python" -m pytest tests/e2e "${args[@]}" "$@" || status=$?
echo "rollcall: junit $out/junit.xml $out/ranks.junit.xml; html report $out/report.html (exit $status)"
exit "$status"
