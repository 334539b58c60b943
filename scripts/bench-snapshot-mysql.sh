#!/usr/bin/env bash
# MariaDB initial snapshot throughput against its ceiling.
#
# Loads ROWS rows (default 5,000,000) into one table of the private
# MariaDB, then reads the whole table twice: `mariadb --quick -e 'SELECT
# ...'` into /dev/null (the ceiling; the faster of a run before and one
# after Sluice), and `sluice run` with `snapshot: { mode: initial }` into
# the file sink, until the last row is in the file. Prints both rates,
# their ratio and Sluice's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS=${ROWS:-5000000}

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh

my() { mariadb -h 127.0.0.1 -P "$SLUICE_TEST_MY_PORT" -u "$SLUICE_TEST_MY_USER" -p"$SLUICE_TEST_MY_PASSWORD" "$@"; }
my -e "DROP DATABASE IF EXISTS bench_mysnap; CREATE DATABASE bench_mysnap;
       CREATE TABLE bench_mysnap.orders (id bigint PRIMARY KEY, customer varchar(32), amount decimal(12,2), status varchar(16), created_at datetime(6));"
echo "loading $ROWS rows" >&2
for first in $(seq 1 1000000 "$ROWS"); do
  last=$((first + 999999 < ROWS ? first + 999999 : ROWS))
  echo "INSERT INTO orders SELECT seq, CONCAT('customer-', seq % 1000), (seq % 100000) / 100, 'paid', NOW(6) FROM seq_${first}_to_${last};"
done | my bench_mysnap
my -e "ANALYZE TABLE bench_mysnap.orders" > /dev/null

ceiling() {
  local start
  start=$(start_clock)
  my --quick -N -e "SELECT * FROM bench_mysnap.orders" > /dev/null
  calc "$(now) - $start"
}

cat > "$work/snap.yaml" <<YAML
pipelines:
  - name: bench
    source:
      type: mysql
      config: { id: bench_mysnap, host: 127.0.0.1, port: $SLUICE_TEST_MY_PORT, user: $SLUICE_TEST_MY_USER, password: "\${SLUICE_TEST_MY_PASSWORD}", tables: [bench_mysnap.orders], snapshot: { mode: initial } }
    sinks:
      - type: file
        config: { id: file, path: $work/orders.jsonl }
YAML
snapshot_bench "mariadb --quick -> /dev/null" "$work/snap.yaml"
