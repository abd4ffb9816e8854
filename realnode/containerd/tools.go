//go:build tools

// Package tools pins the real runtime the real-node test bed builds: containerd v2.4.2 (its
// daemon, ctr and the runc shim) and runc v1.5.3, all from the Go module proxy. Nothing here
// is compiled into the project; realnode/runtime_real.py builds the commands below.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
	_ "github.com/opencontainers/runc"
)
