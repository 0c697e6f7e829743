"""THE DRILL: the real etcd, kube-apiserver, kube-controller-manager, KWOK and KEDA drive forescale and judge the
replay (``forescale drill``, docs/drill.md). Imports the core, ``scaler.serve`` (the server it runs) and
``scaler.replay`` (the rules it checks against); imported only by ``scaler.cli.drill``.

* ``procs``      the processes: start, wait ready, stop; peak RSS and every connection's far end; the
                 loopback-only network namespace
* ``pki``        the certificates (cluster CA, front proxy, KEDA's mTLS), one identity per component
* ``kube``       a small REST client and kubeconfig files
* ``config``     the apiserver's audit policy and KWOK's stages
* ``cluster``    the control plane, brought up in order and stopped
* ``prometheus`` the trace backfilled at its own timestamps, the live series for KEDA's prometheus trigger
* ``scaler``     ``python -m scaler.drill.scaler``: forescale's Server on a compressed clock, recording answers
* ``scenarios``  the built-in scenarios, a user's trace and ScaledObject, the manifest compressed by k
* ``manifests``  what is applied (both cache modes, the Deployments) and what the replay is handed
* ``run``        one scenario: the replay, the live run, its events, the judgement
* ``audit``      the audit log and forescale's record as timelines
* ``fidelity``   the HPA's syncs through the project's rules (``hpaloop.hpa_sync``)
* ``judge``      what KEDA served, the end-to-end figures, KEDA's own loop
* ``report``     every scenario, report.json, the acceptance checks, the table
"""
