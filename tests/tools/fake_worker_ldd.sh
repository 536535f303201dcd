#!/bin/sh
# ldd as a worker without libspdlog installed would answer: the real ldd's lines, except that
# libspdlog.so.* is "not found" unless LD_LIBRARY_PATH's first folder holds it (the worker's
# tensorfold/lib, where scripts/sync_workers.sh copies what a worker lacks). For fake_ssh.sh.
first=${LD_LIBRARY_PATH%%:*}
/usr/bin/ldd "$@" | awk -v dir="$first" '
  $1 ~ /^libspdlog\.so/ {
    if (system("test -f \"" dir "/" $1 "\"") != 0) { print "\t" $1 " => not found"; next }
  }
  { print }'
