//go:build kubelet_1_35

package main

const kubeletVersion = "1.35.4"

// podLevel: 1.35 keeps no pod-level CPU sets or memory blocks.
func (n *node) podLevel(*stateReport) {}
