// A device plugin for the real-node test bed: it serves fake devices (GPUs, NICs, anything)
// with the NUMA affinity a test gives them, through the kubelet's own device plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), so that the kubelet's real device manager
// registers, hints, allocates and checkpoints them. Nothing is attached to a container: Allocate
// answers with one environment variable naming the devices.
//
// Each resource is one plugin endpoint (a unix socket in the kubelet's device-plugin directory)
// registered with the kubelet's Registration service on kubelet.sock. The kubelet removes every
// socket of that directory when it starts, so the plugin watches kubelet.sock and its own
// sockets and registers again when the kubelet comes back (what real plugins do).
//
// SIGHUP reloads --config and sends the new device list to the kubelet (ListAndWatch), so a
// test can turn a device unhealthy; SIGTERM and SIGINT stop it cleanly (sockets removed).
//
// Events (registered, allocate, preferred) are printed as JSON lines on stdout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device is one fake device: its id, the NUMA nodes it sits on (none: no topology) and its
// health ("Healthy" unless told).
type Device struct {
	ID     string  `json:"id"`
	NUMA   []int64 `json:"numa"`
	Health string  `json:"health,omitempty"`
}

// Resource is one extended resource served by one endpoint.
type Resource struct {
	Name string `json:"name"`
	// PreferredAllocation turns GetPreferredAllocation on: the kubelet then asks the plugin
	// which devices to take. The plugin prefers PreferOrder first, then the other devices in
	// reverse order of Devices (so a test can tell the kubelet heeded it).
	PreferredAllocation bool     `json:"preferredAllocation,omitempty"`
	PreferOrder         []string `json:"preferOrder,omitempty"`
	Devices             []Device `json:"devices"`
}

// Config is what --config holds.
type Config struct {
	Resources []Resource `json:"resources"`
}

func (r Resource) validate() error {
	if r.Name == "" || !strings.Contains(r.Name, "/") {
		return fmt.Errorf("resource %q: an extended resource name needs a domain (example.com/gpu)", r.Name)
	}
	if len(r.Devices) == 0 {
		return fmt.Errorf("resource %s: no devices", r.Name)
	}
	seen := map[string]bool{}
	for _, d := range r.Devices {
		if d.ID == "" || seen[d.ID] {
			return fmt.Errorf("resource %s: empty or repeated device id %q", r.Name, d.ID)
		}
		seen[d.ID] = true
		if d.Health != "" && d.Health != pluginapi.Healthy && d.Health != pluginapi.Unhealthy {
			return fmt.Errorf("resource %s device %s: health is %q or %q", r.Name, d.ID, pluginapi.Healthy, pluginapi.Unhealthy)
		}
		for _, n := range d.NUMA {
			if n < 0 {
				return fmt.Errorf("resource %s device %s: negative NUMA node", r.Name, d.ID)
			}
		}
	}
	return nil
}

// parseResourceFlag reads NAME=ID:NODE[+NODE],... (an empty NODE list: no topology).
func parseResourceFlag(s string) (Resource, error) {
	name, list, ok := strings.Cut(s, "=")
	if !ok {
		return Resource{}, fmt.Errorf("--resource %q: expected NAME=ID:NODE,ID:NODE", s)
	}
	r := Resource{Name: name}
	for _, item := range strings.Split(list, ",") {
		id, nodes, _ := strings.Cut(item, ":")
		d := Device{ID: id}
		for _, n := range strings.Split(nodes, "+") {
			if n == "" {
				continue
			}
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return Resource{}, fmt.Errorf("--resource %q: NUMA node %q is not a number", s, n)
			}
			d.NUMA = append(d.NUMA, v)
		}
		r.Devices = append(r.Devices, d)
	}
	return r, nil
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func loadConfig(path string, flags, preferred []string) (Config, error) {
	var cfg Config
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return cfg, err
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return cfg, fmt.Errorf("%s: %v", path, err)
		}
	}
	for _, f := range flags {
		r, err := parseResourceFlag(f)
		if err != nil {
			return cfg, err
		}
		cfg.Resources = append(cfg.Resources, r)
	}
	byName := map[string]int{}
	for i, r := range cfg.Resources {
		if _, dup := byName[r.Name]; dup {
			return cfg, fmt.Errorf("resource %s given twice", r.Name)
		}
		byName[r.Name] = i
		if err := r.validate(); err != nil {
			return cfg, err
		}
	}
	for _, p := range preferred {
		i, ok := byName[p]
		if !ok {
			return cfg, fmt.Errorf("--preferred %s: no such resource", p)
		}
		cfg.Resources[i].PreferredAllocation = true
	}
	if len(cfg.Resources) == 0 {
		return cfg, errors.New("no resource: give --config FILE or --resource NAME=ID:NODE,...")
	}
	return cfg, nil
}

