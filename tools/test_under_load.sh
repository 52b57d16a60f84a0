#!/bin/sh
# The loaded-machine check: the whole suite while CPU-bound processes run beside it, several times in a row (a test
# whose timing bound only holds on an idle machine fails here, as it would on a busy 2-core CI runner).
#
#   sh tools/test_under_load.sh [BUSY] [ROUNDS]     default: 2 busy loops, 3 rounds of `make test`
#
# Exit 0 only when every round passed; each round's result is printed. The busy loops are this script's children
# and end with it (also on Ctrl-C).
set -u
busy=${1:-2}
rounds=${2:-3}
pids=""
stop() { [ -n "$pids" ] && kill $pids 2>/dev/null; }
trap stop EXIT INT TERM
i=0
while [ "$i" -lt "$busy" ]; do
  sh -c 'while :; do :; done' &
  pids="$pids $!"
  i=$((i + 1))
done
sleep 1  # each loop is running its own shell now (a signal before its exec would reach this script's trap)
echo "test_under_load: $busy busy loops (pids$pids), $rounds rounds of make test" >&2
failed=0
r=1
while [ "$r" -le "$rounds" ]; do
  if make test; then
    echo "test_under_load: round $r of $rounds passed" >&2
  else
    echo "test_under_load: round $r of $rounds FAILED" >&2
    failed=1
  fi
  r=$((r + 1))
done
exit $failed
