package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	"k8s.io/utils/cpuset"
)

type podResourcesServer struct {
	socket string
	grpc   *grpc.Server
}

// listen serves gRPC on a unix socket, as the kubelet's ListenAndServePodResources
// (pkg/kubelet/server/server.go) does, less its rate limiter: the tests here are the only
// clients. Each call holds `mu` while it runs: the script's requests change the node the
// calls read (its pod list, and its managers, which a restart replaces), from another
// goroutine (docs/design.md#reference). The PodResources v1 API has unary calls only.
func listen(socket string, mu sync.Locker, register func(*grpc.Server)) (*podResourcesServer, error) {
	if socket == "" {
		return nil, fmt.Errorf("serve: no socket path")
	}
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any,
		_ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		return handler(ctx, req)
	}))
	register(g)
	go func() { _ = g.Serve(l) }()
	return &podResourcesServer{socket: socket, grpc: g}, nil
}

func (s *podResourcesServer) stop() {
	s.grpc.Stop()
	_ = os.Remove(s.socket)
}

func int64s(set cpuset.CPUSet) []int64 {
	out := make([]int64, 0, set.Size())
	for _, c := range set.List() {
		out = append(out, int64(c))
	}
	return out
}
