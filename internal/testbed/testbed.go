package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options selects what a test bed runs.
type Options struct {
	// Jobs also runs kube-controller-manager (Job, TTL, garbage collector, namespace, service
	// account, node lifecycle, Deployment and ReplicaSet controllers), kube-scheduler and kwok with
	// one fake Node, so Jobs and their Pods progress as on a real cluster. Without it only etcd and
	// the API server run, which is enough (and about a second faster, ~300 MiB lighter) for tests
	// of plain API objects such as Secrets and Leases.
	Jobs bool

	// Node also runs a real node: containerd, runc, the kubelet, kube-proxy (iptables), CoreDNS
	// and kube-network-policies in namespaces of their own (node.go), with
	// kube-controller-manager and kube-scheduler, so Pods really run: a Job's container exits
	// with its own exit code, `kubectl logs` works, Services and cluster DNS resolve, and
	// NetworkPolicies are enforced on real packets (node_netpol.go; a stand-in of the cloud
	// metadata service answers on MetadataIP beyond the node). Images come from the test bed's registry (Cluster.Registry,
	// with a pull secret) or ImportImage (PauseImage and ToolboxImage are there from the start).
	// The API server and the registry then listen on HostIP instead of 127.0.0.1,
	// because the node's network namespace cannot reach this machine's loopback. It needs root,
	// cgroups, overlayfs and Debian's containerd, runc and CNI plugins: Start fails with a
	// *NodeUnavailableError saying exactly what is missing, and Main then skips the tests that
	// call RequireNode (fails them under CI=true). With Jobs too, both nodes run and only Pods
	// that tolerate the real node's taint (OnRealNode) go there; the rest keep kwok's simulation.
	// It adds about 3 s to the start-up (a probe Pod runs before Start returns) and 300 MiB
	// (the registry ~20 MiB of it, kube-network-policies ~45 MiB and about 0.3 s).
	Node bool

	// Nodes is how many real nodes run with Node: 0 or 1 for one, up to MaxNodes. Each further
	// node (named by RealNodeNames) has its own namespaces, containerd, kubelet, kube-proxy,
	// CoreDNS and kube-network-policies, its own Pod subnet, and a link to the others' network
	// namespaces, so Pods on every node reach each other by their addresses (node_network.go).
	// With more than one node the node lifecycle is fast, so node-loss tests take seconds rather
	// than minutes: kubelets renew their Lease every 2 s, kube-controller-manager marks a node
	// whose Lease is 10 s old NotReady (--node-monitor-grace-period=10s,
	// --node-monitor-period=2s), and the API server gives Pods 5 s of tolerating a not-ready or
	// unreachable node (--default-not-ready-toleration-seconds,
	// --default-unreachable-toleration-seconds) before their eviction. A second node adds about
	// 3.6 s to the start-up (10.9 s instead of 7.3 s) and 290 MiB of resident memory (its
	// kubelet, containerd, kube-proxy, CoreDNS and kube-network-policies; 1,053 MiB instead of
	// 761 MiB in all), measured with BenchmarkStart on two busy cores.
	Nodes int

	// Dir is the directory for the test bed's files (certificates, kubeconfig, etcd data, logs).
	// Empty means a new temporary directory that Stop removes. A given Dir is kept by Stop, so its
	// logs can be read afterwards; it must not hold a running test bed.
	Dir string

	// Detach starts the processes so they outlive the calling process (a new session, no
	// parent-death signal) and records them in Dir, for `outpost-testbed up`. Such a test bed is
	// stopped with StopDir. Detach requires Dir.
	Detach bool
}

