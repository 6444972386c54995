// Command kube-proxy is the upstream kube-proxy (iptables mode in the test bed), built from source
// for the test bed's real node.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
