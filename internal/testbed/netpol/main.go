// Command kube-network-policies is the test bed's NetworkPolicy implementation: the controller of
// sigs.k8s.io/kube-network-policies (what kind runs), built from its Go module and run on the real
// node as a process of the node's namespaces, like kube-proxy. Without it the node's bridge CNI
// ignores NetworkPolicies, and a policy would only ever be checked as YAML.
//
// It differs from that module's own command (its main package under cmd) in what the test bed
// needs: it reads a kubeconfig instead of the in-cluster service account (it is not a Pod).
// Packets reach it through nfqueue; see queue.go.overlay for why the queue rule is written as an
// xtables target.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

// stamp names what was built: scripts/testbed-build.sh sets it to the kube-network-policies
// version and a digest of this module's files, and rebuilds when it differs.
var stamp = "unstamped"

func main() {
	version := flag.Bool("version", false, "print the build stamp and exit")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	nodeName := flag.String("hostname-override", "", "the name of the Node whose Pods' packets are policed")
	queueID := flag.Int("nfqueue-id", 100, "the nfqueue the packets are sent to")
	klog.InitFlags(nil)
	flag.Parse()
	if *version {
		fmt.Println(stamp)
		return
	}
	if err := run(*kubeconfig, *nodeName, *queueID); err != nil {
		fmt.Fprintf(os.Stderr, "kube-network-policies: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, nodeName string, queueID int) error {
	if kubeconfig == "" || nodeName == "" {
		return fmt.Errorf("--kubeconfig and --hostname-override are required")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	c, err := networkpolicy.NewController(cs,
		f.Networking().V1().NetworkPolicies(), f.Core().V1().Namespaces(), f.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{
			QueueID:  queueID,
			NodeName: nodeName,
			// Fail closed: a packet the controller cannot judge is dropped, so a test never
			// passes because the controller was not running.
			FailOpen:            false,
			NetfilterBug1766Fix: true,
			// containerd 1.6 has no NRI, so the plugin's connection fails (logged once) and Pod
			// IPs come from the API server alone. It stays enabled all the same: v0.8.0 looks up
			// every address it does not know as a Pod's in the NRI plugin's table, and with NRI
			// disabled that table is nil and the controller panics on the first such packet.
			NRIdisabled: false,
		})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	f.Start(ctx.Done())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return <-errc // Run removes its nftables table before it returns
	}
}
