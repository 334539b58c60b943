#!/usr/bin/env bash
# PostgreSQL source throughput against its ceiling, from one backlog.
#
# Loads 1,000,000 rows (100 transactions of 10,000 rows) into the private
# PostgreSQL with a slot for each contender already in place, then each
# drains the same backlog from its own slot: pg_recvlogical with pgoutput
# into /dev/null (the ceiling, before and after the others), `sluice run`
# into the file sink, Sluice into Kafka (at-least-once) with the native
# and with the Debezium envelope (schemas off), in Avro with the private
# schema registry, and with exactly_once: read_back (native), and the
# peer, Debezium embedded 3.6.1 with its JSON converter (schemas off) into
# /dev/null. The native and the Avro Kafka runs, whose ratio is a target,
# go three rounds each, interleaved, and their medians count, so a slow
# spell of the shared machine cannot decide it. Prints every rate, the ratios,
# each contender's peak RSS, and the mean size of a Kafka message's key
# and value in each format (read back by scripts/consumers/topic_bytes.py).
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS_PER_TX=10000
TX_COUNT=100
TOTAL=$((ROWS_PER_TX * TX_COUNT))

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

fresh_pg_db bench_pg
psql_db -d bench_pg >/dev/null <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE TABLE bench_done (id int PRIMARY KEY);
CREATE PUBLICATION sluice_bench FOR TABLE orders, bench_done;
SELECT 'ceiling' FROM pg_create_logical_replication_slot('ceiling_1', 'pgoutput');
SELECT 'ceiling' FROM pg_create_logical_replication_slot('ceiling_2', 'pgoutput');
SELECT 'sluice' FROM pg_create_logical_replication_slot('sluice_bench', 'pgoutput');
SELECT 'kafka', pg_create_logical_replication_slot('kafka_native_' || n, 'pgoutput'),
       pg_create_logical_replication_slot('kafka_avro_' || n, 'pgoutput')
  FROM generate_series(1, 3) AS rounds(n);
SELECT 'kafka' FROM pg_create_logical_replication_slot('kafka_debezium', 'pgoutput');
SELECT 'kafka' FROM pg_create_logical_replication_slot('kafka_read_back', 'pgoutput');
SELECT 'peer' FROM pg_create_logical_replication_slot('debezium', 'pgoutput');
SQL
echo "loading $TOTAL rows in $TX_COUNT transactions" >&2
for tx in $(seq 0 $((TX_COUNT - 1))); do
  first=$((tx * ROWS_PER_TX + 1))
  echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series($first, $((first + ROWS_PER_TX - 1))) g;"
done | psql_db -d bench_pg
# A last one-row transaction: the Kafka runs end when its checkpoint is stored.
psql_db -d bench_pg -c "INSERT INTO bench_done VALUES (1)"
end_lsn=$(psql_db -d bench_pg -At -c "SELECT pg_current_wal_lsn()")

# The ceiling runs before and after Sluice, and the faster run counts, so
# neither side gains from a warmer cache.
ceiling() {
  local start
  start=$(start_clock)
  "$SLUICE_TEST_PG_BIN/pg_recvlogical" -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" -d bench_pg \
    --slot "$1" --start --endpos "$end_lsn" -o proto_version=1 -o publication_names=sluice_bench -f /dev/null
  calc "$(now) - $start"
}
echo "ceiling: pg_recvlogical to /dev/null (first run)" >&2
ceiling_first=$(ceiling ceiling_1)

cat > "$work/bench.yaml" <<YAML
pipelines:
  - name: bench
    source:
      type: postgres
      config: { id: bench, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_pg, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, tables: [public.orders] }
    sinks:
      - type: file
        config: { id: file, path: $work/orders.jsonl }
YAML
echo "sluice: postgres source to the file sink" >&2
run_until_row "$work/bench.yaml" "$TOTAL" "$work/orders.jsonl"
# Sluice into Kafka, at-least-once, in the native and the Debezium envelope.
pg_done() { grep -q 'checkpoint stored.*position=pg:[0-9A-F]*/[0-9A-F]*:0$' "$work/sluice.log"; }
kafka_run() {
  cat > "$work/$1.yaml" <<YAML
pipelines:
  - name: $1-$run_id
    source:
      type: postgres
      config: { id: $1-$run_id, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_pg, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: $1, publication: sluice_bench, create_slot: false, create_publication: false, tables: [public.orders, public.bench_done] }
    sinks:
      - type: kafka
        config: { id: k, brokers: "$SLUICE_TEST_KAFKA_BROKERS", topic: "bench-$1-$run_id", format: $2 }
YAML
  measure "$work/$1.yaml" pg_done
}
avro_format="{ envelope: debezium, topic_prefix: bench, encoding: avro, schema_registry: { url: \"$SLUICE_TEST_REGISTRY_URL\" } }"
native_rounds=()
avro_rounds=()
for round in 1 2 3; do
  echo "sluice: postgres source to kafka, native envelope (round $round)" >&2
  read -r secs kib < <(kafka_run "kafka_native_$round" "{ envelope: native }")
  native_rounds+=("$secs $kib")
  echo "sluice: postgres source to kafka, debezium envelope in avro (round $round)" >&2
  read -r secs kib < <(kafka_run "kafka_avro_$round" "$avro_format")
  avro_rounds+=("$secs $kib")
