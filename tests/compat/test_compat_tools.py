"""The industry's own clients against durakv: redis-cli and redis-benchmark (from Debian's redis-tools)."""

import shutil
import subprocess

REDIS_CLI = shutil.which("redis-cli")
REDIS_BENCHMARK = shutil.which("redis-benchmark")

if not (REDIS_CLI and REDIS_BENCHMARK):
    raise RuntimeError("redis-cli and redis-benchmark are needed: apt-get install redis-tools (.ci/run does)")


def cli(port, *args, input_text=None):
    return subprocess.run([REDIS_CLI, "-p", str(port), *args], capture_output=True, text=True, timeout=60,
                          input=input_text)


def test_redis_cli_basic(shared_server):
    port = shared_server.port
    assert cli(port, "FLUSHALL").stdout.strip() == "OK"
    assert cli(port, "SET", "greeting", "hello world").stdout.strip() == "OK"
    assert cli(port, "GET", "greeting").stdout.strip() == "hello world"
    assert cli(port, "--no-raw", "HGETALL", "nohash").stdout.strip() == "(empty array)"
    out = cli(port, input_text="RPUSH l a b c\nLRANGE l 0 -1\n").stdout.split()
    assert out == ["3", "a", "b", "c"]
    assert "redis_version" in cli(port, "INFO", "server").stdout
    assert cli(port, "-3", "PING").stdout.strip() == "PONG"  # RESP3 via HELLO 3


def test_redis_cli_scan_and_pipe(shared_server):
    port = shared_server.port
    cli(port, "FLUSHALL")
    proto = "".join(f"SET pipe:{i} {i}\n" for i in range(1000))
    res = cli(port, "--pipe", input_text=proto)
    assert "errors: 0" in res.stdout and "replies: 1000" in res.stdout
    keys = cli(port, "--scan", "--pattern", "pipe:*").stdout.split()
    assert len(keys) == 1000


def test_redis_benchmark_default_tests_without_errors(shared_server):
    """redis-benchmark -t over its default test list: every test must complete with no error replies."""
    tests = "ping_inline,ping_mbulk,set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange,mset"
    res = subprocess.run([REDIS_BENCHMARK, "-p", str(shared_server.port), "-t", tests, "-n", "2000", "-c", "10",
                          "-q", "--csv"], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    assert "ERR" not in res.stdout and "error" not in res.stderr.lower(), (res.stdout, res.stderr)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith('"') and not ln.startswith('"test"')]
    names = {ln.split(",")[0].strip('"') for ln in lines}
    assert len(lines) >= 16, res.stdout
    assert any(n.startswith("LRANGE") for n in names) and "MSET (10 keys)" in names
