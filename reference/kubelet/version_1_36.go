//go:build kubelet_1_36

package main

const kubeletVersion = "1.36.3"
