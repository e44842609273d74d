# The two entry points: `make run` (Hearth's main job) and `make test` (every test).
CARGO ?= cargo
export SHADERC_LIB_DIR ?= /usr/lib/x86_64-linux-gnu

.PHONY: setup run test test-build lint build conformance pytools package package-tools package-check \
	fuzz-tools fuzz-smoke

setup:
	bash scripts/setup

build: setup
	$(CARGO) build --release -p hearth-cli --bin hearth -p hearth-gui --bin hearth-gui

# The desktop chat app where there is a display; otherwise a terminal chat with the small
# model scripts/setup installs.
MODEL ?= smollm2-135m-instruct

run: build
	@if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ]; then \
		./target/release/hearth-gui; \
	else \
		./target/release/hearth chat -m $(MODEL); \
	fi

# After setup: the shader crate links the shaderc libraries it installs.
lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 scripts/import-cycles

# Models of each family built by Hugging Face transformers and converted by llama.cpp, with
# transformers' logits: what engine/tests/conformance.rs checks Hearth against.
conformance: setup
	bash scripts/conformance/build

# Python tools the tests use: the official openai package (the client the server tests drive
# it with) and kubernetes-validate (for deploy/kubernetes/).
pytools: setup
	bash scripts/pytools/setup >/dev/null

# cargo-fuzz, for the fuzz targets' corpora and short runs (scripts/fuzz-smoke).
fuzz-tools: setup
	bash scripts/fuzz-tools

# Every fuzz target over its committed corpus, then 15 s of new inputs each.
fuzz-smoke: fuzz-tools
	bash scripts/fuzz-smoke

# What scripts/package needs: Debian's packaging tools, cargo-deb and cargo-generate-rpm.
package-tools: setup
	bash scripts/package-tools

# Signed .deb, .rpm and tarball in target/package/dist (KEYS: the signing keys' folder).
package: package-tools
	bash scripts/package --keys $(KEYS)

# Packages with throwaway keys, verifies every signature (and that one changed byte fails
# it), installs the .deb into a clean Debian root, the .rpm into an empty one, the tarball
# into a prefix, runs them and uninstalls (docs/packaging.md).
package-check: setup
	bash scripts/package-check

# Ends with how many tests ran and how many skipped for a missing device or model; in CI
# (CI set, as .ci/run does) a skip fails the run. The packages are checked with binaries of
# the test profile, which the tests have just compiled: a release build of the workspace
# would take longer than everything else (docs/testing.md#ci-time).
#
# Under `make -j2` (as .ci/run runs it) the models, the Python tools and the packaging tools
# are made while the workspace compiles: they wait on the network or use one core. Make
# starts the prerequisites in this order, so the compile starts first.
#
# scripts/arm64-test then runs the CPU executor's ARM64 kernels under QEMU, and
# scripts/fuzz-smoke the fuzz targets over their corpora.
test: setup lint test-build conformance pytools package-tools fuzz-tools
	bash scripts/test-summary $(CARGO) test --workspace
	HEARTH_PACKAGE_PROFILE=test $(MAKE) package-check
	bash scripts/arm64-test
	bash scripts/fuzz-smoke

# The tests' compile, after lint's: the two would only take turns at cargo's lock on target/.
test-build: lint
	$(CARGO) test --workspace --no-run
