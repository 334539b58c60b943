#!/usr/bin/env bash
# Writes back what is dirty and drops the clean page cache, so a timed
# run neither waits on another's writeback nor pays, page by page, for
# reclaiming a full cache: with the cache full, a 5M-row snapshot into
# the file sink spent as much CPU in the kernel as in Sluice
# (docs/benchmarks.md). Dropping needs root; without it, only the sync.
sync
if [ -w /proc/sys/vm/drop_caches ]; then
  echo 1 > /proc/sys/vm/drop_caches
else
  echo "bench: cannot drop the page cache (needs root); writes may pay for reclaim" >&2
fi
