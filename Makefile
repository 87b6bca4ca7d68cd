# runfleet: `make help` lists the targets.
GO      ?= go
ROOTFS  ?= $(CURDIR)/var/rootfs
IMAGE   ?= runfleet-sandbox:latest
export RUNFLEET_TEST_ROOTFS ?= $(ROOTFS)
export RUNFLEET_TEST_IMAGE  ?= $(IMAGE)
# Every package of the workspace (go.work): the client module at the root, cmd/, internal/ and deploy/.
PKGS    := ./... ./fleet/...

# What --version prints: the nearest tag and commit, or "dev" outside git.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: help build demo test test-cgroup2 deps deps-demo deps-deploy image images langs langs-image langs-test deploy-test lint unit bench cpbench fuzz stress chaos soak clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## write bin/worker (with the small sandbox supervisor embedded), bin/submit and bin/gateway
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o fleet/cmd/worker/runfleet-supervisor ./fleet/internal/cmd/sandboxinit
	CGO_ENABLED=0 $(GO) build -tags runfleet_supervisor -ldflags "-X github.com/runfleet/runfleet/fleet/internal/cli.version=$(VERSION)" -o bin/worker ./fleet/cmd/worker
	$(GO) build -ldflags "-X github.com/runfleet/runfleet/fleet/internal/cli.version=$(VERSION)" -o bin/submit ./fleet/cmd/submit
	$(GO) build -ldflags "-X github.com/runfleet/runfleet/fleet/internal/cli.version=$(VERSION)" -o bin/gateway ./fleet/cmd/gateway

demo: deps-demo build ## run real python3 and nodejs jobs on `worker --dev` (no outside service), then one through `gateway` with curl
	RUNFLEET_ROOTFS=$(ROOTFS) scripts/demo

deps-demo: ## install what the demo needs when missing (redis-server, python3 with numpy, pandas, matplotlib, jinja2, httpx and requests, nodejs, curl)
	scripts/setup demo

deps: ## install what the suite needs when missing (scripts/programs), start dockerd, build the offline sandbox image
	scripts/setup test

image: ## build the sandbox root fs (debootstrap) and import it as $(IMAGE), offline
	scripts/setup image

deps-deploy: ## install what the deployment tests need when missing: the above, the docker compose plugin, nats-server, helm
	scripts/setup deploy

langs: ## build the langs root fs var/rootfs-langs (bash, C, C++, Go, Java 17, Rust, ruby and the sandbox root fs's packages; downloads about a gigabyte): `worker --rootfs var/rootfs-langs --langs fleet/langs`
	scripts/setup langs

langs-image: ## the langs root fs imported as the image runfleet-langs:latest (`worker --provider docker --image runfleet-langs:latest --langs fleet/langs`)
	scripts/setup langs-image

langs-test: langs-image ## every manifest of fleet/langs runs its test program on both providers, in a sandbox and through the native, piston and judge0 APIs (RUNFLEET_TEST_LANGS=1); not part of `make test`
	RUNFLEET_TEST_LANGS=1 RUNFLEET_TEST_LANGS_ROOTFS=$(CURDIR)/var/rootfs-langs $(GO) test -count=1 -v -timeout 30m ./fleet/langs/
	RUNFLEET_TEST_LANGS=1 RUNFLEET_TEST_LANGS_ROOTFS=$(CURDIR)/var/rootfs-langs $(GO) test -count=1 -v -timeout 30m -run TestLanguagesThroughAPIs ./fleet/internal/gateway/

images: image ## build runfleet-worker, -nats and -redis offline; skipped when their inputs did not change
	GO=$(GO) fleet/deploy/images/build

deploy-test: deps-deploy images ## compose up with three workers and 30 jobs; the Kubernetes worker container run as declared; the Helm chart linted, rendered and decoded
	$(GO) test -tags deploy -count=1 -v -timeout 15m ./fleet/deploy/

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: files above need formatting'; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) vet -tags deploy ./fleet/deploy/

unit: ## the suite alone, with the race detector, on what is installed
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

bench: build ## every benchmark once, so they keep compiling and running
	$(GO) test -run '^$$' -bench . -benchtime=1x -timeout 10m $(PKGS)

cpbench: ## the control plane alone (a provider that runs nothing, nats-server, redis-server): jobs/s, latency, CPU per job
	$(GO) run ./fleet/internal/cmd/cpbench --cpuprofile cpbench-worker.pprof

# Counts, not durations: a duration races the fuzz coordinator's own deadline and fails with a bare
# "context deadline exceeded" on a loaded machine (go.dev/issue/75804, fixed in Go 1.27).
fuzz: ## the request decoder's and the outputs matcher's fuzz targets, briefly
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60000x ./job/
	$(GO) test -run '^$$' -fuzz FuzzMatchOutput -fuzztime 300000x ./job/

test: deps lint build unit bench fuzz deploy-test test-cgroup2 ## set up what is missing, then lint, the suite, every benchmark once, a short fuzz, the deployment

test-cgroup2: deps ## the namespace provider's tests on a cgroup v2 kernel: a QEMU guest (TCG) of Debian's kernel, booted with cgroup_no_v1=all
	CI=true RUNFLEET_VMTEST=1 $(GO) test -count=1 -v -timeout 40m -run TestCgroupV2 ./fleet/internal/vmtest/

stress: deps ## the suite three times in a row beside stress-ng --cpu 2 (a loaded 2-core machine), with each run's time
	@stress-ng --cpu 2 --timeout 90m --quiet & pid=$$!; trap "kill $$pid" EXIT; \
	for i in 1 2 3; do start=$$(date +%s); $(GO) test -race -count=1 -timeout 30m $(PKGS) || exit 1; echo "stress run $$i: $$(( $$(date +%s) - start )) s"; done

chaos: deps build ## 3 workers, 500 jobs, a worker killed every few seconds; prints lost/duplicate counts
	RUNFLEET_CHAOS_JOBS=500 $(GO) test -count=1 -run TestChaos -v -timeout 30m ./fleet/internal/e2e/

soak: deps ## 30 minutes of two workers, three tenants (one hostile), a worker SIGKILLed, consumers deleted and Redis failed over in turn; prints the figures (the suite runs 3 minutes of it)
	RUNFLEET_SOAK=30m $(GO) test -count=1 -run TestSoak -v -timeout 60m ./fleet/internal/soak/

.PHONY: release
release: ## VERSION=vX.Y.Z: the fleet module requires the client at VERSION; commit, tag vX.Y.Z and fleet/vX.Y.Z
	@test "$(origin VERSION)" = "command line" || { echo 'usage: make release VERSION=vX.Y.Z'; exit 2; }
	$(GO) run ./fleet/internal/cmd/release $(VERSION)

clean: ## remove build output (keeps var/rootfs and var/rootfs-langs)
	rm -rf bin
