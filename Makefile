# kube-neuron. Run `make help` for the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin
COMMANDS  := $(notdir $(wildcard cmd/*))
# Pinned tools (etcd, Kubernetes control plane, kubectl, staticcheck) are built once by
# hack/build-tools.sh into $(go env GOCACHE)/kube-neuron-tools/<key>/bin and reused.
TOOLS      = $(shell hack/build-tools.sh $(1))
FUZZTIME  ?= 10s
SEEDS     ?= 1-5

.PHONY: help
help: ## Show this help
	@echo "kube-neuron: run AWS Neuron accelerators on Kubernetes with one topology engine."
	@echo
	@echo "Usage: make <target> [VAR=value]"
	@echo
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'
	@echo
	@echo "Variables: FLEET (lab fleet file), COMPONENTS (lab-up: a comma list of the binaries to run, as neuron-lab --components; default all four, the autoscaler too),"
	@echo "           PLATFORMS (images, default $(PLATFORMS)), KUBE_NEURON_REAL_NODES (0: no real nodes in the demo and the tests),"
	@echo "           FUZZTIME (fuzz time per target, default $(FUZZTIME)), SEEDS (simulate seeds, default $(SEEDS))"

.PHONY: build
build: ## Build every binary into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	@echo "built: $(addprefix $(BIN)/,$(COMMANDS))"

PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: images
images: ## Build each component's OCI image into bin/images/<name>.tar, no Docker (PLATFORMS=linux/amd64 for one platform): docs/images.md
	cd hack/images && $(GO) run . -repo ../.. -platforms $(PLATFORMS) -out ../../$(BIN)/images

# Without -race: it makes compressing the binaries several times slower; `go test -race ./...`
# in hack/images runs the same code on small binaries.
.PHONY: images-verify
images-verify: ## Check that the images are reproducible: build them twice, once with an empty Go build cache (minutes)
	cd hack/images && KUBE_NEURON_IMAGES_VERIFY=1 $(GO) test -count=1 -timeout 60m -v ./...

KUBE_TOOLS := etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
LAB_DIR    ?= .lab
CHART      := deployments/helm/kube-neuron
# Real lab nodes (`kubelet: real` in a fleet file, the demo's real-node act, the e2e tests' real-node
# tier) need Debian's iptables and libseccomp-dev, containerd, runc, the CNI plugins and the images:
# hack/real-nodes.sh makes them once and prints the neuron-lab flags. KUBE_NEURON_REAL_NODES=0
# runs without real nodes.
KUBE_NEURON_REAL_NODES ?= 1
REAL_FLEET = $(if $(FLEET),$(shell grep -qE '^[^#]*kubelet:[[:space:]]*"?real' $(FLEET) && echo yes))
LAB_FLAGS  = --bin-dir "$(call TOOLS,$(KUBE_TOOLS))" --chart $(CHART) --helm "$$(hack/helm/build.sh)"

.PHONY: test
test: lint unit e2e ## Run all tests: go vet, staticcheck, unit and e2e tests with -race (the CI command)

.PHONY: unit
unit: ## Run the unit tests with -race (the product module and the scheduler module in scheduler/)
	$(GO) test -race -count=1 ./...
	cd scheduler && $(GO) test -race -count=1 ./...

# The e2e scenarios that exercise my-scheduler, run a second time with my-scheduler as
# neuron-kube-scheduler (KUBE_NEURON_SCHEDULING=plugin) instead of the stock kube-scheduler with
# neuron-scheduler-extender. Left out of that second run, because they are about the extender
# itself or do not use my-scheduler: TestTwoReplicasNeverShareDevices (two extender replicas and
# their bind Leases), TestSwitchKeepsRunningPodsDevices (it switches from the extender to
# neuron-kube-scheduler itself), TestUninstallCleanup (the extender's bind Leases), the other
# autoscaler tests (their pods use the default scheduler), and the packages that run the extender
# only (security: its TLS and RBAC; chart, realnode: the chart's Deployments).
SHARED_E2E_RUN  := ^(TestSeedScenarios|TestChurn|TestExplain|TestTakeOver|TestTwentyMixedPodsGetTheCheapestFleet|TestRestartLaunchesNothingTwice)$$
SHARED_E2E_PKGS := ./test/e2e/extender/ ./test/e2e/migration/ ./test/e2e/autoscaler/

# The real-node tier (test/e2e/realnode) runs after the others, alone: its kubelets and containers
# would otherwise take the CPU the timing-sensitive tests of the simulated labs need.
.PHONY: e2e
e2e: ## Run the e2e tests on labs (real control plane; simulated nodes, the scenarios of my-scheduler again with neuron-kube-scheduler, then the real-node tier unless KUBE_NEURON_REAL_NODES=0) with -race
	KUBE_NEURON_TOOLS_BIN="$(call TOOLS,$(KUBE_TOOLS))" \
	$(GO) test -race -count=1 -tags e2e -timeout 30m $$($(GO) list -tags e2e ./test/e2e/... | grep -v /test/e2e/realnode)
	KUBE_NEURON_TOOLS_BIN="$(call TOOLS,$(KUBE_TOOLS))" KUBE_NEURON_SCHEDULING=plugin \
	$(GO) test -race -count=1 -tags e2e -timeout 30m -run '$(SHARED_E2E_RUN)' $(SHARED_E2E_PKGS)
	KUBE_NEURON_TOOLS_BIN="$(call TOOLS,$(KUBE_TOOLS))" \
	KUBE_NEURON_REAL_NODE_FLAGS="$$(if [ "$(KUBE_NEURON_REAL_NODES)" != 0 ]; then hack/real-nodes.sh; fi)" \
	$(GO) test -race -count=1 -tags e2e -timeout 30m ./test/e2e/realnode/

.PHONY: lws
lws: ## Build the LeaderWorkerSet controller the lab can run (hack/lws/build.sh; the e2e tests build it when they need it): docs/lab.md
	hack/lws/build.sh

.PHONY: lab-up
lab-up: build ## Start the lab in the background with every component, the autoscaler too (COMPONENTS=a,b chooses; FLEET=file the fleet; LWS=1 the LeaderWorkerSet controller), the chart installed with helm; kubeconfig in .lab/kubeconfig
	@mkdir -p $(LAB_DIR)
	$(BIN)/neuron-lab up --dir $(LAB_DIR) $(LAB_FLAGS) $(if $(REAL_FLEET),$$(hack/real-nodes.sh)) $(if $(FLEET),--fleet $(FLEET)) $(if $(COMPONENTS),--components $(COMPONENTS)) $(if $(LWS),--lws-dir "$$(hack/lws/build.sh)")

# lab-status and lab-down use the neuron-lab that lab-up built (building it when there is none).
.PHONY: lab-status
lab-status: ## Say whether the lab runs: its nodes, components, kubeconfig and why each pending pod waits (fails when none runs)
	@[ -x $(BIN)/neuron-lab ] || $(GO) build -o $(BIN)/ ./cmd/neuron-lab
	@$(BIN)/neuron-lab status --dir $(LAB_DIR)

.PHONY: lab-down
lab-down: ## Stop the lab that lab-up started, and say what it stopped (or that nothing ran)
	@[ -x $(BIN)/neuron-lab ] || $(GO) build -o $(BIN)/ ./cmd/neuron-lab
	@$(BIN)/neuron-lab down --dir $(LAB_DIR)

.PHONY: lint
lint: ## Run go vet (the scheduler module too) and the pinned staticcheck (e2e tests included)
	$(GO) vet -tags e2e ./...
	cd scheduler && $(GO) vet ./...
	@echo "staticcheck -tags e2e ./..."
	@"$(call TOOLS,staticcheck)/staticcheck" -tags e2e ./...

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

.PHONY: bench
bench: build ## Benchmark one placement decision and compare best-fit with first-fit (simulate, seeds SEEDS)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/topology/
	$(BIN)/kubectl-neuron simulate --compare --seeds $(SEEDS)

.PHONY: bench-scheduler
bench-scheduler: ## Scheduling throughput through the real kube-scheduler: plain, do-nothing extender, ours, neuron-kube-scheduler (BENCH_NODES, BENCH_PODS)
	KUBE_NEURON_TOOLS_BIN="$(call TOOLS,$(KUBE_TOOLS))" $(GO) test -tags e2e -run '^$$' -bench SchedulingThroughput -benchtime 1x -timeout 30m ./test/bench/scheduler/

.PHONY: bench-autoscaler
bench-autoscaler: ## Autoscaler planning speed (pods/s) and fleet cost against the exact optimum (cost/optimum: 10, 20, 40 pods) and a configuration-LP bound (cost/bound: 100, 1,000, 10,000 pods; random and DRA mixes), printed as one table
	$(GO) test -run '^$$' -bench 'Plan$$' -benchtime 1x -timeout 10m ./internal/autoscaler/plan/

.PHONY: bench-dra
bench-dra: ## DRA scheduling throughput through the real kube-scheduler: claims with and without matchAttribute on our ResourceSlices (BENCH_NODES, BENCH_PODS)
	KUBE_NEURON_TOOLS_BIN="$(call TOOLS,$(KUBE_TOOLS))" $(GO) test -tags e2e -run '^$$' -bench DRASchedulingThroughput -benchtime 1x -timeout 30m ./test/bench/dra/

.PHONY: demo
demo: build ## The main job: a lab with simulated and real Neuron nodes, the examples applied, what every pod got (state in .demo/)
	@mkdir -p .demo
	$(BIN)/neuron-lab demo --dir .demo $(LAB_FLAGS) $$(if [ "$(KUBE_NEURON_REAL_NODES)" != 0 ]; then hack/real-nodes.sh; fi)

.PHONY: engine-demo
engine-demo: build ## Show the topology engine alone through kubectl-neuron (catalog, plans, maps, simulate)
	hack/demo.sh

.PHONY: tools
tools: ## Build the pinned tools (etcd, the Kubernetes binaries, staticcheck, helm; containerd, runc, the CNI plugins, CoreDNS), after installing the Debian packages real nodes need (hack/node/deps.sh, as root)
	hack/build-tools.sh
	hack/helm/build.sh
	hack/node/deps.sh
	hack/node/build.sh

.PHONY: chart-lint
chart-lint: ## helm lint the chart (the chart's Go tests also render it for the seed install commands)
	"$$(hack/helm/build.sh)" lint --strict $(CHART)

.PHONY: chart
chart: ## Package the Helm chart into bin/kube-neuron-<Chart.yaml version>.tgz (after helm lint)
	@mkdir -p $(BIN)
	"$$(hack/helm/build.sh)" lint --strict $(CHART)
	"$$(hack/helm/build.sh)" package $(CHART) --destination $(BIN)

.PHONY: clean
clean: ## Remove bin/ (the tool cache stays: it is keyed by hack/tools/go.sum)
	rm -rf $(BIN)
