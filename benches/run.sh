#!/usr/bin/env bash
# The standard load scenarios against a release roomd on this machine, 127.0.0.1 only.
#
#   benches/run.sh            # defaults below; override with the environment
#   DURATION=20 HG_ROOMS=4500 benches/run.sh
#   SKIP_BUILD=1 ROOMD_BIN=/path/to/roomd benches/run.sh   # measure a roomd built elsewhere
#   SCENARIOS="roomd-tally roomd-cluster-tally" benches/run.sh
#
# roomd-tally runs the embedded node on the in-memory store, roomd-tally-file the same
# load on the durable file store (a fresh data directory under a temp dir): the pair
# shows what durability costs.
# roomd-cluster-tally runs the tally load against two cluster nodes and a private
# redis-server (all on core 0), each room's players spread over both nodes; its CPU and
# RSS columns are the sum of the three processes.
#
# The server (roomd or limit_server) is pinned to core 0 and loadgen to core 1 with
# taskset. Every scenario starts a fresh server. Server CPU seconds (utime+stime) come
# from /proc/<pid>/stat and RSS from /proc/<pid>/status, both by loadgen (--server-pid,
# sampled when the measured window opens and closes) and here (whole-run totals).
# Prints one table and writes it to benches/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
DURATION=${DURATION:-15}           # measured window per scenario (s)
TALLY_ROOMS=${TALLY_ROOMS:-100}    # tally fan-out rooms (4 sockets each)
TALLY_INTERVAL_MS=${TALLY_INTERVAL_MS:-100}
HG_ROOMS=${HG_ROOMS:-1000}         # halli-galli rooms (4 sockets each)
HG_REACTION_MS=${HG_REACTION_MS:-250}
PORT=${PORT:-18080}
PORT2=${PORT2:-18081}
REDIS_PORT=${REDIS_PORT:-18379}
LIMIT_PORT=${LIMIT_PORT:-18090}
RAMP_TIMEOUT=${RAMP_TIMEOUT:-300}
OUT=${OUT:-benches/results.md}

ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 20000 2>/dev/null || true
echo "ulimit -n: $(ulimit -n)" >&2

if [[ -z "${SKIP_BUILD:-}" ]]; then
  cargo build --release -p gateway --bin roomd -p benches --bin loadgen --bin limit_server >&2
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

start_roomd() { # [file]: the embedded file store in a fresh $WORK directory; else in memory
  local kind=${1:-memory}
  ROOMD__HTTP__PORT=$PORT ROOMD__HTTP__BIND=127.0.0.1 ROOMD__LOG__LEVEL=warn \
    ROOMD__STORE__KIND=$kind ROOMD__STORE__PATH="$(mktemp -d -p "$WORK")" \
    taskset -c 0 "$ROOMD_BIN" >"$WORK/roomd.log" 2>&1 &
  SERVER_PID=$!
  wait_port "$PORT"
}
start_cluster() {
  command -v redis-server >/dev/null || { echo "roomd-cluster-tally needs redis-server" >&2; return 1; }
  taskset -c 0 redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  local redis=$!
  wait_port "$REDIS_PORT"
  local secret; secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local pids=$redis port id
  for id in 1 2; do
    port=$PORT; [[ $id == 2 ]] && port=$PORT2
    ROOMD__HTTP__PORT=$port ROOMD__HTTP__BIND=127.0.0.1 ROOMD__LOG__LEVEL=warn ROOMD__NODE__ID="bench-$id" \
      ROOMD__REDIS__URL="redis://127.0.0.1:$REDIS_PORT/" ROOMD__REDIS__PREFIX="bench$$" ROOMD__AUTH__SECRET="$secret" \
      taskset -c 0 "$ROOMD_BIN" >"$WORK/roomd-$id.log" 2>&1 &
    pids="$pids,$!"
  done
  SERVER_PID=$pids
  wait_port "$PORT"; wait_port "$PORT2"
  sleep 2 # both nodes see each other (membership heartbeats)
}
start_limit() {
  taskset -c 0 "$BIN/limit_server" "$LIMIT_PORT" >"$WORK/limit.log" 2>&1 &
  SERVER_PID=$!
  wait_port "$LIMIT_PORT"
}

