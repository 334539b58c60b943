#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every unit, property and
# integration test, against private servers started by scripts/services.sh,
# then a short torture run.
# The README and .ci/run both call this script.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

env_file=$(scripts/services.sh start)
trap 'scripts/services.sh stop' EXIT
# shellcheck source=/dev/null
. "$env_file"
cargo test --workspace --locked


# A short torture run: a PostgreSQL workload through every sink while
# Sluice is killed, servers pause, connections drop and PostgreSQL
# restarts; it fails on any lost event or any exactly-once duplicate.
cargo build --workspace --locked --bins
cargo run --locked -p sluice-torture -- --minutes 2 --sluice target/debug/sluice
