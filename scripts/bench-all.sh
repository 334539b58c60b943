#!/usr/bin/env bash
# Every benchmark in one run, and one table: scenario, Sluice events/s, the
# ceiling measured in this same run (generator alone, pg_recvlogical,
# mariadb-binlog, COPY and mariadb --quick for the snapshots, Kafka's own
# producer benchmark), their ratio, Sluice's peak RSS, Debezium on the same
# backlog where the script runs it (embedded; on Kafka Connect for
# PostgreSQL → Kafka), and for the PostgreSQL
# source the end-to-end latency at a steady 10k events/s (p50 / p99,
# bench-latency.sh); then that latency for every sink. Each script runs
# ROUNDS times (default 3) and every figure is the median of its rounds;
# a ratio is that of two medians. bench-memory.sh runs once: it takes
# three rounds of its own. Prints Markdown; docs/benchmarks.md holds the
# latest output.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
# BENCH_OUT keeps every script's output of every round in that directory;
# with BENCH_RENDER=1 as well, the table is printed from the outputs
# already there and nothing runs.
if [ "${BENCH_RENDER:-}" = 1 ]; then
  out=${BENCH_OUT:?BENCH_RENDER=1 needs BENCH_OUT, the directory of an earlier run}
else
  started_services=no
  if [ ! -f "${SLUICE_SERVICES_DIR:-/tmp/sluice-services}/env" ]; then
    started_services=yes
    scripts/services.sh start >/dev/null
  fi
  if [ -n "${BENCH_OUT:-}" ]; then
    out=$BENCH_OUT
    mkdir -p "$out"
  else
    out=$(mktemp -d)
  fi
  cleanup() {
    if [ -z "${BENCH_OUT:-}" ]; then rm -rf "$out"; fi
    if [ "$started_services" = yes ]; then scripts/services.sh stop; fi
  }
  trap cleanup EXIT
  run_bench() { # script, output file
    echo "running scripts/$1.sh ($2)" >&2
    # What the script before wrote is on the disk, and out of the page
    # cache, before this one starts.
    scripts/bench-settle.sh
    "scripts/$1.sh" > "$out/$2.txt" 2> "$out/$2.err" || { cat "$out/$2.err" >&2; exit 1; }
  }
  # Round after round, so a slow spell of the machine falls on one round
  # of every script rather than on every round of one.
  for round in $(seq 1 "$ROUNDS"); do
    for bench in bench bench-postgres bench-mysql bench-kafka bench-s3 bench-latency bench-snapshot bench-snapshot-mysql; do
      run_bench "$bench" "$bench.$round"
    done
  done
  run_bench bench-memory bench-memory
fi

# The median of the numbers on standard input (the lower middle one of an
# even count); empty without any.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
# The figures each script prints, by the labels it prints them with: the
# first line with that label in each round, or the largest (`best`: a
# ceiling measured before and after Sluice), then the median of the rounds.
field() {
  for round in $(seq 1 "$ROUNDS"); do
    awk -v label="$2" -v column="$3" 'index($0, label) == 1 { print $(NF - column); exit }' "$out/$1.$round.txt"
  done | median
}
best() {
  for round in $(seq 1 "$ROUNDS"); do
    awk -v label="$2" -v column="$3" 'index($0, label) == 1 { print $(NF - column) }' "$out/$1.$round.txt" | sort -g | tail -1
  done | median
}
# Field $3 of the line whose field $2 is $4, in each round's output of $1; the median.
where() {
  for round in $(seq 1 "$ROUNDS"); do
    awk -v at="$2" -v key="$4" -v column="$3" '$at == key { print $column; exit }' "$out/$1.$round.txt"
  done | median
}
# Sluice's peak RSS (MB) as script $1 prints it, the median of the rounds.
peak_rss() {
  for round in $(seq 1 "$ROUNDS"); do
    awk '/^sluice peak RSS/ { print $4; exit }' "$out/$1.$round.txt"
  done | median
}

