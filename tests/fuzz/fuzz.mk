# tests/fuzz/fuzz.mk: libFuzzer targets, built apart from the main build.
#
#   make -f tests/fuzz/fuzz.mk                      build build/fuzz/fuzz_*
#   make -f tests/fuzz/fuzz.mk FUZZ_SECONDS=5 run   build, then run each one
#
# Run from the top of the tree. Every tests/fuzz/fuzz_<name>.c is compiled
# with clang -fsanitize=fuzzer,address,undefined together with the common/
# sources a parser needs (of the rpc layer only the pure rpc_http_parse.c; of
# the controller only the pure policy parser, which needs no libpq) and all
# generated protobuf-c code,
# into build/fuzz/obj: no object is shared with `make` or `make asan`.
# A run starts from build/fuzz/corpus/<name>, seeded from
# tests/fuzz/seeds/<name>/ when that exists, and lasts FUZZ_SECONDS. A crash,
# leak, timeout or sanitizer report fails make; the input is kept in
# build/fuzz/artifacts/ and the output in build/fuzz/<name>.log.

FUZZ_SECONDS ?= 60
FUZZ_MAX_LEN ?= 65536
FUZZ_CC      ?= clang

FZ      := build/fuzz
FZ_GEN  := build/gen
FZ_SELF := $(lastword $(MAKEFILE_LIST))

ifeq ($(V),1)
FZ_Q :=
else
FZ_Q := @
endif

FZ_TARGETS := $(sort $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c)))
FZ_COMMON  := common/err.c common/util.c common/log.c common/pbjson_common.c common/pbjson_write.c \
	common/pbwire.c \
	common/pbjson_read.c common/json_lex.c common/pki.c common/envelope.c common/sshcert.c \
	common/rpc_http_parse.c common/rpc_static.c common/jsonw.c common/mcp.c common/mcp_tools.c \
	common/mcp_exec.c \
	controller/json.c controller/policy.c
FZ_GEN_SRC := $(sort $(shell find $(FZ_GEN) -name '*.pb-c.c' 2>/dev/null))

FZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FZ_CPPFLAGS := -I. -Icommon -I$(FZ_GEN) $(shell pkg-config --cflags libprotobuf-c openssl grpc libpq) \
	-D_GNU_SOURCE
FZ_CFLAGS   := -std=gnu17 -g -O1 -fno-omit-frame-pointer -pthread $(FZ_SAN) \
	-fsanitize=fuzzer-no-link -MMD -MP
FZ_WARN     := -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
FZ_LDFLAGS  := -pthread $(FZ_SAN) -fsanitize=fuzzer
FZ_LDLIBS   := $(shell pkg-config --libs libprotobuf-c openssl) -lm

FZ_SUBMAKE := $(MAKE) --no-print-directory $(if $(FZ_Q),-s)

fz_obj = $(patsubst %.c,$(FZ)/obj/%.o,$(1))

.PHONY: all bins run clean
.SECONDARY:

# Generate the protobuf-c code first (the top Makefile owns that), then
# build in a second pass that can see the generated files.
all:
	$(FZ_Q)$(FZ_SUBMAKE) -f Makefile gen
	$(FZ_Q)$(FZ_SUBMAKE) -f $(FZ_SELF) bins

bins: $(addprefix $(FZ)/,$(FZ_TARGETS))

$(FZ)/fuzz_%: $(call fz_obj,tests/fuzz/fuzz_%.c) $(call fz_obj,$(FZ_COMMON)) \
		$(call fz_obj,$(FZ_GEN_SRC))
	@mkdir -p $(@D)
	@$(if $(FZ_Q),echo "  LD      $@")
	$(FZ_Q)$(FUZZ_CC) $(FZ_LDFLAGS) -o $@ $^ $(FZ_LDLIBS)

# fuzz_bootdata also links the boot data renderer (its database side is
# stubbed in the target).
$(FZ)/fuzz_bootdata: $(call fz_obj,controller/bootdata.c controller/bootdata_rebind.c)
# fuzz_snapshot_args links bcd's pure parser of instance.snapshot's args.
$(FZ)/fuzz_snapshot_args: $(call fz_obj,agent/snapshot_args.c)
# fuzz_rebind_bundle links bcd's pure identity rebind bundle reader and archive.
$(FZ)/fuzz_rebind_bundle: $(call fz_obj,agent/rebind_bundle.c)
# fuzz_identity_req links bcd's pure parser of identity endpoint requests.
$(FZ)/fuzz_identity_req: $(call fz_obj,agent/identity_req.c)
# fuzz_lvsave links bcd's pure libvirt save image check and rewrite.
$(FZ)/fuzz_lvsave: $(call fz_obj,agent/runtime_libvirt_save.c)

$(FZ)/obj/$(FZ_GEN)/%.o: $(FZ_GEN)/%.c
	@mkdir -p $(@D)
	@$(if $(FZ_Q),echo "  CC      $< (fuzz)")
	$(FZ_Q)$(FUZZ_CC) $(FZ_CPPFLAGS) $(FZ_CFLAGS) -w -c -o $@ $<

$(FZ)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(FZ_Q),echo "  CC      $< (fuzz)")
	$(FZ_Q)$(FUZZ_CC) $(FZ_CPPFLAGS) $(FZ_CFLAGS) $(FZ_WARN) -c -o $@ $<

# One TAP line per target; every target runs even after one fails.
run: all
	$(FZ_Q)fail=0; n=0; mkdir -p $(FZ)/artifacts; \
	for t in $(FZ_TARGETS); do \
		n=$$((n + 1)); corpus=$(FZ)/corpus/$$t; mkdir -p $$corpus; \
		if [ -d tests/fuzz/seeds/$$t ]; then cp -n tests/fuzz/seeds/$$t/* $$corpus/ 2>/dev/null; fi; \
		if $(FZ)/$$t -max_len=$(FUZZ_MAX_LEN) -max_total_time=$(FUZZ_SECONDS) -timeout=30 \
			-artifact_prefix=$(FZ)/artifacts/$$t- $$corpus >$(FZ)/$$t.log 2>&1; then \
			echo "ok $$n - $$t: $$(awk '/DONE/ { print $$1 " runs in $(FUZZ_SECONDS)s, " $$3 " " $$4 ", corpus " $$8 }' $(FZ)/$$t.log)"; \
		else \
			echo "not ok $$n - $$t: see $(FZ)/$$t.log and $(FZ)/artifacts/"; \
			grep -m 1 -A 12 -E 'ERROR|runtime error|deadly signal|Abort|timeout' $(FZ)/$$t.log | sed 's/^/#   /'; \
			fail=1; \
		fi; \
	done; \
	echo "1..$$n"; exit $$fail

clean:
	rm -rf $(FZ)

-include $(shell find $(FZ)/obj -name '*.d' 2>/dev/null)
