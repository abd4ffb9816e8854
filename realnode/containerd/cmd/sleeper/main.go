// Command sleeper is the only program in the real-node test images: a static binary that
// stays alive until it is killed, so that the container it runs in has a process whose
// Cpus_allowed_list the test can read. With the argument "spin" it keeps one CPU busy, so
// that the cgroup's CPU time grows and the exporter's busy-per-pool figure has work to see.
package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if len(os.Args) > 1 && os.Args[1] == "spin" {
		go func() {
			for x := uint64(0); ; x++ {
				_ = x * x
			}
		}()
	}
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Hour):
		}
	}
}
