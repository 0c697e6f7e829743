"""Generated KEDA ExternalScaler stubs. Do not edit: run ``python -m scaler.protogen``."""
