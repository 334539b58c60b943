#!/usr/bin/env bash
# Settles the machine before a timed run, so it neither waits on another
# run's leftovers nor pays for them:
# - the private servers write out what the loads before left dirty
#   (PostgreSQL a checkpoint, MariaDB its buffer pool's dirty pages),
#   which they would otherwise do in the background, on the same two
#   cores, while the next run is timed;
# - the disk writes back what is dirty, and the clean page cache is
#   dropped: with the cache full, a 5M-row snapshot into the file sink
#   spent as much CPU in the kernel as in Sluice (docs/benchmarks.md).
#   Dropping needs root; without it, only the sync.
set -euo pipefail
env_file="${SLUICE_SERVICES_DIR:-/tmp/sluice-services}/env"
if [ -f "$env_file" ]; then
  # shellcheck source=/dev/null
  . "$env_file"
  PGPASSWORD="$SLUICE_TEST_PG_PASSWORD" psql -X -q -h 127.0.0.1 -p "$SLUICE_TEST_PG_PORT" -U "$SLUICE_TEST_PG_USER" \
    -d postgres -c CHECKPOINT
  my() { mariadb -h 127.0.0.1 -P "$SLUICE_TEST_MY_PORT" -u "$SLUICE_TEST_MY_USER" -p"$SLUICE_TEST_MY_PASSWORD" -N "$@"; }
  dirty() { my -e "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'" | awk '{ print $2 }'; }
  if [ "$(dirty)" -gt 0 ]; then
    # Flushed as fast as the disk takes it: at the default pace (200 pages
    # a second), a 500,000-row load took 20 s, a 5M-row one minutes.
    read -r pct io io_max < <(my -e "SELECT @@GLOBAL.innodb_max_dirty_pages_pct, @@GLOBAL.innodb_io_capacity, @@GLOBAL.innodb_io_capacity_max")
    my -e "SET GLOBAL innodb_io_capacity_max = 100000; SET GLOBAL innodb_io_capacity = 100000; SET GLOBAL innodb_max_dirty_pages_pct = 0"
    # At most a minute: a server that keeps writing never gets to zero.
    for _ in $(seq 600); do
      [ "$(dirty)" -gt 0 ] || break
      sleep 0.1
    done
    my -e "SET GLOBAL innodb_max_dirty_pages_pct = $pct; SET GLOBAL innodb_io_capacity = $io; SET GLOBAL innodb_io_capacity_max = $io_max"
  fi
fi
sync
if [ -w /proc/sys/vm/drop_caches ]; then
  echo 1 > /proc/sys/vm/drop_caches
else
  echo "bench: cannot drop the page cache (needs root); writes may pay for reclaim" >&2
fi
