"""What the simulated kubelet serves (re-exported so sim users need one import)."""

from exporter.sources.fixture import KubeletState

__all__ = ["KubeletState"]
