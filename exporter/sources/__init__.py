"""Where node facts come from: the PodResources socket, the kubelet's HTTPS endpoint,
sysfs, checkpoint files and fixture directories. Each turns its input into the
reconciler's snapshot types and fails on its own with a ``SourceError``."""
