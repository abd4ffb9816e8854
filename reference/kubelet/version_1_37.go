//go:build !kubelet_1_35 && !kubelet_1_36

package main

const kubeletVersion = "1.37.2"
