# kvq build: C11 + OpenMP library (build/libkvq.a), four tools, cmocka tests, benchmarks.
# CUDA kernels (kernels/cuda/*.cu) are built into build/cuda/libkvqcuda.a only when nvcc is found.
# BUILD=dir selects the output folder (helpers and `make asan` use their own).

BUILD   ?= build
CC      ?= cc
OPT     ?= -O2 -march=x86-64-v2
PKGS    := libzip libzstd jansson libxxhash libcrypto libpcre2-8 libutf8proc yaml-0.1 cairo fontconfig
DEPS_OK := $(BUILD)/.deps-ok
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# clang (make CC=clang) has no -Wformat-truncation and reports every `omp simd` loop it leaves
# scalar; GCC is the reference compiler.
IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -q clang && echo 1)
ifeq ($(IS_CLANG),1)
WARN_CC := -Wno-pass-failed
else
WARN_CC := -Wno-format-truncation
endif
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare $(WARN_CC) \
           -g $(OPT) -fopenmp -I. $(PKG_CFLAGS) $(SAN)
LDLIBS  += $(PKG_LIBS) -lm -fopenmp $(SAN)

LIB_SRC  := $(sort $(wildcard formats/*.c libconv/*/*.c libconv/*/*/*.c kernels/cpu/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS    := $(patsubst tools/%.c,%,$(wildcard tools/kvq-*.c))
# The tools' shared parts (figures with cairo, the HTML report, whole-or-nothing output files).
TLIB_SRC := $(sort $(filter-out tools/kvq-%.c,$(wildcard tools/*.c)))
TLIB_OBJ := $(TLIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_BIN := $(TOOLS:%=$(BUILD)/%)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC:= $(sort $(wildcard tests/bench/*.c))
BENCH_BIN:= $(BENCH_SRC:tests/bench/%.c=$(BUILD)/bench/%)

NVCC     := $(shell command -v nvcc 2>/dev/null)
CU_SRC   := $(sort $(wildcard kernels/cuda/*.cu))
# CU_BUILD: where the CUDA objects live. nvcc gets neither OPT nor SAN, so `make asan` links the
# objects of build/ instead of compiling the same ones again (half of CI's time, stop 43).
CU_BUILD ?= $(BUILD)
# CU_PTX=1 (.ci/run: CI has nvcc but no GPU): nvcc compiles every kernel and template instance to
# sm_90 PTX (cudafe++ and cicc, the C++ front end and the optimizer) and stops there; the driver
# would compile that PTX on first use. ptxas (PTX to SASS) is about half of the CUDA build's CPU
# time (hqx_gemv1.cu: cicc 78 s, ptxas 94 s) and runs in every build made for the device (the
# default, and what the GPU suites and benchmarks run). Its objects have their own folder, so the
# two kinds never mix.
CU_PTX   ?= 0
ifeq ($(CU_PTX),1)
CU_ARCH  := -gencode arch=compute_90,code=compute_90
CU_DIR   := cuda-ptx
else
CU_ARCH  := -arch=sm_90
CU_DIR   := cuda
endif
CU_OBJ   := $(CU_SRC:kernels/cuda/%.cu=$(CU_BUILD)/$(CU_DIR)/%.o)
ifneq ($(NVCC),)
ifneq ($(CU_SRC),)
CU_LIB   := $(CU_BUILD)/$(CU_DIR)/libkvqcuda.a
endif
endif

.PHONY: all test test-cuda asan valgrind demo bench clean deps verify-full
# Keep object files of tools, tests and benchmarks (they are pattern intermediates).
.SECONDARY:
all: $(DEPS_OK) $(BUILD)/libkvq.a $(TOOL_BIN) $(TEST_BIN) $(BENCH_BIN) $(CU_LIB)
ifeq ($(NVCC),)
	@echo "kvq: nvcc not found: built CPU-only (CUDA kernels skipped)"
endif

# Dependencies first: installs with apt-get as root, otherwise prints the command.
$(DEPS_OK): tools/install-deps.sh
	@mkdir -p $(BUILD)
	@tools/install-deps.sh
	@touch $@

$(BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkvq.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libkvqtools.a: $(TLIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# GPU suites (tests/test_cuda_*.c) and benchmarks (tests/bench/cuda_*.c) also link the CUDA
# library and the static CUDA runtime, or, without nvcc, kernels/cuda/no_cuda.c, which reports
# "built without CUDA" so they still build and skip. libkvq.a comes on both sides: the GPU
# backend (libkvq.a) calls the launchers, which call libkvq.a's error helpers.
ifneq ($(CU_LIB),)
CUDA_DEP  := $(CU_LIB)
CUDA_LINK := $(CU_LIB) $(addprefix -L,$(realpath $(dir $(NVCC))../lib64)) -lcudart_static -ldl -lrt -lpthread -lstdc++
else
CUDA_DEP  := $(BUILD)/obj/kernels/cuda/no_cuda.o
CUDA_LINK := $(CUDA_DEP)
endif

# Tools link the CUDA library (kvq-run --gpu, kvq-verify --gpu) or its stand-in (above).
$(BUILD)/kvq-%: $(BUILD)/obj/tools/kvq-%.o $(BUILD)/libkvqtools.a $(BUILD)/libkvq.a $(CUDA_DEP)
	$(CC) $(CFLAGS) $< $(BUILD)/libkvqtools.a $(BUILD)/libkvq.a $(CUDA_LINK) $(BUILD)/libkvq.a -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libkvq.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(shell pkg-config --libs cmocka)

$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(BUILD)/libkvq.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/test_cuda_%: $(BUILD)/obj/tests/test_cuda_%.o $(CUDA_DEP) $(BUILD)/libkvq.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libkvq.a $(CUDA_LINK) $(BUILD)/libkvq.a -o $@ $(LDLIBS) $(shell pkg-config --libs cmocka)

$(BUILD)/bench/cuda_%: $(BUILD)/obj/tests/bench/cuda_%.o $(CUDA_DEP) $(BUILD)/libkvq.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libkvq.a $(CUDA_LINK) $(BUILD)/libkvq.a -o $@ $(LDLIBS)

# Header dependencies from nvcc itself (-MMD: each object's .d, included below).
$(CU_BUILD)/$(CU_DIR)/%.o: kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 $(CU_ARCH) -I. -MMD -MP -MF $(@:.o=.d) -c $< -o $@

$(CU_LIB): $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

# Every suite runs even when one fails; tests/run.sh prints the closing tally.
test: all
	@tests/check_layers.sh
	@tests/check_cycles.sh $(BUILD)
	@tests/run.sh $(BUILD)

# The GPU suites alone (tests/test_cuda_*): they run where a CUDA device exists and skip,
# saying why, elsewhere (they also run, and skip, inside `make test`).
test-cuda: all
	@tests/run.sh $(BUILD) 'test_cuda_*'

asan:
	$(MAKE) BUILD=build-asan CU_BUILD=build OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" all
	@UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 tests/run.sh build-asan

# The CLI smoke tests (the demo's commands, a few refusals) under valgrind memcheck: any memory
# error or definite leak fails (tests/valgrind.sh; minutes, so not part of `make test`).
valgrind: all
	@tests/valgrind.sh $(BUILD)

demo: all
	@tests/demo.sh $(BUILD)

bench: all
	@for b in $(BENCH_BIN); do echo "== $$b"; $$b || exit 1; done

# kvq-verify on the whole heldout book (long: hours on 2 cores); results table on stdout.
verify-full: all
	@tests/bench/verify_table.sh $(BUILD) 0

clean:
	rm -rf build build-asan build-fuzz

include tests/fuzz/fuzz.mk

# Header dependencies of every object (library, tools, tests, benchmarks).
-include $(LIB_OBJ:.o=.d) $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.d) $(FUZZ_OBJ:.o=.d) \
         $(TOOLS:%=$(BUILD)/obj/tools/%.d) $(TLIB_OBJ:.o=.d) $(BENCH_SRC:tests/bench/%.c=$(BUILD)/obj/tests/bench/%.d) \
         $(CU_OBJ:.o=.d)