// Cluster is a running test bed (or, with OUTPOST_TESTBED_KUBECONFIG, one reused from elsewhere).
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig file with a system:masters token for the cluster
	// (context "outpost-testbed"), for code under test that takes a kubeconfig path and for
	// kubectl/helm by hand.
	Kubeconfig string
	// RESTConfig is the same credentials as a client-go config.
	RESTConfig *rest.Config

	// Host is the API server URL, https://127.0.0.1:<port>.
	Host string
	// CAData is the PEM of the CA that signed the API server's serving certificate, so tests can
	// exercise cluster_ca_certificate style settings with verification on.
	CAData []byte
	// Token is a bearer token of a user in system:masters.
	Token string
	// ClientCertData and ClientKeyData are a PEM client certificate and key in system:masters,
	// for tests of client-certificate authentication. Empty for a reused test bed.
	ClientCertData, ClientKeyData []byte

	// Jobs reports whether Jobs and Pods progress (controller manager, scheduler and kwok run).
	Jobs bool
	// Node reports whether the real node runs (Options.Node).
	Node bool
	// RealNodes names the real nodes, RealNodeName first. Empty without a real node.
	RealNodes []string
	// HostIP is the address at which Pods on the real node reach this machine: the API server
	// listens there, and so must any server of a test that Pods call (the orchestrator), e.g.
	// net.Listen("tcp", net.JoinHostPort(c.HostIP, "0")). It is on a veth that leads only into the
	// node's network namespace, so nothing off this machine reaches it. Empty without a node.
	HostIP string
	// Registry is the OCI registry the real node pulls from (registry.go): push images there
	// and give Pods an imagePullSecret that logs in. Nil without a node.
	Registry *Registry
	// Dir holds the test bed's files, including logs/<component>.log. Empty for a reused test bed.
	Dir string

	procs   []*process // in start order; nil for a reused test bed
	node    *node      // the first real node's state; nil without one or when reused
	nodes   []*node    // every real node's state, node first
	nodeErr error      // why the node asked for could not start (Main started without it)
	// metadataPID is the metadata stand-in's process, whose network namespace the nodes join.
	metadataPID int
	// containerdSockets are the real nodes' containerd sockets, for ImportImage; also known for a
	// reused detached test bed.
	containerdSockets []string
	detached          bool
	removeDir         bool
	clientOnce        sync.Once
	client            kubernetes.Interface
	stopOnce          sync.Once
	stopErr           error
}

// Timeouts of the start-up phases. They are generous because tests run in parallel on two cores;
// an idle machine needs a few seconds in total.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiserverReadyTimeout = 120 * time.Second
	jobsReadyTimeout      = 120 * time.Second
	stopGrace             = 3 * time.Second
)

// Start starts a test bed and returns once it is ready: the API server answers /readyz and, with
// opts.Jobs, the fake Node is Ready and a probe Pod has been scheduled and has completed. If a
// component fails to start, the error names it and carries the end of its log. The caller must
// call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Detach && opts.Dir == "" {
		return nil, errors.New("testbed: Options.Detach requires Options.Dir")
	}
	binDir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, opts, binDir)
		if err == nil {
			return c, nil
		}
		if !portInUse(err) || attempt == 3 || ctx.Err() != nil {
			return nil, err
		}
		// Another process took a port between choosing and binding it: try again with new ones.
		if c.removeDir {
			_ = os.RemoveAll(c.Dir)
		}
	}
}

