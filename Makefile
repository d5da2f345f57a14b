# Tools are pinned in tools/go.mod, outside the library's module, and built into bin/.
GO       ?= go
BIN      := $(CURDIR)/bin
SQLC     := $(BIN)/sqlc
STATICCHECK := $(BIN)/staticcheck
GOTESTSUM := $(BIN)/gotestsum

# go test through gotestsum: a line per package as it ends, a failed test's output as it fails.
# Each run's events go to bin/test-<run>.json; when tests fail, internal/cmd/testreport prints from
# all of them, last, every failed test by package with what it said (without the logs of the code
# under test), so that the end of a failed run names each test and says why.
gotest = $(GOTESTSUM) --format pkgname-and-test-fails --format-hide-empty-pkg --hide-summary=skipped,failed --jsonfile $(BIN)/test-$(1).json --
TESTREPORT = { cat $(BIN)/test-*.json | $(GO) -C $(CURDIR) run ./internal/cmd/testreport /dev/stdin; exit 1; }

# Modules of their own under the root, so that what they bring never enters the library's graph.
NESTED := internal/cmd/release internal/containerdb internal/cmd/demo internal/databasesql otelpglock gocronlock redislock console/browsertest

# The library, tools/ and bench/ build on their own go.mod alone, as an importer's go command
# selects their requirements. The nested modules build in go.work's workspace: they require the
# next version of the library, which go.work stands in for until the release tags it
# (RELEASING.md).
export GOWORK := off
WORKSPACE := GOWORK=$(CURDIR)/go.work

# Most tests wait (on leases, handoffs, a server starting) far more than they compute: four at a
# time per package keeps both cores busy. The shared server's connections (100 by default) hold
# that many: about 45 at the peak.
PARALLEL := -parallel 4

.PHONY: test test-main test-nested test-loaded lint generate check-generated bench bench-packages tools demo chaos ha setup screenshots

## test: lint, check that generated code is current, run every test with the race detector, in
## the library and in the nested modules. Installs PostgreSQL first where none is found. The
## three run side by side (lint computes while the tests wait); each one's output is printed
## whole as it ends, and the failed tests of all of them last.
test: setup $(STATICCHECK) $(SQLC) $(GOTESTSUM)
	@rm -f $(BIN)/test-*.json
	@$(MAKE) --no-print-directory -j3 -Otarget lint check-generated test-main test-nested || $(TESTREPORT)

test-main: $(GOTESTSUM)
	$(call gotest,main) -race -count=1 $(PARALLEL) -timeout 10m ./...

test-nested: $(GOTESTSUM)
	for m in $(NESTED); do (cd $$m && $(WORKSPACE) $(call gotest,$$(echo $$m | tr / -)) -race -count=1 $(PARALLEL) -timeout 10m ./...) || exit 1; done
	cd bench && $(call gotest,bench) -race -count=1 $(PARALLEL) -timeout 10m ./...

## test-loaded: the packages whose tests wait on leases, heartbeats, deadlines and rate limits,
## run again while two CPU burners (stress-ng) take both cores of a 2-core machine: a test that
## fails only because the machine is busy is a defect. .ci/run runs it after make test, which
## ran them under -race already: here they run without it, which halves the step's time.
LOADED := ./tablelock/... ./advisory/... ./jobs/... ./cron/... ./leader/... ./ratelimit/...
test-loaded: setup $(GOTESTSUM)
	@command -v stress-ng >/dev/null || { echo "stress-ng is missing (tools/setup.sh test installs it)"; exit 1; }
	@rm -f $(BIN)/test-*.json
	stress-ng --cpu 2 --quiet --timeout 30m & burners=$$!; trap 'kill $$burners' EXIT; trap 'exit 130' INT TERM HUP; \
	$(call gotest,loaded) -count=1 $(PARALLEL) -timeout 15m $(LOADED) || $(TESTREPORT)

## setup: what the tests need (PostgreSQL's server and client, PgBouncer, two locales), installed
## with apt-get (as root or through sudo) where missing, or the command that would.
setup:
	@tools/setup.sh test

## lint: gofmt, go vet, staticcheck; and each module of go.work as the release will publish it
## (internal/cmd/release check: no replace, tidy against a module proxy holding the next
## version, the go line its requirements need).
lint: $(STATICCHECK)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt wants to change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	for m in $(NESTED); do (cd $$m && $(WORKSPACE) $(GO) vet ./... && $(WORKSPACE) $(STATICCHECK) ./...) || exit 1; done
	$(WORKSPACE) $(GO) -C internal/cmd/release run . check
	cd bench && $(GO) vet ./... && $(STATICCHECK) ./...

## generate: write what is generated from the SQL people edit: the migrations golang-migrate and
## psql apply, from migrations/versions/ and migrations/functions/ (internal/cmd/migrationgen);
## internal/db/ from queries/ and those migrations (sqlc); and what each version installs
## (migrations/schema/, read from databases migrated to it: it needs PostgreSQL, as the tests do);
## and every module's go.mod and go.sum, tidied against the release's proxy.
generate: $(SQLC)
	$(GO) run ./internal/cmd/migrationgen
	$(SQLC) generate
	$(GO) test -count=1 -run '^TestSchemaManifestsAreCurrent$$' ./migrations -update
	$(WORKSPACE) $(GO) -C internal/cmd/release run . tidy

## check-generated: fail when a generated file is not what make generate would write.
check-generated: $(SQLC)
	@$(GO) run ./internal/cmd/migrationgen -check
	@$(SQLC) diff || { echo "internal/db/ is stale: run 'make generate' and commit the result"; exit 1; }
	@$(GO) test -count=1 -run '^TestSchemaManifestsAreCurrent$$' ./migrations >$(BIN)/manifests.log 2>&1 || { cat $(BIN)/manifests.log; echo "migrations/schema/ is not what make generate writes (above: why)"; exit 1; }

