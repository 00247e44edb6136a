# The two commands: `make run` (the main job) and `make test` (the whole suite).
PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.installed
DEVSTAMP:= .venv/.installed-dev
export OMP_NUM_THREADS ?= 2

.PHONY: run job test lint bench tour clean chromium

.venv/bin/python:
	python3 -m venv .venv
	$(PIP) install -q --upgrade pip

# torch is pinned to the CPU build that lies on these machines' disk; see README.
# The library (depthlab) and, beside it, the lab (lab/: the claims, the doctor's calibration, the document
# generators), which `depthlab reproduce` and `depthlab calibrate` reach when it is installed.
$(STAMP): .venv/bin/python pyproject.toml lab/pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e . -e lab
	touch $@

$(DEVSTAMP): $(STAMP)
	$(PIP) install -q -e '.[dev]'
	# microsoft/mup for tests/test_mup_reference.py, without its dependencies: they pull torchvision,
	# and with it another torch than the one above; importing mup needs only torch and PyYAML
	$(PIP) install -q --no-deps mup==1.0.0
	touch $@

# The main job: the default study (post-LN vs pre-LN, DeepNorm, sandwich, no attention skip; shallow
# and deep; with and without warmup), its report and an outcome table. Re-running resumes.
run: $(STAMP)
	@$(MAKE) --no-print-directory job

# The job itself, on an installed depthlab. tests/test_fresh_clone.py runs it on a fresh clone of the
# repository with PRESET=smoke, so that the path `make run` takes (its store, its report) is tested.
PRESET   ?= default
DEPTHLAB ?= .venv/bin/depthlab
job:
	$(DEPTHLAB) study --preset $(PRESET) --workers 2

# docs/tour.md: the source texts' argument, each step with a depthlab command and its real output.
tour: $(STAMP)
	.venv/bin/depthlab reproduce tour

# The benchmarks (side by side with PyTorch, x-transformers and a minimal GPT); rewrites benchmarks/RESULTS.md.
bench: $(STAMP)
	$(PIP) install -q -e '.[bench]'
	$(PY) benchmarks/run_all.py

lint: $(DEVSTAMP)
	.venv/bin/ruff check depthlab lab tests benchmarks
	.venv/bin/ruff format --check depthlab lab tests benchmarks

# The browser test renders the report in headless Chromium (Debian's package); install it when missing.
# Without chromium that test fails (its message says how to install it or opt out: DEPTHLAB_SKIP_BROWSER=1).
chromium:
	@command -v chromium >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 \
	  || echo "make chromium: 'apt-get install -y chromium' failed; tests/test_report_browser.py will fail" >&2; }

test: $(DEVSTAMP) chromium
	.venv/bin/ruff check depthlab lab tests benchmarks
	$(PY) -m pytest -q

clean:
	rm -rf .venv build *.egg-info
