// Command kubelet is k8s.io/kubernetes/cmd/kubelet, unchanged, built from the Go module proxy at
// the version go.mod (or go.1_36.mod) pins: the real node of the test bed (docs/real-node.md).
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	// A nil context panics at start: the kubelet's own main passes Background too.
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