generator=$(field bench generator-only 1)
pg=$(best bench-postgres "pg_recvlogical" 2)
my=$(best bench-mysql "mariadb-binlog" 1)
pg_rss=$(field bench-postgres "sluice postgres -> file sink" 0)
pg_peer=$(field bench-postgres "debezium embedded" 2)
my_peer=$(field bench-mysql "debezium embedded" 1)
connect_peer=$(field bench-kafka "debezium 3.6.1 on kafka connect" 2)
my_rss=$(peak_rss bench-mysql)

# A sink's "p50 / p99" ms from bench-latency.sh; "n/a" where not measured.
latency() {
  local p50 p99
  p50=$(where bench-latency 1 4 "$1")
  p99=$(where bench-latency 1 5 "$1")
  if [ -n "$p50" ]; then printf '%.0f / %.0f' "$p50" "$p99"; else printf 'n/a'; fi
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
if ! grep -q "^generator-to-shm-file *skipped" "$out/bench.1.txt"; then
  row "generator → file sink in /dev/shm" "$(field bench generator-to-shm-file 1)" "generator alone" "$generator" \
    "$(field bench generator-to-shm-file 0)"
fi
row "PostgreSQL → file sink" "$(field bench-postgres "sluice postgres -> file sink" 2)" "pg_recvlogical" "$pg" "$pg_rss" file "$pg_peer"
row "MariaDB → file sink" "$(field bench-mysql "sluice mysql" 1)" "mariadb-binlog" "$my" "$my_rss" none "$my_peer"
row "PostgreSQL snapshot → file sink" "$(field bench-snapshot "sluice snapshot" 1)" "COPY to /dev/null" \
  "$(best bench-snapshot "COPY -> /dev/null" 1)" "$(peak_rss bench-snapshot)"
row "MariaDB snapshot → file sink" "$(field bench-snapshot-mysql "sluice snapshot" 1)" "mariadb --quick to /dev/null" \
  "$(best bench-snapshot-mysql "mariadb --quick -> /dev/null" 1)" "$(peak_rss bench-snapshot-mysql)"
for mode in at-least-once "exactly-once (read_back)" "exactly-once (transactions)"; do
  row "generator → Kafka, $mode" "$(field bench-kafka "generator -> kafka, $mode" 2)" "generator alone" "$generator" "$(field bench-kafka "generator -> kafka, $mode" 0)"
  case $mode in
    at-least-once) sink=kafka_alo ;;
    *read_back*) sink=kafka_read_back ;;
    *) sink=kafka_eos ;;
  esac
  row "PostgreSQL → Kafka, $mode" "$(field bench-kafka "postgres -> kafka, $mode" 2)" "pg_recvlogical" "$pg" "$(field bench-kafka "postgres -> kafka, $mode" 0)" "$sink" "$connect_peer"
done
row "the Kafka sink alone (generator → Kafka, at-least-once)" "$(field bench-kafka "generator -> kafka, at-least-once" 2)" "kafka-producer-perf-test" \
  "$(best bench-kafka "kafka-producer-perf-test" 2)" "$(field bench-kafka "generator -> kafka, at-least-once" 0)"
for scenario in "s3 parquet" "local parquet" "s3 json lines"; do
  row "generator → ${scenario/s3/S3}" "$(field bench-s3 "generator -> $scenario" 3)" "pg_recvlogical" "$pg" "$(field bench-s3 "generator -> $scenario" 0)"
done
echo
echo "End-to-end latency, PostgreSQL source, pgbench at a steady 1,000 transactions of 10 rows a second, one sink per run (each column the median of the rounds):"
echo
echo "| sink | events/s reached | events | p50 ms | p99 ms | max ms |"
echo "|---|---|---|---|---|---|"
for sink in $(awk 'NR > 1 { print $1 }' "$out/bench-latency.1.txt"); do
  printf '| %s | %s | %s | %s | %s | %s |\n' "$sink" "$(where bench-latency 1 2 "$sink")" "$(where bench-latency 1 3 "$sink")" \
    "$(where bench-latency 1 4 "$sink")" "$(where bench-latency 1 5 "$sink")" "$(where bench-latency 1 6 "$sink")"
done
echo
awk '$1 == "median" { printf "One transaction of 300,000 rows into the file sink, Kafka exactly-once, Redis and NATS at once (bench-memory.sh, medians of three rounds): %s rows/s, peak RSS %s MB.\n", $2, $4 }' \
  "$out/bench-memory.txt"
