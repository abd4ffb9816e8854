// Runs the topology manager's real Merge (k8s.io/kubernetes v1.37.2) on cases read as JSON.
package main

import (
	"encoding/json"
	"os"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
)

type hint struct {
	Mask      []int `json:"mask"`
	Preferred bool  `json:"preferred"`
}

type tcase struct {
	Policy    string    `json:"policy"`
	Nodes     []int     `json:"nodes"`
	Providers []*[]hint `json:"providers"`
}

type result struct {
	Mask      []int `json:"mask"`
	Preferred bool  `json:"preferred"`
	Admit     bool  `json:"admit"`
}

func main() {
	var cases []tcase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	logger := klog.Background()
	out := []result{}
	for _, c := range cases {
		info := &topologymanager.NUMAInfo{Nodes: c.Nodes}
		var p topologymanager.Policy
		opts := topologymanager.PolicyOptions{}
		switch c.Policy {
		case "best-effort":
			p = topologymanager.NewBestEffortPolicy(info, opts)
		case "restricted":
			p = topologymanager.NewRestrictedPolicy(info, opts)
		case "single-numa-node":
			p = topologymanager.NewSingleNumaNodePolicy(info, opts)
		}
		var providers []map[string][]topologymanager.TopologyHint
		for _, hs := range c.Providers {
			if hs == nil {
				providers = append(providers, map[string][]topologymanager.TopologyHint{"r": nil})
				continue
			}
			list := []topologymanager.TopologyHint{}
			for _, h := range *hs {
				m, _ := bitmask.NewBitMask(h.Mask...)
				list = append(list, topologymanager.TopologyHint{NUMANodeAffinity: m, Preferred: h.Preferred})
			}
			providers = append(providers, map[string][]topologymanager.TopologyHint{"r": list})
		}
		best, admit := p.Merge(logger, providers)
		r := result{Preferred: best.Preferred, Admit: admit}
		if best.NUMANodeAffinity != nil {
			r.Mask = best.NUMANodeAffinity.GetBits()
		}
		out = append(out, r)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
