#!/usr/bin/env bash
# Kafka sink throughput, at-least-once against exactly-once (read_back and
# transactions), with default batch settings: generator → Kafka (1M events) and PostgreSQL → Kafka
# (1M rows in 100 transactions), each with its peak RSS; the sink's
# ceiling, Kafka's own producer benchmark (kafka-producer-perf-test) on
# the same broker, run before and after the generator runs; and the peer,
# Debezium on Kafka Connect, on the same PostgreSQL backlog.
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

# Kafka's producer benchmark with the sink's settings (acks=all,
# idempotence, lz4, linger.ms=5): values taken from messages the sink
# wrote, so each record has the size and compressibility of Sluice's (the
# sink's messages also carry a key of a few bytes). Prints its records/s.
perf_payload=$work/payload.txt
tools="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/kafka-tools-4.1.1"
if [ ! -f "$tools/libs/kafka-tools-4.1.1.jar" ]; then
  echo "fetching Kafka's tools from Maven Central" >&2
  mvn -q -f scripts/kafka/tools/pom.xml dependency:copy-dependencies -DoutputDirectory="$tools/libs" \
    -DincludeScope=runtime >&2
fi
perf_test() {
  local topic=bench-perf-$run_id-$RANDOM
  sync
  java -Xms256m -Xmx512m -cp "$tools/libs/*" org.apache.kafka.tools.ProducerPerformance \
    --topic "$topic" --num-records 1000000 --throughput -1 --payload-file "$perf_payload" \
    --producer-props bootstrap.servers="$SLUICE_TEST_KAFKA_BROKERS" acks=all enable.idempotence=true \
    compression.type=lz4 linger.ms=5 2> "$work/perf.err" |
    awk '/records sent/ { sub(/.*records sent, /, ""); print $1 + 0 }' | tail -1
}
sample_payload() {
  java -Xms128m -Xmx256m -cp "$tools/libs/*" org.apache.kafka.tools.consumer.ConsoleConsumer \
    --bootstrap-server "$SLUICE_TEST_KAFKA_BROKERS" --topic "$1" --from-beginning --max-messages 10000 \
    > "$perf_payload" 2> "$work/consumer.err"
  [ "$(wc -l < "$perf_payload")" -eq 10000 ] || { cat "$work/consumer.err" >&2; exit 1; }
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
  if [ "$mode" = false ]; then
    sample_payload "bench-gen-false-$run_id"
    perf_first=$(perf_test)
  fi
done
perf_second=$(perf_test)
for perf in "$perf_first" "$perf_second"; do
  printf '%-52s %12.0f %10.2f %12s\n' "kafka-producer-perf-test, same records" "$perf" "$(calc "1000000 / $perf")" "-"
done
perf_best=$(calc "($perf_first > $perf_second) ? $perf_first : $perf_second")
printf 'average record: %.0f bytes; generator -> kafka at-least-once / faster perf-test: %.2f\n' \
  "$(calc "$(wc -c < "$perf_payload") / 10000 - 1")" "$(calc "1000000 / $gen_false / $perf_best")"

fresh_pg_db bench_kafka
psql_db -d bench_kafka >/dev/null <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE TABLE bench_done (id int PRIMARY KEY);
CREATE PUBLICATION sluice_bench_kafka FOR TABLE orders, bench_done;
SELECT 'slot' FROM pg_create_logical_replication_slot('bench_false', 'pgoutput');
SELECT 'slot' FROM pg_create_logical_replication_slot('bench_true', 'pgoutput');
SELECT 'slot' FROM pg_create_logical_replication_slot('bench_read_back', 'pgoutput');
SELECT 'slot' FROM pg_create_logical_replication_slot('bench_connect', 'pgoutput');
SQL
for tx in $(seq 0 99); do
  first=$((tx * 10000 + 1))
  echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series($first, $((first + 9999))) g;"
done | psql_db -d bench_kafka
# A last one-row transaction: its checkpoint (sequence 0) marks the end.
before_done=$(psql_db -d bench_kafka -At -c "SELECT pg_current_wal_insert_lsn()")
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
# The peer: Debezium 3.6.1's PostgreSQL connector on Kafka Connect 4.3
# (standalone, its jars from scripts/debezium.sh) into the same broker,
# JSON without schemas. Its records are all in Kafka once it confirms to
# its slot a position past the start of the last transaction: it does so
# when it commits its offsets, after the producer's flush, and with no
# change after that only on a heartbeat; both come every second
# (offset.flush.interval.ms, heartbeat.interval.ms), which the time includes.
classpath=$(scripts/debezium.sh fetch pg)
connect_worker "$work/worker.properties" false
cat > "$work/connector.properties" <<PROPS
name=bench-connect
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=127.0.0.1
database.port=$SLUICE_TEST_PG_PORT
database.user=$SLUICE_TEST_PG_USER
database.password=$PGPASSWORD
database.dbname=bench_kafka
topic.prefix=bench-connect-$run_id
plugin.name=pgoutput
slot.name=bench_connect
publication.name=sluice_bench_kafka
publication.autocreate.mode=disabled
snapshot.mode=no_data
heartbeat.interval.ms=1000
PROPS
echo "peer: debezium on kafka connect to kafka" >&2
connect_done() {
  [ "$(psql_db -d postgres -At -c "SELECT confirmed_flush_lsn > '$before_done' FROM pg_replication_slots WHERE slot_name = 'bench_connect'")" = t ]
}
start=$(start_clock)
java -Xmx768m -cp "$classpath" org.apache.kafka.connect.cli.ConnectStandalone \
  "$work/worker.properties" "$work/connector.properties" > "$work/connect.log" 2>&1 &
peer_pid=$!
peer_kib=0
until connect_done; do
  kill -0 "$peer_pid" 2>/dev/null || { tail -40 "$work/connect.log" >&2; exit 1; }
  note_peer_peak "$peer_pid"
  sleep 0.2
done
peer_secs=$(calc "$(now) - $start")
kill "$peer_pid"
wait "$peer_pid" || true
printf '%-52s %12.0f %10.2f %12.1f\n' "debezium 3.6.1 on kafka connect -> kafka" "$(calc "1000000 / $peer_secs")" \
  "$peer_secs" "$(calc "$peer_kib / 1024")"
printf 'postgres -> kafka at-least-once / debezium on kafka connect: %.2f\n' "$(calc "$peer_secs / $pg_false")"
printf 'exactly-once overhead: generator %.1f%%, postgres %.1f%%\n' \
  "$(calc "($gen_true / $gen_false - 1) * 100")" "$(calc "($pg_true / $pg_false - 1) * 100")"
printf 'read_back / at-least-once throughput: generator %.2f, postgres %.2f\n' \
  "$(calc "$gen_false / $gen_read_back")" "$(calc "$pg_false / $pg_read_back")"
