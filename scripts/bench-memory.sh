#!/usr/bin/env bash
# Peak RSS through one large transaction fanned out to four sinks.
#
# Commits one PostgreSQL transaction of ROWS rows (default 300,000), then
# a one-row transaction that marks the end, and runs `sluice run` with the
# file sink, Kafka exactly-once (transactions), Redis Streams and NATS
# JetStream until every sink's checkpoint is at the marker. Prints the
# time, the rate and Sluice's peak RSS, three rounds (each on its own
# slot of the same WAL) and the median of each column.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS=${ROWS:-300000}

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

fresh_pg_db bench_mem
psql_db -d bench_mem >/dev/null <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE TABLE bench_done (id int PRIMARY KEY);
CREATE PUBLICATION sluice_mem FOR TABLE orders, bench_done;
SELECT pg_create_logical_replication_slot('mem_' || n, 'pgoutput') FROM generate_series(1, 3) n;
SQL
echo "loading one transaction of $ROWS rows" >&2
psql_db -d bench_mem -c "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series(1, $ROWS) g"
psql_db -d bench_mem -c "INSERT INTO bench_done VALUES (1)"

# Done when all four sinks stored a checkpoint at the marker (sequence 0 of
# the last transaction; the large one ends at a higher sequence).
all_done() { [ "$(grep -c 'checkpoint stored.*position=pg:[0-9A-F]*/[0-9A-F]*:0$' "$work/sluice.log")" -ge 4 ]; }
printf '%-8s %10s %10s %12s\n' "round" "rows/s" "seconds" "peak RSS MB"
rounds=()
for round in 1 2 3; do
  name="mem$round-$run_id"
  cat > "$work/mem.yaml" <<YAML
pipelines:
  - name: $name
    source:
      type: postgres
      config: { id: $name, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_mem, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: mem_$round, publication: sluice_mem, create_slot: false, create_publication: false }
    sinks:
      - type: file
        config: { id: file, path: $work/$name.jsonl }
      - type: kafka
        config: { id: kafka, brokers: "$SLUICE_TEST_KAFKA_BROKERS", topic: "$name", exactly_once: true }
      - type: redis
        config: { id: redis, url: "$SLUICE_TEST_REDIS_URL", stream: "$name" }
      - type: nats
        config: { id: nats, url: "$SLUICE_TEST_NATS_URL", stream: "MEM$round$run_id", subject: "$name.rows" }
YAML
  read -r secs peak < <(measure "$work/mem.yaml" all_done)
  lines=$(wc -l < "$work/$name.jsonl")
  [ "$lines" -eq "$((ROWS + 1))" ] || { echo "the file sink holds $lines events, not $((ROWS + 1))" >&2; exit 1; }
  printf '%-8s %10.0f %10.2f %12.1f\n' "$round" "$(calc "$ROWS / $secs")" "$secs" "$(calc "$peak / 1024")"
  rounds+=("$secs $peak")
done
secs=$(printf '%s\n' "${rounds[@]}" | awk '{ print $1 }' | sort -n | sed -n 2p)
peak=$(printf '%s\n' "${rounds[@]}" | awk '{ print $2 }' | sort -n | sed -n 2p)
printf '%-8s %10.0f %10.2f %12.1f\n' "median" "$(calc "$ROWS / $secs")" "$secs" "$(calc "$peak / 1024")"
