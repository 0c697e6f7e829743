"""forescale: a predictive KEDA external scaler for GPU inference services.

Imports run one way (a test walks them): ``cli`` -> ``serve`` | ``replay`` -> core -> ``forecaster``.

* core    ``spec`` (metadata -> ``ScalerSpec``, every default once), ``policy`` (``decide``, the HPA
          tolerance), ``prom`` (the one Prometheus adapter)
* ``serve``   ONLINE: the gRPC server KEDA calls, background fits and tuning; only ``serve.tuning``
              imports ``replay``
* ``replay``  OFFLINE ENGINE, pure: a trace through KEDA/HPA with cold starts, per policy
* ``cli``     VERBS: ``forescale serve|backtest|tune|probe``; the only place for click, tqdm,
              matplotlib and files
* ``probe``   ``forescale probe``: T_cold of a real torch model, phase by phase
"""
