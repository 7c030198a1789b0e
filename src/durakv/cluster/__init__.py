"""Cluster control: topology/lease store, failover controller, local cluster processes (local.py, nats_procs.py)."""
