package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestParseResourceFlag(t *testing.T) {
	r, err := parseResourceFlag("example.com/nic=nic0:0,nic1:1+2,nic2:")
	if err != nil {
		t.Fatal(err)
	}
	want := Resource{Name: "example.com/nic", Devices: []Device{
		{ID: "nic0", NUMA: []int64{0}}, {ID: "nic1", NUMA: []int64{1, 2}}, {ID: "nic2"}}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v, want %+v", r, want)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	n := 0
	write := func(text string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("c%d.json", n))
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		config    string
		flags     []string
		preferred []string
		want      string
	}{
		{"", nil, nil, "no resource"},
		{"", []string{"gpu=g0:0"}, nil, "needs a domain"},
		{"", []string{"example.com/gpu"}, nil, "expected NAME="},
		{"", []string{"example.com/gpu=g0:x"}, nil, "not a number"},
		{"", []string{"example.com/gpu=g0:-1"}, nil, "negative NUMA node"},
		{"", []string{"example.com/gpu=g0:0,g0:1"}, nil, "repeated device id"},
		{"", []string{"example.com/gpu=g0:0", "example.com/gpu=g1:0"}, nil, "given twice"},
		{"", []string{"example.com/gpu=g0:0"}, []string{"example.com/nic"}, "no such resource"},
		{write(`{"resources": [{"name": "example.com/gpu", "devices": []}]}`), nil, nil, "no devices"},
		{write(`{"resources": [{"name": "example.com/gpu", "devices": [{"id": "g", "health": "Sick"}]}]}`), nil, nil, "health is"},
		{write(`{"resources": [], "extra": 1}`), nil, nil, "unknown field"},
		{write(`{`), nil, nil, "unexpected EOF"},
	}
	for _, c := range cases {
		_, err := loadConfig(c.config, c.flags, c.preferred)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loadConfig(%q, %v, %v) = %v, want an error with %q", c.config, c.flags, c.preferred, err, c.want)
		}
	}
}

func TestPreferredAllocation(t *testing.T) {
	p := newPlugin(t.TempDir(), Resource{Name: "example.com/gpu", PreferredAllocation: true,
		PreferOrder: []string{"g1"},
		Devices:     []Device{{ID: "g0"}, {ID: "g1"}, {ID: "g2"}, {ID: "g3"}}})
	resp, err := p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"g0", "g1", "g2"}, MustIncludeDeviceIDs: []string{"g0"},
			AllocationSize: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	// What must be included, then PreferOrder, then the rest from the highest id down; g3 is
	// not available.
	if got := resp.ContainerResponses[0].DeviceIDs; !reflect.DeepEqual(got, []string{"g0", "g1", "g2"}) {
		t.Fatalf("got %v", got)
	}
}

func TestTopologyAndHealth(t *testing.T) {
	got := apiDevices(Resource{Devices: []Device{{ID: "a", NUMA: []int64{0, 1}}, {ID: "b", Health: pluginapi.Unhealthy}}})
	if got[0].Health != pluginapi.Healthy || len(got[0].Topology.Nodes) != 2 || got[0].Topology.Nodes[1].ID != 1 {
		t.Fatalf("a: %+v", got[0])
	}
	if got[1].Health != pluginapi.Unhealthy || got[1].Topology != nil {
		t.Fatalf("b: %+v (a device without NUMA nodes has no topology)", got[1])
	}
}
