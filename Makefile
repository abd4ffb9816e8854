# Everything runs from a local virtual environment so that a fresh Debian machine with
# Python 3.11 needs nothing but these targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
UV     := $(BIN)/uv
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.installed-runtime
INSTALL := $(UV) pip install --quiet --python $(BIN)/python

.PHONY: help venv demo test fuzz lint typecheck proto bench bench-quick soak lock clean reference \
	reference-coverage real-node

help:
	@echo "make demo         run the exporter against the built-in simulated kubelet"
	@echo "make test         lint, type-check and run the whole test suite"
	@echo "make bench        benchmarks on a real-sized node (1000 pods, 512 CPUs)"
	@echo "make bench-quick  the same on a small node, in seconds"
	@echo "make proto        regenerate exporter/pb from proto/"
	@echo "make reference    build the kubelet reference (1.35, 1.36, 1.37; needs Go)"
	@echo "make reference-coverage  statement coverage of the kubelet's managers reached by"
	@echo "                  the random differential: COVERAGE_CASES workloads of each mix"
	@echo "                  (default, memory, devices) and as many configurations a version"
	@echo "make real-node    build the real kubelets (1.36, 1.37) and run the real-node scenarios (root)"

# The venv gets uv, which installs everything else: pip spends half a minute resolving the
# runtime dependencies one index page after another (grpcio's alone is megabytes), uv a few
# seconds. pip only fetches uv: the interpreter's own pip when it can install into another
# environment (pip >= 22.3), which spares bootstrapping a pip into the venv; else the venv's.
$(UV):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "podres-exporter needs Python 3.11 or newer ($(PYTHON) is older)"; exit 1; }
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv --without-pip $(VENV) || \
	  { echo "cannot create a virtual environment: on Debian run 'apt-get install python3-venv'"; exit 1; }
	@if $(PYTHON) -c 'import pip, sys; sys.exit([*map(int, pip.__version__.split(".")[:2])] < [22, 3])' \
	  2>/dev/null; then \
	  pip="$(PYTHON) -m pip --python $(BIN)/python"; \
	elif $(BIN)/python -m ensurepip --default-pip >/dev/null; then pip="$(BIN)/python -m pip"; \
	else echo "cannot install pip: on Debian run 'apt-get install python3-venv'"; exit 1; fi; \
	echo "$$pip install uv"; $$pip install --quiet --disable-pip-version-check --no-compile 'uv<1'

# Two stamps: the demo needs only the runtime dependencies, read from pyproject.toml (it runs
# the package from this tree, so nothing is built), and compiles the bytecode of the modules it
# imports as it starts, sooner than compiling every module first. The tests need the
# development toolchain and the package itself (the command, an editable install) on top, and
# import nearly everything, in many processes: their bytecode is compiled at install, in
# parallel.
$(RUNTIME): pyproject.toml | $(UV)
	$(INSTALL) -r pyproject.toml
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(INSTALL) --compile-bytecode -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(RUNTIME)
	$(BIN)/python -m exporter.cli demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

typecheck: lint

# Fails when radon rates any function of reconciler/ or exporter/ worse than C (the generated
# exporter/pb is exempt); tests/structure/test_complexity.py holds the same rule.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	@worse=$$($(BIN)/radon cc -n D -s -e 'exporter/pb/*' reconciler exporter); \
	  if [ -n "$$worse" ]; then echo "$$worse"; echo "radon: functions above grade C"; exit 1; fi
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The fuzzing suite with a long random budget (make test runs a small fixed one).
fuzz: $(STAMP)
	PODRES_FUZZ_EXAMPLES=$${PODRES_FUZZ_EXAMPLES:-2000} $(BIN)/python -m pytest -q tests/fuzz $(PYTEST_ARGS)

# The kubelet reference (docs/design.md#reference): the real CPU, memory and topology managers
# of each kubelet minor, linked from k8s.io/kubernetes, built into reference/build/ (ignored by
# git). Needs Go on PATH; the modules come from the Go module proxy on the first build. The
# tests build what is missing themselves; this target builds every version up front.
REFERENCE_VERSIONS ?= 1.35 1.36 1.37
reference: $(STAMP)
	@for v in $(REFERENCE_VERSIONS); do \
	  $(BIN)/python -m bench.reference --build-only --version $$v || exit 1; done

# Statement coverage of the kubelet's CPU, memory, topology and device managers reached by the
# random differential (bench/reference_coverage.py; figures in docs/performance.md): the joined
# mix, COVERAGE_CASES workloads each of the default, memory (--memory) and device (--devices)
# mixes and as many random configurations, into one set of counters a version.
COVERAGE_CASES ?= 1000
COVERAGE_SEED ?= 1
reference-coverage: $(STAMP)
	@for v in $(REFERENCE_VERSIONS); do \
	  nice -n 10 $(BIN)/python -m bench.reference_coverage --version $$v \
	    --seed $(COVERAGE_SEED) --count $(COVERAGE_CASES) --functions || exit 1; done
# The real node (docs/real-node.md): the kubelet binaries 1.36 and 1.37 and the fake CRI runtime,
# built from Go into realnode/build/ (ignored by git) when missing or changed, then every
# scenario of tests/realnode against them; a skip is a failure here. Needs root and cgroup v1.
# Prints one line per scenario and `real node: A/N scenarios agree` last.
real-node: $(STAMP)
	$(BIN)/python -m realnode.build
	$(BIN)/python -m realnode.devtools
	$(BIN)/python -m realnode.runtime_real
	PODRES_REQUIRE_REALNODE=1 $(BIN)/python -m pytest -q tests/realnode $(PYTEST_ARGS)

proto: $(STAMP)
	$(BIN)/python -m exporter.pb.generate

bench: $(STAMP)
	$(BIN)/python -m bench.cycle --pods 1000 --cpus 512

bench-quick: $(STAMP)
	$(BIN)/python -m bench.cycle --pods 100 --cpus 64 --rounds 5

# An hour and a half of serve with SQLite history against a churning simulated node; RSS
# must not grow over the last hour (not in CI: bench/soak.py). SOAK_ARGS="--history-off" for
# the same without history, SOAK_ARGS="--minutes 8" for a shorter run.
soak: $(RUNTIME)
	$(BIN)/python -m bench.soak --minutes 90 $(SOAK_ARGS)

# The image's dependencies, pinned with their hashes (the Dockerfile installs from it with
# --require-hashes): run after changing a dependency in pyproject.toml, and commit the file.
lock: $(UV)
	$(UV) pip compile pyproject.toml --extra postgres --generate-hashes --universal \
	  --python-version 3.11 --quiet -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
