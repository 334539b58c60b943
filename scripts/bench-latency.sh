#!/usr/bin/env bash
# End-to-end latency at a steady 10,000 events/s, sink by sink.
#
# pgbench writes 1,000 transactions of 10 rows a second (a Poisson
# schedule, `--rate`) into the private PostgreSQL for SECONDS seconds while
# `sluice run` streams them into one sink. The database commits
# synchronously, as production servers do: the test server's default
# (synchronous_commit off) leaves commits in memory for up to 200 ms, and
# the server sends only flushed WAL to replication clients. Each sink writer measures, for
# every event this run wrote, the time from the source commit to the
# moment the sink made it durable, and logs p50 and p99 when it stops;
# the figures are at most 1/16 above the true value (histogram buckets).
# pgbench starts once the sink is open, and the Kafka topics exist before
# the run: the figures are the steady state's.
# Prints one line per sink with the rate pgbench reached.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_SINK=${SECONDS_PER_SINK:-30}
TX_PER_SEC=1000
ROWS_PER_TX=10

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh


echo "INSERT INTO ticks (note) SELECT 'tick' FROM generate_series(1, $ROWS_PER_TX);" > "$work/tick.sql"

api=127.0.0.1:$((20000 + RANDOM % 10000))
sink_open() {
  curl -sf "http://$api/pipelines/latency" |
    python3 -c 'import json, sys; sys.exit(any(s["state"] != "running" for s in json.load(sys.stdin)["sinks"]))'
}
# The topics exist before the run, as a production topic does: created
# on the first write, they would add the broker's topic creation to the
# first events' latency.
python=$(scripts/consumers.sh python)
create_topic() {
  "$python" - "$SLUICE_TEST_KAFKA_BROKERS" "$1" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
for future in admin.create_topics([NewTopic(sys.argv[2], 3, 1)]).values():
    future.result()
PY
}

# One sink's run: a fresh database and slot, Sluice started and ready,
# pgbench at the steady rate, then a drain until the slot is acknowledged
# past the last write, and a clean stop that logs the latency.
run_sink() {
  local name=$1 sink=$2 db="bench_lat_$1" end_lsn
  fresh_pg_db "$db"
  psql_db -d postgres -c "ALTER DATABASE $db SET synchronous_commit = on"
  psql_db -d "$db" >/dev/null <<SQL
CREATE TABLE ticks (id bigserial PRIMARY KEY, note text, at timestamptz NOT NULL DEFAULT now());
CREATE PUBLICATION sluice_lat_$name FOR TABLE ticks;
SELECT 'slot' FROM pg_create_logical_replication_slot('sluice_lat_$name', 'pgoutput');
SQL
  cat > "$work/$name.yaml" <<YAML
pipelines:
  - name: latency
    source:
      type: postgres
      config: { id: lat_$name, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: $db, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, status_interval_secs: 1, heartbeat_secs: 1, tables: [public.ticks] }
    sinks:
      - $sink
YAML
  # What earlier benchmarks left unwritten in the page cache would reach
  # the disk during this run, and every fsync (the sink's, the servers')
  # would wait behind it: written now, it stays out of the figures.
  sync
  "$SLUICE" run -c "$work/$name.yaml" --data-dir "$work/data-$name" --api-addr "$api" 2> "$work/$name.log" &
  sluice_pid=$!
  # Steady state: the source streams and the sink is open (a Kafka
  # producer's transactions initialised, for one), as in a pipeline that
  # has been running; the time to start is not this benchmark's figure.
  until grep -q "replication started" "$work/$name.log" && sink_open; do
    kill -0 "$sluice_pid" 2>/dev/null || { cat "$work/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  "$SLUICE_TEST_PG_BIN/pgbench" -n -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" \
    -f "$work/tick.sql" -R "$TX_PER_SEC" -T "$SECONDS_PER_SINK" -c 4 -j 2 "$db" > "$work/$name.pgbench" 2>&1
  end_lsn=$(psql_db -d "$db" -At -c "SELECT pg_current_wal_lsn()")
  until [ "$(psql_db -d postgres -At -c "SELECT confirmed_flush_lsn >= '$end_lsn' FROM pg_replication_slots WHERE slot_name = 'sluice_lat_$name'")" = t ]; do
    kill -0 "$sluice_pid" 2>/dev/null || { cat "$work/$name.log" >&2; exit 1; }
    sleep 0.2
  done
  kill -TERM "$sluice_pid"
  wait "$sluice_pid"
  sluice_pid=
  local rows tps line
  rows=$(psql_db -d "$db" -At -c "SELECT count(*) FROM ticks")
  tps=$(awk '/^tps = / { print $3; exit }' "$work/$name.pgbench")
  line=$(grep "latency from source commit to durable" "$work/$name.log" | tail -1)
  field() { echo "$line" | grep -o "$1=[0-9.]*" | cut -d= -f2; }
  [ "$(field events)" = "$rows" ] || { echo "$name: measured $(field events) events, the table has $rows rows" >&2; exit 1; }
  printf '%-28s %10.0f %10s %10s %10s %10s\n' "$name" "$(calc "$tps * $ROWS_PER_TX")" "$rows" "$(field p50_ms)" "$(field p99_ms)" "$(field max_ms)"
}

printf '%-28s %10s %10s %10s %10s %10s\n' "sink" "events/s" "events" "p50 ms" "p99 ms" "max ms"
run_sink file "{ type: file, config: { id: file, path: $work/ticks.jsonl } }"
create_topic "lat$run_id.alo"
run_sink kafka_alo "{ type: kafka, config: { id: kafka, brokers: \"$SLUICE_TEST_KAFKA_BROKERS\", topic: lat$run_id.alo } }"
create_topic "lat$run_id.eos"
run_sink kafka_eos "{ type: kafka, config: { id: kafka, brokers: \"$SLUICE_TEST_KAFKA_BROKERS\", topic: lat$run_id.eos, exactly_once: true } }"
create_topic "lat$run_id.rb"
run_sink kafka_read_back "{ type: kafka, config: { id: kafka, brokers: \"$SLUICE_TEST_KAFKA_BROKERS\", topic: lat$run_id.rb, exactly_once: read_back } }"
run_sink redis "{ type: redis, config: { id: redis, url: \"$SLUICE_TEST_REDIS_URL\", stream: \"lat$run_id\" } }"
run_sink nats "{ type: nats, config: { id: nats, url: \"$SLUICE_TEST_NATS_URL\", stream: LAT$run_id, subject: \"lat$run_id.ticks\" } }"
run_sink s3_parquet "{ type: s3, config: { id: s3, bucket: $SLUICE_TEST_S3_BUCKET, endpoint: \"$SLUICE_TEST_S3_ENDPOINT\", path_style: true, access_key_id: $SLUICE_TEST_S3_ACCESS_KEY, secret_access_key: $SLUICE_TEST_S3_SECRET_KEY, prefix: lat$run_id, max_file_age_secs: 1 } }"