ROWS=()
# scenario NAME LOADGEN-ARGS…: runs loadgen on core 1 against the running server.
scenario() {
  local name=$1; shift
  local cpu0; cpu0=$(cpu_s "$SERVER_PID")
  local limit=$((DURATION + RAMP_TIMEOUT + 60))
  echo "== $name: loadgen $*" >&2
  timeout "$limit" taskset -c 1 "$BIN/loadgen" --duration "$DURATION" --ramp-timeout "$RAMP_TIMEOUT" \
    --server-pid "$SERVER_PID" --json "$@" >"$WORK/$name.json"
  local cpu1; cpu1=$(cpu_s "$SERVER_PID")
  local peak; peak=$(rss_kb "$SERVER_PID")
  jq -r --arg name "$name" --arg total "$(echo "$cpu1 - $cpu0" | bc -l)" --arg peak "$peak" '
    def r(n): if n == null then "–" else (n * 10 | round / 10 | tostring) end;
    "| \($name) | \(.connectedClients) | \(r(.actionsPerS)) | \(r(.updatesPerS)) | \(r(.latency.p50Ms)) / \(r(.latency.p99Ms)) / \(r(.latency.p999Ms)) / \(r(.latency.maxMs)) | \(r(.serverCpuS)) (\($total | tonumber | . * 10 | round / 10)) | \(r(.deliveriesPerCpuS)) | \(r(.playersPerCore)) | \(r(.kbPerRoom)) / \(r(.kbPerConnection)) | \(($peak | tonumber) / 1024 | round) | \(r(.loadgenCpuS)) | \(r(.serverRunqueueWaitS)) / \(r(.loadgenRunqueueWaitS)) | \([.rejects | to_entries[] | "\(.key)=\(.value)"] | join(" ")) | \(.errors) |"
  ' "$WORK/$name.json" | tee -a "$WORK/rows" >&2
  cleanup; SERVER_PID=""
}

SCENARIOS=${SCENARIOS:-limit-tally roomd-tally roomd-tally-file roomd-cluster-tally roomd-halli-galli}
want() { [[ " $SCENARIOS " == *" $1 "* ]]; }
touch "$WORK/rows"
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
scenario roomd-cluster-tally --url "http://127.0.0.1:$PORT,http://127.0.0.1:$PORT2" --game tally --rooms "$TALLY_ROOMS" --interval-ms "$TALLY_INTERVAL_MS"
fi
if want roomd-halli-galli; then
start_roomd
scenario roomd-halli-galli --url "http://127.0.0.1:$PORT" --game halli-galli --rooms "$HG_ROOMS" --reaction-ms "$HG_REACTION_MS" --concurrency 64
fi

limit_dps=$(jq '.deliveriesPerCpuS // 0' "$WORK/limit-tally.json" 2>/dev/null || echo 0)
roomd_dps=$(jq '.deliveriesPerCpuS // 0' "$WORK/roomd-tally.json" 2>/dev/null || echo 0)
ratio=$(echo "if ($limit_dps > 0) $roomd_dps / $limit_dps * 100 else 0" | bc -l)

{
  echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); server on core 0, loadgen on core 1; window ${DURATION} s."
  echo
  echo "| scenario | clients | actions/s | updates/s | latency p50 / p99 / p99.9 / max (ms) | server CPU-s window (whole run) | deliveries / CPU-s | players / core | KiB per room / per conn | peak RSS MiB | loadgen CPU-s window | run-queue wait s server / loadgen | rejects | errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  cat "$WORK/rows"
  echo
  printf 'roomd tally fan-out: %.0f%% of the limit server'"'"'s deliveries per CPU-second (target ≥ 70%%).\n' "$ratio"
  if [[ -f "$WORK/roomd-tally-file.json" && -f "$WORK/roomd-tally.json" ]]; then
    file_dps=$(jq '.deliveriesPerCpuS // 0' "$WORK/roomd-tally-file.json")
    printf 'durability: the file store delivers %.0f%% of the memory store'"'"'s deliveries per CPU-second; tally p99 %.1f ms (file) vs %.1f ms (memory).\n' \
      "$(echo "if ($roomd_dps > 0) $file_dps / $roomd_dps * 100 else 0" | bc -l)" \
      "$(jq '.latency.p99Ms' "$WORK/roomd-tally-file.json")" "$(jq '.latency.p99Ms' "$WORK/roomd-tally.json")"
  fi
  if [[ -f "$WORK/roomd-cluster-tally.json" && -f "$WORK/roomd-tally.json" ]]; then
    single=$(jq '.latency.p99Ms' "$WORK/roomd-tally.json"); cluster=$(jq '.latency.p99Ms' "$WORK/roomd-cluster-tally.json")
    printf 'cluster (2 nodes + Redis) tally p99 %.1f ms = %.2f× the single node'"'"'s %.1f ms at the same offered load (target ≤ 1.5×).\n' \
      "$cluster" "$(echo "if ($single > 0) $cluster / $single else 0" | bc -l)" "$single"
  fi
} | tee "$OUT"
