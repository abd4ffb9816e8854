// Command fakecri serves the CRI with k8s.io/cri-client/pkg/fake, the kubelet's own fake remote
// runtime: sandboxes and containers exist only in memory, so a static pod reaches Running
// without any process or cgroup of its own (docs/real-node.md).
//
//	fakecri -listen /path/cri.sock -image-fs DIR [IMAGE...]
//
// Each IMAGE is known (an id and a size) before the kubelet asks for it: without a size the
// kubelet refuses the image ("Id or size of image ... is not set").
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

func main() {
	listen := flag.String("listen", "", "unix socket path to serve the CRI on")
	imageFs := flag.String("image-fs", "/tmp", "directory reported as the image filesystem")
	flag.Parse()
	if *listen == "" {
		log.Fatal("fakecri: -listen is required")
	}
	rt := fake.NewFakeRemoteRuntime()
	// The kubelet reads the runtime's cgroup driver and must find the one it is set up with.
	rt.RuntimeService.FakeLinuxConfiguration = &kubeapi.LinuxRuntimeConfiguration{
		CgroupDriver: kubeapi.CgroupDriver_CGROUPFS}
	rt.ImageService.SetFakeImageSize(1 << 20)
	rt.ImageService.SetFakeImages(flag.Args())
	// The image garbage collector and the eviction manager read the image filesystem.
	fs := []*kubeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &kubeapi.FilesystemIdentifier{Mountpoint: *imageFs},
		UsedBytes:  &kubeapi.UInt64Value{Value: 1 << 20},
		InodesUsed: &kubeapi.UInt64Value{Value: 1},
	}}
	rt.ImageService.SetFakeFilesystemUsage(fs)
	rt.ImageService.SetFakeContainerFilesystemUsage(fs)
	if err := rt.Start("unix://" + *listen); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	rt.Stop()
}
