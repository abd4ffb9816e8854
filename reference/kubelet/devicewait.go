package main

// What the reference waits for when the device plugins register (docs/design.md#reference).
//
// The device manager takes in a plugin's device list on the goroutine that reads the plugin's
// ListAndWatch stream (genericDeviceUpdateCallback): it stores the devices under its lock,
// releases it, and only then writes its checkpoint, from a snapshot of its allocations taken
// under the lock again. Once the devices are listed, a pod may be admitted and given devices,
// and its allocation is checkpointed; a list's write still on its way, snapshotted before that
// allocation, can land after it and put back a checkpoint without the pod. The next restart
// reads that checkpoint, the pod's containers are running, so nothing is allocated again: the
// kubelet reports no devices for them (about one workload in 3,500 with devices, timing
// alone). The kubelet itself has that window at every plugin registration; the reference
// closes it by answering only once every list's write has landed.
//
// No state of the manager says a write has landed: it is seen on the file system. The
// kubelet's file store writes a temporary file and renames it onto the checkpoint
// (pkg/kubelet/util/store/filestore.go), so each write is one IN_MOVED_TO of the checkpoint's
// name in the device-plugin folder; while the plugins register, nothing but their lists
// writes the checkpoint (Start only reads it), one write a list. The watch takes each
// rename's IN_MOVED_FROM (the temporary file's own name) too: inotify merges an event into the
// one queued before it when the two are alike, cookie aside, so two writes landing together
// would be one IN_MOVED_TO without a different event between them.

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// deviceCheckpoint is the device manager's checkpoint file name (kubeletDeviceManagerCheckpoint).
const deviceCheckpoint = "kubelet_internal_checkpoint"

// checkpointWrites counts the writes that land on the device manager's checkpoint.
type checkpointWrites struct {
	f *os.File
}

func watchCheckpointWrites(dir string) (*checkpointWrites, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("device plugins: inotify: %w", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_MOVED_FROM|syscall.IN_MOVED_TO); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("device plugins: watching %s: %w", dir, err)
	}
	// Non-blocking, the descriptor joins Go's poller, so that a read can have a deadline.
	return &checkpointWrites{f: os.NewFile(uintptr(fd), "inotify:"+dir)}, nil
}

// wait returns once `writes` more writes have landed, or an error at the deadline.
func (w *checkpointWrites) wait(writes int, deadline time.Time) error {
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return err
	}
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for writes > 0 {
		got, err := w.f.Read(buf)
		if err != nil {
			return fmt.Errorf("device plugins: %d checkpoint writes of their device lists "+
				"still missing: %w", writes, err)
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= got; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			start := off + syscall.SizeofInotifyEvent
			off = start + int(ev.Len)
			if ev.Mask&syscall.IN_Q_OVERFLOW != 0 {
				return fmt.Errorf("device plugins: the checkpoint watch overflowed")
			}
			if ev.Mask&syscall.IN_MOVED_TO != 0 &&
				strings.TrimRight(string(buf[start:off]), "\x00") == deviceCheckpoint {
				writes--
			}
		}
	}
	return nil
}

func (w *checkpointWrites) close() { _ = w.f.Close() }
