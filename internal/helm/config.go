// Package helm wraps the Helm v3 SDK actions the provider needs to install, upgrade, inspect,
// recover and remove the agent's release. It has no terraform-plugin imports: callers pass a
// logger (Helm's DebugLog signature) and a context.
//
// Every wrapper is thin and does one action; deciding whether an action is due is the caller's
// job. Actions that support it run with RunWithContext, so Terraform's timeouts and interrupts
// reach Helm. When the context ends first, Helm may still finish in the background and leave the
// release pending; RecoverPending repairs that on the next run.
package helm

import (
	"fmt"
	"sync"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// MaxHistory is how many revisions of a release Helm keeps (one Secret each).
const MaxHistory = 10

// Logger receives Helm's debug output; it has the signature of action.DebugLog.
type Logger func(format string, v ...any)

// RESTClientGetter gives Helm clients for one cluster and namespace from an existing REST
// config. Discovery results and the REST mapper are cached for the getter's lifetime, which
// is one Terraform operation.
type RESTClientGetter struct {
	config    *rest.Config
	namespace string

	mu        sync.Mutex
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
}

// NewRESTClientGetter returns a getter for namespace on the cluster of config.
func NewRESTClientGetter(config *rest.Config, namespace string) *RESTClientGetter {
	return &RESTClientGetter{config: config, namespace: namespace}
}

// ToRESTConfig returns a copy of the REST config, so Helm may change it.
func (g *RESTClientGetter) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(g.config), nil
}

// ToDiscoveryClient returns a memory-cached discovery client.
func (g *RESTClientGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.discovery == nil {
		cfg := rest.CopyConfig(g.config)
		// Discovery of a large cluster makes many requests at once; give it room.
		cfg.Burst = max(cfg.Burst, 100)
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("create discovery client: %w", err)
		}
		g.discovery = memory.NewMemCacheClient(dc)
	}
	return g.discovery, nil
}

// ToRESTMapper returns a deferred, discovery-backed REST mapper.
func (g *RESTClientGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mapper == nil {
		g.mapper = restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil)
	}
	return g.mapper, nil
}

// ToRawKubeConfigLoader returns a loader whose only job is to answer the namespace and the
// REST config; there is no kubeconfig file behind it.
func (g *RESTClientGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return &staticClientConfig{getter: g}
}

// staticClientConfig is the clientcmd.ClientConfig of a RESTClientGetter.
type staticClientConfig struct {
	getter *RESTClientGetter
}

func (c *staticClientConfig) RawConfig() (clientcmdapi.Config, error) {
	return clientcmdapi.Config{}, nil
}

func (c *staticClientConfig) ClientConfig() (*rest.Config, error) {
	return c.getter.ToRESTConfig()
}

func (c *staticClientConfig) Namespace() (string, bool, error) {
	return c.getter.namespace, true, nil
}

func (c *staticClientConfig) ConfigAccess() clientcmd.ConfigAccess {
	return clientcmd.NewDefaultClientConfigLoadingRules()
}

// NewConfiguration returns a Helm action configuration that stores releases as Secrets in
// namespace and sends Helm's debug output to log.
func NewConfiguration(getter *RESTClientGetter, namespace string, log Logger) (*action.Configuration, error) {
	if log == nil {
		log = func(string, ...any) {}
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, namespace, "secret", action.DebugLog(log)); err != nil {
		return nil, fmt.Errorf("initialise helm for namespace %q: %w", namespace, err)
	}
	// Pin the namespace on the kube client too, so resources without one land in the release's.
	if kc, ok := cfg.KubeClient.(*kube.Client); ok {
		kc.Namespace = namespace
	}
	cfg.Releases.MaxHistory = MaxHistory
	return cfg, nil
}
