"""forescale's forecasting library: no KEDA, no gRPC, never imports ``scaler``.

* ``forecaster.base``      the contract: ``Series``, ``Forecast``, ``Fitted``, ``Forecaster``
* ``forecaster.series``    hygiene: ``regularize``, ``resample``, ``from_prometheus_matrix`` (a range query's series)
* ``forecaster.tracecsv``  a trace CSV -> ``Series``: ``from_csv``, its form, its timestamps
* ``forecaster.models``    ``make(name, **options)``, ``NAMES`` (built-ins and plugins), ``to_state``/``from_state``
* ``forecaster.level``     level correction, as the policy applies it
* ``forecaster.metrics``   ``mase``, ``wape``, ``pinball``, ``coverage``
* ``forecaster.evaluate``  rolling-origin ``historical_forecasts`` and ``score``
* ``forecaster.calendar``  public holidays on the calendar days of a time zone
* ``forecaster.eventsfile`` a user's events file (``eventsFile``, ``--events``): read, checked, applied
"""
