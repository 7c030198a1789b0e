"""Cluster control: topology/lease store, failover controller, local cluster processes (local.py, nats_procs.py).

LocalCluster (local.py) is assembled from one mixin module per concern; see its docstring.
"""
