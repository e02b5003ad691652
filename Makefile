# minicri — the two commands a user needs are `make run` and `make test`.
# Both install the Debian packages that are missing first (as root), through
# make deps, the one target that installs; make build only builds.

export PATH := $(PATH):/usr/local/go/bin:/usr/sbin:/sbin
GO       ?= go
# LDFLAGS is recursive (=): git runs for a build only, not at every make.
# VERSION is a semantic version, as the kubelet wants the runtime's (it shows
# one it cannot parse as "Unknown"): a release tag vX.Y.Z without its v, else
# 0.1.0-dev with the commit as build metadata.
VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//' | grep . || \
	echo "0.1.0-dev+$$(git describe --always --dirty 2>/dev/null || echo unknown)")
LDFLAGS   = -s -w -X main.version=$(VERSION)
BIN      := $(CURDIR)/bin
E2E_BIN  := $(BIN)/e2e
PREFIX   ?= /usr/local
E2E_TIMEOUT ?= 20m

.PHONY: all deps build build-e2e kubelet cri-tools run test vet fmt-check tidy-check unit e2e guest-test guest-stage cluster cluster-down cluster-test conformance conformance-build bench install clean

all: build

# Debian packages: runc, crun, CNI plugins, busybox-static, docker-registry, ...
# and a current runc for the handler runc-current (built once, then reused).
deps:
	@hack/install-deps.sh
	@hack/build-runc.sh >/dev/null

# Static binaries: the monitor must not depend on the host's libc, and neither
# needs cgo. The shipped daemon must not have the test-only crash points
# (server/internal/lifecycle/crashpoint.go); what each tag leaves out is checked by cmd/minicri's
# TestBuildTagsLeaveOutFiles and TestDaemonLeavesOutHeavyPackages.
# minicri-pause, the pod infra process, is a short C program built static
# with Debian's gcc and libc6-dev: one runs per PID-sharing pod, and a Go
# runtime in each would cost more than the program.
# NRI's WASM plugin runtime (wazero, made at every start) is left out
# (-tags nri_no_wasm): a WASM plugin in the plugin dir is then refused with
# a log line. `make build NRI_WASM=1` builds it in (docs/nri.md).
# grpcnotrace leaves out grpc's request tracing (golang.org/x/net/trace,
# off unless grpc.EnableTracing is set, which minicri never does) and the
# html/template it pulls in.
GOBUILD := CGO_ENABLED=0 $(GO) build
comma   := ,
GOTAGS  := grpcnotrace$(if $(NRI_WASM),,$(comma)nri_no_wasm)
build: $(BIN)/minicri-pause
	$(GOBUILD) -tags "$(GOTAGS)" -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# The e2e suite's binaries: the same, plus the crash points its crash tests
# use (server/internal/lifecycle/crashpoint.go, -tags crashpoints). Never install these.
build-e2e: $(E2E_BIN)/minicri-pause
	$(GOBUILD) -tags "crashpoints$(if $(GOTAGS),$(comma)$(GOTAGS))" -trimpath -ldflags "$(LDFLAGS)" -o $(E2E_BIN)/ ./cmd/...

CC ?= cc
%/minicri-pause: cmd/minicri-pause/pause.c
	@command -v $(CC) >/dev/null && test -e "$$($(CC) -print-file-name=libc.a)" || \
		{ echo "minicri-pause needs $(CC) and a static libc (Debian: gcc, libc6-dev); make deps installs them" >&2; exit 1; }
	@mkdir -p $(@D)
	$(CC) -static -Os -s -Wall -Wextra -o $@ $<

# Run the daemon in the foreground with the built-in defaults (socket
# /run/minicri/minicri.sock). Extra flags: make run ARGS="--log-level debug".
# A node without any CNI configuration gets contrib/cni's bridge network.
run: deps build
	@hack/install-cni-config.sh
	PATH=$(BIN):$$PATH $(BIN)/minicri $(ARGS)

