#!/usr/bin/env bash
# The postgres sink in apply mode against its ceiling and its peer, from
# one backlog.
#
# Loads 500,000 inserts (50 transactions of 10,000 rows) and then 500,000
# updates of the same keys (50 transactions) into the private PostgreSQL,
# with a slot for each contender in place, plus a one-row marker
# transaction after each phase. Then:
# - the ceiling: COPY … FROM STDIN of the same 500,000 rows into an empty
#   table, before and after the others (the faster run counts), and the
#   source's own: pg_recvlogical decoding the inserts to /dev/null;
# - the source inside Sluice: the PostgreSQL source into the null sink,
#   until the sink has the inserts and the first marker;
# - Sluice: the PostgreSQL source into the postgres sink (apply mode,
#   tables created by the sink) in a second database; the insert rate runs
#   until the first marker lands, the update rate from there to the second;
# - the sink alone: the generator's 500,000 mixed changes into the sink;
# - the peer: Debezium's JDBC sink 3.6.1 in Kafka Connect standalone
#   (upsert, delete enabled, key from the record key), applying the same
#   changes, which Sluice first writes to Kafka in Debezium's envelope with
#   schemas; its rates run from its first row in the target.
# Prints every rate, the ratios, and each contender's peak RSS; then the
# CPU seconds the inserts took in each process (PostgreSQL's counted over
# all its backends and WAL senders), against what two cores give in the
# time 0.5 x COPY allows.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS_PER_TX=10000
TX_COUNT=50
ROWS=$((ROWS_PER_TX * TX_COUNT))

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

for db in bench_sink bench_sink_sluice bench_sink_jdbc bench_sink_copy; do
  fresh_pg_db $db
done
psql_db -d bench_sink <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE TABLE bench_done (id int PRIMARY KEY);
CREATE PUBLICATION sluice_bench FOR TABLE orders, bench_done;
SELECT 'sluice' FROM pg_create_logical_replication_slot('sink_sluice', 'pgoutput');
SELECT 'feed' FROM pg_create_logical_replication_slot('sink_feed', 'pgoutput');
SELECT 'source' FROM pg_create_logical_replication_slot('sink_source', 'pgoutput');
SELECT 'null' FROM pg_create_logical_replication_slot('sink_null', 'pgoutput');
SQL
echo "loading $ROWS inserts and $ROWS updates" >&2
{
  for tx in $(seq 0 $((TX_COUNT - 1))); do
    first=$((tx * ROWS_PER_TX + 1))
    echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', TIMESTAMPTZ '2026-12-01 00:00:00+00' + g * INTERVAL '1 second' FROM generate_series($first, $((first + ROWS_PER_TX - 1))) g;"
  done
  echo "INSERT INTO bench_done VALUES (1);"
} | psql_db -d bench_sink
after_inserts=$(psql_db -d bench_sink -At -c "SELECT pg_current_wal_lsn()")
{
  for tx in $(seq 0 $((TX_COUNT - 1))); do
    first=$((tx * ROWS_PER_TX + 1))
    echo "UPDATE orders SET status = 'shipped', amount = amount + 1 WHERE id BETWEEN $first AND $((first + ROWS_PER_TX - 1));"
  done
} | psql_db -d bench_sink
before_last=$(psql_db -d bench_sink -At -c "SELECT pg_current_wal_insert_lsn()")
psql_db -d bench_sink -c "INSERT INTO bench_done VALUES (2)"

# The source's own ceiling: pg_recvlogical decoding the inserts to /dev/null.
echo "ceiling of the source: pg_recvlogical, the inserts" >&2
postmaster=$(head -1 "${SLUICE_SERVICES_DIR:-/tmp/sluice-services}/postgres/data/postmaster.pid")
decode_cpu=$(tree_cpu "$postmaster")
start=$(start_clock)
"$SLUICE_TEST_PG_BIN/pg_recvlogical" -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" -d bench_sink \
  --slot sink_source --start --endpos "$after_inserts" -o proto_version=1 -o publication_names=sluice_bench -f /dev/null
