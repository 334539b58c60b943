#!/usr/bin/env bash
# The PostgreSQL core suite against every other supported major: the type
# zoo, TOAST, truncate, slot acknowledgement, partitions, the initial and
# the incremental snapshot, kill -9 and server restarts. The same tests as
# on the main server (15), pointed at each major's private server by
# swapping SLUICE_TEST_PG_PORT and SLUICE_TEST_PG_SOCKET.
#
#   scripts/test-pg-versions.sh [--restarts-only] [MAJOR...]   (default: every major the services run)
#
# SLUICE_TEST_PG_RESTARTS=no leaves out the crash-restart test.
#
# Needs the env file of scripts/services.sh sourced, and runs the test
# binaries cargo already built (scripts/test.sh builds them first):
# `--workspace` keeps the features of `cargo test --workspace`, where `-p`
# would build a second copy of the dependencies with other features.
set -euo pipefail
cd "$(dirname "$0")/.."

# --restarts-only: only the crash-restart test, one major at a time.
restarts=${SLUICE_TEST_PG_RESTARTS:-yes}
suite=yes
if [ "${1:-}" = --restarts-only ]; then
  shift
  suite=no
  restarts=yes
fi
majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
  read -r -a majors <<< "${SLUICE_TEST_PG_MAJORS:?source the env file scripts/services.sh start prints}"
fi
for major in "${majors[@]}"; do
  [ "$suite" = yes ] || break
  port_var="SLUICE_TEST_PG${major}_PORT"
  port="${!port_var:?no server for PostgreSQL $major: scripts/services.sh starts 13, 14, 16, 17 and 18}"
  echo "== PostgreSQL $major on port $port" >&2
  export SLUICE_TEST_PG_PORT="$port"
  export SLUICE_TEST_PG_SOCKET="${SLUICE_SERVICES_DIR:-/tmp/sluice-services}/postgres-$major"
  if [ "$major" -ge 15 ]; then
    cargo test --locked -q --workspace --test replication --test real_world
  else
    # pgoutput before 15 keeps a partition's publication membership from
    # before ATTACH or DETACH PARTITION until a publication changes; the
    # source renews it within seconds, but this test's changes share the
    # attach's transaction (docs/postgres.md, "Partitions attached or
    # detached while streaming"). Its neighbour in real_world.rs shows the
    # renewal on every major.
    cargo test --locked -q --workspace --test replication --test real_world \
      -- --skip partitions_attached_and_detached_mid_stream_lose_nothing
  fi
  if [ "$major" -ge 14 ]; then
    cargo test --locked -q --workspace --test snapshot --test incremental --test crash
  else
    # Before 14 pgoutput sends no messages, so incremental snapshots and
    # the modes that re-read are refused: this test checks the refusal.
    cargo test --locked -q --workspace --test snapshot --test crash -- --skip under_when_needed_
    cargo test --locked -q --workspace --test incremental -- --exact \
      incremental_snapshots_are_taken_from_postgresql_14_on_and_refused_before
  fi
done
# Crash restarts, one major at a time (scripts/test.sh runs two lanes of
# the above side by side): beside the other lane, the test timed out on 18
# twice waiting for rows after the restart, and passed alone every time;
# why is not yet found (issue 24).
if [ "$restarts" = yes ]; then
  for major in "${majors[@]}"; do
    port_var="SLUICE_TEST_PG${major}_PORT"
    echo "== PostgreSQL $major: server restarts" >&2
    SLUICE_TEST_PG_PORT="${!port_var}" SLUICE_TEST_PG_SOCKET="${SLUICE_SERVICES_DIR:-/tmp/sluice-services}/postgres-$major" \
      cargo test --locked -q --workspace --test postgres_restart
  done
fi
