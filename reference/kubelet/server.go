package main

import (
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"k8s.io/utils/cpuset"
)

type podResourcesServer struct {
	socket string
	grpc   *grpc.Server
}

// listen serves gRPC on a unix socket, as the kubelet's ListenAndServePodResources
// (pkg/kubelet/server/server.go) does, less its rate limiter: the tests here are the only
// clients.
func listen(socket string, register func(*grpc.Server)) (*podResourcesServer, error) {
	if socket == "" {
		return nil, fmt.Errorf("serve: no socket path")
	}
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	g := grpc.NewServer()
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