done
# The median round's seconds, and the peak RSS over all three.
median() { printf '%s\n' "$@" | sort -n | awk '{ secs[NR] = $1; if ($2 > kib) kib = $2 } END { print secs[2], kib }'; }
read -r native_secs native_kib < <(median "${native_rounds[@]}")
read -r avro_secs avro_kib < <(median "${avro_rounds[@]}")
echo "sluice: postgres source to kafka, debezium envelope" >&2
read -r debezium_secs debezium_kib < <(kafka_run kafka_debezium "{ envelope: debezium, topic_prefix: bench }")
echo "sluice: postgres source to kafka, native envelope, exactly_once: read_back" >&2
read -r read_back_secs read_back_kib < <(kafka_run kafka_read_back "{ envelope: native }, exactly_once: read_back")
python=$(scripts/consumers.sh python)
# The mean bytes of a message's key and value, over the whole topic.
sizes() {
  local count keys values
  read -r count keys values < <("$python" scripts/consumers/topic_bytes.py "$SLUICE_TEST_KAFKA_BROKERS" "bench-$1-$run_id")
  [ "$count" -gt "$TOTAL" ] || { echo "bench-$1-$run_id holds $count messages, fewer than $TOTAL" >&2; exit 1; }
  echo "$(calc "$keys / $count") $(calc "$values / $count")"
}
read -r native_key native_value < <(sizes kafka_native_1)
read -r debezium_key debezium_value < <(sizes kafka_debezium)
read -r avro_key avro_value < <(sizes kafka_avro_1)

cat > "$work/debezium.properties" <<PROPS
name=bench
connector.class=io.debezium.connector.postgresql.PostgresConnector
offset.storage=org.apache.kafka.connect.storage.FileOffsetBackingStore
offset.storage.file.filename=$work/debezium.offsets
database.hostname=127.0.0.1
database.port=$SLUICE_TEST_PG_PORT
database.user=$SLUICE_TEST_PG_USER
database.password=$PGPASSWORD
database.dbname=bench_pg
topic.prefix=bench
plugin.name=pgoutput
slot.name=debezium
publication.name=sluice_bench
publication.autocreate.mode=disabled
snapshot.mode=no_data
capture.converter.schemas.enable=false
PROPS
run_peer pg "$work/debezium.properties" $((TOTAL + 1))

echo "ceiling: pg_recvlogical to /dev/null (second run)" >&2
ceiling_second=$(ceiling ceiling_2)
ceiling_secs=$(calc "($ceiling_first < $ceiling_second) ? $ceiling_first : $ceiling_second")
lines=$(wc -l < "$work/orders.jsonl")
[ "$lines" -eq "$TOTAL" ] || { echo "expected $TOTAL lines, found $lines" >&2; exit 1; }

row() { printf '%-52s %12.0f %10.2f %12s\n' "$1" "$(calc "$TOTAL / $2")" "$2" "$3"; }
mb() { printf '%.1f' "$(calc "$1 / 1024")"; }
printf '%-52s %12s %10s %12s\n' "run" "rows/s" "seconds" "peak RSS MB"
row "pg_recvlogical -> /dev/null, 1st" "$ceiling_first" "-"
row "pg_recvlogical -> /dev/null, 2nd" "$ceiling_second" "-"
row "sluice postgres -> file sink" "$sluice_secs" "$(mb "$peak_kib")"
for round in 1 2 3; do
  read -r secs _ <<< "${native_rounds[$((round - 1))]}"
  row "sluice postgres -> kafka, native, round $round" "$secs" "-"
  read -r secs _ <<< "${avro_rounds[$((round - 1))]}"
  row "sluice postgres -> kafka, avro, round $round" "$secs" "-"
done
row "sluice postgres -> kafka, native (median)" "$native_secs" "$(mb "$native_kib")"
row "sluice postgres -> kafka, debezium envelope" "$debezium_secs" "$(mb "$debezium_kib")"
row "sluice postgres -> kafka, debezium in avro (median)" "$avro_secs" "$(mb "$avro_kib")"
row "sluice postgres -> kafka, native, read_back" "$read_back_secs" "$(mb "$read_back_kib")"
row "debezium embedded 3.6.1, JSON -> /dev/null" "$peer_secs" "$(mb "$peer_kib")"
printf 'ratio (sluice file / faster ceiling): %.2f\n' "$(calc "$ceiling_secs / $sluice_secs")"
printf 'ratio (sluice file / debezium embedded): %.2f\n' "$(calc "$peer_secs / $sluice_secs")"
printf 'ratio (kafka debezium envelope / kafka native): %.2f\n' "$(calc "$native_secs / $debezium_secs")"
printf 'ratio (kafka debezium envelope / debezium embedded): %.2f\n' "$(calc "$peer_secs / $debezium_secs")"
printf 'ratio (kafka avro / kafka native, medians of three rounds): %.2f\n' "$(calc "$native_secs / $avro_secs")"
printf 'ratio (kafka read_back / kafka native at-least-once): %.2f\n' "$(calc "$native_secs / $read_back_secs")"
printf 'mean message bytes (key + value): native %.0f + %.0f, debezium json %.0f + %.0f, debezium avro %.0f + %.0f\n' \
  "$native_key" "$native_value" "$debezium_key" "$debezium_value" "$avro_key" "$avro_value"
printf 'ratio (avro value / debezium json value): %.2f; (avro value / native value): %.2f\n' \
  "$(calc "$avro_value / $debezium_value")" "$(calc "$avro_value / $native_value")"
