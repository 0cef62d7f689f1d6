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
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'
	@echo
	@echo "Variables: FUZZTIME (fuzz time per target, default $(FUZZTIME)), SEEDS (simulate seeds, default $(SEEDS))"

.PHONY: build
build: ## Build every binary into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	@echo "built: $(addprefix $(BIN)/,$(COMMANDS))"

.PHONY: test
test: lint unit ## Run all tests: go vet, staticcheck, unit tests with -race (the CI command)

.PHONY: unit
unit: ## Run the unit tests with -race
	$(GO) test -race -count=1 ./...

.PHONY: lint
lint: ## Run go vet and the pinned staticcheck
	$(GO) vet ./...
	@echo "staticcheck ./..."
	@"$(call TOOLS,staticcheck)/staticcheck" ./...

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

.PHONY: demo
demo: build ## Show the topology engine through kubectl-neuron (catalog, plans, maps, simulate)
	hack/demo.sh

.PHONY: tools
tools: ## Build the pinned tools (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, staticcheck)
	hack/build-tools.sh

.PHONY: clean
clean: ## Remove bin/ (the tool cache stays: it is keyed by hack/tools/go.sum)
	rm -rf $(BIN)
