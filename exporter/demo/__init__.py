"""The demo's simulated node: the allocator model placing a bundled mixed workload."""