var (
	outMu sync.Mutex
	out   = json.NewEncoder(os.Stdout)
)

func event(kind string, fields map[string]any) {
	fields["event"] = kind
	fields["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	outMu.Lock()
	defer outMu.Unlock()
	_ = out.Encode(fields)
}

// plugin serves one resource.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	dir    string
	socket string // file name in dir

	mu      sync.Mutex
	res     Resource
	changed chan struct{} // closed and replaced when res changes

	server *grpc.Server
}

func newPlugin(dir string, r Resource) *plugin {
	safe := strings.NewReplacer("/", "_", ".", "_").Replace(r.Name)
	return &plugin{dir: dir, socket: "fake-" + safe + ".sock", res: r, changed: make(chan struct{})}
}

func (p *plugin) resource() (Resource, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res, p.changed
}

func (p *plugin) update(r Resource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res = r
	close(p.changed)
	p.changed = make(chan struct{})
}

func apiDevices(r Resource) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(r.Devices))
	for _, d := range r.Devices {
		dev := &pluginapi.Device{ID: d.ID, Health: d.Health}
		if dev.Health == "" {
			dev.Health = pluginapi.Healthy
		}
		if len(d.NUMA) > 0 {
			dev.Topology = &pluginapi.TopologyInfo{}
			for _, n := range d.NUMA {
				dev.Topology.Nodes = append(dev.Topology.Nodes, &pluginapi.NUMANode{ID: n})
			}
		}
		out = append(out, dev)
	}
	return out
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	r, _ := p.resource()
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: r.PreferredAllocation}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		r, changed := p.resource()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: apiDevices(r)}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// preference is the order the plugin prefers: PreferOrder, then the devices in reverse order.
func preference(r Resource) []string {
	order := append([]string(nil), r.PreferOrder...)
	for i := len(r.Devices) - 1; i >= 0; i-- {
		order = append(order, r.Devices[i].ID)
	}
	return order
}

func (p *plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	r, _ := p.resource()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		avail := map[string]bool{}
		for _, id := range c.AvailableDeviceIDs {
			avail[id] = true
		}
		chosen := append([]string(nil), c.MustIncludeDeviceIDs...)
		taken := map[string]bool{}
		for _, id := range chosen {
			taken[id] = true
		}
		for _, id := range preference(r) {
			if len(chosen) >= int(c.AllocationSize) {
				break
			}
			if avail[id] && !taken[id] {
				chosen = append(chosen, id)
				taken[id] = true
			}
		}
		event("preferred", map[string]any{"resource": r.Name, "available": sorted(c.AvailableDeviceIDs),
			"mustInclude": sorted(c.MustIncludeDeviceIDs), "size": c.AllocationSize, "chosen": chosen})
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return resp, nil
}

func sorted(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	r, _ := p.resource()
	env := "FAKE_DEVICES_" + strings.ToUpper(strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(r.Name))
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := sorted(c.DevicesIds)
		event("allocate", map[string]any{"resource": r.Name, "devices": ids})
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerAllocateResponse{Envs: map[string]string{env: strings.Join(ids, ",")}})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve (re)creates the plugin's socket and gRPC server.
func (p *plugin) serve() error {
	p.stop()
	path := filepath.Join(p.dir, p.socket)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	p.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(lis) }()
	return nil
}

func (p *plugin) stop() {
	if p.server != nil {
		p.server.Stop()
		p.server = nil
	}
	_ = os.Remove(filepath.Join(p.dir, p.socket))
}

