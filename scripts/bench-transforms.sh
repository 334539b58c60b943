#!/usr/bin/env bash
# What the pipeline's transforms cost: PostgreSQL -> file sink with and
# without them, from one backlog.
#
# Loads 1,000,000 rows (100 transactions of 10,000 rows) into the private
# PostgreSQL with a slot for each run already in place. Sluice then drains
# the backlog into the file sink three times without transforms and three
# times with a `filter` (drops the rows whose status is `cancelled`, one in
# ten), a salted-SHA-256 `mask` of the customer column and a ten-line `vrl`
# script (leaves out created_at, upper-cases the status, adds two columns
# worked out from the amount and one from the table), the rounds
# interleaved; the medians count.
# The ceiling, pg_recvlogical into /dev/null, runs first and last, and the
# faster run counts. Prints every rate, the ratio of the medians and each
# side's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS_PER_TX=10000
TX_COUNT=100
TOTAL=$((ROWS_PER_TX * TX_COUNT))

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

fresh_pg_db bench_tf
psql_db -d bench_tf >/dev/null <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
CREATE PUBLICATION sluice_bench FOR TABLE orders;
SELECT 'ceiling' FROM pg_create_logical_replication_slot('ceiling_1', 'pgoutput');
SELECT 'ceiling' FROM pg_create_logical_replication_slot('ceiling_2', 'pgoutput');
SELECT pg_create_logical_replication_slot('plain_' || n, 'pgoutput'),
       pg_create_logical_replication_slot('transformed_' || n, 'pgoutput')
  FROM generate_series(1, 3) AS rounds(n);
SQL
echo "loading $TOTAL rows in $TX_COUNT transactions" >&2
for tx in $(seq 0 $((TX_COUNT - 1))); do
  first=$((tx * ROWS_PER_TX + 1))
  # The last row is never cancelled, so the runs end on it.
  echo "INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0,
    CASE WHEN g % 10 = 3 THEN 'cancelled' ELSE 'paid' END, now()
    FROM generate_series($first, $((first + ROWS_PER_TX - 1))) g;"
done | psql_db -d bench_tf
end_lsn=$(psql_db -d bench_tf -At -c "SELECT pg_current_wal_lsn()")

ceiling() {
  local start
  start=$(start_clock)
  "$SLUICE_TEST_PG_BIN/pg_recvlogical" -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" -d bench_tf \
    --slot "$1" --start --endpos "$end_lsn" -o proto_version=1 -o publication_names=sluice_bench -f /dev/null
  calc "$(now) - $start"
}
echo "ceiling: pg_recvlogical to /dev/null (first run)" >&2
ceiling_first=$(ceiling ceiling_1)

# Writes the config of one run: slot $1, transforms $2 (YAML lines).
config() {
  rm -f "$work/orders.jsonl"
  cat > "$work/bench.yaml" <<YAML
pipelines:
  - name: bench
    source:
      type: postgres
      config: { id: $1, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_tf, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, slot: $1, publication: sluice_bench, create_slot: false, create_publication: false, tables: [public.orders] }
$2
    sinks:
      - type: file
        config: { id: file, path: $work/orders.jsonl }
YAML
}
transforms="    transforms:
      - { type: filter, tables: [public.orders], where: [{ column: status, equals: cancelled }] }
      - { type: mask, tables: [public.orders], columns: [customer], with: { sha256: { salt: bench-salt } } }
      - type: vrl
        tables: [public.orders]
        source: |
          del(.after.created_at)
          status = string!(.after.status)
          .after.status = upcase(status)
          amount = to_float(.after.amount) ?? 0.0
          .after.amount_cents = to_int(amount * 100.0)
          if .after.amount_cents > 50000 {
            .after.tier = \"large\"
          } else {
            .after.tier = \"small\"
          }
          .after.source_table = .table"
plain_rounds=()
transformed_rounds=()
for round in 1 2 3; do
  echo "sluice: postgres source to the file sink, no transforms (round $round)" >&2
  config "plain_$round" ""
  rm -rf "$work/data"
  run_until_row "$work/bench.yaml" "$TOTAL" "$work/orders.jsonl"
  plain_rounds+=("$sluice_secs $peak_kib")
  plain_lines=$(wc -l < "$work/orders.jsonl")
  echo "sluice: postgres source to the file sink, filter + mask + vrl (round $round)" >&2
  config "transformed_$round" "$transforms"
  rm -rf "$work/data"
  run_until_row "$work/bench.yaml" "$TOTAL" "$work/orders.jsonl"
  transformed_rounds+=("$sluice_secs $peak_kib")
  transformed_lines=$(wc -l < "$work/orders.jsonl")
  grep -q 'customer-' "$work/orders.jsonl" && { echo "a clear customer name reached the file" >&2; exit 1; }
  grep -q '"tier":"large"' "$work/orders.jsonl" || { echo "the script's columns are missing" >&2; exit 1; }
done
[ "$plain_lines" -eq "$TOTAL" ] || { echo "expected $TOTAL lines, found $plain_lines" >&2; exit 1; }
[ "$transformed_lines" -eq $((TOTAL * 9 / 10)) ] || { echo "expected $((TOTAL * 9 / 10)) lines, found $transformed_lines" >&2; exit 1; }

echo "ceiling: pg_recvlogical to /dev/null (second run)" >&2
ceiling_second=$(ceiling ceiling_2)
ceiling_secs=$(calc "($ceiling_first < $ceiling_second) ? $ceiling_first : $ceiling_second")

# The median round's seconds, and the peak RSS over all three.
median() { printf '%s\n' "$@" | sort -n | awk '{ secs[NR] = $1; if ($2 > kib) kib = $2 } END { print secs[2], kib }'; }
read -r plain_secs plain_kib < <(median "${plain_rounds[@]}")
read -r transformed_secs transformed_kib < <(median "${transformed_rounds[@]}")

row() { printf '%-58s %12.0f %10.2f %12s\n' "$1" "$(calc "$TOTAL / $2")" "$2" "$3"; }
mb() { printf '%.1f' "$(calc "$1 / 1024")"; }
printf '%-58s %12s %10s %12s\n' "run (rows/s counts every source row)" "rows/s" "seconds" "peak RSS MB"
row "pg_recvlogical -> /dev/null, 1st" "$ceiling_first" "-"
row "pg_recvlogical -> /dev/null, 2nd" "$ceiling_second" "-"
for round in 1 2 3; do
  read -r secs kib <<< "${plain_rounds[$((round - 1))]}"
  row "sluice postgres -> file, no transforms, round $round" "$secs" "$(mb "$kib")"
  read -r secs kib <<< "${transformed_rounds[$((round - 1))]}"
  row "sluice postgres -> file, filter + mask + vrl, round $round" "$secs" "$(mb "$kib")"
done
row "sluice postgres -> file, no transforms (median)" "$plain_secs" "$(mb "$plain_kib")"
row "sluice postgres -> file, filter + mask + vrl (median)" "$transformed_secs" "$(mb "$transformed_kib")"
printf 'ratio (with transforms / without, medians): %.2f\n' "$(calc "$plain_secs / $transformed_secs")"
printf 'ratio (peak RSS with / without): %.2f\n' "$(calc "$transformed_kib / $plain_kib")"
printf 'ratio (sluice file without transforms / faster ceiling): %.2f\n' "$(calc "$ceiling_secs / $plain_secs")"
