#!/usr/bin/env bash
# make test's sessions: the real-nodes tests beside the unit session and then the integration session.
#
#   hack/test.sh PYTHON UNIT_WORKERS INTEGRATION_WORKERS -- TESTS... [-- PYTEST_ARGS...]
#
# The real nodes' tests (tests/real) are the longest path of the integration tests, one worker's (their
# bridge and namespaces exist once per machine: tests/groups.py), and spend most of their time waiting on
# pods and bounds: they start at once, in a session of their own, instead of after the unit session. The
# unit session runs first, then the other integration tests (TESTS) on INTEGRATION_WORKERS workers. Each
# session's output is printed whole, the real-nodes session's after the others'. Ctrl-C or SIGTERM ends the
# real-nodes session with SIGTERM (its clean-up runs: the suite turns SIGTERM into Ctrl-C) and is passed on.
set -uo pipefail
py=$1 unit_workers=$2 workers=$3
shift 3
[[ ${1:-} == -- ]] && shift
tests=()
while (($#)) && [[ $1 != -- ]]; do
  tests+=("$1")
  shift
done
(($#)) && shift
args=("$@")

real_log=$(mktemp)
"$py" -m pytest tests/real "${args[@]}" >"$real_log" 2>&1 &
real=$!

show_real() {
  echo "== the real nodes' tests (tests/real), run beside the sessions above"
  cat "$real_log"
  rm -f "$real_log"
}
interrupted() {
  kill -TERM "$real" 2>/dev/null
  wait "$real"
  show_real
  exit 130
}
trap interrupted INT TERM

rc=0
"$py" -m pytest -n "$unit_workers" --dist loadfile tests/unit "${args[@]}" || rc=$?
if ((rc == 0)); then
  "$py" -m pytest -n "$workers" --dist loadgroup "${tests[@]}" "${args[@]}" || rc=$?
else
  kill -TERM "$real" 2>/dev/null  # the unit tests failed: no need to wait for the real nodes
fi
real_rc=0
wait "$real" || real_rc=$?
trap - INT TERM
show_real
((rc == 0)) || exit "$rc"
exit "$real_rc"