// register tells the kubelet about the endpoint.
func (p *plugin) register(ctx context.Context, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	r, _ := p.resource()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.socket,
		ResourceName: r.Name,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: r.PreferredAllocation},
	})
	return err
}

type fileID struct {
	dev, ino uint64
}

func statID(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

func main() {
	dir := flag.String("socket-dir", pluginapi.DevicePluginPath,
		"the kubelet's device-plugin directory (holds kubelet.sock; the kubelet fixes it at "+pluginapi.DevicePluginPath+")")
	config := flag.String("config", "", "a JSON file: {\"resources\": [{\"name\", \"preferredAllocation\", \"preferOrder\", \"devices\": [{\"id\", \"numa\": [0], \"health\"}]}]}")
	var resources, preferred listFlag
	flag.Var(&resources, "resource", "NAME=ID:NODE[+NODE],... (repeatable; an empty NODE list means no topology)")
	flag.Var(&preferred, "preferred", "a resource NAME whose plugin answers GetPreferredAllocation (repeatable)")
	poll := flag.Duration("poll", 200*time.Millisecond, "how often to check that the kubelet and the plugin's sockets are still there")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "deviceplugin: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	cfg, err := loadConfig(*config, resources, preferred)
	if err != nil {
		fmt.Fprintf(os.Stderr, "deviceplugin: %v\n", err)
		os.Exit(2)
	}
	if err := run(*dir, cfg, *config, resources, preferred, *poll); err != nil {
		fmt.Fprintf(os.Stderr, "deviceplugin: %v\n", err)
		os.Exit(1)
	}
}

func run(dir string, cfg Config, configPath string, flags, preferred []string, poll time.Duration) error {
	plugins := make([]*plugin, 0, len(cfg.Resources))
	for _, r := range cfg.Resources {
		plugins = append(plugins, newPlugin(dir, r))
	}
	defer func() {
		for _, p := range plugins {
			p.stop()
		}
		event("stopped", map[string]any{})
	}()
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	kubeletSock := filepath.Join(dir, "kubelet.sock")
	var registeredWith fileID // the kubelet.sock the plugins registered with
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	ctx := context.Background()
	for {
		kid, up := statID(kubeletSock)
		missing := false
		for _, p := range plugins {
			if _, ok := statID(filepath.Join(dir, p.socket)); !ok {
				missing = true
			}
		}
		if up && (kid != registeredWith || missing) {
			if err := registerAll(ctx, plugins, kubeletSock); err != nil {
				event("register-failed", map[string]any{"error": err.Error()})
			} else {
				registeredWith = kid
			}
		}
		select {
		case s := <-signals:
			if s != syscall.SIGHUP {
				return nil
			}
			reloaded, err := loadConfig(configPath, flags, preferred)
			if err != nil {
				event("reload-failed", map[string]any{"error": err.Error()})
				continue
			}
			reloadInto(plugins, reloaded)
		case <-ticker.C:
		}
	}
}

func registerAll(ctx context.Context, plugins []*plugin, kubeletSock string) error {
	for _, p := range plugins {
		if err := p.serve(); err != nil {
			return err
		}
		if err := p.register(ctx, kubeletSock); err != nil {
			return fmt.Errorf("register %s: %w", p.res.Name, err)
		}
		r, _ := p.resource()
		ids := make([]string, 0, len(r.Devices))
		for _, d := range r.Devices {
			ids = append(ids, d.ID)
		}
		event("registered", map[string]any{"resource": r.Name, "endpoint": p.socket, "devices": ids,
			"preferredAllocation": r.PreferredAllocation})
	}
	return nil
}

// reloadInto gives each plugin its resource's new devices; the set of resource names is fixed
// at start (a new name would need a new registration, which no test needs).
func reloadInto(plugins []*plugin, cfg Config) {
	for _, p := range plugins {
		cur, _ := p.resource()
		for _, r := range cfg.Resources {
			if r.Name == cur.Name {
				p.update(r)
				event("reloaded", map[string]any{"resource": r.Name})
			}
		}
	}
}
