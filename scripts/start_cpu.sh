#!/usr/bin/env bash
# CPU a durakv server spends from exec to its first PONG (user + system, all threads, from /proc/PID/stat), the
# mean of N starts: what each of the ~850 servers the test suite starts pays before its test begins.
#   scripts/start_cpu.sh [PYTHON] [N]        PYTHON: the interpreter whose durakv to start (default: python3)
# Compare two trees with PYTHONPATH=<tree>/src, interleaving their runs on a quiet machine.
set -euo pipefail
PY=${1:-python3}; N=${2:-10}
TICK_MS=$((1000 / $(getconf CLK_TCK)))
total=0
for _ in $(seq "$N"); do
  dir=$(mktemp -d)
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$PY" -m durakv server --port "$port" --bind 127.0.0.1 --dir "$dir" --durability sync >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 500); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.02; done
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  total=$((total + ticks))
done
echo "mean CPU from exec to the first PONG: $((total * TICK_MS / N)) ms over $N starts ($PY)"
