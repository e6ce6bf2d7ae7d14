# Thin driver over CMake. The two set-up commands of the README:
#   make demo   install deps, build, run the main job on the bundled default
#   make test   install deps, build, run the whole test suite (ctest)
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all deps build test test-sanitize demo bench interop fuzz clean
all: build

deps:
	@bash scripts/install-deps.sh
	@python3 scripts/fetch-cudnn-frontend.py --if-cuda || true

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The whole suite again, built with AddressSanitizer + UBSan in build-sanitize/
# (.ci/run runs it after make test). Leaks inside Open MPI, hwloc, oneDNN and the
# OpenMP runtime are suppressed (tests/sanitize/lsan.supp); trident's own are not.
SAN_BUILD ?= build-sanitize
test-sanitize: deps
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Release -DTRIDENT_SANITIZE=ON >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitize/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 900

demo: build
	@bash scripts/demo.sh

bench: build
	$(BUILD)/trident bench kernels

# Opt-in (not in make test): exported checkpoints load in Hugging Face transformers
# and back, and TensorBoard reads --tensorboard-dir; installs transformers and
# tensorboard into venvs from PyPI.
interop: build
	bash scripts/check_hf_interop.sh $(BUILD)
	bash scripts/check_tensorboard_interop.sh $(BUILD)

# Opt-in (not in make test): libFuzzer over every reader of user files, FUZZ_SECONDS
# each (clang, build-fuzz/); new coverage is merged into tests/fuzz/corpus/, which
# make test replays (tests/test_fuzz_replay.c).
FUZZ_SECONDS ?= 60
fuzz: deps
	bash tests/fuzz/run.sh all $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD)
