"""HTTP: /metrics, probes, the ledger and CPU-map API, the landing page (CPU map)."""
