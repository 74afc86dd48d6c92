#!/usr/bin/env bash
# Memory soak: a fresh release roomd on a free loopback port, pinned to core 0, and the
# soak client on core 1; prints the soak's table and exits with its code (0 flat, 1 RSS
# grows faster than the limit, 2 too many failed cycles, 3 could not run).
#
#   benches/soak.sh                                  # 10,000 cycles, embedded file store
#   ROOMD_ENV=ROOMD__STORE__KIND=memory benches/soak.sh  # the in-memory store
#   benches/soak.sh --cycles 20000 --concurrency 64  # arguments go to the soak binary
#   REDIS_URL=redis://127.0.0.1:6393/ benches/soak.sh    # cluster mode (your own Redis)
#   SKIP_BUILD=1 ROOMD_BIN=/path/to/roomd benches/soak.sh
#
# ROOMD_ENV adds settings, e.g. ROOMD_ENV="ROOMD__ROOMS__SNAPSHOT_EVERY=32". All the load
# comes from 127.0.0.1, so roomd's per-address limits and connection cap are lifted.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cargo build --release --locked -p gateway --bin roomd -p benches --bin soak >&2
fi
BIN=$CARGO_TARGET_DIR/release
ROOMD_BIN=${ROOMD_BIN:-$BIN/roomd}
WORK=$(mktemp -d)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID"
    for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

# Every soak client comes from 127.0.0.1: the per-address limits and the socket cap are
# raised; a secret of our own so the embedded node writes no data directory in the tree.
cluster=(ROOMD__HTTP__ADDR_RATE_PER_MIN=100000000 ROOMD__HTTP__ADDR_BURST=100000000 ROOMD__HTTP__ADDR_MAX_SOCKETS=1000000
         ROOMD__HTTP__MAX_CONNECTIONS=1000000 ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER=1000000
         ROOMD__AUTH__SECRET="soak-secret-$$-$RANDOM$RANDOM$RANDOM" ROOMD__STORE__PATH="$WORK/data")
if [[ -n "${REDIS_URL:-}" ]]; then
  cluster+=(ROOMD__REDIS__URL="$REDIS_URL" ROOMD__REDIS__PREFIX="soak$$")
fi
# shellcheck disable=SC2086
# The embedded node's data directory is a fresh one under $WORK (never the repo).
env ROOMD__HTTP__ADDR_RATE_PER_MIN=1000000 ROOMD__HTTP__ADDR_BURST=1000000 ROOMD__HTTP__ADDR_MAX_SOCKETS=1000000 \
  ROOMD__HTTP__MAX_CONNECTIONS=100000 \
  ROOMD__HTTP__BIND=127.0.0.1 ROOMD__HTTP__PORT=0 ROOMD__LOG__LEVEL=warn ROOMD__LOG__FORMAT=json \
  ROOMD__STORE__PATH="$WORK/data" "${cluster[@]}" ${ROOMD_ENV:-} taskset -c 0 "$ROOMD_BIN" >"$WORK/roomd.log" 2>&1 &
SERVER_PID=$!
URL=""
for _ in $(seq 300); do
  URL=$(sed -n 's/^roomd listening on \(http:[^ ]*\).*/\1/p' "$WORK/roomd.log")
  [[ -n "$URL" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/roomd.log" >&2; exit 3; }
  sleep 0.1
done
[[ -n "$URL" ]] || { echo "roomd did not come up" >&2; exit 3; }
echo "roomd pid $SERVER_PID at $URL (log $WORK/roomd.log)" >&2

set +e
taskset -c 1 "$BIN/soak" --url "$URL" --pid "$SERVER_PID" "$@"
code=$?
set -e
# JSON log lines (warn and up) by message: e.g. "log append failed" during the run.
echo "roomd log ($WORK/roomd.log), warnings and errors by message:" >&2
{ grep -o '"level":"[A-Z]*","message":"[^"]*"' "$WORK/roomd.log" || true; } | sort | uniq -c | sort -rn >&2
exit "$code"
