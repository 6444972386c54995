// Command coredns is CoreDNS with only the plugins the test bed's Corefile uses (bind, ready,
// errors, cache, kubernetes), which builds in a fraction of the time of the full distribution
// and its cloud-provider plugins. It serves the real node's cluster DNS.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, registered by their init functions.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// The order in which the plugins handle a query; it must follow CoreDNS's own plugin.cfg.
	dnsserver.Directives = []string{"bind", "ready", "errors", "cache", "kubernetes"}
	coremain.Run()
}
