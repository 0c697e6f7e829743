"""ONLINE: the KEDA external scaler (``forescale serve``).

* ``server``    composition root: the one place that reads the clock, the environment and signals; ``tls``: gRPC's
                 TLS credentials, re-read after the files change on disk
* ``service``   the gRPC servicer: proto <-> ``Decision``, errors -> status codes, nothing else
* ``registry``  the tracked ScaledObjects: refresh, decide, export; the only writer of a ``Workload``; ``answer``:
                 the decision read from memory and what is recorded of it; ``cadence``: a trigger's timings
                 (refresh interval, late, stale, retired)
* ``workload``  ``Workload`` and the protocols of the two background services
* ``fitting``   background forecast fits in worker processes (``fitjob``: the fit a worker process runs);
                 ``forecastdoc``: a forecast as the state store keeps it (its key, its document, read back)
* ``tuning``    ``tuning: auto``: the replay engine on the workload's own history; ``tuningwindow``: the history a
                 run sweeps (its cutoff's window, or a first choice's earlier one); ``tuningdoc``: a choice as the state
                 store keeps it (its key, its document, read back)
* ``state``     the one JSON state store (forecasts, tuning choices, what was learned online) under --state-dir;
                 ``keeper``: the learned capacity, the closed loop's factor and the forecast-error scoring kept
                 across a restart
* ``metrics``   the scaler's own Prometheus metrics
* ``opsmetrics``  metrics of the scaler's own operation (query budget, connections, workers)
* ``refresher``  the observation queries behind every decision; ``registryconfig``: the registry's settings;
                 ``load``: the load those queries and the fits read (with ``tokenQuery`` or ``capacityModel``, the
                 binding load); ``capacityfile``: the capacityModel file read off the RPC threads, its model put in
                 force; ``llmstate``: an LLM trigger's learned capacity and its token mix's history
* ``identity``   a trigger's identity (its metadata's digest); ``coldstart``: ``coldStartFrom: cluster``
* ``worker``     the background-worker skeleton behind fitting and tuning
* ``http``       the HTTP port (/metrics, /healthz, the status page); ``status``: the page (``statusllm``: its
                 LLM part: token mix, capacity used, queue, TTFT/ITL, learned capacity); ``view``: per-trigger
                 detail and the decision log; ``watch``: live scores and drift per trigger
* ``ratelimit``  a repeated log message at most once per interval; ``logs``: the log lines (text, control
                 characters escaped, or JSON)
* ``admission``  room for a new trigger: the cap, the namespace's quota, which trigger goes for a new one
* ``gate``       fair shares of the Prometheus I/O per host:port and per caller namespace
* ``threads``    a thread pool that gives idle threads back (the gRPC server's executor)
* ``ledger``    a fleet GPU budget live (``--budget-file``): every member's claim, ``scaler.budget``'s arbitration
                 on each answer, the claims shared with the other replicas (``/budget/claims``, ``--budget-peers``)
* ``decisionlog``  the durable decision log (JSON lines under --state-dir); ``files``: state files opened
                 through a directory descriptor, never through a link
"""