source_secs=$(calc "$(now) - $start")
decode_cpu=$(calc "$(tree_cpu "$postmaster") - $decode_cpu")

# The ceiling: the inserted rows, COPY'd into an empty table.
psql_db -d bench_sink -c "\\copy (SELECT id, customer, (id % 100000) / 100.0, 'paid', created_at FROM orders ORDER BY id) TO '$work/rows.copy'"
# Prints the seconds and PostgreSQL's CPU seconds.
ceiling() {
  local start cpu
  psql_db -d bench_sink_copy -c "DROP TABLE IF EXISTS orders" \
    -c "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz)"
  cpu=$(tree_cpu "$postmaster")
  start=$(start_clock)
  psql_db -d bench_sink_copy -c "COPY orders FROM STDIN" < "$work/rows.copy"
  echo "$(calc "$(now) - $start") $(calc "$(tree_cpu "$postmaster") - $cpu")"
}
echo "ceiling: COPY FROM STDIN into an empty table (first run)" >&2
read -r ceiling_first copy_cpu_first < <(ceiling)

target_count() { psql_db -d "$1" -At -c "SELECT count(*) FROM bench_done" 2>/dev/null || echo 0; }
cat > "$work/sink.yaml" <<YAML
pipelines:
  - name: sink-$run_id
    source:
      type: postgres
      config: { id: sink-$run_id, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_sink, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: sink_sluice, publication: sluice_bench, create_slot: false, create_publication: false, tables: [public.orders, public.bench_done] }
    sinks:
      - type: postgres
        config: { id: replica, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_sink_sluice, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable }
YAML
echo "sluice: postgres source to the postgres sink, apply mode" >&2
pg_cpu=$(tree_cpu "$postmaster")
start=$(start_clock)
"$SLUICE" run -c "$work/sink.yaml" --data-dir "$work/data-sink" 2> "$work/sluice.log" &
sluice_pid=$!
sluice_kib=0
inserts_at=""
while true; do
  sample=$(awk '/VmHWM/ {print $2}' "/proc/$sluice_pid/status" 2>/dev/null || true)
  if [ -n "$sample" ] && [ "$sample" -gt "$sluice_kib" ]; then sluice_kib=$sample; fi
  kill -0 "$sluice_pid" 2>/dev/null || { cat "$work/sluice.log" >&2; exit 1; }
  done_rows=$(target_count bench_sink_sluice)
  if [ -z "$inserts_at" ] && [ "$done_rows" -ge 1 ]; then
    inserts_at=$(now)
    sluice_cpu=$(tree_cpu "$sluice_pid")
    pg_cpu=$(calc "$(tree_cpu "$postmaster") - $pg_cpu")
  fi
  if [ "$done_rows" -ge 2 ]; then updates_at=$(now); break; fi
  sleep 0.1
done
kill -TERM "$sluice_pid"
wait "$sluice_pid"
sluice_pid=
sluice_inserts=$(calc "$inserts_at - $start")
sluice_updates=$(calc "$updates_at - $inserts_at")
same=$(psql_db -d bench_sink_sluice -At -c "SELECT count(*) FROM orders WHERE status = 'shipped'")
[ "$same" -eq "$ROWS" ] || { echo "the sink holds $same shipped orders, not $ROWS" >&2; exit 1; }

# The source alone, inside Sluice: the same backlog into the null sink,
# timed until the sink has written the inserts and the first marker.
api=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/null.yaml" <<YAML
pipelines:
  - name: null-$run_id
    source:
      type: postgres
      config: { id: null-$run_id, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_sink, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: sink_null, publication: sluice_bench, create_slot: false, create_publication: false, tables: [public.orders, public.bench_done] }
    sinks:
      - type: null
        config: { id: nothing }
