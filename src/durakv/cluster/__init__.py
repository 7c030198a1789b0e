"""Cluster control: topology/lease store, failover controller, local cluster processes (local.py, nats_procs.py).

LocalCluster (local.py) holds one part per concern (launcher, readiness, partition proxy, shard membership,
NATS view, status), each in its own module; its docstring says which part owns what.
"""
