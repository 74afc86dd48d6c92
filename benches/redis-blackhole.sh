#!/usr/bin/env bash
# How long a cluster node takes to get back on Redis after its open connections to Redis
# die without closing (Redis's pod replaced behind a stable Service address, a partition,
# a NAT that forgot them): iptables drops the packets of the node's current connections
# only, so new connections pass, as they would to the replaced Redis.
#
#   sudo benches/redis-blackhole.sh [ROOMD_BIN]     # default: target/release/roomd
#
# Needs root and iptables (Debian: apt-get install iptables); everything is on 127.0.0.1:
# a Redis of its own on REDIS_PORT (26410), the node on HTTP_PORT (18190). Prints when
# /readyz failed and when it answered 200 again (gives up after 120 s). The rules it adds
# are removed at exit. Not part of ./scripts/test (root only); results:
# docs/bench-history-2026-12.md, "Redis connections that die without closing".
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/roomd}
RP=${REDIS_PORT:-26410}
HP=${HTTP_PORT:-18190}
command -v iptables >/dev/null || { echo "redis-blackhole: iptables is needed (and root)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "redis-blackhole: no roomd at $BIN (cargo build --release -p gateway)" >&2; exit 1; }
work=$(mktemp -d)
rules=()
cleanup() {
  for r in "${rules[@]}"; do iptables -D OUTPUT $r 2>/dev/null || true; done
  if [ -n "${node:-}" ]; then kill -9 "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; fi
  redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
redis-server --bind 127.0.0.1 --port "$RP" --save "" --appendonly no --daemonize yes >/dev/null
sleep 0.5
ROOMD__NODE__ID=bh1 ROOMD__REDIS__URL="redis://127.0.0.1:$RP/" ROOMD__REDIS__PREFIX="blackhole-$$" \
  ROOMD__AUTH__SECRET=blackhole-secret-0123456789abcdef ROOMD__HTTP__PORT="$HP" ROOMD__LOG__LEVEL=warn \
  "$BIN" >"$work/roomd.log" 2>&1 &
node=$!
ready() { [ "$(curl -s -m 3 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HP/readyz" || true)" = 200 ]; }
for _ in $(seq 1 100); do ready && break; sleep 0.1; done
ready || { echo "redis-blackhole: the node never got ready" >&2; cat "$work/roomd.log" >&2; exit 1; }
sleep 2
ports=$(ss -tnp | awk -v rp=":$RP" -v pid="pid=$node," '$5 ~ rp"$" && index($0, pid) {n = split($4, a, ":"); print a[n]}' | sort -u)
[ -n "$ports" ] || { echo "redis-blackhole: found no connection of the node to Redis" >&2; exit 1; }
echo "node $node ($BIN): connections to Redis from ports $(echo $ports)"
for p in $ports; do
  for r in "-p tcp -s 127.0.0.1 --sport $p -d 127.0.0.1 --dport $RP -j DROP" \
           "-p tcp -s 127.0.0.1 --sport $RP -d 127.0.0.1 --dport $p -j DROP"; do
    iptables -I OUTPUT $r
    rules+=("$r")
  done
done
t0=$(date +%s.%N); down=""; up=""
while :; do
  # The time a /readyz answer came (a failing one takes up to the Redis timeout, 2 s).
  if ready; then ok=1; else ok=0; fi
  el=$(echo "$(date +%s.%N) - $t0" | bc)
  if [ $ok = 1 ]; then
    if [ -n "$down" ]; then up=$el; break; fi
  elif [ -z "$down" ]; then
    down=$el
  fi
  (( $(echo "$el > 120" | bc) )) && break
  sleep 0.2
done
printf '/readyz failing %.1f s after the connections died; ready again at %s\n' "${down:-0}" \
  "$( [ -n "$up" ] && printf '%.1f s' "$up" || echo 'not within 120 s')"
echo "the node's log:"
sed 's/\x1b\[[0-9;]*m//g' "$work/roomd.log" | tail -8