YAML
null_written() {
  local written
  written=$(curl -sf "http://$api/metrics" | awk '/^sluice_sink_events_total\{.*sink="nothing"/ { print $2 }')
  [ "${written:-0}" -ge $((ROWS + 1)) ]
}
echo "sluice: postgres source to the null sink" >&2
read -r null_secs null_kib < <(SLUICE_API_ADDR=$api measure "$work/null.yaml" null_written)

# The sink alone: the generator (no database to decode) into the postgres
# sink, 500,000 events of its mix (70 % inserts, 20 % updates, 10 % deletes
# of earlier rows); sluice exits when the finite generator is written.
cat > "$work/gen.yaml" <<YAML
pipelines:
  - name: gen-$run_id
    source: { type: generator, config: { id: gen-$run_id, tx_count: $TX_COUNT, rows_per_tx: $ROWS_PER_TX } }
    sinks:
      - type: postgres
        config: { id: replica, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_sink_gen, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable }
YAML
psql_db -d postgres -c "DROP DATABASE IF EXISTS bench_sink_gen WITH (FORCE)" -c "CREATE DATABASE bench_sink_gen"
echo "sluice: generator to the postgres sink" >&2
read -r gen_secs gen_kib < <(measure "$work/gen.yaml" never)

# The feed of the peer: the same changes in Kafka, Debezium's envelope with schemas.
topic="bench-sink-$run_id"
cat > "$work/feed.yaml" <<YAML
pipelines:
  - name: feed-$run_id
    source:
      type: postgres
      config: { id: feed-$run_id, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_sink, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, status_interval_secs: 1, slot: sink_feed, publication: sluice_bench, create_slot: false, create_publication: false, tables: [public.orders, public.bench_done] }
    sinks:
      - type: kafka
        config: { id: k, brokers: "$SLUICE_TEST_KAFKA_BROKERS", topic: "$topic.\${table}", format: { envelope: debezium, schemas: true, topic_prefix: $topic } }
YAML
echo "feed: sluice writes the changes to kafka for the peer" >&2
# Done when the feed's slot is acknowledged past the last marker.
feed_done() {
  psql_db -d bench_sink -At -c "SELECT confirmed_flush_lsn > '$before_last' FROM pg_replication_slots WHERE slot_name = 'sink_feed'" | grep -q t
}
measure "$work/feed.yaml" feed_done > /dev/null

connect_worker "$work/worker.properties" true \
  plugin.discovery=only_scan consumer.auto.offset.reset=earliest consumer.max.poll.records=5000
cat > "$work/jdbc.properties" <<PROPS
name=bench-$run_id
connector.class=io.debezium.connector.jdbc.JdbcSinkConnector
tasks.max=1
topics.regex=$topic\\.public\\..*
connection.url=jdbc:postgresql://127.0.0.1:$SLUICE_TEST_PG_PORT/bench_sink_jdbc
connection.username=$SLUICE_TEST_PG_USER
connection.password=$PGPASSWORD
insert.mode=upsert
delete.enabled=true
primary.key.mode=record_key
schema.evolution=basic
collection.name.format=\${source.table}
batch.size=5000
PROPS
echo "peer: debezium jdbc sink 3.6.1 in kafka connect standalone" >&2
scripts/debezium.sh connect "$work/worker.properties" "$work/jdbc.properties" > "$work/connect.log" 2>&1 &
peer_pid=$!
peer_kib=0
peer_start=""
peer_inserts_at=""
# The connector takes each topic on its own, so the markers say nothing
# about the orders: its progress is read from the orders themselves.
jdbc_count() { psql_db -d bench_sink_jdbc -At -c "SELECT count(*) FROM orders $1" 2>/dev/null || echo 0; }
while true; do
  sample=$(awk '/VmHWM/ {print $2}' "/proc/$peer_pid/status" 2>/dev/null || true)
  if [ -n "$sample" ] && [ "$sample" -gt "$peer_kib" ]; then peer_kib=$sample; fi
  kill -0 "$peer_pid" 2>/dev/null || { tail -50 "$work/connect.log" >&2; exit 1; }
  if [ -z "$peer_inserts_at" ]; then
    rows=$(jdbc_count "")
    if [ -z "$peer_start" ] && [ "$rows" -gt 0 ]; then peer_start=$(now); fi
    if [ "$rows" -ge "$ROWS" ]; then peer_inserts_at=$(now); fi
  elif [ "$(jdbc_count "WHERE status = 'shipped'")" -ge "$ROWS" ]; then
    peer_updates_at=$(now)
    break
  fi
  sleep 0.5
