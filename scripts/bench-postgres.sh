#!/usr/bin/env bash
# PostgreSQL source throughput against its ceiling, from one backlog.
#
# Loads 1,000,000 rows (100 transactions of 10,000 rows) into the private
# PostgreSQL with two slots already in place, then drains the same backlog
# twice: pg_recvlogical with pgoutput into /dev/null (the ceiling), and
# `sluice run` into the file sink. Prints both rates, their ratio, and
# Sluice's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS_PER_TX=10000
TX_COUNT=100
TOTAL=$((ROWS_PER_TX * TX_COUNT))

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

export PGPASSWORD="$SLUICE_TEST_PG_PASSWORD"
psql_db() { psql -X -q -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" -v ON_ERROR_STOP=1 "$@"; }
psql_db -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = 'bench_pg'" >/dev/null
psql_db -d postgres -c "DROP DATABASE IF EXISTS bench_pg WITH (FORCE)" -c "CREATE DATABASE bench_pg"
psql_db -d bench_pg <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE PUBLICATION sluice_bench FOR TABLE orders;
SELECT 'ceiling' FROM pg_create_logical_replication_slot('ceiling_1', 'pgoutput');
SELECT 'ceiling' FROM pg_create_logical_replication_slot('ceiling_2', 'pgoutput');
SELECT 'sluice' FROM pg_create_logical_replication_slot('sluice_bench', 'pgoutput');
SQL
echo "loading $TOTAL rows in $TX_COUNT transactions" >&2
for tx in $(seq 0 $((TX_COUNT - 1))); do
  first=$((tx * ROWS_PER_TX + 1))
  echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series($first, $((first + ROWS_PER_TX - 1))) g;"
done | psql_db -d bench_pg
end_lsn=$(psql_db -d bench_pg -At -c "SELECT pg_current_wal_lsn()")

# The ceiling runs before and after Sluice, and the faster run counts, so
# neither side gains from a warmer cache.
ceiling() {
  local start
  start=$(now)
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
echo "ceiling: pg_recvlogical to /dev/null (second run)" >&2
ceiling_second=$(ceiling ceiling_2)
ceiling_secs=$(calc "($ceiling_first < $ceiling_second) ? $ceiling_first : $ceiling_second")
lines=$(wc -l < "$work/orders.jsonl")
[ "$lines" -eq "$TOTAL" ] || { echo "expected $TOTAL lines, found $lines" >&2; exit 1; }

printf '%-34s %12s %10s\n' "run" "rows/s" "seconds"
printf '%-34s %12.0f %10.2f\n' "pg_recvlogical -> /dev/null, 1st" "$(calc "$TOTAL / $ceiling_first")" "$ceiling_first"
printf '%-34s %12.0f %10.2f\n' "pg_recvlogical -> /dev/null, 2nd" "$(calc "$TOTAL / $ceiling_second")" "$ceiling_second"
printf '%-34s %12.0f %10.2f\n' "sluice postgres -> file sink" "$(calc "$TOTAL / $sluice_secs")" "$sluice_secs"
printf 'ratio (sluice / faster ceiling): %.2f\n' "$(calc "$ceiling_secs / $sluice_secs")"
printf 'sluice peak RSS: %.1f MB\n' "$(calc "$peak_kib / 1024")"
