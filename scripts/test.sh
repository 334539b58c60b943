#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every unit, property and
# integration test, against private servers started by scripts/services.sh.
# The README and .ci/run both call this script.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Kafka sink's librdkafka links Debian's OpenSSL for TLS and SASL, and
# libcurl to fetch OAUTHBEARER tokens.
if ! pkg-config --exists openssl libcurl 2>/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev libcurl4-openssl-dev pkg-config
fi
# tests/cli.rs renders the manual pages with groff.
if ! command -v groff >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq groff-base
fi

# A clean clone gains nothing from incremental artifacts, and they double
# the size of target/.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# What the disk holds at the start: target/ reaches about 7 GB, and the
# servers' data and the jars about 3 GB more.
df -h . >&2
cargo fmt --all -- --check
# The size limits of docs/architecture.md: files of 600 lines, functions of 100.
python3 scripts/check-size.py
cargo clippy --workspace --all-targets --locked -- -D warnings

env_file=$(scripts/services.sh start)
trap 'scripts/services.sh stop' EXIT
# shellcheck source=/dev/null
. "$env_file"
# Debezium embedded, the oracle of tests/debezium.rs (jars from Maven Central).
scripts/debezium.sh fetch >/dev/null
# Real consumers of the output formats (tests/cloudevents.rs, tests/consumers.rs):
# the CloudEvents SDKs from PyPI and npm, Kafka Connect's JsonConverter and
# Flink's debezium-json from Maven Central.
scripts/consumers.sh python >/dev/null
scripts/consumers.sh java >/dev/null
scripts/consumers.sh node >/dev/null
cargo test --workspace --locked
# The packaging (docs/deploy.md): Dockerfile, Helm chart, manifests and
# systemd unit, with helm, hadolint and the Kubernetes API's Go types; no
# cargo and no servers, so it runs beside the version lanes, which mostly
# wait on their servers.
packaging_log=$(mktemp)
scripts/check-packaging.sh >"$packaging_log" 2>&1 &
packaging=$!
# The PostgreSQL core suite on 13, 14, 16, 17 and 18 (15 ran the whole
# suite above), in two lanes: the servers are separate, and the tests
# mostly wait on them.
SLUICE_TEST_PG_RESTARTS=no scripts/test-pg-versions.sh 13 16 18 &
lane=$!
SLUICE_TEST_PG_RESTARTS=no scripts/test-pg-versions.sh 14 17
wait "$lane"
scripts/test-pg-versions.sh --restarts-only
# The MySQL-source core suite on MariaDB 11.4 and MySQL 8.0 (10.11 ran
# the whole suite), side by side: separate servers.
scripts/test-my-versions.sh mariadb-11 &
lane=$!
scripts/test-my-versions.sh mysql-80
wait "$lane"
if ! wait "$packaging"; then
  cat "$packaging_log"
  exit 1
fi
cat "$packaging_log"

# The short torture runs (README, "Torture"): workload through every sink
# under kills, outages, cut connections and PostgreSQL restarts, compared
# event by event, with the PostgreSQL pipeline on the newest and on the
# oldest supported major, the newest as a primary and standby that fail
# over mid-run, and a fleet of three instances (kills, instances stopped
# past their leases, store outages). Debug builds: the pace suits them.
# Built with the features of `cargo test --workspace` (`--tests`), where
# `cargo run -p sluice-torture` would compile a second copy of most
# dependencies.
cargo build --workspace --bins --tests --locked
target/debug/sluice-torture --minutes 2 --sluice target/debug/sluice --postgres-major 18 --failover
target/debug/sluice-torture --minutes 1 --sluice target/debug/sluice --postgres-major 13
target/debug/sluice-torture --minutes 1.5 --sluice target/debug/sluice --fleet 3
