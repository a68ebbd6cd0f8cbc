# labkit — a JupyterLab course on PyTorch 2's compiler.  `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.labkit-setup
# CPU machines need triton from PyPI; on a CUDA machine torch brings its own matching triton.
EXTRAS  := $(if $(shell command -v nvidia-smi 2>/dev/null),dev,dev,cpu)
NBVAL   := --nbval-lax --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))

.PHONY: status help setup lab test test-all test-torch test-lib test-notebooks lint figures bench-capture bench-models bench-compiler \
        bench-course bench-grading record-gpu gpu-check notebooks student check submit grade clean \
        hub hub-setup hub-roster hub-staff hub-passback hub-release bench-hub test-hub

# The student release (`make student`) has no tools/exsrc/ (instructor-only): its `make help` lists
# only what a student runs; the other targets stay (the Makefile is shared) but aren't advertised.
STUDENT_TARGETS := help setup lab check status submit test
RELEASE := $(if $(wildcard tools/exsrc),master,student)

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' \
	    $(if $(filter student,$(RELEASE)),| grep -E '^($(subst $(eval) ,|,$(strip $(STUDENT_TARGETS))))[[:space:]]') \
	    | expand -t 18

setup: $(STAMP)  ## create .venv, install labkit + tools, make sure `dot` and chromium exist, register the kernel
	@# the student release's .gitattributes names a filter: git then sees notebooks' sources only
	@if grep -qs 'filter=labkit-notebook' .gitattributes && git rev-parse --git-dir >/dev/null 2>&1; then \
	    python3 tools/nb_git_clean.py --install; fi

$(STAMP): pyproject.toml tools/setup_system.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	bash tools/setup_system.sh
	$(PY) -m ipykernel install --sys-prefix --name labkit --display-name "Python (labkit)" >/dev/null
	@touch $(STAMP)
	@echo "setup done: $$($(PY) -c 'import labkit, json; print(json.dumps(labkit.versions()))')"

lab: setup  ## start JupyterLab on the repo and open notebooks/00_overview.ipynb in your browser (no display or LAB_BROWSER=0: prints the URL)
	$(PY) tools/serve_lab.py

test: setup  ## CI: the library tests but those marked slow, then nbval over every chapter notebook
	$(PY) tools/build_notebooks.py --check
	$(PY) -m pytest tests -m "not slow"
	$(if $(NOTEBOOKS),$(PY) -m pytest -p no:cacheprovider $(NBVAL) $(NOTEBOOKS))

test-all: setup  ## everything: `make test` plus the slow suites (attacks on the grader, the browser walk of every notebook, dtype sweeps, real TORCH_TRACE logs); about an hour on 2 cores
	$(PY) tools/build_notebooks.py --check
	$(PY) -m pytest tests
	$(if $(NOTEBOOKS),$(PY) -m pytest -p no:cacheprovider $(NBVAL) $(NOTEBOOKS))

# Another torch in a venv of its own (CI and `make setup` stay on the pin in pyproject.toml).
# Supported: 2.11 (the GPU machine), 2.13 (the pin), 2.15 (the newest). TORCH_VENV reuses a venv.
TORCH       ?=
TORCH_VENV  ?= .venv-torch-$(TORCH)
# TORCH_INDEX: an extra index for torch wheels (e.g. PyTorch's CPU-only one); none by default, since
# a machine without that index's host would retry it for minutes
TORCH_INDEX ?=
TPY         := $(TORCH_VENV)/bin/python

test-torch:  ## make test-torch TORCH=2.15.0: library tests (SLOW=1: the slow ones too) + nbval over the chapter on that torch, in .venv-torch-2.15.0
	@test -n "$(TORCH)" || { echo "usage: make test-torch TORCH=2.15.0  (a torch version on PyPI)"; exit 2; }
	@test -x $(TPY) || python3 -m venv $(TORCH_VENV)
	$(TPY) -m pip install -q "torch==$(TORCH)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(TPY) -m pip install -q $$(python3 tools/pinned_deps.py $(EXTRAS) --except torch)
	@$(TPY) -c 'import torch; v = torch.__version__.split("+")[0]; assert v == "$(TORCH)", f"torch {v} in $(TORCH_VENV), not $(TORCH)"'
	PYTHONPATH="$(CURDIR)" $(TPY) -m pytest tests $(if $(SLOW),,-m "not slow")
	$(if $(NOTEBOOKS),PYTHONPATH="$(CURDIR)" $(TPY) -m pytest -p no:cacheprovider $(NBVAL) $(NOTEBOOKS))

test-lib: setup  ## library tests only (no notebooks)
	$(PY) -m pytest tests

test-notebooks: setup  ## nbval over the chapter only
	$(PY) -m pytest -p no:cacheprovider $(NBVAL) $(NOTEBOOKS)

lint: setup  ## ruff over the library, tests and tools
	$(VENV)/bin/ruff check labkit tests tools benchmarks deploy

