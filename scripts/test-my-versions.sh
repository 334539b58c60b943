#!/usr/bin/env bash
# The MySQL-source core suite against the second MariaDB (11.4, from Maven
# Central): types, transactions and rotation, schema history, GTID and
# file/offset resume, kill -9, purged binlogs, the snapshots and RESET
# MASTER recovery. The same tests as on the main server (Debian's 10.11),
# pointed at it by swapping SLUICE_TEST_MY_PORT and SLUICE_TEST_MY_SOCKET.
#
# Needs the env file of scripts/services.sh sourced, and runs the test
# binaries cargo already built (scripts/test.sh builds them first).
set -euo pipefail
cd "$(dirname "$0")/.."

export SLUICE_TEST_MY_PORT="${SLUICE_TEST_MY11_PORT:?source the env file scripts/services.sh start prints}"
export SLUICE_TEST_MY_SOCKET="$SLUICE_TEST_MY11_SOCKET"
echo "== MariaDB 11 on port $SLUICE_TEST_MY_PORT" >&2
cargo test --locked -q -p sluice-mysql --test binlog --test binlog_purge
cargo test --locked -q -p sluice --test mysql --test mysql_restart --test snapshot_mysql --test mysql_reset