done
kill "$peer_pid"; wait "$peer_pid" 2>/dev/null || true
peer_inserts=$(calc "$peer_inserts_at - $peer_start")
peer_updates=$(calc "$peer_updates_at - $peer_inserts_at")

echo "ceiling: COPY FROM STDIN into an empty table (second run)" >&2
read -r ceiling_second copy_cpu_second < <(ceiling)
ceiling_secs=$(calc "($ceiling_first < $ceiling_second) ? $ceiling_first : $ceiling_second")

row() { printf '%-52s %12.0f %10.2f %12s\n' "$1" "$(calc "$ROWS / $2")" "$2" "$3"; }
mb() { printf '%.1f' "$(calc "$1 / 1024")"; }
printf '%-52s %12s %10s %12s\n' "run" "rows/s" "seconds" "peak RSS MB"
row "COPY FROM STDIN, empty table, 1st" "$ceiling_first" "-"
row "COPY FROM STDIN, empty table, 2nd" "$ceiling_second" "-"
row "pg_recvlogical -> /dev/null: inserts (the source)" "$source_secs" "-"
row "sluice postgres source -> null sink: inserts" "$null_secs" "$(mb "$null_kib")"
row "sluice postgres sink, apply: inserts" "$sluice_inserts" "$(mb "$sluice_kib")"
row "sluice postgres sink, apply: updates" "$sluice_updates" "$(mb "$sluice_kib")"
row "sluice generator -> postgres sink (mixed changes)" "$gen_secs" "$(mb "$gen_kib")"
row "debezium jdbc sink 3.6.1: inserts (from first row)" "$peer_inserts" "$(mb "$peer_kib")"
row "debezium jdbc sink 3.6.1: updates" "$peer_updates" "$(mb "$peer_kib")"
printf 'ratio (sluice inserts / faster COPY): %.2f; (sluice inserts / pg_recvlogical): %.2f\n' \
  "$(calc "$ceiling_secs / $sluice_inserts")" "$(calc "$source_secs / $sluice_inserts")"
printf 'ratio (sluice inserts / sluice source into the null sink): %.2f\n' "$(calc "$null_secs / $sluice_inserts")"
printf 'ratio (generator -> postgres sink / faster COPY): %.2f\n' "$(calc "$ceiling_secs / $gen_secs")"
printf 'ratio (sluice / debezium jdbc sink), inserts and updates together: %.2f\n' \
  "$(calc "($peer_inserts + $peer_updates) / ($sluice_inserts + $sluice_updates)")"
printf 'ratio (sluice / debezium jdbc sink): inserts %.2f, updates %.2f\n' \
  "$(calc "$peer_inserts / $sluice_inserts")" "$(calc "$peer_updates / $sluice_updates")"
copy_cpu=$(calc "($copy_cpu_first < $copy_cpu_second) ? $copy_cpu_first : $copy_cpu_second")
printf 'CPU seconds for the inserts: postgres %.2f, sluice %.2f, together %.2f\n' \
  "$pg_cpu" "$sluice_cpu" "$(calc "$pg_cpu + $sluice_cpu")"
printf '  postgres alone: decoding them for pg_recvlogical %.2f, COPY of them %.2f, together %.2f\n' \
  "$decode_cpu" "$copy_cpu" "$(calc "$decode_cpu + $copy_cpu")"
printf '  two cores in the time 0.5 x COPY allows: %.2f\n' "$(calc "4 * $ceiling_secs")"
