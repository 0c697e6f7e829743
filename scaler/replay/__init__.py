"""OFFLINE ENGINE, pure (no click, tqdm, matplotlib or files): a trace through KEDA/HPA with cold starts.

The engine and its inputs:

* ``engine``     ``run(trace, settings, variants) -> Result``: behind backtest, sweep, tune and ``tuning: auto``;
                 its steps in order, the work run by ``execution`` (fits in threads or a process pool); ``prepare``:
                 its first step (the simulated span, the replica size, the KEDA/HPA scenario: ``Setup``)
* ``settings``   ``Settings`` (every knob), ``Trace``, ``ReplayError``
* ``variant``    ``Variant``: one configuration of one family (plain data); ``variants``: the defaults and the sweep
* ``families``   THE family table: each policy family one module (knobs, metadata mapping, evaluation, label)
* ``batches``    configurations evaluated in batches, stage 1 shared; ``policies``: the decision at every poll
* ``search``     the targeted headroom search; ``frontier``: the miss-vs-cost plane and the selection; ``tune``: the
                 sweep, the search and the selection of one series
* ``anchors``    published autoscalers re-implemented; ``calibration``: the window-max band

KEDA and the HPA:

* ``scenario``   demand and its Prometheus view on 15 s ticks; ``Timeline`` -> ``Outcome`` (misses, cost);
                 ``tokenload``: a trace with shape judged on the binding load of requests and tokens
* ``hpa``        the HPA's settings and ticks; ``hparules``: its rules (numba-compiled); ``hpaloop``: the compiled
                 loop composing them
* ``keda``       KEDA's layer: several metrics, activation, fallback, idle replicas; ``run_hpa`` (one metric)
* ``manifest``   a ScaledObject parsed and checked field by field -> ``Plan`` (its formula: ``scaler.formula``);
                 ``manifesttrigger``: one trigger of it; ``manifestfields``: the field readers, ``ManifestError``
* ``triggers``   a Plan's triggers (forescale, prometheus, cron) at each of KEDA's calls, composed, replayed
* ``selfwatch``  the server's drift response over a sequence of answers (triggers and ``drift`` use it)
* ``fleetloop``  a fleet replayed jointly under a GPU budget, tick by tick (``scaler.budget``'s arbitration of the
                 answers and of the free GPUs); ``fleetmember``: one workload's KEDA + HPA and pods in that loop
* ``closedloop`` the server's closed loop (``scaler.feedback``) replayed call by call against the queue; ``llm``:
                 TTFT and ITL from the queue and the load per replica (``ttft_p95_s``, ``itl_p95_s``);
                 ``saturation``: the server's capacity learner fed a replayed policy's queue and served rate

Forecasts and the world around the replicas:

* ``forecasts``  historical forecasts over the simulated span, scored and packed; ``fitcache``: fits kept between
                 replays in one process
* ``world``      the cluster (``cluster``; its plain data ``nodepool``), the queue (``latency``) and the scenarios (``scenarios``); ``pools``:
                 replicas placed on GPU node pools of several types, their GPU-hours and dollars
* ``advice``, ``plan``  ``backtest --advise``; ``drift``: the drift response replayed
"""
