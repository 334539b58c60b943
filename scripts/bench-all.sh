#!/usr/bin/env bash
# Every benchmark in one run, and one table: scenario, Sluice events/s, the
# ceiling measured in this same run (generator alone, pg_recvlogical,
# mariadb-binlog, COPY and mariadb --quick for the snapshots, Kafka's own
# producer benchmark), their ratio, Sluice's peak RSS, Debezium on the same
# backlog where the script runs it (embedded; on Kafka Connect for
# PostgreSQL → Kafka), and for the PostgreSQL
# source the end-to-end latency at a steady 10k events/s (p50 / p99,
# bench-latency.sh); then that latency for every sink. Prints Markdown;
# docs/benchmarks.md holds the latest output.
set -euo pipefail
cd "$(dirname "$0")/.."

started_services=no
if [ ! -f "${SLUICE_SERVICES_DIR:-/tmp/sluice-services}/env" ]; then
  started_services=yes
  scripts/services.sh start >/dev/null
fi
out=$(mktemp -d)
cleanup() {
  rm -rf "$out"
  if [ "$started_services" = yes ]; then scripts/services.sh stop; fi
}
trap cleanup EXIT

for bench in bench bench-postgres bench-mysql bench-kafka bench-s3 bench-latency bench-snapshot bench-snapshot-mysql bench-memory; do
  echo "running scripts/$bench.sh" >&2
  "scripts/$bench.sh" > "$out/$bench.txt" 2> "$out/$bench.err" || { cat "$out/$bench.err" >&2; exit 1; }
done

# The figures each script prints, by the labels it prints them with.
field() { awk -v label="$2" -v column="$3" 'index($0, label) == 1 { print $(NF - column) }' "$out/$1.txt" | head -1; }
best() { awk -v label="$2" -v column="$3" 'index($0, label) == 1 { print $(NF - column) }' "$out/$1.txt" | sort -n | tail -1; }
generator=$(field bench generator-only 1)
pg=$(best bench-postgres "pg_recvlogical" 2)
my=$(best bench-mysql "mariadb-binlog" 1)
pg_rss=$(field bench-postgres "sluice postgres -> file sink" 0)
pg_peer=$(field bench-postgres "debezium embedded" 2)
my_peer=$(field bench-mysql "debezium embedded" 1)
connect_peer=$(field bench-kafka "debezium 3.6.1 on kafka connect" 2)
my_rss=$(awk '/sluice peak RSS/ { print $4 }' "$out/bench-mysql.txt")

# A sink's "p50 / p99" ms from bench-latency.sh; "n/a" where not measured.
latency() {
  awk -v sink="$1" '$1 == sink { printf "%.0f / %.0f", $4, $5; found = 1 } END { if (!found) printf "n/a" }' \
    "$out/bench-latency.txt"
}
# The peer's events/s and Sluice's multiple of it; "–" without one.
peer() { if [ -n "${2:-}" ]; then printf '%.0f (%.1f ×)' "$2" "$(awk "BEGIN { print $1 / $2 }")"; else printf '–'; fi; }
row() { # scenario, sluice events/s, ceiling name, ceiling events/s, peak RSS MB[, latency sink[, peer events/s]]
  printf '| %s | %.0f | %s %.0f | %.2f | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$(awk "BEGIN { print $2 / $4 }")" "$5" \
    "$(peer "$2" "${7:-}")" "$(latency "${6:-none}")"
}
echo "| scenario | Sluice events/s | ceiling (same run) events/s | ratio | peak RSS MB | Debezium (same run; embedded, or on Kafka Connect for the Kafka rows) events/s, Sluice ÷ it | latency p50 / p99 ms at 10k events/s |"
echo "|---|---|---|---|---|---|---|"
row "generator → memory sink" "$(field bench generator-to-memory 1)" "generator alone" "$generator" "$(field bench generator-to-memory 0)"
row "generator → file sink" "$(field bench generator-to-file 1)" "generator alone" "$generator" "$(field bench generator-to-file 0)"
if ! grep -q "^generator-to-shm-file *skipped" "$out/bench.txt"; then
  row "generator → file sink in /dev/shm" "$(field bench generator-to-shm-file 1)" "generator alone" "$generator" \
    "$(field bench generator-to-shm-file 0)"
fi
row "PostgreSQL → file sink" "$(field bench-postgres "sluice postgres -> file sink" 2)" "pg_recvlogical" "$pg" "$pg_rss" file "$pg_peer"
row "MariaDB → file sink" "$(field bench-mysql "sluice mysql" 1)" "mariadb-binlog" "$my" "$my_rss" none "$my_peer"
row "PostgreSQL snapshot → file sink" "$(field bench-snapshot "sluice snapshot" 1)" "COPY to /dev/null" \
  "$(best bench-snapshot "COPY -> /dev/null" 1)" "$(awk '/sluice peak RSS/ { print $4 }' "$out/bench-snapshot.txt")"
row "MariaDB snapshot → file sink" "$(field bench-snapshot-mysql "sluice snapshot" 1)" "mariadb --quick to /dev/null" \
  "$(best bench-snapshot-mysql "mariadb --quick -> /dev/null" 1)" "$(awk '/sluice peak RSS/ { print $4 }' "$out/bench-snapshot-mysql.txt")"
for mode in at-least-once "exactly-once (transactions)"; do
  row "generator → Kafka, $mode" "$(field bench-kafka "generator -> kafka, $mode" 2)" "generator alone" "$generator" "$(field bench-kafka "generator -> kafka, $mode" 0)"
  sink=kafka_alo; [ "$mode" = at-least-once ] || sink=kafka_eos
  row "PostgreSQL → Kafka, $mode" "$(field bench-kafka "postgres -> kafka, $mode" 2)" "pg_recvlogical" "$pg" "$(field bench-kafka "postgres -> kafka, $mode" 0)" "$sink" "$connect_peer"
done
row "the Kafka sink alone (generator → Kafka, at-least-once)" "$(field bench-kafka "generator -> kafka, at-least-once" 2)" "kafka-producer-perf-test" \
  "$(best bench-kafka "kafka-producer-perf-test" 2)" "$(field bench-kafka "generator -> kafka, at-least-once" 0)"
for scenario in "s3 parquet" "local parquet" "s3 json lines"; do
  row "generator → ${scenario/s3/S3}" "$(field bench-s3 "generator -> $scenario" 3)" "pg_recvlogical" "$pg" "$(field bench-s3 "generator -> $scenario" 0)"
done
echo
echo "End-to-end latency, PostgreSQL source, pgbench at a steady 1,000 transactions of 10 rows a second, one sink per run:"
echo
echo "| sink | events/s reached | events | p50 ms | p99 ms | max ms |"
echo "|---|---|---|---|---|---|"
awk 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }' "$out/bench-latency.txt"
echo
awk '$1 == "median" { printf "One transaction of 300,000 rows into the file sink, Kafka exactly-once, Redis and NATS at once (bench-memory.sh, medians of three rounds): %s rows/s, peak RSS %s MB.\n", $2, $4 }' \
  "$out/bench-memory.txt"
