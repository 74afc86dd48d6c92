#!/usr/bin/env bash
# The standard load scenarios against a release roomd on this machine, 127.0.0.1 only.
#
#   benches/run.sh            # defaults below; override with the environment
#   DURATION=20 HG_ROOMS=4500 benches/run.sh
#   SKIP_BUILD=1 ROOMD_BIN=/path/to/roomd benches/run.sh   # measure a roomd built elsewhere
#   SCENARIOS="roomd-tally roomd-cluster-tally" benches/run.sh
#   SCENARIOS="roomd-cockroach-poker" CP_ROOMS=500 benches/run.sh   # not in the default set
#   THRESHOLDS="p99<50ms errors<0.1%" benches/run.sh      # exit 99 at the end if one failed
#   NOTE="other builds were running" benches/run.sh       # a line under the table's header
#
# roomd-tally runs the embedded node on the in-memory store, roomd-tally-file the same
# load on the durable file store (a fresh data directory under a temp dir): the pair
# shows what durability costs. roomd-halli-galli-file (not in the default set) is the
# same for the Halli Galli load.
# roomd-cluster-tally runs the tally load against two cluster nodes and a private
# redis-server (all on core 0), each room's players spread over both nodes; its CPU and
# RSS columns are the sum of the three processes; loadgen reads Redis's INFO commandstats
# and INFO cpu as the window opens and closes (--redis-stats), and the results name
# Redis's commands and CPU per acknowledged action (the cluster's command budget).
# roomd-cluster-tally-rc is the same load with the two nodes on a Redis Cluster of three
# masters (ROOMD__REDIS__CLUSTER_URLS, sharded pub/sub), its three processes on core 0 too.
# roomd-cluster-halli-galli is the Halli Galli load on the same two nodes and Redis.
# Their Redis keeps nothing on disk unless REDIS_FSYNC=always (an append-only file fsynced
# after every write: durable as the file store is) or REDIS_FSYNC=everysec.
# The cluster nodes take peer links (ROOMD__CLUSTER__PEER_LISTEN=127.0.0.1:0): frames
# between them go node to node, Redis keeps the logs, leases and membership. PEER_LINKS=0
# runs them without links, every frame through Redis pub/sub (what roomd did before).
# roomd-cluster-tally-direct is roomd-cluster-tally with loadgen --direct: every player
# connects to its room's owner (`nodeUrl` in room info; each bench node's
# ROOMD__NODE__PUBLIC_URL is its own address), so no action or frame crosses the bus;
# roomd-cluster-halli-galli-direct (not in the default set) is the same for Halli Galli.
# roomd-cluster-tally-one-node (not in the default set) is the tally load on one cluster
# node and its Redis: every room is local, so it prices the Redis store and the leases
# without any cross-node hop (the floor of a path that sends clients to the owner).
# roomd-cluster-halli-galli-one-node (not in the default set) is the same for Halli Galli.
# roomd-tally-pair and roomd-halli-galli-pair (not in the default set) split the load
# over two embedded nodes (in-memory store, no Redis) on core 0, each room whole on one
# of them (loadgen --whole-rooms): what two processes sharing a core cost before any Redis,
# so a cluster's extra CPU splits into the split itself, the store and the hops.
#
# The server (roomd or limit_server) is pinned to core 0 and loadgen to core 1 with
# taskset. Every scenario starts a fresh server. Server CPU seconds (utime+stime) come
# from /proc/<pid>/stat and RSS from /proc/<pid>/status, both by loadgen (--server-pid,
# sampled every second and when the measured window opens and closes) and here
# (whole-run totals).
#
# Every scenario writes its loadgen report to $REPORTS/NAME.json and NAME.html (the HTML
# has the plots) and NAME.run.json (whole-run CPU, peak RSS); loadgen_results then
# generates the summary table from those JSONs into $OUT (benches/results.md: generated,
# never edited by hand). The reports stay local (benches/reports/ is in .gitignore): the
# table is what gets committed.
#
# Every roomd started here raises the per-address limits and the connection cap: all the
# load comes from 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
DURATION=${DURATION:-15}           # measured window per scenario (s)
TALLY_ROOMS=${TALLY_ROOMS:-100}    # tally fan-out rooms (4 sockets each)
TALLY_INTERVAL_MS=${TALLY_INTERVAL_MS:-100}
HG_ROOMS=${HG_ROOMS:-1000}         # halli-galli rooms (4 sockets each)
HG_REACTION_MS=${HG_REACTION_MS:-250}
CP_ROOMS=${CP_ROOMS:-250}          # cockroach-poker rooms (4 sockets each; not in the default set)
PORT=${PORT:-18080}
PORT2=${PORT2:-18081}
REDIS_PORT=${REDIS_PORT:-18379}
LIMIT_PORT=${LIMIT_PORT:-18090}
RAMP_TIMEOUT=${RAMP_TIMEOUT:-300}
OUT=${OUT:-benches/results.md}
REPORTS=${REPORTS:-benches/reports}
THRESHOLDS=${THRESHOLDS:-}
NOTE=${NOTE:-}
case ${REDIS_FSYNC:-} in
  ""|always|everysec) ;;
  *) echo "REDIS_FSYNC=$REDIS_FSYNC: use always or everysec (or leave it unset: Redis keeps nothing on disk)" >&2; exit 2 ;;
