"""ONLINE: the KEDA external scaler (``forescale serve``).

* ``server``    composition root: the one place that reads the clock, the environment and signals
* ``service``   the gRPC servicer: proto <-> ``Decision``, errors -> status codes, nothing else
* ``registry``  the tracked ScaledObjects: refresh, decide, export; the only writer of a ``Workload``
* ``workload``  ``Workload`` and the protocols of the two background services
* ``fitting``   background forecast fits in worker processes
* ``tuning``    ``tuning: auto``: the replay engine on the workload's own history
* ``state``     the one JSON state store (forecasts, tuning choices) under --state-dir
* ``metrics``   the scaler's own Prometheus metrics
"""
