#!/bin/sh
# Stop the nodes start.sh started (by their pid files only): SIGTERM to all, then wait up to
# 15 s for them to exit. Run it from the repository root. The stores in ./data/nats-cluster
# stay, so start.sh brings the same cluster back.
set -eu

data=./data/nats-cluster
nodes="n1 n2 n3"

# A pid file names one of our nodes only while that process runs the node's conf (a pid
# left by a crashed node may have been reused by something else).
alive() {
  [ -f "$data/$1.pid" ] || return 1
  pid=$(cat "$data/$1.pid")
  kill -0 "$pid" 2>/dev/null || return 1
  if [ -r "/proc/$pid/cmdline" ]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$1.conf"
  fi
}

for n in $nodes; do
  if alive "$n"; then
    kill -TERM "$(cat "$data/$n.pid")"
  fi
done

tries=0
status=0
for n in $nodes; do
  [ -f "$data/$n.pid" ] || continue
  while alive "$n"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 150 ]; then
      echo "stop.sh: $n (pid $(cat "$data/$n.pid")) did not stop within 15 s" >&2
      status=1
      break
    fi
    sleep 0.1
  done
  if ! alive "$n"; then
    rm -f "$data/$n.pid"
    echo "$n stopped"
  fi
done
exit "$status"