test: deps build vet fmt-check tidy-check unit e2e guest-stage cluster-test

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/
	$(GO) vet -tags e2e,guest ./test/e2e/
	$(GO) vet -tags cluster ./test/e2e/

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# go.mod and go.sum must be what `go mod tidy` makes of them: a module
# imported directly must not be marked // indirect, nor one no longer used
# stay. -diff changes nothing and fails on any difference. hack/kubelet is a
# module of its own.
tidy-check:
	$(GO) mod tidy -diff
	cd hack/kubelet && $(GO) mod tidy -diff
	cd hack/cri-tools && $(GO) mod tidy -diff
	cd hack/cluster && $(GO) mod tidy -diff
	cd hack/conformance && $(GO) mod tidy -diff

# Unit tests, with the race detector: most packages hold shared state.
# Every go test also runs the fuzz targets' seed corpora (testdata/fuzz);
# then each target tries FUZZTIME more inputs (docs/reliability.md). A count,
# not a duration: the fuzz coordinator can report its own -fuzztime
# deadline as a failure when a loaded worker is mid-input; a count sets no
# deadline.
FUZZTIME ?= 4000x
FUZZ_TARGETS := FuzzValidateContainerConfig:server FuzzValidateSandboxConfig:server FuzzValidateID:server \
	FuzzGenerateSpec:oci FuzzLogWriter:conmon/monitor
