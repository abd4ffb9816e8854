package main

// Hugepages in the machine info the memory manager reads (cAdvisor's Node.HugePages, one
// entry per page size: its size in KiB and the number of pages), from the setup's
// "hugepages": NUMA node id -> page size in KiB -> pages. The entries are filled through
// their JSON form, whose field names every cAdvisor release the minors link shares.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

func addHugepages(cfg *setupRequest, node *numaNodeT) error {
	sizes := cfg.Hugepages[strconv.Itoa(node.Id)]
	if len(sizes) == 0 {
		return nil
	}
	keys := make([]string, 0, len(sizes))
	for k := range sizes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var pages []map[string]uint64
	for _, k := range keys {
		kb, err := strconv.ParseUint(k, 10, 64)
		if err != nil || kb == 0 {
			return fmt.Errorf("setup: hugepages of NUMA node %d: page size %q is not a number of KiB", node.Id, k)
		}
		pages = append(pages, map[string]uint64{"page_size": kb, "num_pages": sizes[k]})
	}
	raw, err := json.Marshal(pages)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, &node.HugePages)
}
