# Thin wrapper over CMake carrying the README's commands. Everything real is in CMakeLists.txt.
#   make run    brings up localkube with the demo workload (later: the whole serving stack)
#   make test   installs deps, builds (with sanitizer twins), runs every test, prints one summary
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

FUZZ_TIME ?= 300
FUZZ_JOBS ?= 1
FUZZ_ARGS ?=

.PHONY: all deps configure build test unit e2e run bench fmt lint fuzz fuzz-long clean images

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTANDEM_WERROR=ON $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) -- --no-print-directory

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

unit: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L unit $(CTEST_FLAGS)

e2e: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -L e2e $(CTEST_FLAGS)

lint: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -L lint $(CTEST_FLAGS)

run: build
	@scripts/run.sh $(BUILD_DIR)

bench: build
	@e2e/bench/run.sh $(BUILD_DIR)

# Real libFuzzer builds of every fuzz target (clang); run one with e.g.
#   build-fuzz/lib_fuzz_json -max_total_time=60 lib/fuzz/corpus/fuzz_json
fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DTANDEM_LIBFUZZER=ON \
		-DTANDEM_E2E=OFF -DTANDEM_CUDA=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

# A long campaign over every target with memory limits (docs/fuzzing.md), e.g.
#   make fuzz-long FUZZ_TIME=1800 FUZZ_JOBS=2 FUZZ_ARGS=--merge
fuzz-long: fuzz
	@e2e/fuzz/campaign.sh -t $(FUZZ_TIME) -j $(FUZZ_JOBS) $(FUZZ_ARGS)

# Container images tandem-{operator,epp,agent,engine}:<version> and their OCI archives in
# $(BUILD_DIR)/images/ (docs/images.md).
images: deps
	@scripts/images.sh $(BUILD_DIR)

fmt:
	@git ls-files '*.c' '*.h' '*.cu' '*.cuh' | xargs -r clang-format -i

clean:
	rm -rf $(BUILD_DIR) build-fuzz
