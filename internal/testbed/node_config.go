package testbed

import (
	"fmt"
	"strings"
)

// Configuration files of the real node's components. Every path a component would otherwise take
// from the host (/var/lib/containerd, /etc/cni/net.d, /var/lib/kubelet, /var/log/pods,
// /usr/libexec/kubernetes, /opt/containerd) is set to one under the node's directory; the rest
// (/run, /var/log, /var/lib/cni) is a tmpfs of the node's own mount namespace. Paths are written
// with %q: a Go-quoted ASCII string is a valid TOML basic string and YAML double-quoted string.

// nodeFiles is what the configuration templates need to know.
type nodeFiles struct {
	dir        string // the node's directory
	name       string // the Node's name
	podSubnet  string // its Pods' addresses, nodePodSubnet
	socket     string // containerd's socket
	kubeconfig string
	caFile     string
	nodeIP     string
	cgroupRoot string
	taint      bool // register the node with RealNodeTaint (kwok's fake node runs too)
	// fastLifecycle: the kubelet renews its Lease every 2 s instead of 10 s, so the node
	// lifecycle controller's short grace period (lifecycleArgs) holds on a busy machine.
	fastLifecycle bool
}

func (f nodeFiles) path(name string) string { return f.dir + "/" + name }

// containerdConfig is containerd's config.toml. restrict_oom_score_adj: these machines lack
// CAP_SYS_RESOURCE, so the negative oom_score_adj the kubelet asks for would fail every sandbox
// ("can't get final child's PID from pipe: EOF"). netns_mounts_under_state_dir keeps the Pods'
// network namespace files out of the host's /run/netns. Plugins that would probe other
// snapshotters or write to /opt are disabled or redirected. config_path holds a hosts.toml for the
// test bed's registry (the CA it trusts; writeRegistryHosts), read at every pull.
func (f nodeFiles) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, f.path("containerd/root"), f.path("containerd/state"), f.socket, f.path("containerd/opt"),
		PauseImage, cniBinDir, f.path("cni"), f.registryHostsDir())
}

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// cniConfig is the network of the node's Pods: a bridge with a host-local range, masquerading
// traffic that leaves the Pod subnet (so replies from this machine come back to the node IP),
// hairpin mode so a Pod reaches itself through its own Service, and portmap for hostPort.
func (f nodeFiles) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "outpost-testbed",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, f.podSubnet, f.path("cni-ipam"))
}

// kubeletConfig is the KubeletConfiguration. Each setting departs from the defaults for a reason
// of this environment: cgroupfs (no systemd), failCgroupV1 false (cgroup v1 hosts), failSwapOn
// false, eviction and image garbage collection effectively off (the kubelet cannot read the
// filesystem stats of a virtual disk, and an imported image that was collected could never be
// pulled again), no host resolv.conf (Pods must not learn the host's resolvers), and every
// directory under the node's own.
func (f nodeFiles) kubeletConfig() string {
	taints := "[]"
	if f.taint {
		taints = fmt.Sprintf("[{key: %q, effect: NoSchedule}]", RealNodeTaint)
	}
	lease := ""
	if f.fastLifecycle {
		// The Lease is renewed every quarter of its duration.
		lease = "nodeLeaseDurationSeconds: 8\nnodeStatusUpdateFrequency: 2s\n"
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %q
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization:
  mode: Webhook
containerRuntimeEndpoint: %q
cgroupDriver: cgroupfs
cgroupRoot: %q
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [%q]
resolvConf: ""
podLogsDir: %q
volumePluginDir: %q
evictionHard:
  memory.available: "0%%"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
maxPods: 110
registerWithTaints: %s
%s`, f.nodeIP, f.caFile, "unix://"+f.socket, f.cgroupRoot, f.nodeIP,
		f.path("pod-logs"), f.path("kubelet/volume-plugins"), taints, lease)
}

// kubeProxyConfig is the KubeProxyConfiguration: iptables mode, health and metrics on the node's
// loopback, and no attempt to change sysctls the node's namespace does not own (conntrack
// limits) or the oom_score_adj it may not lower.
func (f nodeFiles) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
mode: iptables
hostnameOverride: %q
bindAddress: %q
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %q
nodePortAddresses: [primary]
oomScoreAdj: 0
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, f.kubeconfig, f.name, f.nodeIP, clusterCIDR)
}

// corefile is CoreDNS's configuration: the cluster.local zone (and reverse lookups) from the
// API server, on the node IP only. There is deliberately no forward plugin: names outside the
// cluster are refused rather than sent to a resolver off this machine.
func (f nodeFiles) corefile() string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`, f.nodeIP, corefileQuote(f.kubeconfig), kubeContext)
}

// corefileQuote quotes a path for a Corefile, whose tokens are separated by spaces.
func corefileQuote(s string) string {
	if !strings.ContainsAny(s, " \t\"") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}
