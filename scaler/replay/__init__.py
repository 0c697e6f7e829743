"""OFFLINE ENGINE, pure (no click, tqdm, matplotlib or files): a trace through KEDA/HPA with cold starts.

* ``scenario``   demand and its Prometheus view on 15 s ticks; ``Timeline`` -> ``Outcome`` (misses, cost)
* ``hpa``        KEDA + the HPA, one function per rule (numba-compiled), ``run_hpa`` (one metric)
* ``hpaloop``    the compiled sequential loop composing the rules tick by tick
* ``keda``       KEDA's layer: several metrics, activation, fallback, idle replicas -> the loop
* ``manifest``   a ScaledObject parsed and checked field by field -> ``Plan``; ``formula``: scalingModifiers
* ``triggers``   a Plan's triggers (forescale, prometheus, cron) at each poll, composed, replayed
* ``forecasts``  historical forecasts over the simulated span, scored and packed
* ``fitcache``   fits kept between replays in one process (the server's daily tuning), bounded
* ``variants``   the policy families, their knobs, the default of each, the sweep grid
* ``policies``   THE per-family code (one place per family), replayed through ``decide`` and ``hpa``
* ``engine``     ``run(trace, settings, variants, progress=...) -> Result``: behind backtest, sweep, tune
                 and the server's ``tuning: auto``
* ``frontier``   the miss-vs-cost plane: Pareto flags and the selection
"""