esac
# One address sends all the load: lift roomd's per-address limits and its connection cap.

ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 20000 2>/dev/null || true
echo "ulimit -n: $(ulimit -n)" >&2

if [[ -z "${SKIP_BUILD:-}" ]]; then
  cargo build --release -p gateway --bin roomd -p benches --bin loadgen --bin loadgen_results --bin limit_server >&2
fi
BIN=$CARGO_TARGET_DIR/release
ROOMD_BIN=${ROOMD_BIN:-$BIN/roomd}   # another roomd build to measure (e.g. a release of a commit)
WORK=$(mktemp -d)
SERVER_PID=""   # one pid, or a comma-separated list (cluster)
cleanup() {
  local pid
  for pid in ${SERVER_PID//,/ }; do
    if kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
  done
}
trap cleanup EXIT

cpu_s() { # utime+stime in seconds, summed over the comma-separated pids in $1
  local pid total=0
  for pid in ${1//,/ }; do
    total=$(echo "$total + $(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$pid/stat")" | bc -l)
  done
  echo "$total"
}
rss_kb() { # peak RSS (VmHWM), summed over the pids in $1
  local pid total=0
  for pid in ${1//,/ }; do total=$((total + $(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status"))); done
  echo "$total"
}

wait_port() { # wait until http://127.0.0.1:$1 accepts connections (30 s at most)
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "server on port $1 did not come up" >&2; return 1
}

# Every load client comes from 127.0.0.1: the per-address limits (guest sessions, rooms,
# WebSocket upgrades) and the node's socket cap are raised far above the run's needs. A
# secret of our own; the data directory is a fresh one under $WORK (never the repo).
LOAD_ENV=(ROOMD__HTTP__ADDR_RATE_PER_MIN=100000000 ROOMD__HTTP__ADDR_BURST=100000000 ROOMD__HTTP__ADDR_MAX_SOCKETS=1000000
          ROOMD__HTTP__MAX_CONNECTIONS=1000000 ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER=1000000)
# spawn_embedded PORT KIND: an embedded node on core 0 (KIND: memory or file, the file
# store in a fresh $WORK directory) with a secret of its own; its pid in LAST_PID.
spawn_embedded() {
  env "${LOAD_ENV[@]}" ROOMD__AUTH__SECRET="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
    ROOMD__HTTP__PORT="$1" ROOMD__HTTP__BIND=127.0.0.1 ROOMD__LOG__LEVEL=warn \
    ROOMD__STORE__KIND="$2" ROOMD__STORE__PATH="$(mktemp -d -p "$WORK")" \
    taskset -c 0 "$ROOMD_BIN" >"$WORK/roomd-$1.log" 2>&1 &
  LAST_PID=$!
}
start_roomd() { # [file]: the embedded file store in a fresh $WORK directory; else in memory
  spawn_embedded "$PORT" "${1:-memory}"
  SERVER_PID=$LAST_PID
  wait_port "$PORT"
}
# start_pair: two embedded nodes (in-memory store) on core 0, sharing nothing.
start_pair() {
  spawn_embedded "$PORT" memory; SERVER_PID=$LAST_PID
  spawn_embedded "$PORT2" memory; SERVER_PID="$SERVER_PID,$LAST_PID"
  wait_port "$PORT"; wait_port "$PORT2"
}
start_cluster() { # [COUNT]: nodes (2)
  command -v redis-server >/dev/null || { echo "roomd-cluster-tally needs redis-server" >&2; return 1; }
  # REDIS_FSYNC=always|everysec: Redis keeps an append-only file in $WORK, fsynced after
  # every write (always: as durable as the file store's fsync per batch) or once a second;
  # unset, it keeps nothing on disk.
  local persist=(--appendonly no)
  [[ -n ${REDIS_FSYNC:-} ]] && persist=(--appendonly yes --appendfsync "$REDIS_FSYNC")
  taskset -c 0 redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" "${persist[@]}" \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  local redis=$!
  wait_port "$REDIS_PORT"
  start_nodes "$redis" ROOMD__REDIS__URL="redis://127.0.0.1:$REDIS_PORT/" "${1:-2}"
}
# start_nodes PIDS SETTING=VALUE [COUNT]: the bench nodes (two, or COUNT) on core 0 with
# that Redis setting; SERVER_PID = PIDS (the Redis processes) and the nodes'.
start_nodes() {
  local pids=$1 redis_setting=$2 count=${3:-2}
  local secret; secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local port id peer=127.0.0.1:0
  # PEER_LINKS=0: frames between the nodes go through Redis pub/sub (no peer links).
  [[ ${PEER_LINKS:-1} == 0 ]] && peer=off
  for id in $(seq "$count"); do
    port=$PORT; [[ $id == 2 ]] && port=$PORT2
    env "${LOAD_ENV[@]}" ROOMD__HTTP__PORT="$port" ROOMD__HTTP__BIND=127.0.0.1 ROOMD__LOG__LEVEL=warn ROOMD__NODE__ID="bench-$id" \
      ROOMD__NODE__PUBLIC_URL="http://127.0.0.1:$port" "$redis_setting" ROOMD__REDIS__PREFIX="bench$$" ROOMD__AUTH__SECRET="$secret" \
      ROOMD__CLUSTER__PEER_LISTEN="$peer" \
      taskset -c 0 "$ROOMD_BIN" >"$WORK/roomd-$id.log" 2>&1 &
    pids="$pids,$!"
  done
  SERVER_PID=$pids
  wait_port "$PORT"; [[ $count == 1 ]] || wait_port "$PORT2"
  sleep 2 # the nodes see each other (membership heartbeats)
}
# The same two nodes on a Redis Cluster of 3 masters (no replicas; all on core 0):
# REDIS_STATS names its three processes.
start_redis_cluster() {
  command -v redis-server >/dev/null || { echo "roomd-cluster-tally-rc needs redis-server" >&2; return 1; }
  local pids="" seeds="" p
  for p in "$REDIS_PORT" $((REDIS_PORT + 1)) $((REDIS_PORT + 2)); do
    mkdir -p "$WORK/rc-$p"
    taskset -c 0 redis-server --bind 127.0.0.1 --port "$p" --save "" --appendonly no --cluster-enabled yes \
      --cluster-config-file nodes.conf --dir "$WORK/rc-$p" --logfile "$WORK/rc-$p/redis.log" &
    pids="$pids${pids:+,}$!"
    seeds="$seeds${seeds:+,}redis://127.0.0.1:$p/"
    wait_port "$p"
  done
  redis-cli --cluster create "127.0.0.1:$REDIS_PORT" "127.0.0.1:$((REDIS_PORT + 1))" "127.0.0.1:$((REDIS_PORT + 2))" \
    --cluster-yes >"$WORK/rc-create.log" 2>&1
  until redis-cli -p "$REDIS_PORT" cluster info | grep -q cluster_state:ok; do sleep 0.2; done
  REDIS_STATS=$seeds
  start_nodes "$pids" ROOMD__REDIS__CLUSTER_URLS="$seeds"
}
start_limit() {
  taskset -c 0 "$BIN/limit_server" "$LIMIT_PORT" >"$WORK/limit.log" 2>&1 &
  SERVER_PID=$!
  wait_port "$LIMIT_PORT"
}

mkdir -p "$REPORTS"
RAN=()
FAILED=()
threshold_args=()
for t in $THRESHOLDS; do threshold_args+=(--threshold "$t"); done
# scenario NAME LOADGEN-ARGS…: runs loadgen on core 1 against the running server.
scenario() {
  local name=$1; shift
  local cpu0; cpu0=$(cpu_s "$SERVER_PID")
  local limit=$((DURATION + RAMP_TIMEOUT + 60))
  echo "== $name: loadgen $*" >&2
  local code=0
  timeout "$limit" taskset -c 1 "$BIN/loadgen" --duration "$DURATION" --ramp-timeout "$RAMP_TIMEOUT" \
    --server-pid "$SERVER_PID" --quiet --json --report "$REPORTS/$name.html" "${threshold_args[@]}" "$@" \
    >"$REPORTS/$name.json" || code=$?
  if [[ $code == 99 ]]; then FAILED+=("$name"); elif [[ $code != 0 ]]; then echo "loadgen failed ($code)" >&2; exit "$code"; fi
  local cpu1; cpu1=$(cpu_s "$SERVER_PID")
  printf '{"wholeRunCpuS": %s, "peakRssKb": %s}\n' "$(echo "$cpu1 - $cpu0" | bc -l | sed 's/^\./0./')" "$(rss_kb "$SERVER_PID")" \
    >"$REPORTS/$name.run.json"
  jq -r '"\(.actionsPerS | round)/s acked, p99 \(.latency.p99Ms) ms, errors \(.errors)"' "$REPORTS/$name.json" >&2
  RAN+=("$REPORTS/$name.json")
  cleanup; SERVER_PID=""
}

SCENARIOS=${SCENARIOS:-limit-tally roomd-tally roomd-tally-file roomd-cluster-tally roomd-cluster-tally-direct roomd-cluster-tally-rc roomd-halli-galli roomd-cluster-halli-galli}
want() { [[ " $SCENARIOS " == *" $1 "* ]]; }
if want limit-tally; then
start_limit
scenario limit-tally --limit --url "http://127.0.0.1:$LIMIT_PORT" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS"
fi
if want roomd-tally; then
start_roomd
scenario roomd-tally --url "http://127.0.0.1:$PORT" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS"
fi
if want roomd-tally-file; then
start_roomd file
scenario roomd-tally-file --url "http://127.0.0.1:$PORT" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS"
fi
if want roomd-cluster-tally; then
start_cluster
scenario roomd-cluster-tally --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS" \
  --redis-stats "redis://127.0.0.1:$REDIS_PORT/"
fi
if want roomd-cluster-tally-direct; then
start_cluster
scenario roomd-cluster-tally-direct --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS" \
  --redis-stats "redis://127.0.0.1:$REDIS_PORT/" --direct
fi
if want roomd-cluster-tally-one-node; then
start_cluster 1
scenario roomd-cluster-tally-one-node --url "http://127.0.0.1:$PORT" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS" \
  --redis-stats "redis://127.0.0.1:$REDIS_PORT/"
fi
if want roomd-tally-pair; then
start_pair
scenario roomd-tally-pair --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS" --whole-rooms
fi
if want roomd-cluster-tally-rc; then
start_redis_cluster
scenario roomd-cluster-tally-rc --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS" \
  --redis-stats "$REDIS_STATS"
fi
if want roomd-halli-galli; then
start_roomd
scenario roomd-halli-galli --url "http://127.0.0.1:$PORT" --game halli-galli --rooms "$HG_ROOMS" --reaction-ms "$HG_REACTION_MS" --concurrency 64
fi
if want roomd-halli-galli-file; then
start_roomd file
scenario roomd-halli-galli-file --url "http://127.0.0.1:$PORT" --game halli-galli --rooms "$HG_ROOMS" --reaction-ms "$HG_REACTION_MS" --concurrency 64
fi
if want roomd-cluster-halli-galli; then
start_cluster
scenario roomd-cluster-halli-galli --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game halli-galli --rooms "$HG_ROOMS" \
  --reaction-ms "$HG_REACTION_MS" --concurrency 64 --redis-stats "redis://127.0.0.1:$REDIS_PORT/"
fi
if want roomd-halli-galli-pair; then
start_pair
scenario roomd-halli-galli-pair --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game halli-galli --rooms "$HG_ROOMS" \
  --reaction-ms "$HG_REACTION_MS" --concurrency 64 --whole-rooms
fi
if want roomd-cluster-halli-galli-one-node; then
start_cluster 1
scenario roomd-cluster-halli-galli-one-node --url "http://127.0.0.1:$PORT" --game halli-galli --rooms "$HG_ROOMS" \
  --reaction-ms "$HG_REACTION_MS" --concurrency 64 --redis-stats "redis://127.0.0.1:$REDIS_PORT/"
fi
if want roomd-cluster-halli-galli-direct; then
start_cluster
scenario roomd-cluster-halli-galli-direct --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game halli-galli --rooms "$HG_ROOMS" \
  --reaction-ms "$HG_REACTION_MS" --concurrency 64 --redis-stats "redis://127.0.0.1:$REDIS_PORT/" --direct
fi
if want roomd-cockroach-poker; then
start_roomd
scenario roomd-cockroach-poker --url "http://127.0.0.1:$PORT" --game cockroach-poker --rooms "$CP_ROOMS" --reaction-ms "$HG_REACTION_MS" --concurrency 64
fi

[[ ${#RAN[@]} -gt 0 ]] || { echo "no scenario ran (SCENARIOS=$SCENARIOS)" >&2; exit 1; }
"$BIN/loadgen_results" --out "$OUT" --note "$NOTE" "${RAN[@]}"
cat "$OUT"
# benches/README.md shows the same generated table between its results markers.
README=benches/README.md
if [[ "$OUT" == benches/results.md ]] && grep -q '<!-- results:begin -->' "$README"; then
  awk -v f="$OUT" 'BEGIN { while ((getline l < f) > 0) body = body l "\n" }
    /<!-- results:begin -->/ { print; printf "%s", body; skip = 1; next }
    /<!-- results:end -->/ { skip = 0 }
    !skip' "$README" >"$WORK/README.md" && cp "$WORK/README.md" "$README"
fi
if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "thresholds failed in: ${FAILED[*]} (see $REPORTS/NAME.html)" >&2
  exit 99
fi
