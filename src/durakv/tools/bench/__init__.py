"""`durakv bench`: a load generator for RESP servers, and `durakv bench compare` (durakv vs Redis vs Valkey).

Programmatic use:
    from durakv.tools.bench import BenchConfig, run_bench
    result = run_bench(BenchConfig(port=6379, rate=2000, duration=3))
    result.report["commands"]["GET"]["latency_ms"]["p99"]
"""

from .config import BenchConfig, plan_clients
from .runner import BenchError, BenchResult, format_report, run_bench

__all__ = ["BenchConfig", "BenchError", "BenchResult", "format_report", "plan_clients", "run_bench", "main"]


def main(argv=None):
    from .cli import main as _main
    return _main(argv)
