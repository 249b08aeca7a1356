# The README's commands. `make test` installs what is missing (PostgreSQL,
# redis-server, PgBouncer and Chromium from Debian's packages when run as root), then runs every test
# against real servers that the tests start themselves on loopback.
GO ?= go
TESTFLAGS ?= -race -count=1 -timeout 20m

# The fuzz targets, as package:Fuzz; `make fuzz` runs each for FUZZTIME.
FUZZTIME ?= 3s
FUZZ_TARGETS = \
	./cmd/jobfence:FuzzParseInterspersed \
	./queue/pgqueue:FuzzCancelPayload \
	./queue/pgqueue:FuzzRedactText \
	./scheduler:FuzzParseSpec \
	./worker:FuzzDecodeArgs \
	./idempotency:FuzzFingerprint \
	./telemetry:FuzzParseTraceparent

.PHONY: test setup vet fuzz demo bench build model

build:
	$(GO) build ./...

setup:
	$(GO) run ./cmd/jobfence setup

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (gofmt -l . && exit 1)
	$(GO) vet ./...

# Tests, summarised by internal/testsummary: failing tests' output, each
# package's result, and a closing "N passed, N failed" line. Every fuzz
# target runs its seed corpus here, as a test; fuzzing itself is `make
# fuzz`: for a few seconds on a loaded machine, Go's fuzzing engine failed
# with "context deadline exceeded" while the tests all passed.
test: setup vet
	@$(GO) test $(TESTFLAGS) -json ./... 2>&1 | $(GO) run ./internal/testsummary

# The model test's long run (internal/model): seeds of random operations
# and faults for DURATION, from SEED (0: drawn from the time and printed).
# make test runs its short version. A violation prints the seed, the
# shrunk operation list and the command that replays it. PARALLEL seeds
# run at once, each on its own schema: a run mostly waits (on the server,
# on its sleeps), so seeds side by side use the cores one leaves idle
# (docs/benchmarks/model.md).
DURATION ?= 10m
SEED ?= 0
PARALLEL ?= 12
MODELFLAGS ?=

model:
	$(GO) test -race -count=1 -timeout 0 -v ./internal/model -run TestModel -args -duration=$(DURATION) -seed=$(SEED) -parallel=$(PARALLEL) $(MODELFLAGS)

# Go fuzzes one target per invocation. A failure leaves its input under the
# package's testdata/fuzz, where it becomes a seed that go test always runs.
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t##*:} ($(FUZZTIME))"; \
		$(GO) test $(FUZZFLAGS) -run='^$$' -fuzz="^$${t##*:}\$$" -fuzztime=$(FUZZTIME) $${t%%:*} || exit 1; \
	done

demo:
	$(GO) run ./cmd/jobfence demo

bench:
	$(GO) run ./cmd/jobfence bench
