#!/usr/bin/env bash
# User-space instructions per applied action of a release roomd under a steady load,
# counted by valgrind's callgrind: close to the same figure run after run for the same
# binary and load, whatever else the machine is doing (unlike CPU time on a shared VM;
# Halli Galli varies by ~3 % on a single node and ~7 % on the cluster, as the timing of
# rings and batches does: repeat a run before reading a small change). Kernel work
# (the sockets' send and receive) is not counted: compare builds with it, and keep
# benches/run.sh for what a whole core delivers.
#
#   benches/callgrind.sh                          # tally, single node, 100 rooms, 100 actions/s
#   ROOMD_BIN=/tmp/roomd-old benches/callgrind.sh # another build
#   GAME=halli-galli benches/callgrind.sh
#   MODE=cluster benches/callgrind.sh             # node 1 of two cluster nodes on a private
#                                                 # redis-server; its count is doubled to
#                                                 # price an action on both nodes
#   MODE=cluster PEER_LINKS=0 benches/callgrind.sh # frames between the nodes through Redis
#                                                 # pub/sub instead of peer links
#   MODE=cluster DIRECT=1 benches/callgrind.sh    # the same with every player on its room's
#                                                 # owner (loadgen --direct): no hop between nodes
#   OUT=/tmp/cg benches/callgrind.sh              # keep the profile there, then:
#   callgrind_annotate --auto=no --inclusive=yes /tmp/cg/callgrind.out.1 | head -60
#
# Only 127.0.0.1; the ports below must be free. Needs valgrind (and redis-server for
# MODE=cluster). The load is low on purpose (valgrind runs the node ~50x slower), so
# every action is its own wake-up: batching across actions does not show here.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
MODE=${MODE:-single}
GAME=${GAME:-tally}
ROOMS=${ROOMS:-100}
INTERVAL_MS=${INTERVAL_MS:-4000}   # tally: each of the 4*ROOMS clients bumps this often (100 actions/s)
WINDOW_S=${WINDOW_S:-10}           # counted window, after RAMP_S of load
RAMP_S=${RAMP_S:-25}
PORT=${PORT:-19180}
PORT2=${PORT2:-19181}
REDIS_PORT=${REDIS_PORT:-19379}
OUT=${OUT:-$(mktemp -d)}

command -v valgrind >/dev/null || { echo "callgrind.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cargo build --release -p gateway --bin roomd -p benches --bin loadgen >&2
fi
ROOMD_BIN=${ROOMD_BIN:-$CARGO_TARGET_DIR/release/roomd}
LOADGEN=$CARGO_TARGET_DIR/release/loadgen
mkdir -p "$OUT"
rm -f "$OUT"/callgrind.out*

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

ENV=(ROOMD__HTTP__ADDR_RATE_PER_MIN=100000000 ROOMD__HTTP__ADDR_BURST=100000000 ROOMD__HTTP__ADDR_MAX_SOCKETS=1000000
     ROOMD__HTTP__MAX_CONNECTIONS=1000000 ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER=1000000
     ROOMD__AUTH__SECRET="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
     ROOMD__HTTP__BIND=127.0.0.1 ROOMD__LOG__LEVEL=warn ROOMD__HTTP__WORKERS=1)
URLS="http://127.0.0.1:$PORT"
if [[ $MODE == cluster ]]; then
  command -v redis-server >/dev/null || { echo "MODE=cluster needs redis-server" >&2; exit 1; }
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$OUT" \
    --logfile "$OUT/redis.log" &
  PIDS+=($!)
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  ENV+=(ROOMD__REDIS__URL="redis://127.0.0.1:$REDIS_PORT/" ROOMD__REDIS__PREFIX="cg$$")
  # Peer links between the two nodes, as benches/run.sh runs them (PEER_LINKS=0: pub/sub).
  if [[ ${PEER_LINKS:-1} == 0 ]]; then ENV+=(ROOMD__CLUSTER__PEER_LISTEN=off); else ENV+=(ROOMD__CLUSTER__PEER_LISTEN=127.0.0.1:0); fi
  env "${ENV[@]}" ROOMD__HTTP__PORT="$PORT2" ROOMD__NODE__ID=cg-2 ROOMD__NODE__PUBLIC_URL="http://127.0.0.1:$PORT2" \
    taskset -c 0 "$ROOMD_BIN" >"$OUT/roomd-2.log" 2>&1 &
  PIDS+=($!)
  URLS="$URLS,http://127.0.0.1:$PORT2"
else
  ENV+=(ROOMD__STORE__KIND=memory)
fi
env "${ENV[@]}" ROOMD__HTTP__PORT="$PORT" ROOMD__NODE__ID=cg-1 ROOMD__NODE__PUBLIC_URL="http://127.0.0.1:$PORT" \
  taskset -c 0 valgrind --tool=callgrind \
  --instr-atstart=no --callgrind-out-file="$OUT/callgrind.out" --compress-strings=no --compress-pos=no \
  "$ROOMD_BIN" >"$OUT/roomd-1.log" 2>&1 &
VALGRIND=$!
PIDS+=("$VALGRIND")
for url in ${URLS//,/ }; do
  for _ in $(seq 600); do curl -sf -o /dev/null "$url/healthz" && break; sleep 0.2; done
done
[[ $MODE == cluster ]] && sleep 3 # the nodes see each other

applied() { # actions applied so far, summed over the nodes
  local url
  for url in ${URLS//,/ }; do curl -s "$url/metrics"; done | awk '/^roomd_actions_applied_total/ { s += $2 } END { print s + 0 }'
}
DIRECT_ARG=()
[[ -n "${DIRECT:-}" ]] && DIRECT_ARG=(--direct)
taskset -c 1 "$LOADGEN" --url "$URLS" "${DIRECT_ARG[@]}" --game "$GAME" --rooms "$ROOMS" --interval-ms "$INTERVAL_MS" \
  --duration "$((WINDOW_S + RAMP_S + 5))s" --ramp-timeout 120s --quiet --json >"$OUT/loadgen.json" 2>"$OUT/loadgen.err" &
LOADGEN_PID=$!
PIDS+=("$LOADGEN_PID")
sleep "$RAMP_S"
before=$(applied)
callgrind_control -i on "$VALGRIND" >/dev/null 2>&1
sleep "$WINDOW_S"
callgrind_control -d "$VALGRIND" >/dev/null 2>&1
after=$(applied)
wait "$LOADGEN_PID" || { echo "loadgen failed: $(tail -3 "$OUT/loadgen.err")" >&2; exit 1; }
ir=$(callgrind_annotate "$OUT/callgrind.out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
actions=$((after - before))
[[ $actions -gt 0 && -n $ir ]] || { echo "nothing counted (actions $actions, Ir '$ir'); see $OUT" >&2; exit 1; }
per=$((ir / actions))
[[ $MODE == cluster ]] && per=$((2 * per))
echo "mode=$MODE${DIRECT:+ direct} game=$GAME actions=$actions instructions=$ir per_action=$per profile=$OUT/callgrind.out.1"
