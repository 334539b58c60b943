#!/usr/bin/env bash
# A slow optional sink must not slow the others. PostgreSQL → Kafka
# (at-least-once) drains one backlog of 1,000,000 rows (100 transactions
# of 10,000) twice: alone, and beside an optional HTTP sink whose receiver
# takes 500 ms per request. Prints Kafka's rows/s in both runs, their
# ratio (the target is at least 0.8), the pg_recvlogical ceiling of the
# same backlog, peak RSS, and what the HTTP sink held when Kafka was done.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS_PER_TX=10000
TX_COUNT=100
TOTAL=$((ROWS_PER_TX * TX_COUNT))

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

fresh_pg_db bench_isolation
psql_db -d bench_isolation <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE TABLE bench_done (id int PRIMARY KEY);
CREATE PUBLICATION sluice_bench_isolation FOR TABLE orders, bench_done;
SELECT 'slot' FROM pg_create_logical_replication_slot('ceiling', 'pgoutput');
SELECT 'slot' FROM pg_create_logical_replication_slot('alone', 'pgoutput');
SELECT 'slot' FROM pg_create_logical_replication_slot('beside', 'pgoutput');
SQL
load_orders bench_isolation
ceiling_secs=$(recvlogical_ceiling bench_isolation ceiling sluice_bench_isolation)

# The slow webhook: 500 ms per request, any number at once.
cat > "$work/slow.py" <<'PY'
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Slow(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(0.5)
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
        with open(sys.argv[2], "a") as out: out.write("1\n")
    def log_message(self, *args): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Slow).serve_forever()
PY
hook_port=$(awk 'BEGIN { srand(); print 40000 + int(rand() * 20000) }')
python3 "$work/slow.py" "$hook_port" "$work/hook-requests" &
hook_pid=$!
trap 'kill $hook_pid 2>/dev/null || true; cleanup' EXIT
until (exec 3<>"/dev/tcp/127.0.0.1/$hook_port") 2>/dev/null; do sleep 0.05; done

kafka_done() { grep -q 'checkpoint stored.*::sink::k.*position=pg:[0-9A-F]*/[0-9A-F]*:0$' "$work/sluice.log"; }
pipeline() {
  cat <<YAML
pipelines:
  - name: iso-$1-$run_id
    source:
      type: postgres
      config: { id: iso-$1-$run_id, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_isolation, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: $1, publication: sluice_bench_isolation, create_slot: false, create_publication: false }
    sinks:
      - type: kafka
        config: { id: k, brokers: "$SLUICE_TEST_KAFKA_BROKERS", topic: "bench-iso-$1-$run_id" }
YAML
}
pipeline alone > "$work/alone.yaml"
echo "sluice: postgres -> kafka alone" >&2
read -r alone_secs alone_peak < <(measure "$work/alone.yaml" kafka_done)
pipeline beside > "$work/beside.yaml"
cat >> "$work/beside.yaml" <<YAML
      - type: http
        config: { id: slow, url: "http://127.0.0.1:$hook_port/hook", required: false, timeout_secs: 10 }
YAML
echo "sluice: postgres -> kafka beside a 500 ms webhook" >&2
: > "$work/hook-requests"
read -r beside_secs beside_peak < <(measure "$work/beside.yaml" kafka_done)
requests=$(wc -l < "$work/hook-requests")

printf '%-46s %12s %10s %12s\n' "run" "rows/s" "seconds" "peak RSS MB"
printf '%-46s %12.0f %10.2f %12s\n' "pg_recvlogical -> /dev/null (ceiling)" "$(calc "$TOTAL / $ceiling_secs")" "$ceiling_secs" "-"
printf '%-46s %12.0f %10.2f %12.1f\n' "postgres -> kafka alone" "$(calc "$TOTAL / $alone_secs")" "$alone_secs" "$(calc "$alone_peak / 1024")"
printf '%-46s %12.0f %10.2f %12.1f\n' "postgres -> kafka beside a 500 ms webhook" "$(calc "$TOTAL / $beside_secs")" "$beside_secs" "$(calc "$beside_peak / 1024")"
printf 'kafka beside / alone: %.2f (target >= 0.80)\n' "$(calc "$alone_secs / $beside_secs")"
printf 'webhook requests answered meanwhile: %d (100 events each)\n' "$requests"
