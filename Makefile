# bc: top-level Makefile. Plain make, pkg-config for every dependency,
# quiet unless V=1, -Werror when CI is set. Generated protobuf-c code goes to
# build/gen and is never committed.
#
#   make            build bc-controller, bcd, bcctl into build/bin
#   make check      install deps, build (plain and ASan/UBSan), run every layer
#   make guest      build (or take from the cache) the guest image build/guest/guest.qcow2
#   make demo       install deps, start a throwaway stack (see README)
#   make stop       stop the demo stack

PREFIX  ?= /usr/local
DESTDIR ?=
BUILD   ?= build
GEN     := build/gen
CC      ?= cc

# pkg-config runs unless every goal only installs, cleans or re-runs make
# (those work before `make deps` installed the libraries); its errors show,
# and stop make.
PKGS := grpc libprotobuf-c libpq openssl libcurl libmnl libnftnl libvirt
NOBUILD_GOALS := deps clean stop check demo bench guest node-deps
ifneq ($(filter-out $(NOBUILD_GOALS),$(or $(MAKECMDGOALS),all)),)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
ifneq ($(.SHELLSTATUS),0)
$(error pkg-config --cflags $(PKGS) failed (see above; `make deps` installs them))
endif
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))
ifneq ($(.SHELLSTATUS),0)
$(error pkg-config --libs $(PKGS) failed (see above; `make deps` installs them))
endif
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
	-Wno-unused-parameter -Wno-missing-field-initializers
ifneq ($(CI),)
WARN += -Werror
endif
OPT ?= -O2 -g
ifneq ($(SAN),)
OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
SANLD := -fsanitize=address,undefined
endif
BC_VERSION ?= 0.1.0
CPPFLAGS += -I. -Icommon -I$(GEN) $(PKG_CFLAGS) -D_GNU_SOURCE -DBC_VERSION=\"$(BC_VERSION)\"
CFLAGS   += -std=gnu17 $(OPT) -pthread -MMD -MP
LDFLAGS  += -pthread $(SANLD)
LDLIBS   += $(PKG_LIBS) -lm

ifeq ($(V),1)
Q :=
else
Q := @
endif

PROTOS   := $(shell find proto -name '*.proto' | sort)
GEN_C    := $(patsubst proto/%.proto,$(GEN)/%.pb-c.c,$(PROTOS))
GEN_H    := $(GEN_C:.c=.h)
GEN_OBJ  := $(patsubst $(GEN)/%.c,$(BUILD)/obj/gen/%.o,$(GEN_C))

