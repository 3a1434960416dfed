# lazyinfer — one Makefile for the engine, the CLI, the tests, the fuzzers and the demo.
#
#   make              CPU build: build/liblazyinfer.a, build/liblazyinfer.so and ./lazyinfer
#   make lib          the shared library alone (build/release/liblazyinfer.so: python/ loads it)
#   make CUDA=1       also compiles the CUDA backend (src/backend/cuda/*.cu) and links cuBLASLt
#   make debug        the same with ASan + UBSan into build/debug/ (./lazyinfer-debug)
#   make test         setup check, build, every test; ends with "N passed, N failed". Random
#                     inputs come from a fixed seed (tests/test.h), so every run gives the same
#                     result; LI_TEST_SEED=N make test (or =random) draws other inputs
#   make test DEBUG=1 the suite against the sanitizer build
#   make test-random  the C test programs and their variants with LI_TEST_SEED=random,
#                     TEST_RANDOM_RUNS times (default 3); each prints the seed it drew, a
#                     failure its replay command. Not part of make test
#   make fuzz         libFuzzer targets (clang) in build/fuzz/, each run FUZZ_RUNS times
#   make test-fresh-machine  make demo and make test, each first on a fresh Debian 12 (debootstrap)
#   make demo         setup (packages, venv, default model) + one generation on the default model
#   make bench        lazyinfer bench generate on the default model
#
# Sources are found by wildcard: a new .c under src/<layer>/ joins the library, a new
# tests/test-*.c becomes a test program, a new tests/fuzz/fuzz-*.c a fuzz target.

CC      ?= cc
NVCC    ?= nvcc
PYTHON  := .venv/bin/python

# -O2 as the project's baseline; hot loops ask for vectorisation themselves (see ops-cpu.c).
CFLAGS_BASE := -std=c11 -Wall -Wextra -Wno-unused-parameter -Wpointer-arith -g -pthread -fPIC \
               -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L
# hiredis: the shared Redis tier of the document store (src/kv/blob-redis.c); libxxhash: its
# per-chunk checksums (src/kv/blob-store.c says why XXH3 and not SHA-256).
# pkg-config is asked when a recipe first needs the flags, not when make starts: on a fresh
# machine `setup` (a prerequisite of demo, bench and test) installs the packages first. Each
# variable replaces itself with its value on first use ($(eval ... :=)), so pkg-config runs once.
# demo, bench and test still build in a second make, so that `make -j` cannot start compiling
# beside setup. A build without the packages stops at pkg-check with the command to run.
PKG_MODULES := libpcre2-8 jansson hiredis libxxhash
PKG_CFLAGS   = $(eval PKG_CFLAGS := $(shell pkg-config --cflags $(PKG_MODULES) 2>/dev/null))$(PKG_CFLAGS)
PKG_LIBS     = $(eval PKG_LIBS := $(shell pkg-config --libs $(PKG_MODULES) 2>/dev/null || \
                 echo -lpcre2-8 -ljansson -lhiredis -lxxhash))$(PKG_LIBS)
CPPFLAGS     = -Iinclude $(PKG_CFLAGS)
LDLIBS       = $(PKG_LIBS) \
               -lopenblas -lcrypto -lmicrohttpd -lpthread -lm

ifeq ($(DEBUG),1)
  BUILD   := build/debug
  CFLAGS  := $(CFLAGS_BASE) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
             -fno-sanitize-recover=undefined
  LDFLAGS := -fsanitize=address,undefined
  BIN     := lazyinfer-debug
else
  BUILD   := build/release
  CFLAGS  := $(CFLAGS_BASE) -O2
  LDFLAGS :=
  BIN     := lazyinfer
endif

# CUDA=1 builds into its own directory (build/release-cuda, build/debug-cuda) and binary
# (./lazyinfer-cuda): that library holds the CUDA objects and LI_CUDA=1 objects, and a later CPU
# `make` must neither reuse them nor find a CUDA-linked ./lazyinfer newer than its sources.
ifeq ($(CUDA),1)
  BUILD := $(BUILD)-cuda
  BIN   := $(BIN)-cuda
endif

