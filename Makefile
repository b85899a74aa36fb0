# Tether. The two commands that matter: `make run` and `make test`.

GO           ?= go
TOOLS        := $(CURDIR)/.tools
BUF_VERSION  := 1.75.0
BUF          := $(TOOLS)/node_modules/.bin/buf
PLAYWRIGHT_CORE_VERSION := 1.65.1
PLAYWRIGHT_CORE := $(TOOLS)/node_modules/playwright-core/package.json
REDOCLY_VERSION := 2.77.0
REDOCLY      := $(TOOLS)/node_modules/.bin/redocly
OPENAPI      := services/apiserver/openapi
BIN          := $(CURDIR)/bin
GENERATED    := proto services/apiserver/openapi
GOTEST_FLAGS ?= -race -count=1 -timeout 20m
# gotestsum runs go test and repeats each failed test's output at the end,
# where a CI log's last lines show it; it and golangci-lint are tools of
# go.mod (go get -tool), pinned and checked by go.sum like any module
GOTESTSUM    := $(GO) tool gotestsum

.PHONY: all build run test test-short cluster-test fuzz lint breaking baseline generate check-generate tools bench chaos image clean

all: build

## build: compile tether, tetherctl, the example game server and nats-server
## (the version go.mod pins, for a cluster without anything else installed)
## into ./bin
build:
	$(GO) build -o $(BIN)/ ./services/cmd/tether ./services/cmd/tetherctl
	$(GO) build -o $(BIN)/tether-gameserver ./sdk/go/example/gameserver
	$(GO) build -o $(BIN)/tether-agones-gameserver ./sdk/go/example/agonesgameserver
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

## run: build and start the whole system on this machine, with a demo fleet
run: build
	$(BIN)/tether dev --hosts 3 --demo

## test: every test, with the race detector
test:
	$(GOTESTSUM) --format standard-quiet -- $(GOTEST_FLAGS) ./...

## cluster-test: the HA topology on a network of Linux network namespaces
## (3 NATS nodes, PostgreSQL, 2 API replicas, 2 projectors, 2 controllers,
## 4 agent hosts), killing components under allocation load; needs root,
## and fails where it cannot run (make test skips it)
cluster-test:
	TETHER_CLUSTER_TEST=require $(GOTESTSUM) --format standard-verbose -- -count=1 -v -timeout 20m -run '^TestCluster$$' ./services/tools/clustertest/

## test-short: the inner loop: every test but the whole-stack and scale
## ones (-short), without the race detector, four packages at a time (they
## wait on PostgreSQL and NATS as much as on the CPU); `make test` runs all
test-short:
	$(GO) test -short -count=1 -p 4 ./...

## fuzz: every fuzz target (func FuzzXxx in a _test.go file, found in the
## tree and listed by `go test -list`) for FUZZTIME each (default 30s), one
## target of one package at a time; a crash stops it and leaves the input in
## the package's testdata/fuzz (docs/fuzzing.md). FUZZ_PKGS narrows it;
## FUZZMINTIME bounds the minimising of each new input (go's default, 60s,
## can take a whole short run).
FUZZTIME ?= 30s
FUZZMINTIME ?= 5s
FUZZ_PKGS ?= $(sort $(patsubst %/,%,$(dir $(shell grep -rl --include='*_test.go' --exclude-dir=.git --exclude-dir=.tools --exclude-dir=bin -e '^func Fuzz' .))))
fuzz:
	@for pkg in $(FUZZ_PKGS); do \
		names=$$($(GO) test -list '^Fuzz' $$pkg 2>&1) || { echo "$$names"; exit 1; }; \
		for name in $$(echo "$$names" | grep '^Fuzz'); do \
			echo "== $$name ($$pkg, $(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) $$pkg || exit 1; \
		done; \
	done

## lint: buf lint, the OpenAPI document (redocly, every recommended rule an
## error), go vet, golangci-lint (.golangci.yml: staticcheck, errcheck,
## unused and more; the version go.mod's tool line pins) and gofmt
lint: $(BUF) $(REDOCLY)
	$(BUF) lint
	$(REDOCLY) lint --config $(OPENAPI)/redocly.yaml $(OPENAPI)/tether.openapi.json
	$(GO) vet ./...
	$(GO) tool golangci-lint run ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## breaking: buf breaking against the protos of the last release
## (proto/releases/baseline.binpb; `make baseline` records a new one at a release)
breaking: $(BUF)
	$(BUF) breaking --against proto/releases/baseline.binpb

## baseline: record the current protos as the last release's (without
## source info: buf breaking needs no comments)
baseline: $(BUF)
	$(BUF) build --exclude-source-info -o proto/releases/baseline.binpb

## generate: regenerate protobuf, gRPC, gateway and OpenAPI code (the
## generator's Swagger 2.0, converted to the OpenAPI 3 document the API serves)
generate: $(BUF)
	$(BUF) generate
	$(GO) run ./services/tools/openapi3 -in $(OPENAPI)/tether.swagger.json -out $(OPENAPI)/tether.openapi.json

## check-generate: fail if `make generate` changes or adds files
check-generate: generate
	@git diff --exit-code -- $(GENERATED) || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@untracked=$$(git status --porcelain -- $(GENERATED)); if [ -n "$$untracked" ]; then echo "$$untracked"; echo "generated files not committed"; exit 1; fi

## bench: every target of docs/benchmarks.md ("Targets"), median of 3 runs, met or not (one table; JSON in bench.json)
bench: build
	$(GO) run ./services/tools/benchtable --json bench.json

## chaos: 200 real game servers, hangs and crashes for 3 minutes; prints detection figures
chaos: build
	$(BIN)/tether --log-level error chaos --json chaos.json

## image: build the container image into bin/tether-image.tar without a
## container runtime: a static tether, non-root (65532), reproducible; an
## OCI layout with docker's manifest.json (docker/podman load, skopeo, crane;
## services/tools/image). IMAGE_ARCH picks the architecture (default: this machine's)
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image:
	$(GO) run ./services/tools/image -o $(BIN)/tether-image.tar -arch $(IMAGE_ARCH)

## tools: install buf, redocly (the OpenAPI linter), and playwright-core for
## the console's browser tests (it drives the chromium on PATH; it downloads
## no browser), from npm into
## .tools; one npm install, since an install without a package.json
## removes the packages it was not given
tools: $(BUF) $(PLAYWRIGHT_CORE) $(REDOCLY)

$(BUF) $(PLAYWRIGHT_CORE) $(REDOCLY) &:
	mkdir -p $(TOOLS)
	npm install --prefix $(TOOLS) --no-save --no-audit --no-fund --loglevel=error @bufbuild/buf@$(BUF_VERSION) playwright-core@$(PLAYWRIGHT_CORE_VERSION) @redocly/cli@$(REDOCLY_VERSION)

clean:
	rm -rf $(BIN)