COMMON_SRC := $(wildcard common/*.c)
CTL_SRC    := $(filter-out controller/main.c,$(wildcard controller/*.c))
AGENT_SRC  := $(filter-out agent/main.c,$(wildcard agent/*.c))
CLI_SRC    := $(wildcard cli/*.c)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
BENCH_SRC  := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBBC    := $(BUILD)/lib/libbc.a
LIBCTL   := $(BUILD)/lib/libctl.a
LIBAGENT := $(BUILD)/lib/libagent.a
BINS     := $(BUILD)/bin/bc-controller $(BUILD)/bin/bcd $(BUILD)/bin/bcctl
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
NETDRV   := $(BUILD)/tests/net/netdrv
RTDRV    := $(BUILD)/tests/e2e/rtdrv
TUNDRV   := $(BUILD)/tests/integration/tunneldrv
SIGDRV   := $(BUILD)/tests/integration/sigv4drv
DBDRV    := $(BUILD)/tests/integration/dbdrv
GUESTID  := $(BUILD)/tests/integration/bc-identity

.PHONY: all gen bins unit-bins bench-bins node-deps check check-unit check-integration check-net check-e2e \
	check-interop fuzz fuzz-smoke asan bench update-golden demo stop install clean deps guest
.SECONDARY:

all: bins unit-bins bench-bins $(NETDRV) $(RTDRV) $(TUNDRV) $(SIGDRV) $(DBDRV) $(GUESTID)

bins: $(BINS)
unit-bins: $(UNIT_BIN)
bench-bins: $(BENCH_BIN)
gen: $(GEN_C)

# ---------------------------------------------------------------- codegen
$(GEN)/%.pb-c.c $(GEN)/%.pb-c.h: proto/%.proto
	@mkdir -p $(GEN)
	@$(if $(Q),echo "  PROTOC  $<")
	$(Q)protoc-c -Iproto --c_out=$(GEN) $<

# Every object may include any generated header.
$(call obj,$(COMMON_SRC) controller/main.c agent/main.c $(CTL_SRC) $(AGENT_SRC) $(CLI_SRC) $(UNIT_SRC) $(BENCH_SRC)): | $(GEN_H)

$(BUILD)/obj/gen/%.o: $(GEN)/%.c | $(GEN_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -w -c -o $@ $<

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -c -o $@ $<

# The web console (console/, docs/console.md): its files compiled into a
# table (contrib/embed-static.sh) served by the JSON/HTTP port.
CONSOLE_FILES := $(sort $(wildcard console/*.html console/*.css console/*.js console/*.svg))
$(GEN)/console_static.c: $(CONSOLE_FILES) contrib/embed-static.sh
	@mkdir -p $(@D)
	@$(if $(Q),echo "  EMBED   $@")
	$(Q)STATIC_PAGES=volumes sh contrib/embed-static.sh $@ console_files /console/ $(CONSOLE_FILES)

$(LIBBC): $(call obj,$(COMMON_SRC)) $(GEN_OBJ) $(BUILD)/obj/gen/console_static.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBCTL): $(call obj,$(CTL_SRC))
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBAGENT): $(call obj,$(AGENT_SRC))
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/bc-controller: $(call obj,controller/main.c) $(LIBCTL) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/bin/bcd: $(call obj,agent/main.c) $(LIBAGENT) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/bin/bcctl: $(call obj,$(CLI_SRC)) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Unit tests: test_ctl_* link the controller's objects, test_agent_* the
# agent's, the rest only common/.
$(BUILD)/tests/unit/test_ctl_%: $(BUILD)/obj/tests/unit/test_ctl_%.o $(LIBCTL) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/unit/test_agent_%: $(BUILD)/obj/tests/unit/test_agent_%.o $(LIBAGENT) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/unit/test_%: $(BUILD)/obj/tests/unit/test_%.o $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The network tests' driver of the agent's networking code (tests/net).
$(call obj,tests/net/netdrv.c): | $(GEN_H)
$(NETDRV): $(BUILD)/obj/tests/net/netdrv.o $(LIBAGENT) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The end-to-end tests' driver of the libvirt runtime (tests/e2e).
$(call obj,tests/e2e/rtdrv.c): | $(GEN_H)
$(RTDRV): $(BUILD)/obj/tests/e2e/rtdrv.o $(LIBAGENT) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The integration tests' driver of the controller's tunnel dialer.
$(call obj,tests/integration/tunneldrv.c): | $(GEN_H)
$(TUNDRV): $(BUILD)/obj/tests/integration/tunneldrv.o $(LIBCTL) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The boto3 comparison's driver of the SigV4 signer (sigv4_boto3.py).
$(call obj,tests/integration/sigv4drv.c): | $(GEN_H)
$(SIGDRV): $(BUILD)/obj/tests/integration/sigv4drv.o $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The integration tests' driver of the controller's statement cache (db_cache.t).
$(call obj,tests/integration/dbdrv.c): | $(GEN_H)
$(DBDRV): $(BUILD)/obj/tests/integration/dbdrv.o $(LIBCTL) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bcd's upload code (agent/xfer.c) timed by bench/snapshots.sh
$(BUILD)/bench/bench_xfer: $(BUILD)/obj/bench/bench_xfer.o $(LIBAGENT) $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The guest's identity client (libc only), built here for identity_host.t;
# the guest image compiles its own copy (contrib/guest/customize.sh).
$(GUESTID): contrib/guest/bc-identity.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) -std=gnu17 $(OPT) $(WARN) -o $@ $<

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBBC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# ------------------------------------------------------------------ tests
ASAN_BUILD := build/asan
export BC_SRC := $(CURDIR)

deps:
	$(Q)bash contrib/install-deps.sh

asan:
	$(Q)$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=1 all

check: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory asan
	$(Q)$(MAKE) --no-print-directory check-unit check-integration check-net check-e2e \
		check-interop fuzz-smoke

# The test list comes from the sources: the binaries do not exist yet when
# make expands this recipe.
check-unit:
	$(Q)$(MAKE) --no-print-directory asan unit-bins
	$(Q)ASAN_OPTIONS=detect_leaks=1 prove $(PROVE_FLAGS) --exec '' \
		$(patsubst tests/unit/%.c,$(ASAN_BUILD)/tests/unit/%,$(sort $(UNIT_SRC)))
	$(Q)prove $(PROVE_FLAGS) --exec '$(VALGRIND)' $(BUILD)/tests/unit/test_rpc $(BUILD)/tests/unit/test_rpc_read

# Rewrite the golden files of the unit tests (tests/unit/golden) from the
# current code; review the diff before committing it.
update-golden: unit-bins
	$(Q)BC_UPDATE_GOLDEN=1 $(BUILD)/tests/unit/test_agent_nft >/dev/null
	$(Q)BC_UPDATE_GOLDEN=1 $(BUILD)/tests/unit/test_agent_domxml >/dev/null

# The RPC layer also runs under valgrind (uninstrumented build): gRPC's own
# one-time allocations are suppressed in tests/unit/valgrind.supp, ours never.
VALGRIND := valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
	--suppressions=tests/unit/valgrind.supp

# the Node.js packages of tests/interop (grpc-js), also used by the stand-in
# replica of tests/integration/nodes.t and the bench peer
NODE_DEPS := tests/interop/node_modules/.package-lock.json
node-deps: $(NODE_DEPS)
$(NODE_DEPS): tests/interop/package-lock.json tests/interop/package.json
	$(Q)cd tests/interop && npm ci --no-audit --no-fund --silent
	$(Q)touch $@

# Integration files run CHECK_JOBS at a time: each has its own PostgreSQL,
# ports and directories, and most of their time is spent waiting on the
# stack. The net and e2e layers share the host's nftables tables and run one
# file at a time.
CHECK_JOBS ?= 3
# --timer: every test file prints its wall time, so a slow layer shows in a
# CI log.
PROVE_FLAGS ?= --timer
check-integration: bins node-deps
	$(Q)$(MAKE) --no-print-directory asan
	$(Q)BC_BIN=$(CURDIR)/$(ASAN_BUILD)/bin BC_LOAD_BIN=$(CURDIR)/$(BUILD)/bin prove $(PROVE_FLAGS) -j$(CHECK_JOBS) --exec bash $(sort $(wildcard tests/lib/*.t)) \
		$(sort $(wildcard tests/integration/*.t))

check-net: $(NETDRV)
	$(Q)prove $(PROVE_FLAGS) --exec bash $(sort $(wildcard tests/net/*.t))

# The e2e layer boots the guest image under libvirt (KVM, or TCG without a
# usable /dev/kvm).
check-e2e: bins $(RTDRV) guest node-deps
	$(Q)prove $(PROVE_FLAGS) --exec bash $(sort $(wildcard tests/e2e/*.t))

# The guest image (contrib/guest/build.sh): built from Debian packages once
# per set of build inputs, cached under /var/cache/bc/guest (BC_GUEST_CACHE).
guest:
	$(Q)bash contrib/guest/build.sh $(CURDIR)/build/guest

check-interop: bins unit-bins node-deps
	$(Q)BC_BIN=$(CURDIR)/$(BUILD)/bin prove $(PROVE_FLAGS) --exec bash tests/interop/run.t tests/interop/ws.t \
		tests/interop/mcp.t tests/interop/console.t

fuzz:
	$(Q)$(MAKE) --no-print-directory -f tests/fuzz/fuzz.mk FUZZ_SECONDS=60 run
fuzz-smoke:
	$(Q)$(MAKE) --no-print-directory -f tests/fuzz/fuzz.mk FUZZ_SECONDS=5 run

# check, bench and demo install the dependencies first, then build in a
# second make that can ask pkg-config for them.
bench: deps
	$(Q)$(MAKE) --no-print-directory bins bench-bins node-deps guest
	$(Q)bash bench/run.sh

demo: deps
	$(Q)$(MAKE) --no-print-directory bins guest
	$(Q)bash contrib/dev/demo.sh

stop:
	$(Q)bash contrib/dev/stop.sh

install: bins
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/bc/migrations
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 migrations/*.sql $(DESTDIR)$(PREFIX)/share/bc/migrations/
	install -d $(DESTDIR)$(PREFIX)/share/bc/systemd $(DESTDIR)$(PREFIX)/share/bc/examples \
		$(DESTDIR)$(PREFIX)/share/doc/bc
	install -m 0644 contrib/systemd/*.service $(DESTDIR)$(PREFIX)/share/bc/systemd/
	install -m 0644 contrib/examples/*.conf $(DESTDIR)$(PREFIX)/share/bc/examples/
	install -m 0644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/bc/

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)
