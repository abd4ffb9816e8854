package main

// stateReport is what the managers hold, read through their own readers.
type stateReport struct {
	// The CPU manager's default set (the shared pool) and per-container exclusive sets.
	Default    string                       `json:"default"`
	Containers map[string]map[string]string `json:"containers"`
	// Pod-level CPU sets (PodLevelResourceManagers; absent before 1.36).
	Pods map[string]string `json:"pods"`
	// The memory manager's blocks per container and per pod.
	Memory    map[string]map[string][]memBlock `json:"memory"`
	PodMemory map[string][]memBlock            `json:"pod_memory"`
	// The topology manager's stored affinity per container ("" for none), as bits.
	Affinity map[string]map[string]affinity `json:"affinity"`
	// The device manager's devices per container (resource -> ids), and the containers whose
	// start failed to get theirs (devices.go); absent on a node without devices.
	Devices           map[string]map[string]map[string][]string `json:"devices,omitempty"`
	DeviceStartErrors map[string]map[string]string              `json:"device_start_errors,omitempty"`
	DeviceAllocatable map[string]int64                          `json:"device_allocatable,omitempty"`
	// UpdateAllocatedResourcesStatus: per pod UID, app container and resource, each device
	// held as "id=Health" (devices.go).
	DeviceHealth map[string]map[string]map[string][]string `json:"device_health,omitempty"`
	// The extended-resource allocatable the last admission's predicate check saw, after the
	// device manager's UpdatePluginResources (devices.go); absent before any admission.
	DeviceAdmitAllocatable map[string]int64 `json:"device_admit_allocatable,omitempty"`
	// GetAllocatableCPUs: what the PodResources server reports as allocatable.
	Allocatable string `json:"allocatable"`
	// The checkpoint files, byte for byte, and the directory they are in.
	Checkpoints map[string]string `json:"checkpoints"`
	StateDir    string            `json:"state_dir"`
	// The PodResources server's and the CPU manager's answers (answers.go).
	Answers *answers `json:"answers"`
}

type memBlock struct {
	NUMA []int  `json:"numa"`
	Type string `json:"type"`
	Size uint64 `json:"size"`
}

type affinity struct {
	NUMA      []int `json:"numa"`
	Preferred bool  `json:"preferred"`
}

type readmission struct {
	UID      string `json:"uid"`
	Admitted bool   `json:"admitted"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}