## demo: the toolkit doing its job in one command, checked in the database (DATABASE_URL, local
## PostgreSQL binaries, or Docker).
demo:
	@tools/setup.sh demo
	$(GO) build -o $(BIN)/ ./cmd/pglockctl
	$(WORKSPACE) $(GO) -C internal/cmd/demo build -o $(BIN)/demo .
	$(BIN)/demo

## chaos: worker processes doing fenced critical sections, cron, job deliveries and leader
## election while PostgreSQL backends are terminated, workers partitioned, slowed and killed
## with SIGKILL, and PostgreSQL (a cluster of the suite's own) is restarted in immediate mode;
## then the evidence is checked in the database. CHAOS_DURATION=60s is the short mode CI runs.
CHAOS_DURATION ?= 60s
chaos:
	$(GO) build -o bin/ ./internal/cmd/chaos
	bin/chaos -duration $(CHAOS_DURATION)

## ha: the chaos workers on two PostgreSQL nodes under Patroni with one etcd (Debian's patroni and
## etcd-server), connected through a multi-host string; halfway, the primary's postmaster is
## killed with SIGKILL, and every workload must resume on the promoted standby by itself. Once
## with synchronous replication, once with asynchronous; one line each, and the checker's
## verdict. HA_DURATION=30s is the short mode CI runs (about 1.5 minutes in all).
HA_DURATION ?= 30s
ha:
	@tools/setup.sh ha
	$(GO) build -o bin/ ./internal/cmd/chaos
	bin/chaos -ha sync -duration $(HA_DURATION)
	bin/chaos -ha async -duration $(HA_DURATION)

## bench: pglock against raw SQL, the seed design, cirello.io/pglock, bsm/redislock and redsync in one
## run (bench/, a module of its own so peers never enter the library's dependencies), within
## 5 minutes; it rewrites docs/benchmarks.md and its charts. cirello.io/pglock is built from
## its source at PGLOCK_CIRELLO_COMMIT, cloned from PGLOCK_CIRELLO_GIT (GitHub by default)
## into the ignored bench/.peers/; when that fails its column is left out,
## with a note. Redis: one it starts if redis-server is on PATH, else 127.0.0.1:6379; Redlock:
## three it starts (redis-server).
## Point PGLOCK_CIRELLO_GIT at a local clone to build offline.
PGLOCK_CIRELLO_GIT ?= https://github.com/cirello-io/pglock.git
PGLOCK_CIRELLO_COMMIT ?= 38e8fcfb538beff91c4c8d9f4c26a26785083e72
bench:
	@peer=bench/.peers/cirello-pglock; clone=bench/.peers/cirello.git; \
	if [ "$$(cat $$peer/COMMIT 2>/dev/null)" != "$(PGLOCK_CIRELLO_COMMIT)" ]; then \
	  rm -rf $$peer $$clone; mkdir -p $$peer; \
	  if git clone -q --bare "$(PGLOCK_CIRELLO_GIT)" $$clone && \
	     git --git-dir=$$clone archive $(PGLOCK_CIRELLO_COMMIT) | tar -x -C $$peer && [ -f $$peer/go.mod ]; then \
	    echo $(PGLOCK_CIRELLO_COMMIT) > $$peer/COMMIT; \
	  else \
	    rm -rf $$peer; echo "bench: no cirello.io/pglock at $(PGLOCK_CIRELLO_COMMIT) from $(PGLOCK_CIRELLO_GIT): its column is left out"; \
	  fi; \
	  rm -rf $$clone; \
	fi; \
	tags=; [ -f $$peer/COMMIT ] && tags=cirello; \
	cd bench && $(GO) run -tags "$$tags" . -out ../docs

## screenshots: the console's pages, photographed in Chromium by its browser tests from a seeded
## database, into docs/console/.
screenshots: setup
	mkdir -p docs/console
	PGLOCK_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(WORKSPACE) $(GO) -C console/browsertest test -count=1 -run 'TestEveryPageLoadsCleanlyInABrowser|TestARuntimeScheduleIsCreatedEditedAndDeletedInTheBrowser' .

## bench-packages: each package's benchmarks, each comparing pglock with its baseline in the same
## run. A failover waits out a lease (2 s), so it runs 5 times; cron's run for a fixed number of
## ticks.
bench-packages:
	$(GO) test -run '^$$' -bench . -benchtime 3000x $$($(GO) list ./... | grep -v '/leader$$' | grep -v '/cron$$')
	$(GO) test -run '^$$' -bench ResignHandoff -benchtime 300x ./leader/
	$(GO) test -run '^$$' -bench CrashFailover -benchtime 5x ./leader/
	$(GO) test -run '^$$' -bench . -benchtime 1x ./cron/
	$(WORKSPACE) $(GO) -C otelpglock test -run '^$$' -bench . -benchtime 3000x .

tools: $(SQLC) $(STATICCHECK) $(GOTESTSUM)

# sqlc builds with cgo: about 100 s on an empty build cache, cached after that.
$(SQLC): tools/go.mod tools/go.sum
	$(GO) -C tools build -o $(SQLC) github.com/sqlc-dev/sqlc/cmd/sqlc

$(STATICCHECK): tools/go.mod tools/go.sum
	$(GO) -C tools build -o $(STATICCHECK) honnef.co/go/tools/cmd/staticcheck

$(GOTESTSUM): tools/go.mod tools/go.sum
	$(GO) -C tools build -o $(GOTESTSUM) gotest.tools/gotestsum
