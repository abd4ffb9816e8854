"""What the simulated kubelet serves (re-exported so sim users need one import)."""

from exporter.rawnode import KubeletState, RawNode

__all__ = ["KubeletState", "RawNode"]
