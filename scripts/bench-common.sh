# Sourced by the bench scripts: builds the release binary, starts the
# private services (and stops them on exit if this run started them),
# makes a scratch folder, and defines the helpers the scripts share.
# Sets SLUICE, work and run_id.

# SLUICE_BIN runs another build instead (an A/B comparison).
if [ -n "${SLUICE_BIN:-}" ]; then
  SLUICE=$SLUICE_BIN
else
  cargo build --release --locked -p sluice >&2
  SLUICE="$PWD/target/release/sluice"
fi

started_services=no
if [ ! -f "${SLUICE_SERVICES_DIR:-/tmp/sluice-services}/env" ]; then
  started_services=yes
fi
env_file=$(scripts/services.sh start)
scripts/bench-settle.sh
# shellcheck source=/dev/null
. "$env_file"
work=$(mktemp -d)
cleanup() {
  [ -n "${sluice_pid:-}" ] && kill "$sluice_pid" 2>/dev/null || true
  rm -rf "$work"
  if [ "$started_services" = yes ]; then scripts/services.sh stop; fi
}
trap cleanup EXIT
run_id=$$
now() { date +%s.%N; }
# The start of a timed run: first the disk writes back what the load or
# the script before left in the page cache, so no contender's time, and
# no contender's fsyncs, include writing back another's data.
start_clock() {
  sync
  now
}
export PGPASSWORD="$SLUICE_TEST_PG_PASSWORD"
psql_db() { psql -X -q -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" -v ON_ERROR_STOP=1 "$@"; }
# Drops database $1 with the replication slots in it, and creates it empty.
fresh_pg_db() {
  psql_db -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '$1'" >/dev/null
  psql_db -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
}
calc() { awk "BEGIN { print $1 }"; }

# Runs sluice until `done_check` succeeds (or it exits); prints "seconds peak_kib".
# The seconds end when the check succeeds: the drain after SIGTERM (a slow
# optional sink may take up to shutdown_grace_secs) is not part of the rate.
measure() {
  local config=$1 done_check=$2 start end="" pid peak=0 sample
  start=$(start_clock)
  RUST_LOG=info,sluice_runtime::checkpointer=debug "$SLUICE" run -c "$config" --data-dir "$work/data-$RANDOM" \
    2> "$work/sluice.log" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    # An exited process not yet reaped has a status without VmHWM: keep
    # the last figure read rather than lose it.
    sample=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    if [ -n "$sample" ] && [ "$sample" -gt "$peak" ]; then peak=$sample; fi
    if $done_check; then end=$(now); kill -TERM "$pid"; break; fi
    sleep 0.05
  done
  wait "$pid" || { cat "$work/sluice.log" >&2; exit 1; }
  echo "$(calc "${end:-$(now)} - $start") $peak"
}
never() { false; }

# CPU seconds used so far by process $1 and its children: its own, that of
# the children alive now, and that of the children it has reaped (so a
# PostgreSQL postmaster counts its backends and WAL senders, live or gone).
tree_cpu() {
  local total=0 pid fields
  for pid in "$1" $(pgrep -P "$1"); do
    # Fields after the command's closing parenthesis, from the state on:
    # utime, stime, cutime and cstime are the 12th to 15th of them.
    fields=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
    total=$((total + $(echo "$fields" | awk '{ print $12 + $13 + $14 + $15 }')))
  done
  calc "$total / $(getconf CLK_TCK)"
}

# Runs sluice on config $1 until the row with id $2 is in file $3 (rows
# arrive in id order, so it is the last); sets sluice_secs and peak_kib.
run_until_row() {
  local config=$1 last=$2 file=$3 start
  start=$(start_clock)
  "$SLUICE" run -c "$config" --data-dir "$work/data" 2> "$work/sluice.log" &
  sluice_pid=$!
  until tail -c 4096 "$file" 2>/dev/null | grep -q "\"id\":$last,"; do
    if ! kill -0 "$sluice_pid" 2>/dev/null; then cat "$work/sluice.log" >&2; exit 1; fi
    sleep 0.05
  done
  sluice_secs=$(calc "$(now) - $start")
  peak_kib=$(awk '/VmHWM/ {print $2}' "/proc/$sluice_pid/status")
  kill -TERM "$sluice_pid"
  wait "$sluice_pid"
  sluice_pid=
}

# Raises peer_kib to process $1's peak RSS (KiB) so far.
note_peer_peak() {
  local sample
  sample=$(awk '/VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
  if [ -n "$sample" ] && [ "$sample" -gt "$peer_kib" ]; then peer_kib=$sample; fi
}

# The peer: Debezium embedded (scripts/debezium.sh, set $1: pg or mariadb)
# on properties file $2 with its defaults and its JSON converter, each
# record written to /dev/null, until it has $3 records; sets peer_secs
# and peer_kib. Extra arguments go to the capture.
run_peer() {
  local set=$1 properties=$2 records=$3 classpath start pid
  shift 3
  classpath=$(scripts/debezium.sh fetch "$set")
  echo "peer: debezium embedded ($set) to /dev/null" >&2
  start=$(start_clock)
  java -cp "$classpath" Capture "$properties" --max-records "$records" --timeout-ms 1800000 "$@" \
    > /dev/null 2> "$work/debezium.log" &
  pid=$!
  peer_kib=0
  while kill -0 "$pid" 2>/dev/null; do
    note_peer_peak "$pid"
    sleep 0.1
  done
  wait "$pid" || { cat "$work/debezium.log" >&2; exit 1; }
  peer_secs=$(calc "$(now) - $start")
}

# A snapshot bench: the `ceiling` function the script defines, run before
# and after `sluice run -c $2` reads all $ROWS rows into $work/orders.jsonl;
# prints both ceiling runs (labelled $1), Sluice, the ratio to the faster
# ceiling and Sluice's peak RSS.
snapshot_bench() {
  local label=$1 config=$2 first second best lines
  echo "ceiling: $label (first run)" >&2
  first=$(ceiling)
  echo "sluice: snapshot into the file sink" >&2
  run_until_row "$config" "$ROWS" "$work/orders.jsonl"
  echo "ceiling: $label (second run)" >&2
  second=$(ceiling)
  best=$(calc "($first < $second) ? $first : $second")
  lines=$(wc -l < "$work/orders.jsonl")
  [ "$lines" -eq "$ROWS" ] || { echo "expected $ROWS lines, found $lines" >&2; exit 1; }
  printf '%-34s %12s %10s\n' "run" "rows/s" "seconds"
  printf '%-34s %12.0f %10.2f\n' "$label, 1st" "$(calc "$ROWS / $first")" "$first"
  printf '%-34s %12.0f %10.2f\n' "$label, 2nd" "$(calc "$ROWS / $second")" "$second"
  printf '%-34s %12.0f %10.2f\n' "sluice snapshot -> file sink" "$(calc "$ROWS / $sluice_secs")" "$sluice_secs"
  printf 'ratio (sluice / faster ceiling): %.2f\n' "$(calc "$best / $sluice_secs")"
  printf 'sluice peak RSS: %.1f MB\n' "$(calc "$peak_kib / 1024")"
}

# Loads $TX_COUNT transactions of $ROWS_PER_TX rows into `orders` of
# database $1, then one row into `bench_done` (a sink's checkpoint at that
# last transaction, sequence 0, marks the end); sets end_lsn.
load_orders() {
  local db=$1 tx first
  echo "loading $((TX_COUNT * ROWS_PER_TX)) rows in $TX_COUNT transactions" >&2
  for tx in $(seq 0 $((TX_COUNT - 1))); do
    first=$((tx * ROWS_PER_TX + 1))
    echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series($first, $((first + ROWS_PER_TX - 1))) g;"
  done | psql_db -d "$db"
  psql_db -d "$db" -c "INSERT INTO bench_done VALUES (1)"
  end_lsn=$(psql_db -d "$db" -At -c "SELECT pg_current_wal_insert_lsn()")
}

# The ceiling: pg_recvlogical decoding database $1 through slot $2 and
# publication $3 up to $end_lsn into /dev/null; prints the seconds.
recvlogical_ceiling() {
  local start
  echo "ceiling: pg_recvlogical to /dev/null" >&2
  start=$(start_clock)
  "$SLUICE_TEST_PG_BIN/pg_recvlogical" -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" -d "$1" \
    --slot "$2" --start --endpos "$end_lsn" -o proto_version=1 -o publication_names="$3" -f /dev/null
  calc "$(now) - $start"
}

# Writes a Kafka Connect standalone worker's properties to $1: the test
# broker, JSON converters with schemas on or off ($2: true or false), its
# offsets under $work flushed every second, any free REST port; each
# further argument is one more line.
connect_worker() {
  local file=$1 schemas=$2
  shift 2
  {
    cat <<PROPS
bootstrap.servers=$SLUICE_TEST_KAFKA_BROKERS
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=$schemas
value.converter.schemas.enable=$schemas
offset.storage.file.filename=$work/connect.offsets
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:0
PROPS
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi
  } > "$file"
}