# image/sigpolicy_upstream_test.go reads containers/image's test vectors
# from the module cache, at the version it names. hack/cluster is a module
# of its own: its images program (the cluster's and the suite's images).
unit:
	$(GO) mod download github.com/containers/image/v5@v5.36.2
	$(GO) test -race -count=1 ./...
	cd hack/cluster && $(GO) test -count=1 ./images/
	for t in $(FUZZ_TARGETS); do $(GO) test -run '^$$' -fuzz "^$${t%%:*}\$$" -fuzztime $(FUZZTIME) ./$${t#*:}/ || exit 1; done

# The real kubelet the kubelet e2e tests run (docs/kubelet.md), built from
# hack/kubelet and cached outside the repository: the first build takes
# minutes, every later one (any clone) reuses it. MINICRI_KUBELET=PATH (in
# the environment or on the command line) runs another kubelet instead.
MINICRI_KUBELET ?= $(shell hack/build-kubelet.sh --path)
KUBELET_DEP := $(if $(filter environment command,$(origin MINICRI_KUBELET)),,kubelet)
kubelet:
	@hack/build-kubelet.sh >/dev/null

# critest, the CRI validation suite of cri-tools, and crictl (docs/development.md),
# built from hack/cri-tools and cached like the kubelet. MINICRI_CRITEST=PATH
# runs another critest instead.
MINICRI_CRITEST ?= $(shell hack/build-cri-tools.sh --path)
CRITEST_DEP := $(if $(filter environment command,$(origin MINICRI_CRITEST)),,cri-tools)
cri-tools:
	@hack/build-cri-tools.sh >/dev/null

# End-to-end tests: the real daemon, real runc, real registry, a real
# kubelet; needs root.
e2e: build build-e2e $(KUBELET_DEP) $(CRITEST_DEP)
	MINICRI_BIN_DIR=$(E2E_BIN) MINICRI_KUBELET=$(MINICRI_KUBELET) MINICRI_CRITEST=$(MINICRI_CRITEST) $(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) ./test/e2e/

# The guest tests (docs/development.md): test/e2e/guest_*_test.go in a
# Debian VM (systemd, cgroup v2, AppArmor, the release's stock kernel) that
# hack/build-guest.sh builds once per release into the cache, booted by
# qemu (TCG where KVM cannot run a stock kernel). minicri goes in by make
# install. make guest-test boots one release, GUEST_RELEASE: bookworm (6.1,
# the default), trixie (6.12) or bullseye (5.10); GUEST_RUN=TestGuestNode
# runs one test. make guest-stage boots the releases of GUEST_STAGE_RELEASES
# side by side (hack/guest-stage.sh): the whole suite on bookworm and
# trixie, on bullseye the tests whose outcome depends on the kernel or on
# systemd (GUEST_RUN_BULLSEYE). make test's guest stage is bookworm alone:
# under TCG the three need more CPU than this host's two cores give in the
# stage's budget (docs/development.md); GUEST_STAGE_RELEASES="bookworm
# trixie bullseye" runs them all.
GUEST_RUN     ?= ^TestGuest
GUEST_TIMEOUT ?= 20m
GUEST_RELEASE ?= bookworm
# Each release's bound in the stage: side by side on a busy host each VM
# gets less of the CPU than alone.
GUEST_STAGE_TIMEOUT ?= 40m
GUEST_RUN_BULLSEYE ?= ^TestGuest(Node|Lifecycle|Exec|Stats|OOMKilled|UpdateResources|SharedPID|UserNamespace|AppArmor|Restart|Kubelet|KubeletUserNamespace|CheckpointRestore|CheckpointRootfsOfAnAttackersContainer|FailedPodLeavesNothing|CritestUserNamespaces|ScopesGoWhileSystemdReloads)$$
GUEST_STAGE_RELEASES ?= bookworm
guest_stage_spec = $(1)=$(if $(filter bullseye,$(1)),$(GUEST_RUN_BULLSEYE),^TestGuest)
# A saved booted guest instead of a boot under TCG (docs/development.md);
# GUEST_SNAPSHOT=0 boots every time.
GUEST_SNAPSHOT ?= 1
GUEST_ENV = MINICRI_BIN_DIR=$(E2E_BIN) MINICRI_KUBELET=$(MINICRI_KUBELET) MINICRI_CRITEST=$(MINICRI_CRITEST) MINICRI_GUEST_SNAPSHOT=$(GUEST_SNAPSHOT) GUEST_TIMEOUT=$(GUEST_TIMEOUT) GO=$(GO)
guest-test: build build-e2e $(KUBELET_DEP) $(CRITEST_DEP)
	@hack/install-deps.sh guest
	@hack/build-runc.sh >/dev/null
	$(GUEST_ENV) hack/guest-stage.sh '$(GUEST_RELEASE)=$(GUEST_RUN)'

guest-stage: build build-e2e $(KUBELET_DEP) $(CRITEST_DEP)
	@hack/install-deps.sh guest
	@hack/build-runc.sh >/dev/null
	$(GUEST_ENV) GUEST_TIMEOUT=$(GUEST_STAGE_TIMEOUT) hack/guest-stage.sh $(foreach r,$(GUEST_STAGE_RELEASES),'$(call guest_stage_spec,$(r))')

# A single-node kubeadm cluster on this host, minicri its CRI (docs/cluster.md):
# make cluster brings it up and leaves it running (kubectl --kubeconfig
# /etc/kubernetes/admin.conf), make cluster-down takes it down and checks that
# nothing is left. Kubernetes' binaries and the control plane's images are
# built once, offline, and cached like the kubelet (hack/build-cluster.sh).
# make cluster-test: up, the tests of test/e2e/cluster_*_test.go, down.
# NODES=2: the guest of the guest stage joins as a second node; its tests
# wait on a TCG guest, hence the longer timeout.
# make cluster CLUSTER_CRI=containerd: the same cluster on Debian's
# containerd 1.6 instead of minicri, to cross-check a spec minicri does not
# run (docs/cluster.md); make cluster-test always runs on minicri.
NODES ?= 1
CLUSTER_CRI ?= minicri
CLUSTER_TIMEOUT ?= $(if $(filter 2,$(NODES)),25m,10m)
cluster: deps build kubelet $(if $(filter containerd,$(CLUSTER_CRI)),conformance-build)
	$(if $(filter 2,$(NODES)),@hack/install-deps.sh guest)
	$(if $(filter containerd,$(CLUSTER_CRI)),@hack/install-deps.sh containerd)
	@NODES=$(NODES) CLUSTER_CRI=$(CLUSTER_CRI) hack/cluster.sh up

cluster-down:
	@hack/cluster.sh down

cluster-test: deps build kubelet conformance-build
	$(if $(filter 2,$(NODES)),@hack/install-deps.sh guest)
	@NODES=$(NODES) CLUSTER_CRI=minicri hack/cluster.sh up || { hack/cluster.sh down; exit 1; }
	MINICRI_CLUSTER_ENV=/var/lib/minicri-cluster/env \
		$(GO) test -tags cluster -count=1 -timeout $(CLUSTER_TIMEOUT) -run '^TestCluster' -v ./test/e2e/; \
		rc=$$?; CONFORMANCE_TIMEOUT=15m CONFORMANCE_SKIP='$(CONFORMANCE_CI_SKIP)' hack/conformance.sh '$(CONFORMANCE_CI)' || rc=1; \
		hack/cluster.sh down && exit $$rc

# The Kubernetes conformance suite against a cluster that is up (make
# cluster; docs/conformance.md): e2e.test v1.37.2, ginkgo and the suite's
# images, built once, offline, and cached like the cluster
# (hack/build-conformance.sh). make cluster-test runs the [Conformance] specs
# of CONFORMANCE_CI only: the pods and containers of sig-node, kubectl's
# exec/attach/logs/port-forward/cp, DNS, Services and pod-to-pod traffic,
# Deployments, DaemonSets and Jobs.
CONFORMANCE_CI ?= \[sig-node\] (Pods|Containers|Container Runtime|Container Lifecycle Hook|InitContainer|Downward API|Variable Expansion|Kubelet|PreStop)|\[sig-cli\] Kubectl.*([Ee]xec|[Aa]ttach|logs|[Pp]ort.forward|[^a-z]cp[^a-z])|\[sig-network\] (DNS|Services|Networking)|\[sig-apps\] (Deployment|Daemon set|Job)
# CONFORMANCE_CI_SKIP: specs of that focus to leave out (none: a spec that
# fails on this host is listed with its reason in docs/conformance.md).
CONFORMANCE_CI_SKIP ?=
conformance-build: build kubelet
	@hack/install-deps.sh conformance
	@hack/build-cluster.sh $(BIN)/minicri-pause >/dev/null
	@hack/build-conformance.sh >/dev/null

conformance: deps conformance-build
	@hack/conformance.sh

# make bench SCALE=100: the node-scale bench, 100 pods (then 100 pods x 2
# containers), with the floors taken in the same run (docs/performance.md).
# ROWS=memory keeps the first round's start, memory and restart rows only.
# GUEST=1: the guest bench instead (TestGuestBench), the stats and removal
# rows on cgroup v2 and the systemd driver, SCALE pods (25 unset, which fits a
# TCG guest's pace; SCALE=100 takes about four times as long), in the
# guest stage's VM.
SCALE ?=
ROWS ?=
GUEST ?=
bench: deps build $(KUBELET_DEP) $(CRITEST_DEP)
ifeq ($(GUEST),1)
	@MINICRI_BENCH=1 MINICRI_BENCH_PODS=$(SCALE) $(MAKE) --no-print-directory guest-test GUEST_RUN='^TestGuestBench$$' GUEST_TIMEOUT=90m
else
	@MINICRI_BENCH_PODS=$(SCALE) MINICRI_BENCH_ROWS=$(ROWS) MINICRI_KUBELET=$(MINICRI_KUBELET) MINICRI_CRITEST=$(MINICRI_CRITEST) hack/bench.sh $(BIN)
endif

install: build
	install -D -m 0755 $(BIN)/minicri $(DESTDIR)$(PREFIX)/bin/minicri
	install -D -m 0755 $(BIN)/minicri-conmon $(DESTDIR)$(PREFIX)/bin/minicri-conmon
	install -D -m 0755 $(BIN)/minicri-pause $(DESTDIR)$(PREFIX)/bin/minicri-pause
	install -d -m 0755 $(DESTDIR)/etc/systemd/system
	sed 's#/usr/local/#$(PREFIX)/#g' contrib/systemd/minicri.service > $(DESTDIR)/etc/systemd/system/minicri.service
	install -d -m 0755 $(DESTDIR)$(PREFIX)/share/doc/minicri
	install -m 0644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/minicri/
	install -d -m 0755 $(DESTDIR)/etc/minicri
	test -e $(DESTDIR)/etc/minicri/minicri.toml || $(BIN)/minicri config > $(DESTDIR)/etc/minicri/minicri.toml

clean:
	rm -rf $(BIN)