notebooks: setup  ## rebuild notebooks/*.ipynb from tools/nbsrc/ (execute + normalise); edit the sources, not the .ipynb
	$(PY) tools/build_notebooks.py

figures: setup  ## regenerate figures/ from code (pipeline map, timing plots from benchmark JSON)
	$(PY) tools/make_figures.py

bench-capture: setup  ## explore() wall time vs plain torch.compile, caches off for both
	$(PY) benchmarks/bench_capture.py

bench-models: setup  ## real models (timm + transformers, small configs): explore vs compile (wall and CPU), page size -> docs/real-models.md
	$(PY) benchmarks/bench_models.py --json benchmarks/results/models.json
	$(PY) benchmarks/bench_models.py --doc benchmarks/results/models.json

bench-compiler: setup  ## labkit's compiler vs eager and Inductor (CPU here, GPU where present)
	$(PY) benchmarks/bench_compiler.py

bench-course: setup  ## per-notebook wall time of the chapter, cold and warm caches
	$(PY) benchmarks/bench_course.py

record-gpu: setup  ## write Traces of the chapter's GPU examples to figures/recordings/ (needs CUDA)
	$(PY) benchmarks/record_gpu.py

gpu-check:  ## on a CUDA machine: recordings, GPU bench, all suites, nbval over the chapter -> gpu-report/
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/gpu_course.sh gpu-report

student: setup  ## build the solution-free release in dist/student/
	$(PY) -m labkit.grading student

check: setup  ## students: run the visible checks of your own work, per task
	$(PY) -m labkit.grading check $(if $(TASK),--task $(TASK))

status: setup  ## students: every task's state (not started / changed / failing / passing) from your last check, instantly
	@$(PY) -m labkit.grading status

submit: setup  ## students: check your notebooks are saved and your files in place, then write dist/submission.zip to upload
	@$(PY) -m labkit.grading.submit $(if $(OUT),--out "$(OUT)")

grade: setup  ## instructors: make grade SUBMISSIONS=<dir> [JOBS=2] [UNSAFE=1] -> grades/ (each student in a bwrap sandbox)
	$(PY) -m labkit.grading grade --submissions "$(SUBMISSIONS)" --jobs $(or $(JOBS),1) \
	    $(if $(UNSAFE),--unsafe-no-sandbox)

bench-grading: setup  ## seconds per full submission and submissions/hour for a 40-student class, JOBS=1 and 2
	$(PY) benchmarks/bench_grading.py

# -- JupyterHub for a class on one server (docs/hosting.md); as root; state in $(HUB_STATE) --------------
HUB_STATE ?= /var/lib/labkit-hub
HUBPY     := $(HUB_STATE)/hub-venv/bin/python
HUBENV    := HUB_STATE="$(HUB_STATE)" PYTHONPATH="$(CURDIR)/deploy/hub"

hub-setup:  ## as root: apt (bwrap, git, node), the hub's venv, configurable-http-proxy, the students' venv, all under HUB_STATE
	bash tools/setup_hub.sh

hub-release: student  ## publish dist/student into the hub's release repo (students get it via nbgitpuller on their next start)
	$(HUBENV) $(HUBPY) -m labkit_hub.release dist/student

hub: hub-setup hub-release  ## as root: JupyterHub for the course on 127.0.0.1:800 (HUB_IP/HUB_PORT to change), TLS in front: docs/hosting.md
	$(HUBENV) $(HUBPY) -m labkit_hub.launch

hub-roster:  ## make hub-roster ROSTER=roster.csv: install the roster, create its users (REST) and print new staff accounts' first passwords (hub running)
	$(HUBENV) $(HUBPY) -m labkit_hub.roster sync $(if $(ROSTER),--roster "$(ROSTER)")

hub-staff:  ## make hub-staff RESET="tina": a new first password for staff accounts (printed once; hand it over in person)
	$(HUBENV) $(HUBPY) -m labkit_hub.roster staff $(if $(RESET),--reset $(RESET))

hub-passback:  ## make hub-passback ASSIGNMENT=ex02: LTI 1.3 score passback of a graded deadline (LTI_* as for the hub, LTI_TOKEN_URL)
	$(HUBENV) $(HUBPY) -m labkit_hub.passback send "$(ASSIGNMENT)"

test-hub: setup  ## the hub suite (slow: boots the hub, 10 sandboxed servers); HUB_STATE=/var/lib/labkit-hub-test by default
	HUB_TEST_STATE=$(or $(HUB_TEST_STATE),/var/lib/labkit-hub-test) $(PY) -m pytest tests/test_hub.py

bench-hub: setup  ## time to ready p50/p95 and memory per idle/active student, 10 and 20 students (as root)
	HUB_TEST_STATE=$(or $(HUB_TEST_STATE),/var/lib/labkit-hub-test) $(PY) benchmarks/bench_hub.py

clean:  ## remove build outputs (keeps .venv and .venv-torch-*)
	rm -rf dist build *.egg-info .pytest_cache
