#!/usr/bin/env bash
# Coordinator throughput and peak RSS: generator alone (the ceiling),
# generator → memory sink, generator → file sink; 2M events each.
set -euo pipefail
cd "$(dirname "$0")/.."
# Built first, so the build's writes are settled with the rest.
cargo bench -p sluice --bench pipeline --locked --no-run
scripts/bench-settle.sh
cargo bench -p sluice --bench pipeline --locked
