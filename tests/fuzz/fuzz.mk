# Fuzzing (included by the Makefile). `make fuzz FUZZ_SECONDS=N` builds the libFuzzer targets
# (tests/fuzz/fuzz_*.c, clang -fsanitize=fuzzer,address,undefined, library in build-fuzz/),
# builds their seed corpora (tests/fuzz/seeds.sh) and runs each target for N seconds, one at a
# time, OMP_NUM_THREADS=1; logs and crashing inputs in build-fuzz/{log,artifacts}/<target>.
# FUZZ_TARGETS=... runs a subset; FUZZ_ARGS adds libFuzzer flags (after FUZZ_MAX_LEN's, so they
# win). The
# corpus (build-fuzz/corpus/<target>) carries over between runs. The same targets, compiled
# without libFuzzer, replay every kept input of tests/fuzz/regress/<target>/ in `make test`
# (tests/test_fuzz_regress.c).

FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_ALL     := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=%)
FUZZ_TARGETS ?= $(FUZZ_ALL)
FUZZ_SECONDS ?= 60
FUZZ_ARGS    ?=
# Each target's -max_len. Without one libFuzzer takes the largest seed's size (82 KB stories260K
# manifests made the manifest target run 7 execs/s; 3424/s at 16384); inputs over it are cut.
# Sized to the target's real inputs: the small fixture models' manifests (seeds.sh, compacted)
# are 3-16.6 KB, so 20480 (stories260K's, 44-61 KB compacted, are cut); kvqfile's fixture .kvq files are 30-36 KB; the tokenizer.json fixtures of
# tests/tokenizer/ are 53-76 KB (the 262 KB tiny-llama one is cut); st headers and index files
# run to 5.6 KB; stories260K.bin (1 MB) is cut for l2c, whose header and tiny_unshared.bin
# (4.5 KB) fit 16384. Others' inputs fit libFuzzer's usual 4096.
FUZZ_MAX_LEN ?= manifest=20480 kvqfile=65536 tokenizer=81920 l2c=16384 st=8192 index=8192
FUZZ_BUILD   := build-fuzz
FUZZ_CC      ?= clang
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_FLAGS    = -std=c11 -D_GNU_SOURCE -g -O1 -fopenmp -I. $(PKG_CFLAGS) $(FUZZ_SAN)

# The replay suite links every target's object and the helpers beside the library.
FUZZ_OBJ := $(FUZZ_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/fuzz/util.o
$(BUILD)/tests/test_fuzz_regress: $(BUILD)/obj/tests/test_fuzz_regress.o $(FUZZ_OBJ) $(BUILD)/libkvq.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(shell pkg-config --libs cmocka)

.PHONY: fuzz fuzz-build
fuzz-build:
	@command -v $(FUZZ_CC) >/dev/null && echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
	  $(FUZZ_CC) -x c - -fsanitize=fuzzer -o /dev/null 2>/dev/null || \
	  { echo "kvq: make fuzz needs clang with its libFuzzer runtime (Debian: clang libclang-rt-14-dev)" >&2; exit 1; }
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT="-O1" SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_BUILD)/libkvq.a
	@mkdir -p $(FUZZ_BUILD)/bin
	@for t in $(FUZZ_ALL); do \
	  echo "$(FUZZ_CC) ... -o $(FUZZ_BUILD)/bin/fuzz_$$t"; \
	  $(FUZZ_CC) $(FUZZ_FLAGS) -DKVQ_FUZZ_LIBFUZZER -fsanitize=fuzzer tests/fuzz/fuzz_$$t.c tests/fuzz/util.c \
	    $(FUZZ_BUILD)/libkvq.a -o $(FUZZ_BUILD)/bin/fuzz_$$t $(PKG_LIBS) -lm || exit 1; done
	$(FUZZ_CC) $(FUZZ_FLAGS) tests/fuzz/make_seeds.c $(FUZZ_BUILD)/libkvq.a -o $(FUZZ_BUILD)/bin/make_seeds $(PKG_LIBS) -lm

fuzz: all fuzz-build
	@rm -rf $(FUZZ_BUILD)/seeds && tests/fuzz/seeds.sh $(FUZZ_BUILD)/seeds $(BUILD) $(FUZZ_BUILD)/bin/make_seeds
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts/$$t $(FUZZ_BUILD)/log; \
	  ml=4096; for kv in $(FUZZ_MAX_LEN); do [ "$${kv%%=*}" = "$$t" ] && ml=$${kv#*=}; done; \
	  echo "== fuzz_$$t: $(FUZZ_SECONDS) s, max_len $$ml"; \
	  OMP_NUM_THREADS=1 $(FUZZ_BUILD)/bin/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=20 \
	    -print_final_stats=1 -max_len=$$ml $(FUZZ_ARGS) -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t/ \
	    $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/seeds/$$t > $(FUZZ_BUILD)/log/$$t.log 2>&1; rc=$$?; \
	  grep -E '^#[0-9]+.*(DONE|pulse|NEW)' $(FUZZ_BUILD)/log/$$t.log | tail -1; \
	  grep -E 'stat::number_of_executed_units|ERROR|SUMMARY' $(FUZZ_BUILD)/log/$$t.log | head -3; \
	  [ $$rc -eq 0 ] || echo "fuzz_$$t: exit $$rc (crash input in $(FUZZ_BUILD)/artifacts/$$t/)"; \
	done

# The kept inputs through the libFuzzer builds (clang's UBSan sees what gcc's does not, e.g. an
# offset applied to a null pointer): each target runs each of its files once.
.PHONY: fuzz-replay
fuzz-replay: fuzz-build
	@for t in $(FUZZ_ALL); do \
	  OMP_NUM_THREADS=1 $(FUZZ_BUILD)/bin/fuzz_$$t tests/fuzz/regress/$$t/* > $(FUZZ_BUILD)/replay-$$t.log 2>&1 \
	    && echo "fuzz_$$t: $$(ls tests/fuzz/regress/$$t | wc -l) inputs ok" \
	    || { echo "fuzz_$$t: FAILED (build-fuzz/replay-$$t.log)"; exit 1; }; done
