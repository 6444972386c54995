# Tool and test bed targets, included from GNUmakefile, which defines OUTPOST_CACHE, the versions
# (from scripts/versions.env) and the tool paths TOFU, GOLANGCI, TFPLUGINDOCS, GORELEASER, HELM,
# ACTIONLINT and COSIGN.

# State directory of the background test bed of testbed-up/testbed-down.
TESTBED_DIR          ?= $(OUTPOST_CACHE)/testbed-run
OUTPOST_TESTBED      := go run ./internal/testbed/cmd/outpost-testbed

.PHONY: tools testbed-build testbed-up testbed-down testbed-status testbed-test

tools: ## Builds OpenTofu, golangci-lint, tfplugindocs, deadcode, goreleaser, helm, actionlint and cosign into the cache (once) and checks terraform.
	scripts/tools.sh

# Each tool is built on first use by the target that needs it, and only that tool.
$(TOFU) $(GOLANGCI) $(TFPLUGINDOCS) $(GORELEASER) $(HELM) $(ACTIONLINT) $(COSIGN):
	scripts/tools.sh $(notdir $@)
	@test -x '$@' || { echo "scripts/tools.sh did not build $@: versions come from scripts/versions.env only" >&2; exit 1; }

testbed-build: ## Builds the test bed (control plane, kwok, and the real node's kubelet, kube-proxy, CoreDNS, registry, kube-network-policies) from source (once, ~10 min cold); installs containerd, runc, CNI plugins and nftables with apt-get as root.
	scripts/testbed-build.sh

testbed-up: testbed-build ## Starts a local Kubernetes test bed in the background and prints its kubeconfig (NODE=1: with a real node).
	$(OUTPOST_TESTBED) up --dir '$(TESTBED_DIR)' $(if $(NODE),--node)

testbed-down: ## Stops the test bed started by testbed-up (does nothing if none runs).
	$(OUTPOST_TESTBED) down --dir '$(TESTBED_DIR)'

testbed-status: ## Says whether the testbed-up test bed runs.
	$(OUTPOST_TESTBED) status --dir '$(TESTBED_DIR)'

testbed-test: testbed-build ## Runs the test bed's own tests (Jobs on kwok and on the real node, Services, DNS, logs, cleanup).
	go test -count=1 ./internal/testbed/...
