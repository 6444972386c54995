# Test bed and tool provisioning targets, included from GNUmakefile:
#
#   include scripts/make-fragment-testbed.mk
#
# (Remove the GNUmakefile's own tools/testbed-* recipes when including this, or make warns about
# overriding recipes.) Variables already set by the GNUmakefile (OUTPOST_CACHE, TOFU_VERSION,
# GOLANGCI_VERSION) win; they are passed to the scripts so the paths the GNUmakefile computes and
# the paths the scripts build into always agree.

OUTPOST_CACHE        ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/outpost
TOFU_VERSION         ?= 1.10.6
GOLANGCI_VERSION     ?= 2.15.0
TFPLUGINDOCS_VERSION ?= 0.24.0
# State directory of the background test bed of testbed-up/testbed-down.
TESTBED_DIR          ?= $(OUTPOST_CACHE)/testbed-run
OUTPOST_TESTBED      := go run ./internal/testbed/cmd/outpost-testbed

.PHONY: tools testbed-build testbed-up testbed-down testbed-status testbed-test

tools: ## Builds OpenTofu, golangci-lint and tfplugindocs into the cache (once) and checks terraform.
	OUTPOST_CACHE='$(OUTPOST_CACHE)' TOFU_VERSION='$(TOFU_VERSION)' GOLANGCI_VERSION='$(GOLANGCI_VERSION)' \
		TFPLUGINDOCS_VERSION='$(TFPLUGINDOCS_VERSION)' scripts/tools.sh

testbed-build: ## Builds the test bed (control plane, kwok, and the real node's kubelet, kube-proxy, CoreDNS) from source (once, ~10 min cold); installs containerd, runc and CNI plugins with apt-get as root.
	OUTPOST_CACHE='$(OUTPOST_CACHE)' scripts/testbed-build.sh

testbed-up: testbed-build ## Starts a local Kubernetes test bed in the background and prints its kubeconfig (NODE=1: with a real node).
	OUTPOST_CACHE='$(OUTPOST_CACHE)' $(OUTPOST_TESTBED) up --dir '$(TESTBED_DIR)' $(if $(NODE),--node)

testbed-down: ## Stops the test bed started by testbed-up (does nothing if none runs).
	OUTPOST_CACHE='$(OUTPOST_CACHE)' $(OUTPOST_TESTBED) down --dir '$(TESTBED_DIR)'

testbed-status: ## Says whether the testbed-up test bed runs.
	OUTPOST_CACHE='$(OUTPOST_CACHE)' $(OUTPOST_TESTBED) status --dir '$(TESTBED_DIR)'

testbed-test: testbed-build ## Runs the test bed's own tests (Jobs on kwok and on the real node, Services, DNS, logs, cleanup).
	OUTPOST_CACHE='$(OUTPOST_CACHE)' go test -count=1 ./internal/testbed/...
