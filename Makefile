# runfleet: `make help` lists the targets.
GO      ?= go
ROOTFS  ?= $(CURDIR)/var/rootfs
IMAGE   ?= runfleet-sandbox:latest
export RUNFLEET_TEST_ROOTFS ?= $(ROOTFS)
export RUNFLEET_TEST_IMAGE  ?= $(IMAGE)
# Every package of the workspace (go.work): the client module at the root, cmd/, internal/ and deploy/.
PKGS    := ./... ./cmd/... ./internal/... ./deploy/...

# What --version prints: the nearest tag and commit, or "dev" outside git.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: help build demo test test-cgroup2 deps deps-demo deps-deploy image images deploy-test lint unit bench cpbench fuzz stress chaos clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## write bin/worker (with the small sandbox supervisor embedded), bin/submit and bin/gateway
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o cmd/worker/runfleet-supervisor ./internal/supervise/sandboxinit
	CGO_ENABLED=0 $(GO) build -tags runfleet_supervisor -ldflags "-X main.version=$(VERSION)" -o bin/worker ./cmd/worker
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/submit ./cmd/submit
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/gateway ./cmd/gateway

demo: deps-demo build ## run real python3 and nodejs jobs on `worker --dev` (no outside service), then one through `gateway` with curl
	RUNFLEET_ROOTFS=$(ROOTFS) scripts/demo

deps-demo: ## install what the demo needs when missing (redis-server, python3 with numpy, pandas, matplotlib, jinja2, httpx and requests, nodejs, curl)
	scripts/setup demo

deps: ## install what the suite needs when missing (scripts/programs), start dockerd, build the offline sandbox image
	scripts/setup test

image: ## build the sandbox root fs (debootstrap) and import it as $(IMAGE), offline
	scripts/setup image

deps-deploy: ## install what the deployment tests need when missing: the above, the docker compose plugin, nats-server
	scripts/setup deploy

images: image ## build runfleet-worker, -nats and -redis offline; skipped when their inputs did not change
	GO=$(GO) deploy/images/build

deploy-test: deps-deploy images ## compose up with three workers and 30 jobs; the Kubernetes worker container run as declared
	$(GO) test -tags deploy -count=1 -v -timeout 15m ./deploy/

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: files above need formatting'; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) vet -tags deploy ./deploy/

unit: ## the suite alone, with the race detector, on what is installed
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

bench: build ## every benchmark once, so they keep compiling and running
	$(GO) test -run '^$$' -bench . -benchtime=1x -timeout 10m $(PKGS)

cpbench: ## the control plane alone (a provider that runs nothing, nats-server, redis-server): jobs/s, latency, CPU per job
	$(GO) run ./internal/cmd/cpbench --cpuprofile cpbench-worker.pprof

# Counts, not durations: a duration races the fuzz coordinator's own deadline and fails with a bare
# "context deadline exceeded" on a loaded machine (go.dev/issue/75804, fixed in Go 1.27).
fuzz: ## the request decoder's and the outputs matcher's fuzz targets, briefly
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60000x ./job/
	$(GO) test -run '^$$' -fuzz FuzzMatchOutput -fuzztime 300000x ./job/

test: deps lint build unit bench fuzz deploy-test test-cgroup2 ## set up what is missing, then lint, the suite, every benchmark once, a short fuzz, the deployment

test-cgroup2: deps ## the namespace provider's tests on a cgroup v2 kernel: a QEMU guest (TCG) of Debian's kernel, booted with cgroup_no_v1=all
	CI=true RUNFLEET_VMTEST=1 $(GO) test -count=1 -v -timeout 40m -run TestCgroupV2 ./internal/vmtest/

stress: deps ## the suite three times in a row beside stress-ng --cpu 2 (a loaded 2-core machine), with each run's time
	@stress-ng --cpu 2 --timeout 90m --quiet & pid=$$!; trap "kill $$pid" EXIT; \
	for i in 1 2 3; do start=$$(date +%s); $(GO) test -race -count=1 -timeout 30m $(PKGS) || exit 1; echo "stress run $$i: $$(( $$(date +%s) - start )) s"; done

chaos: deps build ## 3 workers, 500 jobs, a worker killed every few seconds; prints lost/duplicate counts
	RUNFLEET_CHAOS_JOBS=500 $(GO) test -count=1 -run TestChaos -v -timeout 30m ./internal/e2e/

.PHONY: release
release: ## VERSION=vX.Y.Z: the four modules require each other at VERSION; commit, tag vX.Y.Z, cmd/, internal/, deploy/
	@test "$(origin VERSION)" = "command line" || { echo 'usage: make release VERSION=vX.Y.Z'; exit 2; }
	$(GO) run ./internal/cmd/release $(VERSION)

clean: ## remove build output (keeps var/rootfs)
	rm -rf bin
