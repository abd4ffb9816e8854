"""podres-exporter: the I/O side (sources, collectors, web, history, CLI)."""

__version__ = "0.1.0"
