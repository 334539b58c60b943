#!/usr/bin/env bash
# MariaDB source throughput against its ceiling, from one backlog.
#
# Loads 1,000,000 rows (100 transactions of 10,000 rows) into the private
# MariaDB, then reads the same binlog range twice: `mariadb-binlog
# --read-from-remote-server -v` into /dev/null (the decode ceiling), and
# `sluice run` into the file sink; and the peer, Debezium embedded with
# its MariaDB connector 3.5.0.Final, on the same range. Prints the rates,
# Sluice's ratio to the ceiling and to Debezium, and the peak RSS of both.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS_PER_TX=10000
TX_COUNT=100
TOTAL=$((ROWS_PER_TX * TX_COUNT))

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

my() { mariadb -h 127.0.0.1 -P "$SLUICE_TEST_MY_PORT" -u "$SLUICE_TEST_MY_USER" -p"$SLUICE_TEST_MY_PASSWORD" "$@"; }
my -e "DROP DATABASE IF EXISTS bench_my; CREATE DATABASE bench_my;
       CREATE TABLE bench_my.orders (id bigint PRIMARY KEY, customer varchar(32), amount decimal(12,2), status varchar(16), created_at datetime(6));
       FLUSH BINARY LOGS;"
read -r start_file start_offset < <(my -N -e "SHOW MASTER STATUS" | awk '{print $1, $2}')
start_gtid=$(my -N -e "SELECT @@gtid_binlog_pos")
echo "loading $TOTAL rows in $TX_COUNT transactions" >&2
for tx in $(seq 0 $((TX_COUNT - 1))); do
  first=$((tx * ROWS_PER_TX + 1))
  echo "INSERT INTO bench_my.orders SELECT seq, CONCAT('customer-', seq % 1000), (seq % 100000) / 100, 'paid', NOW(6) FROM seq_${first}_to_$((first + ROWS_PER_TX - 1));"
done | my bench_my
read -r end_file end_offset < <(my -N -e "SHOW MASTER STATUS" | awk '{print $1, $2}')

# The ceiling runs before and after Sluice, and the faster run counts.
ceiling() {
  local start
  start=$(start_clock)
  mariadb-binlog --read-from-remote-server -h 127.0.0.1 -P "$SLUICE_TEST_MY_PORT" -u "$SLUICE_TEST_MY_USER" \
    -p"$SLUICE_TEST_MY_PASSWORD" -v --start-position="$start_offset" --to-last-log "$start_file" \
    2>/dev/null > /dev/null
  calc "$(now) - $start"
}
echo "ceiling: mariadb-binlog -v to /dev/null (first run)" >&2
ceiling_first=$(ceiling)

cat > "$work/bench.yaml" <<YAML
pipelines:
  - name: bench
    source:
      type: mysql
      config: { id: bench, host: 127.0.0.1, port: $SLUICE_TEST_MY_PORT, user: $SLUICE_TEST_MY_USER, password: "\${SLUICE_TEST_MY_PASSWORD}", tables: [bench_my.orders], start: { file: $start_file, offset: $start_offset } }
    sinks:
      - type: file
        config: { id: file, path: $work/orders.jsonl }
YAML
echo "sluice: mysql source to the file sink" >&2
run_until_row "$work/bench.yaml" "$TOTAL" "$work/orders.jsonl"
echo "ceiling: mariadb-binlog -v to /dev/null (second run)" >&2
ceiling_second=$(ceiling)
ceiling_secs=$(calc "($ceiling_first < $ceiling_second) ? $ceiling_first : $ceiling_second")
lines=$(wc -l < "$work/orders.jsonl")
[ "$lines" -eq "$TOTAL" ] || { echo "expected $TOTAL lines, found $lines" >&2; exit 1; }

# The peer starts where Sluice did: its offset is seeded with the same
# binlog position, and it reads the tables' definitions from the server
# (snapshot.mode=recovery), as they were when the range began.
cat > "$work/debezium.properties" <<PROPS
name=bench
connector.class=io.debezium.connector.mariadb.MariaDbConnector
offset.storage=org.apache.kafka.connect.storage.FileOffsetBackingStore
offset.storage.file.filename=$work/debezium.offsets
database.hostname=127.0.0.1
database.port=$SLUICE_TEST_MY_PORT
database.user=$SLUICE_TEST_MY_USER
database.password=$SLUICE_TEST_MY_PASSWORD
database.server.id=54399
database.ssl.mode=disable
database.include.list=bench_my
topic.prefix=bench
schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory
schema.history.internal.file.filename=$work/debezium.history
include.schema.changes=false
snapshot.mode=recovery
capture.converter.schemas.enable=false
PROPS
run_peer mariadb "$work/debezium.properties" "$TOTAL" \
  --seed-offset "{\"file\":\"$start_file\",\"pos\":$start_offset,\"gtids\":\"$start_gtid\"}"

echo "binlog range: $start_file:$start_offset .. $end_file:$end_offset"
printf '%-36s %12s %10s\n' "run" "rows/s" "seconds"
printf '%-36s %12.0f %10.2f\n' "mariadb-binlog -v -> /dev/null, 1st" "$(calc "$TOTAL / $ceiling_first")" "$ceiling_first"
printf '%-36s %12.0f %10.2f\n' "mariadb-binlog -v -> /dev/null, 2nd" "$(calc "$TOTAL / $ceiling_second")" "$ceiling_second"
printf '%-36s %12.0f %10.2f\n' "sluice mysql -> file sink" "$(calc "$TOTAL / $sluice_secs")" "$sluice_secs"
printf '%-36s %12.0f %10.2f\n' "debezium embedded 3.5.0 -> /dev/null" "$(calc "$TOTAL / $peer_secs")" "$peer_secs"
printf 'ratio (sluice / faster ceiling): %.2f\n' "$(calc "$ceiling_secs / $sluice_secs")"
printf 'ratio (sluice / debezium embedded): %.2f\n' "$(calc "$peer_secs / $sluice_secs")"
printf 'sluice peak RSS: %.1f MB\n' "$(calc "$peak_kib / 1024")"
printf 'debezium peak RSS: %.1f MB\n' "$(calc "$peer_kib / 1024")"
