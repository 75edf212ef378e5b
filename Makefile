# Makefile -- the entry points of flightshuffle. Each one installs what it
# needs first (Debian packages via scripts/deps.sh, the .venv via
# scripts/venv.sh; both do nothing when all is in place), then builds with
# CMake presets (CMakePresets.json) and Ninja.
#
#   make run        release build, the IPC demo and its pyarrow check, then the
#                   main job: a verified shuffle on a local cluster of 4 worker
#                   processes (flight backend, 16 x 16, 256 MiB)
#   make test       ASan+UBSan build + ctest, then release build + pytest
#                   (what .ci/run calls)
#   make fuzz       libFuzzer builds (clang), FUZZ_SECONDS per target,
#                   new coverage merged into fuzz/corpus/<target>/
#   make bench-ipc  release build, then build/bench_ipc (any bench-<x> works)
#   make bench-shuffle-cluster   release build, then `flightshuffle bench
#                   shuffle` on a local cluster (BENCH_ARGS replaces the defaults)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PY := .venv/bin/python
FUZZ_SECONDS ?= 60
BENCH_ARGS ?=
PYTEST_ARGS ?=

# Where the golden files are read in place (arrow-testing).
export FSH_SHARED ?= $(abspath $(CURDIR)/../shared)
SAN_ENV := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: help deps venv build build-asan build-debug ctest pytest test run fuzz clean distclean \
        bench-shuffle-cluster

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

deps:
	@bash scripts/deps.sh

venv: deps
	@bash scripts/venv.sh python/requirements.txt

# $(call configure_build,PRESET): configure and build one CMakePresets.json preset.
define configure_build
	cmake --preset $(1)
	cmake --build --preset $(1) -j $(JOBS)
endef

# ctest over the ASan+UBSan build; leaks fail a test.
define run_ctest
	$(SAN_ENV) ctest --test-dir build-asan --output-on-failure -j $(JOBS) --timeout 600
endef

# pytest over tests/python. The Python package loads the release (non-ASan)
# library with ctypes. Exit code 5 (no tests collected) is not a failure
# while there are none.
define run_pytest
	@if [ ! -d tests/python ]; then echo "pytest: no tests/python folder yet"; exit 0; fi; \
	rc=0; \
	FSH_LIB=$(CURDIR)/build/libflightshuffle.so PYTHONPATH=$(CURDIR)/python$${PYTHONPATH:+:$$PYTHONPATH} \
	  $(PY) -m pytest -p no:cacheprovider -ra tests/python $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; \
	exit $$rc
endef

# Release: build/flightshuffle, build/libflightshuffle.so and .a, benchmarks.
build: deps
	$(call configure_build,release)

build-asan: deps
	$(call configure_build,asan)

build-debug: deps
	$(call configure_build,debug)

ctest: build-asan
	$(run_ctest)

pytest: venv build
	$(run_pytest)

test: deps venv
	$(call configure_build,asan)
	$(run_ctest)
	$(call configure_build,release)
	$(run_pytest)

run: venv build
	rm -rf build/demo
	build/flightshuffle demo --out build/demo
	$(PY) scripts/demo_check.py build/demo
	build/flightshuffle bench shuffle --workers 4 --maps 16 --reduces 16 --bytes 256M \
	  --backend flight --runs 1

# The shuffle on a local cluster of worker processes (flightshuffle bench shuffle).
BENCH_SHUFFLE_CLUSTER_ARGS ?= --workers 4 --maps 64 --reduces 64 --bytes 1G --backend flight --runs 3
bench-shuffle-cluster: build
	build/flightshuffle bench shuffle $(if $(strip $(BENCH_ARGS)),$(BENCH_ARGS),$(BENCH_SHUFFLE_CLUSTER_ARGS))

fuzz: deps
	$(call configure_build,fuzz)
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh build-fuzz

# make bench-<x>: build/bench_<x> from bench/<area>/bench_<x>.c.
bench-%: venv build
	@test -x build/bench_$* || { echo "no build/bench_$* (bench/*/bench_$*.c)"; exit 1; }
	FSH_LIB=$(CURDIR)/build/libflightshuffle.so build/bench_$* $(BENCH_ARGS)

clean:
	rm -rf build build-asan build-debug build-fuzz

distclean: clean
	rm -rf .venv
