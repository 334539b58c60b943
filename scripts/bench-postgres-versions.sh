#!/usr/bin/env bash
# The PostgreSQL source's drain against its ceiling on several majors.
#
#   scripts/bench-postgres-versions.sh [MAJOR...]   (default: 13 15 18)
#
# On each major's private server (scripts/services.sh runs 13 to 18):
# loads 1,000,000 rows (100 transactions of 10,000 rows) with a slot for
# every run already in place, then drains the same backlog three times
# each, interleaved: pg_recvlogical with pgoutput into /dev/null (the
# ceiling; Debian's 15 client, which reads every major here) and `sluice
# run` into the file sink. Prints each round, the medians, their ratio and
# Sluice's peak RSS per major.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS_PER_TX=10000
TX_COUNT=100
TOTAL=$((ROWS_PER_TX * TX_COUNT))
ROUNDS=3

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

export PGPASSWORD="$SLUICE_TEST_PG_PASSWORD"
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(13 15 18)

# The port of a major's server: 15 is the main one.
port_of() {
  if [ "$1" = 15 ]; then echo "$SLUICE_TEST_PG_PORT"; return; fi
  local var="SLUICE_TEST_PG${1}_PORT"
  echo "${!var:?no server for PostgreSQL $1}"
}

median() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }

summary=()
for major in "${majors[@]}"; do
  port=$(port_of "$major")
  psql_db() { psql -X -q -h 127.0.0.1 -p "$port" -U "$SLUICE_TEST_PG_USER" -v ON_ERROR_STOP=1 "$@"; }
  psql_db -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = 'bench_versions'" >/dev/null
  psql_db -d postgres -c "DROP DATABASE IF EXISTS bench_versions WITH (FORCE)" -c "CREATE DATABASE bench_versions"
  psql_db -d bench_versions >/dev/null <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE PUBLICATION sluice_bench FOR TABLE orders;
SELECT pg_create_logical_replication_slot('ceiling_' || n, 'pgoutput'),
       pg_create_logical_replication_slot('sluice_' || n, 'pgoutput')
  FROM generate_series(1, $ROUNDS) AS rounds(n);
SQL
  echo "PostgreSQL $major (port $port): loading $TOTAL rows in $TX_COUNT transactions" >&2
  for tx in $(seq 0 $((TX_COUNT - 1))); do
    first=$((tx * ROWS_PER_TX + 1))
    echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series($first, $((first + ROWS_PER_TX - 1))) g;"
  done | psql_db -d bench_versions
  end_lsn=$(psql_db -d bench_versions -At -c "SELECT pg_current_wal_lsn()")
  ceilings=()
  sluices=()
  peak=0
  for round in $(seq 1 $ROUNDS); do
    echo "PostgreSQL $major, round $round: pg_recvlogical to /dev/null" >&2
    start=$(start_clock)
    "$SLUICE_TEST_PG_BIN/pg_recvlogical" -h 127.0.0.1 -p "$port" -U "$SLUICE_TEST_PG_USER" -d bench_versions \
      --slot "ceiling_$round" --start --endpos "$end_lsn" -o proto_version=1 -o publication_names=sluice_bench -f /dev/null
    ceilings+=("$(calc "$(now) - $start")")
    echo "PostgreSQL $major, round $round: sluice to the file sink" >&2
    rm -rf "$work/data" "$work/orders.jsonl"
    cat > "$work/bench.yaml" <<YAML
pipelines:
  - name: bench
    source:
      type: postgres
      config: { id: bench, host: 127.0.0.1, port: $port, database: bench_versions, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: sluice_$round, publication: sluice_bench, create_slot: false, create_publication: false, tables: [public.orders] }
    sinks:
      - type: file
        config: { id: file, path: $work/orders.jsonl }
YAML
    run_until_row "$work/bench.yaml" "$TOTAL" "$work/orders.jsonl"
    lines=$(wc -l < "$work/orders.jsonl")
    [ "$lines" -eq "$TOTAL" ] || { echo "expected $TOTAL lines, found $lines" >&2; exit 1; }
    sluices+=("$sluice_secs")
    [ "$peak_kib" -gt "$peak" ] && peak=$peak_kib
  done
  version=$(psql_db -d postgres -At -c "SHOW server_version")
  ceiling=$(median "${ceilings[@]}")
  sluice=$(median "${sluices[@]}")
  rates() { for s in "$@"; do printf ' %.0f' "$(calc "$TOTAL / $s")"; done; }
  summary+=("$(printf '%-8s %10.0f %10.0f %7.2f %9.1f   ceiling:%s  sluice:%s' "$version" \
    "$(calc "$TOTAL / $ceiling")" "$(calc "$TOTAL / $sluice")" "$(calc "$ceiling / $sluice")" \
    "$(calc "$peak / 1024")" "$(rates "${ceilings[@]}")" "$(rates "${sluices[@]}")")")
  psql_db -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = 'bench_versions'" \
    -c "DROP DATABASE bench_versions WITH (FORCE)" >/dev/null
done
printf '%-8s %10s %10s %7s %9s   %s\n' "server" "ceiling/s" "sluice/s" "ratio" "peak MB" "rounds (rows/s)"
printf '%s\n' "${summary[@]}"