// start makes one attempt at starting a test bed. On error the returned Cluster is not nil; its
// processes are stopped and its directory is kept for the logs.
func start(ctx context.Context, opts Options, binDir string) (_ *Cluster, err error) {
	if opts.Nodes < 0 || opts.Nodes > MaxNodes {
		return nil, fmt.Errorf("testbed: Options.Nodes is %d; a test bed runs 1 to %d real nodes", opts.Nodes, MaxNodes)
	}
	if opts.Nodes > 1 && !opts.Node {
		return nil, errors.New("testbed: Options.Nodes needs Options.Node")
	}
	c := &Cluster{Jobs: opts.Jobs, Node: opts.Node, Dir: opts.Dir, detached: opts.Detach}
	if c.Dir == "" {
		sweepStaleTempDirs()
		c.Dir, err = os.MkdirTemp("", tempDirPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return c, fmt.Errorf("testbed: creating a temporary directory: %w", err)
		}
		c.removeDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return c, fmt.Errorf("testbed: %w", err)
	}
	defer func() {
		if err != nil {
			_ = c.stopProcesses() // the start error says more than a cleanup error would
			if c.removeDir {
				// Keep the logs the error points at; sweepStaleTempDirs removes them later.
				err = fmt.Errorf("%w\n(test bed files, including all component logs, kept in %s)", err, c.Dir)
			}
		}
	}()

	bindIP := "127.0.0.1"
	if opts.Node {
		if err := c.startNodeSandbox(ctx, binDir, max(opts.Nodes, 1), opts.Detach); err != nil {
			return c, err
		}
		for _, n := range c.nodes {
			c.RealNodes = append(c.RealNodes, n.name)
		}
		bindIP = c.HostIP
	}
	p, err := newPKI(bindIP)
	if err != nil {
		return c, fmt.Errorf("testbed: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return c, fmt.Errorf("testbed: %w", err)
	}
	etcdPort, etcdPeerPort, apiPort := ports[0], ports[1], ports[2]
	c.Host = "https://" + net.JoinHostPort(bindIP, strconv.Itoa(apiPort))
	c.CAData, c.Token, c.ClientCertData, c.ClientKeyData = p.caCert, p.token, p.clientCert, p.clientKey
	if err := c.writeFiles(p); err != nil {
		return c, fmt.Errorf("testbed: writing files to %s: %w", c.Dir, err)
	}
	c.RESTConfig = c.restConfig()

	var registry *process
	if opts.Node {
		// Started first and waited for last: it serves within a second, while etcd and the API
		// server start.
		if registry, err = c.startRegistry(binDir, p, opts.Detach); err != nil {
			return c, err
		}
	}
	if err := c.startEtcd(ctx, binDir, etcdPort, etcdPeerPort, opts.Detach); err != nil {
		return c, err
	}
	if err := c.startAPIServer(ctx, binDir, bindIP, etcdPort, apiPort, opts.Detach); err != nil {
		return c, err
	}
	if opts.Jobs || opts.Node {
		if err := c.startControlLoops(binDir, opts.Detach); err != nil {
			return c, err
		}
	}
	var kwok *process
	var kubelets []*process
	if opts.Jobs {
		if kwok, err = c.startKwok(binDir, opts.Detach); err != nil {
			return c, err
		}
	}
	if opts.Node {
		if kubelets, err = c.startNodeAgents(ctx, binDir, opts.Jobs, opts.Detach); err != nil {
			return c, err
		}
	}
	// Both kinds of node come up side by side, each proving itself with a probe Pod. (Every
	// process is started by now: the waits only read c.procs.)
	var wg sync.WaitGroup
	var kwokErr error
	nodeErrs := make([]error, len(kubelets))
	if kwok != nil {
		wg.Go(func() { kwokErr = c.waitKwokReady(ctx, kwok) })
	}
	for i, kubelet := range kubelets {
		wg.Go(func() { nodeErrs[i] = c.waitNodeReady(ctx, c.nodes[i], kubelet) })
	}
	wg.Wait()
	if err := errors.Join(nodeErrs...); err != nil {
		return c, err
	}
	if len(kubelets) > 0 {
		if err := c.waitNetworkPoliciesReady(ctx); err != nil {
			return c, err
		}
	}
	if kwokErr != nil {
		return c, kwokErr
	}
	if registry != nil {
		return c, c.waitRegistryReady(ctx, registry)
	}
	return c, nil
}

// track records a started process. For a detached test bed it also rewrites the state file at
// once, so `outpost-testbed down` finds every process even if `up` dies half-way.
func (c *Cluster) track(p *process) error {
	c.procs = append(c.procs, p)
	if c.detached {
		if err := c.writeState(); err != nil {
			return fmt.Errorf("testbed: recording the processes in %s: %w", c.Dir, err)
		}
	}
	return nil
}

// tempDirPrefix starts the names of temporary test bed directories; the test binary's pid follows,
// so a later run can tell directories of dead runs from those of running ones.
const tempDirPrefix = "outpost-testbed-"

// sweepStaleTempDirs removes temporary test bed directories left by test binaries that died
// without running Stop (killed by a timeout or a second Ctrl-C). Their processes died with them
// (Pdeathsig), only files remain.
func sweepStaleTempDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, dir := range dirs {
		rest := strings.TrimPrefix(filepath.Base(dir), tempDirPrefix)
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || processAlive(pid) {
			continue
		}
		if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > time.Minute {
			_ = os.RemoveAll(dir)
		}
	}
}