LAYERS  := core format tokenizer backend backend/cpu model kv engine server
LIB_SRC := $(foreach d,$(LAYERS),$(wildcard src/$(d)/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)

ifeq ($(CUDA),1)
  CUDA_HOME ?= /usr/local/cuda
  CU_SRC    := $(wildcard src/backend/cuda/*.cu) $(wildcard src/backend/cuda/*.c) \
               $(wildcard src/backend/cuda/*.cpp)
  CU_OBJ    := $(patsubst %,$(BUILD)/%.o,$(CU_SRC))
  CPPFLAGS  += -DLI_CUDA=1 -I$(CUDA_HOME)/include
  # rpath: the GPU machine need not have the toolkit's lib64 in ld.so.conf. -lstdc++: CUB
  # (sample.cu) and the cuDNN frontend (attention-cudnn.cpp); -ldl: cuDNN is loaded at run time.
  CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart \
                 -lstdc++ -ldl
  # cuDNN's and its frontend's headers, pinned: scripts/setup-cuda.sh puts them in third_party/
  # (the frontend always; cuDNN's own only when the toolkit's are not the pinned version;
  # a missing folder on the include path is harmless).
  CUDNN_INC := third_party/cudnn-frontend/include third_party/cudnn/include
  CXXFLAGS_CUDNN := -std=c++17 -O2 -fPIC -Wall -MMD -MP $(addprefix -isystem ,$(CUDNN_INC)) \
                    -I$(CUDA_HOME)/include
  LDLIBS    += $(CUDA_LDLIBS)
  # -MMD -MP: header dependencies of the .cu files, like the C objects'.
  NVFLAGS   := -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude --compiler-options -fPIC,-Wall \
               -MMD -MP
endif

LIB       := $(BUILD)/liblazyinfer.a
# The same objects as one shared library (they are -fPIC), for the Python package (python/,
# ctypes over include/lazyinfer.h); CUDA=1 builds its own in build/release-cuda/.
SOLIB     := $(BUILD)/liblazyinfer.so
TOOL_SRC  := $(wildcard tools/*.c)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_SRC  := $(wildcard tests/test-*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all lib debug test test-random fuzz demo bench setup clean tests
all: $(BIN) $(SOLIB)
lib: $(SOLIB)

$(BUILD)/%.o: %.c | pkg-check
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# Without the -dev packages every compile would fail on a missing header: say what to run instead.
.PHONY: pkg-check
pkg-check:
	@pkg-config --exists $(PKG_MODULES) 2>/dev/null || { \
	 echo "make: pkg-config finds none or not all of $(PKG_MODULES)." >&2; \
	 echo "make: run 'make setup' (scripts/setup.sh installs the Debian packages), then make again;" >&2; \
	 echo "make: 'make demo' and 'make test' run setup themselves." >&2; exit 2; }

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# The one C++ translation unit (the cuDNN frontend is a C++ header library).
$(BUILD)/%.cpp.o: %.cpp third_party/.cudnn-stamp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_CUDNN) -c $< -o $@

third_party/.cudnn-stamp: scripts/setup-cuda.sh
	@CUDA_HOME=$(CUDA_HOME) scripts/setup-cuda.sh

$(BUILD)/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SOLIB): $(LIB_OBJ) $(CU_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN): $(TOOL_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(LIB) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/test.h tests/paged-seq.h tests/backend-ops.h tests/gguf-write.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# gpu-model: the whole model on a device backend against the CPU (tests/gpu/gpu-model.c); the
# suite runs it on cpu-devsim, gpu-check on CUDA.
$(BUILD)/tests/gpu-model: tests/gpu/gpu-model.c tests/test.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

tests: $(TEST_BIN) $(BIN) $(BUILD)/tests/gpu-model

debug:
	$(MAKE) DEBUG=1 all tests

# setup is idempotent and quick when everything is present (stamp checks inside the script).
setup:
	@scripts/setup.sh

test: setup
	@$(MAKE) --no-print-directory all tests
	@BUILD=$(BUILD) BIN=./$(BIN) tests/run.sh

# The README's `make demo` and `make test`, each as the first command on a fresh Debian 12 root
# made by debootstrap (needs root and Debian's registry; ~20 min). .ci/run runs it after make test.
.PHONY: test-fresh-machine
test-fresh-machine:
	@scripts/test-fresh-machine.sh

# Other draws than the fixed seed's, each run with fresh seeds from /dev/urandom: a failure
# here is a real bug the fixed draw misses; its "replay:" line reproduces it.
TEST_RANDOM_RUNS ?= 3
test-random: setup
	@$(MAKE) --no-print-directory all tests
	@failed=0; for i in $$(seq $(TEST_RANDOM_RUNS)); do \
	  echo "=== random draw $$i of $(TEST_RANDOM_RUNS)"; \
	  LI_TEST_SEED=random BUILD=$(BUILD) BIN=./$(BIN) tests/run.sh --c-only || failed=$$((failed + 1)); \
	done; \
	echo "test-random: $$failed of $(TEST_RANDOM_RUNS) runs failed"; [ $$failed -eq 0 ]

# ---- GPU correctness: every CUDA op against the CPU oracle (tests/gpu/gpu-check.c) ------------
# `make CUDA=1 gpu-check` builds $(BUILD)/tests/gpu-check and runs it on GPU 0 (LI_GPU=N picks
# another). Without a usable GPU the program prints SKIP with the reason and exits 0; without
# CUDA=1 there is nothing to check and the target says so and fails. It links only what it uses
# (core, the RoPE tables, the CPU oracle, the CUDA backend), so the GPU machine needs no pcre2,
# jansson, OpenBLAS, OpenSSL or libmicrohttpd to build and run it.
# ---- kernel workbench (dev/cuda/: a program per op, numbered versions, CPU check, timing) -----
# `make CUDA=1 dev-cuda` compiles them into $(BUILD)/dev-cuda/ (tests/run.sh does, wherever nvcc
# is found, so that they keep compiling); they run on a GPU machine only.
.PHONY: dev-cuda
ifeq ($(CUDA),1)
dev-cuda:
	@$(MAKE) --no-print-directory -C dev/cuda NVCC=$(NVCC) OUT=$(abspath $(BUILD))/dev-cuda
else
dev-cuda:
	@echo "dev-cuda: needs the CUDA build: make CUDA=1 dev-cuda"; exit 1
endif

.PHONY: gpu-check
ifeq ($(CUDA),1)
GPU_CHECK_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/core/*.c) src/backend/rope.c \
                   src/backend/attn-blocks.c src/backend/dllm-rules.c src/backend/cpu/ops-ref.c) $(CU_OBJ)

# Then the whole model on the GPU against the CPU (gpu-model), the LazyAttention exactness
# suite on the GPU (test-rag with LI_TEST_BACKEND=cuda), both with the GPU's default bf16 KV pool
# and with an f32 one, the cross-document repair's (test-repair: a repair of every token = full
# attention, the shared pages unwritten), and the diffusion decoder suite on the
# GPU (test-dllm: every LaCache combination = all off), and test-llada's device cases (LLaDA's
# bf16-activation path = its f32 path bit for bit), and test-llada-generate-ref's device parts
# (the GPU's float64 confidence at a threshold, torch.topk's ties); these link the full library.
gpu-check: $(BUILD)/tests/gpu-check $(BUILD)/tests/gpu-model $(BUILD)/tests/test-rag \
           $(BUILD)/tests/test-repair $(BUILD)/tests/test-dllm $(BUILD)/tests/test-llada \
           $(BUILD)/tests/test-llada-generate-ref
	$(BUILD)/tests/gpu-check
	$(BUILD)/tests/gpu-model
	LI_TEST_KV_DTYPE=f32 $(BUILD)/tests/gpu-model
	LI_TEST_BACKEND=cuda $(BUILD)/tests/test-rag
	LI_TEST_BACKEND=cuda LI_TEST_KV_DTYPE=f32 $(BUILD)/tests/test-rag
	LI_TEST_BACKEND=cuda $(BUILD)/tests/test-repair
	LI_TEST_BACKEND=cuda $(BUILD)/tests/test-dllm
	LI_TEST_BACKEND=cuda $(BUILD)/tests/test-llada
	LI_TEST_BACKEND=cuda $(BUILD)/tests/test-llada-generate-ref


$(BUILD)/tests/gpu-check: tests/gpu/gpu-check.c tests/test.h tests/paged-seq.h tests/backend-ops.h $(GPU_CHECK_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(CFLAGS) $(LDFLAGS) -o $@ $< $(GPU_CHECK_OBJ) $(CUDA_LDLIBS) -lpthread -lm
else
gpu-check:
	@echo "gpu-check: needs the CUDA build: make CUDA=1 gpu-check"; exit 1
endif

# ---- fuzzing (clang + libFuzzer, ASan) -------------------------------------------------------
FUZZ_RUNS ?= 1000000
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz-*.c)
FUZZ_BIN  := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
FUZZ_LIB_SRC := $(filter src/core/% src/format/% src/tokenizer/%,$(LIB_SRC))
FUZZ_CFLAGS  := $(CFLAGS_BASE) -O1 -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer

build/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_SRC)
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) -Isrc $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_LIB_SRC) $(LDLIBS)

fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do \
	  n=$$(basename $$f); mkdir -p fuzz-out/$$n; \
	  echo "== $$n: $(FUZZ_RUNS) runs"; \
	  $$f -runs=$(FUZZ_RUNS) -max_len=65536 -print_final_stats=1 fuzz-out/$$n tests/fuzz/corpus/$$n \
	    > fuzz-out/$$n.log 2>&1; rc=$$?; \
	  grep -E "stat::number_of_executed_units|ERROR|SUMMARY" fuzz-out/$$n.log; \
	  if [ $$rc -ne 0 ]; then echo "$$n failed (fuzz-out/$$n.log; the input is in crash-*)"; exit 1; fi; \
	done

# setup first, then the build in a second make that reads pkg-config after setup (see CPPFLAGS).
demo: setup
	@$(MAKE) --no-print-directory all
	./$(BIN) generate -p "The capital of France is" -n 32 --temp 0

bench: setup
	@$(MAKE) --no-print-directory all
	./$(BIN) bench generate

clean:
	rm -rf build lazyinfer lazyinfer-debug lazyinfer-cuda lazyinfer-debug-cuda

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(CU_OBJ:.o=.d)
