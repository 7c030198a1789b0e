"""The pure parts of `durakv verify`: the history model, the checkers and the report rendering.

    from durakv.tools.verify import Recorder, check_registers, check_acked_writes
    rec = Recorder()
    rec.invoke(1, "write", "k", "v1"); rec.ok(1)
    rec.invoke(2, "read", "k"); rec.ok(2, "v1")
    check_registers(rec.history(), time_limit_s=10).status   # "ok" | "fail" | "unknown"

What this module imports is pure (no sockets, no asyncio). The runner of `durakv verify` sits beside it and is
imported only by name: workload.py (the clients that record histories), scenarios.py (workload + fault +
checkers + report, per scenario) and cli.py; the nemesis is tools/chaos/.
"""

from .acked import AckedWritesResult, LostKey, Window, check_acked_writes, write_rate
from .dirty import DirtyRead, DirtyReadsResult, check_dirty_reads
from .history import (ADD, CAS, FAIL, FAULT_START, FAULT_STOP, INFO, INVOKE, NEMESIS, OK, READ, WRITE,
                      WRITE_KEY, FaultWindow, History, Op, Operation, Recorder, pair)
from .linearizable import (LINEARIZABLE, NOT_LINEARIZABLE, UNKNOWN, Counterexample, KeyResult,
                           LinearizabilityResult, check_registers, describe)
from .report import (Plot, Report, Table, acked_writes_report, acked_writes_table, async_rpo_table,
                     failover_report, failover_table, latency_report, latency_table, linearizability_report,
                     linearizability_table, write_report)

__all__ = [
    "ADD", "CAS", "FAIL", "FAULT_START", "FAULT_STOP", "INFO", "INVOKE", "NEMESIS", "OK", "READ", "WRITE",
    "WRITE_KEY", "FaultWindow", "History", "Op", "Operation", "Recorder", "pair",
    "LINEARIZABLE", "NOT_LINEARIZABLE", "UNKNOWN", "Counterexample", "KeyResult", "LinearizabilityResult",
    "check_registers", "describe",
    "AckedWritesResult", "LostKey", "Window", "check_acked_writes", "write_rate",
    "DirtyRead", "DirtyReadsResult", "check_dirty_reads",
    "Plot", "Report", "Table", "acked_writes_report", "acked_writes_table", "async_rpo_table", "failover_report",
    "failover_table", "latency_report", "latency_table", "linearizability_report", "linearizability_table",
    "write_report",
]