func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

func (c *Cluster) writeFiles(p *pki) error {
	files := map[string][]byte{
		"pki/ca.crt":        p.caCert,
		"pki/apiserver.crt": p.servingCrt,
		"pki/apiserver.key": p.servingKey,
		"pki/sa.key":        p.saKey,
		"pki/sa.pub":        p.saPub,
		"pki/admin.crt":     p.clientCert,
		"pki/admin.key":     p.clientKey,
		"pki/tokens.csv":    fmt.Appendf(nil, "%s,%s,%s,\"system:masters\"\n", p.token, adminUser, adminUser),
		"kwok/kwok.yaml":    kwokConfig,
		"scheduler.yaml":    fmt.Appendf(nil, schedulerConfig, c.path("kubeconfig")),
	}
	// A reused Dir may hold the etcd data of an earlier test bed, which etcd would refuse (or worse,
	// serve) with this one's new ports.
	if err := os.RemoveAll(c.path("etcd")); err != nil {
		return err
	}
	for _, dir := range []string{"logs", "etcd", "apiserver-certs"} {
		if err := os.MkdirAll(c.path(dir), 0o700); err != nil {
			return err
		}
	}
	for name, data := range files {
		path := c.path(name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.path("kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeContext] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{Token: c.Token}
	cfg.Contexts[kubeContext] = &clientcmdapi.Context{Cluster: kubeContext, AuthInfo: adminUser, Namespace: "default"}
	cfg.CurrentContext = kubeContext
	return clientcmd.WriteToFile(*cfg, c.Kubeconfig)
}

// kubeContext is the name of the cluster and context in the kubeconfig.
const kubeContext = "outpost-testbed"

func (c *Cluster) restConfig() *rest.Config {
	return &rest.Config{
		Host:            c.Host,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		// Tests create many objects quickly; client-go's default of 5 QPS would make them slow
		// for no reason against a private API server.
		QPS:   200,
		Burst: 400,
	}
}

// exitedErr returns an error for the first component that exited unexpectedly.
func (c *Cluster) exitedErr() error {
	for _, p := range c.procs {
		if err := p.exitedErr(); err != nil {
			return err
		}
	}
	return nil
}

// Client returns a Kubernetes clientset for the cluster (system:masters), created once.
func (c *Cluster) Client() kubernetes.Interface {
	c.clientOnce.Do(func() {
		c.client = kubernetes.NewForConfigOrDie(rest.CopyConfig(c.RESTConfig))
	})
	return c.client
}

// Stop stops every process of the test bed (SIGTERM, then SIGKILL after a short grace) and
// removes its temporary directory. It reports components that had crashed before Stop, since a
// crash mid-test explains otherwise puzzling test failures. Stop of a reused test bed does
// nothing; calling Stop twice is harmless.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		crashed := c.exitedErr()
		nodeErr := c.stopProcesses()
		if crashed != nil {
			c.stopErr = fmt.Errorf("testbed: a component crashed while the test bed was in use (logs kept in %s): %w", c.Dir, crashed)
			return
		}
		if nodeErr != nil {
			c.stopErr = fmt.Errorf("testbed: %w", nodeErr)
			return
		}
		if c.removeDir {
			if err := os.RemoveAll(c.Dir); err != nil {
				c.stopErr = fmt.Errorf("testbed: removing %s: %w", c.Dir, err)
			}
		}
	})
	return c.stopErr
}

// stopProcesses stops all processes at once and waits for them, then removes what the real node
// leaves on the host. A test bed in a temporary directory is killed outright: its data is about to
// be deleted, and the API server's graceful shutdown would add seconds to every test binary.
func (c *Cluster) stopProcesses() error {
	grace := stopGrace
	if c.removeDir {
		grace = 0
	}
	var wg sync.WaitGroup
	for i := len(c.procs) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *process) {
			defer wg.Done()
			p.stop(grace)
		}(c.procs[i])
	}
	wg.Wait()
	return c.stopNode()
}
