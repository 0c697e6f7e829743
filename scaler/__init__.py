"""forescale: a predictive KEDA external scaler for GPU inference services.

Imports run one way (tests/test_architecture.py walks them; no circle): ``cli`` -> ``serve`` | ``fleet`` ->
``replay`` -> core -> ``forecaster``; ``loadtest`` and ``probe`` stand alone; only ``serve.tuning`` reaches ``replay``.

* core      ``spec`` (metadata -> ``ScalerSpec``; ``reader``: the typed getters and their errors; ``specvalues``:
            the form of each single value) and
            ``specwrite`` (the way back), ``keys`` (the vocabulary, every
            default once), ``params`` (``ScalerSpec`` -> ``PolicyParams``, the one translation), ``policy``
            (``decide``), ``deadband`` (KEDA's milli-quantities, the HPA's tolerance band), ``scaledobject``
            (KEDA's and the HPA's defaults, the manifest writer), ``durations``, ``limits``, ``misstarget``,
            ``coldstart``, ``coldstartkeys`` and ``coldstart_ksm`` (T_cold from the cluster), ``drift``
            (live scores), ``events`` (``eventsFile``), ``credentials``, ``prom``, ``prompool`` and ``promerror``
            (Prometheus),
            ``kedacheck`` (what KEDA refuses in a ScaledObject; ``kedaschema``: what the API
            server refuses first, the CRD's schema made strict), ``manifest_yaml`` (the one bounded YAML loader),
            ``formula`` (KEDA's scalingModifiers formula), ``tokens`` (a replica's token budget, the binding load),
            ``capacity`` (the capacity model file: capacity over prompt and answer lengths, fitted on a loadtest
            grid; ``capacitykeys``: the trigger keys that read it, and ``capacity: learned``), ``learned`` (capacity
            learned online at saturation, bounded, with hysteresis),
            ``feedback`` (the closed loop on the model server's queue, TTFT and ITL: one rule, server and replay),
            ``leaderror`` (the lead's forecast-error part measured from the live scores: forecastErrorSeconds auto),
            ``gpus`` (GPU types, MIG slices, the pool file),
            ``money`` (prices, lost requests' value, the break-even rate) and ``budget`` (a fleet GPU budget's
            arbitration, one rule for the replay and the server)
* ``serve``     ONLINE: the gRPC server KEDA calls, background fits and tuning
* ``replay``    OFFLINE ENGINE, pure: a trace through KEDA/HPA with cold starts, per policy family
* ``fleet``     many workloads of one query tuned as ``forescale tune`` tunes one
* ``cli``       VERBS: ``forescale serve|backtest|tune|check|probe|loadtest``; click, tqdm, matplotlib and files
* ``probe``     ``forescale probe``: T_cold of a real torch model, phase by phase
* ``loadtest``  ``forescale loadtest``: what one replica serves at a latency SLO
* ``drill``     ``forescale drill``: the real KEDA, HPA and kube-apiserver drive forescale and judge the replay
* ``_proto`` (generated gRPC stubs) and ``protogen`` (the one script that generates them)
"""
