"""Helpers shared by the tests (never imported by the product): paths, a fake clock, the real-Prometheus
fixture (``promfixture``) and an in-process scaler driven over real gRPC (``scaler``)."""
