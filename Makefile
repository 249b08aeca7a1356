# The README's commands. `make test` installs what is missing (PostgreSQL and
# redis-server from Debian's packages when run as root), then runs every test
# against real servers that the tests start themselves on loopback.
GO ?= go
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: test setup vet demo bench build

build:
	$(GO) build ./...

setup:
	$(GO) run ./cmd/jobfence setup

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (gofmt -l . && exit 1)
	$(GO) vet ./...

test: setup vet
	$(GO) test $(TESTFLAGS) ./...

demo:
	$(GO) run ./cmd/jobfence demo

bench:
	$(GO) run ./cmd/jobfence bench
