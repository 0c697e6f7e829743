"""FLEET: tune many workloads from one query (or a CSV with a series column), locally or on Ray.

* ``workloads``  pure: a multi-series range answer split into workloads by labels, their names, the
                 per-workload query, the screening (too short, too flat), the chunked range plan
* ``jobs``       pure: one workload's tuning job (``forescale tune``'s ``engine.run`` + ``frontier.select``),
                 its input hash, the result cache, the fleet totals
* ``budgeted``   pure: the tuned fleet replayed jointly within a GPU budget (``replay.fleetloop``) by both rules,
                 who gave way, when, at what cost
* ``executor``   where the jobs run: a local process pool (default) or Ray tasks (``ray``), with the cache

Imports run ``cli -> fleet -> replay -> core``: nothing here imports ``scaler.cli`` or ``scaler.serve``.
"""
