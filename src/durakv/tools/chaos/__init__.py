"""`durakv chaos`: faults on a local cluster, each with an automatic heal, logged with timestamps (printed, and
as JSON lines in DIR/chaos/events.jsonl, which `durakv verify` reads to shade the fault window).

The nemesis (faults.Nemesis) acts on processes and on the network between AZs, never on keys; the clients of a
verification run live elsewhere (tools/verify/workload.py)."""

from .events import EventLog, events_path, log_size, read_events
from .faults import FAULTS, FaultError, Nemesis, wait_healthy

__all__ = ["EventLog", "events_path", "log_size", "read_events", "FAULTS", "FaultError", "Nemesis",
           "wait_healthy"]
