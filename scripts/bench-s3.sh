#!/usr/bin/env bash
# Object storage sink throughput: generator → S3 Parquet (2M events, the
# default 256 MiB files), and for comparison generator → local Parquet,
# generator → S3 JSON Lines and generator → file sink; events/s, MB/s of
# files written, peak RSS. The ceiling it must keep up with is the
# PostgreSQL source's (pg_recvlogical), measured in the same run by
# scripts/bench-postgres.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

TX_COUNT=200000
ROWS_PER_TX=10
TOTAL=$((TX_COUNT * ROWS_PER_TX))

# shellcheck source=scripts/bench-common.sh
. scripts/bench-common.sh


s3="bucket: $SLUICE_TEST_S3_BUCKET, endpoint: \"$SLUICE_TEST_S3_ENDPOINT\", path_style: true, access_key_id: $SLUICE_TEST_S3_ACCESS_KEY, secret_access_key: $SLUICE_TEST_S3_SECRET_KEY"
scenarios=(
  "generator -> s3 parquet (snappy)|type: s3|config: { id: lake, $s3, prefix: bench-$run_id-pq }|$SLUICE_TEST_S3_DATA/bench-$run_id-pq"
  "generator -> local parquet (snappy)|type: s3|config: { id: lake, local: $work/lake }|$work/lake"
  "generator -> s3 json lines|type: s3|config: { id: lake, $s3, prefix: bench-$run_id-js, format: jsonl }|$SLUICE_TEST_S3_DATA/bench-$run_id-js"
  "generator -> file sink|type: file|config: { id: file, path: $work/out.jsonl }|$work/out.jsonl"
)
ceiling=$(scripts/bench-postgres.sh 2>/dev/null | awk '/pg_recvlogical/ { print $(NF-1) }' | sort -n | tail -1)

printf '%-40s %12s %10s %10s %12s\n' "run" "events/s" "seconds" "MB/s" "peak RSS MB"
for scenario in "${scenarios[@]}"; do
  IFS='|' read -r label kind settings output <<< "$scenario"
  cat > "$work/bench.yaml" <<YAML
pipelines:
  - name: bench-$run_id
    source: { type: generator, config: { id: gen-$run_id-$RANDOM, tx_count: $TX_COUNT, rows_per_tx: $ROWS_PER_TX } }
    sinks:
      - $kind
        $settings
YAML
  read -r secs peak < <(measure "$work/bench.yaml" never)
  bytes=$(du -sb --exclude=.sluice-staging "$output" | cut -f1)
  printf '%-40s %12.0f %10.2f %10.1f %12.1f\n' "$label" "$(calc "$TOTAL / $secs")" "$secs" \
    "$(calc "$bytes / 1048576 / $secs")" "$(calc "$peak / 1024")"
done
printf '%-40s %12.0f   (best of two runs, same machine, same run)\n' "ceiling: pg_recvlogical -> /dev/null" "$ceiling"
