//go:build !kubelet_1_35

package main

// podLevel reports the pod-level entries of the managers' state (1.36 and later).
func (n *node) podLevel(r *stateReport) {
	for uid, entry := range n.cpu.State().GetPodCPUAssignments() {
		r.Pods[uid] = entry.CPUSet.String()
	}
	for uid, blocks := range n.mem.State().GetPodMemoryAssignments() {
		r.PodMemory[uid] = memBlocks(blocks.MemoryBlocks)
	}
}
