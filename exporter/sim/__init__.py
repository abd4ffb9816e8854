"""The simulated kubelet: PodResources over a real unix socket and the kubelet's HTTPS
endpoint, serving a fixture directory or the allocator model's placement."""
