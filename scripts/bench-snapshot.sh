#!/usr/bin/env bash
# PostgreSQL initial snapshot throughput against its ceiling.
#
# Loads ROWS rows (default 5,000,000) into one table of the private
# PostgreSQL, then reads the whole table twice: `COPY (SELECT ...) TO
# STDOUT` into /dev/null (the ceiling; the faster of a run before and one
# after Sluice), and `sluice run` with `snapshot: { mode: initial }` into
# the file sink, until the last row is in the file. Prints both rates,
# their ratio and Sluice's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS=${ROWS:-5000000}

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

fresh_pg_db bench_snap
echo "loading $ROWS rows" >&2
psql_db -d bench_snap <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text, created_at timestamptz);
INSERT INTO orders SELECT g, 'customer-' || (g % 1000), (g % 100000) / 100.0, 'paid', now() FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE orders;
SQL

ceiling() {
  local start
  start=$(start_clock)
  psql_db -d bench_snap -c "COPY (SELECT * FROM orders) TO STDOUT" > /dev/null
  calc "$(now) - $start"
}

cat > "$work/snap.yaml" <<YAML
pipelines:
  - name: bench
    source:
      type: postgres
      config: { id: bench_snap, host: 127.0.0.1, port: $SLUICE_TEST_PG_PORT, database: bench_snap, user: $SLUICE_TEST_PG_USER, password: "\${PGPASSWORD}", ssl_mode: disable, tables: [public.orders], snapshot: { mode: initial } }
    sinks:
      - type: file
        config: { id: file, path: $work/orders.jsonl }
YAML
snapshot_bench "COPY -> /dev/null" "$work/snap.yaml"
