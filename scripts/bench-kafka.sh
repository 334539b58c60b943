#!/usr/bin/env bash
# Kafka sink throughput, at-least-once against exactly-once (read_back and
# transactions), with default batch settings: generator → Kafka (1M events) and PostgreSQL → Kafka
# (1M rows in 100 transactions), each with its peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh


label() {
  case "$1" in
    true) echo "exactly-once (transactions)" ;;
    read_back) echo "exactly-once (read_back)" ;;
    *) echo "at-least-once" ;;
  esac
}

printf '%-52s %12s %10s %12s\n' "run" "events/s" "seconds" "peak RSS MB"
for mode in false read_back true; do
  cat > "$work/gen.yaml" <<YAML
pipelines:
  - name: gen-$mode-$run_id
    source: { type: generator, config: { id: gen-$mode-$run_id, tx_count: 100000, rows_per_tx: 10 } }
    sinks:
      - type: kafka
        config: { id: k, brokers: "$SLUICE_TEST_KAFKA_BROKERS", topic: "bench-gen-$mode-$run_id", exactly_once: $mode }
YAML
  read -r secs peak < <(measure "$work/gen.yaml" never)
  label=$(label "$mode")
  printf '%-52s %12.0f %10.2f %12.1f\n' "generator -> kafka, $label" "$(calc "1000000 / $secs")" "$secs" "$(calc "$peak / 1024")"
  eval "gen_$mode=$secs"
done

export PGPASSWORD="$SLUICE_TEST_PG_PASSWORD"
psql_db() { psql -X -q -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" -v ON_ERROR_STOP=1 "$@"; }
psql_db -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = 'bench_kafka'" >/dev/null
psql_db -d postgres -c "DROP DATABASE IF EXISTS bench_kafka WITH (FORCE)" -c "CREATE DATABASE bench_kafka"
psql_db -d bench_kafka >/dev/null <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE TABLE bench_done (id int PRIMARY KEY);
CREATE PUBLICATION sluice_bench_kafka FOR TABLE orders, bench_done;
SELECT 'slot' FROM pg_create_logical_replication_slot('bench_false', 'pgoutput');
SELECT 'slot' FROM pg_create_logical_replication_slot('bench_true', 'pgoutput');
SELECT 'slot' FROM pg_create_logical_replication_slot('bench_read_back', 'pgoutput');
SQL
for tx in $(seq 0 99); do
  first=$((tx * 10000 + 1))
  echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series($first, $((first + 9999))) g;"
done | psql_db -d bench_kafka
# A last one-row transaction: its checkpoint (sequence 0) marks the end.
psql_db -d bench_kafka -c "INSERT INTO bench_done VALUES (1)"
pg_done() { grep -q 'checkpoint stored.*position=pg:[0-9A-F]*/[0-9A-F]*:0$' "$work/sluice.log"; }
for mode in false read_back true; do
  cat > "$work/pg.yaml" <<YAML
pipelines:
  - name: pg-$mode-$run_id
    source:
      type: postgres
      config: { id: pg-$mode-$run_id, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_kafka, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: bench_$mode, publication: sluice_bench_kafka, create_slot: false, create_publication: false }
    sinks:
      - type: kafka
        config: { id: k, brokers: "$SLUICE_TEST_KAFKA_BROKERS", topic: "bench-pg-$mode-$run_id", exactly_once: $mode }
YAML
  read -r secs peak < <(measure "$work/pg.yaml" pg_done)
  label=$(label "$mode")
  printf '%-52s %12.0f %10.2f %12.1f\n' "postgres -> kafka, $label" "$(calc "1000000 / $secs")" "$secs" "$(calc "$peak / 1024")"
  eval "pg_$mode=$secs"
done
printf 'exactly-once overhead: generator %.1f%%, postgres %.1f%%\n' \
  "$(calc "($gen_true / $gen_false - 1) * 100")" "$(calc "($pg_true / $pg_false - 1) * 100")"
printf 'read_back / at-least-once throughput: generator %.2f, postgres %.2f\n' \
  "$(calc "$gen_false / $gen_read_back")" "$(calc "$pg_false / $pg_read_back")"
