# rollcall: `make test` (lint + every test that needs no cluster or GPU), `make test-fast` (the unit tests that
# do not train, between edits), `make e2e-local` (the roll call on this machine), `make e2e` (the roll call
# against the current kube context). Each installs what it needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
UV_VERSION := 0.13.9
# The uv binary itself: run as `python3 -m uv` it would install into that python, not the venv.
UV = $(shell python3 -c 'import uv; print(uv.find_uv_bin())' 2>/dev/null || echo uv)
export UV_PYTHON_DOWNLOADS := never
NODES ?= 2
PYTEST_ARGS ?=

PROFILE ?= trn1.32xlarge
REAL ?= 0
.PHONY: help setup lock lock-image lint test test-fast test-unit test-integration test-k8s-oldest contract-docs checks-docs docs e2e e2e-local e2e-real xla-smoke bench bench-scale bench-store clean
.PHONY: deps cluster-build cluster-up cluster-down cluster-status e2e-slurm slurm-up slurm-down slurm-status

help:
	@echo "make test       lint + all tests that need no cluster or GPU"
	@echo "make test-k8s-oldest  the kubernetes backend's tests against the oldest Kubernetes EKS supports"
	@echo "make mutants    mutation testing of the predicates that decide whom a verdict names (about 15 min)"
	@echo "make test-fast  between edits: the unit tests not marked slow (none trains), 2 workers, under 3 min"
	@echo "make e2e-local  the roll call on this machine (local backend, $(NODES) nodes, cpu unless GPUs)"
	@echo "make e2e        the roll call against the current kube context (NODES=$(NODES))"
	@echo "make setup      create $(VENV) from requirements.lock"
	@echo "make cluster-up a local control plane with fake accelerator nodes (NODES=$(NODES) PROFILE=$(PROFILE))"
	@echo "                and REAL=N real nodes (kubelet, containerd, CNI, CoreDNS) beside them"
	@echo "make e2e-real   the roll call on 2 real nodes of the local cluster, 2 ranks each (starts it if needed)"
	@echo "make cluster-down  remove it; make xla-smoke: the Neuron/XLA path on torch-xla's CPU runtime"
	@echo "make e2e-slurm  the roll call through a real Slurm on this machine (hack/slurm.sh, 2 nodes, cpu)"

# The venv is rebuilt when the lock changes; uv's cache makes a rebuild take seconds once torch is cached.
$(VENV)/.installed: requirements.lock pyproject.toml
	@python3 -c 'import uv' 2>/dev/null || python3 -m pip install -q "uv==$(UV_VERSION)"
	$(UV) venv -q --allow-existing -p "$$(command -v python3)" $(VENV)
	$(UV) pip sync -q --compile-bytecode --python $(PY) requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps -e .
	@touch $@

setup: $(VENV)/.installed

lock:
	$(UV) pip compile -q pyproject.toml --extra dev --extra workload -c requirements.in \
	  -o requirements.lock --python-version 3.11
	$(UV) pip compile -q pyproject.toml requirements-xla.in --extra workload \
	  -o requirements-xla.lock --python-version 3.11

# The Neuron/XLA branch of the workload, on torch-xla's CPU runtime, in a venv of its own (torch-xla pins
# its own torch): the roll call on 2 simulated nodes with PJRT_DEVICE=CPU. BERT-tiny: the branch's code is the
# same for any size, and the neuron default (BERT-base) took about 4 of this target's 5 minutes on 2 cores.
# The straggler and bus-bandwidth checks are off: two ranks sharing 2 CPU cores say nothing of a cluster's
# speed (one rank was seen 1.29 x the other's compute time beside another job).
XLA_VENV ?= .venv-xla
$(XLA_VENV)/.installed: requirements-xla.lock pyproject.toml
	@python3 -c 'import uv' 2>/dev/null || python3 -m pip install -q "uv==$(UV_VERSION)"
	$(UV) venv -q --allow-existing -p "$$(command -v python3)" $(XLA_VENV)
	$(UV) pip sync -q --compile-bytecode --python $(XLA_VENV)/bin/python requirements-xla.lock
	$(UV) pip install -q --python $(XLA_VENV)/bin/python --no-deps -e .
	@touch $@

xla-smoke: $(XLA_VENV)/.installed
	$(XLA_VENV)/bin/python -m pytest tests/e2e --backend local --accelerator neuron --nodes 2 \
	  --workload-env PJRT_DEVICE=CPU --artifacts-dir artifacts/xla --job-timeout 900 \
	  --straggler-ratio 0 --busbw-ratio 0 \
	  --workload-args "--model tiny --seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2" \
	  $(PYTEST_ARGS)
	@# The replicas agree: one parameter digest after each epoch and at completion (none reported fails too).
	$(XLA_VENV)/bin/python -c 'import json, sys; from rollcall.collect import RESULTS_FILE; \
	  tests = json.load(open("artifacts/xla/" + RESULTS_FILE))["tests"]; \
	  bad = {t["test_id"]: t["replicas"] for t in tests if not t["replicas"] or any(len(d) != 1 for d in t["replicas"].values())}; \
	  sys.exit(f"xla-smoke: not one parameter digest per stage: {bad}" if bad or not tests else None)'

# The CPU image's pins: torch, transformers and numpy as in requirements.lock, with their dependencies.
lock-image:
	printf 'torch==2.11.0\ntransformers==5.17.0\nnumpy==2.4.6\n' | $(UV) pip compile -q - -c requirements.lock \
	  --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-header --no-annotate \
	  -o images/bert-training/requirements.cpu.txt.new
	{ sed -n '1,2p' images/bert-training/requirements.cpu.txt; cat images/bert-training/requirements.cpu.txt.new; } \
	  > images/bert-training/requirements.cpu.txt && rm images/bert-training/requirements.cpu.txt.new

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# docs/contract.md, the rank-log contract's reference, generated from its records (a unit test holds it).
contract-docs: setup
	$(PY) -m rollcall_workload.contract --markdown > docs/contract.md

# docs/checks.md, every check and kind of problem, generated from each check's declaration (a unit test holds it).
checks-docs: setup
	$(PY) -m rollcall.checks --markdown > docs/checks.md

# Every generated page, each from the declaration it documents (unit tests hold each up to date): the contract,
# the checks, the options, the node verdicts and the table of error texts blame reads.
docs: contract-docs checks-docs
	$(PY) -m rollcall.options --markdown > docs/options.md
	$(PY) -m rollcall.nodeverdicts --markdown > docs/nodes.md
	$(PY) -m rollcall.checks.error_texts --markdown > docs/blame.md

test-unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The tests a developer runs between edits: the unit tests not marked slow (those train: real torchrun runs),
# a file's tests on one of two xdist workers as in `make test`; under 3 minutes on 2 shared cores.
test-fast: setup
	$(PY) -m pytest -n 2 --dist loadfile tests/unit -m "not slow" $(PYTEST_ARGS)

# Mutation testing of the predicates that decide whom a verdict names: whose GPU an event is on and the rank it
# is tied to, the severity rule, each part of a run on its own clock, states that hold, the first to leave.
# mutmut ([tool.mutmut] in pyproject.toml: the files, and the unit tests that reach them) mutates these
# functions, runs the tests that reach each mutant, and prints every mutant no test killed; the target fails
# if one survives. Not part of `make test`: about 15 minutes on 2 shared cores (bench/NOTES.md).
MUTANTS ?= rollcall.evidence.gpu_events.x_phase_at__* rollcall.evidence.gpu_events.x_events_seen__* \
  rollcall.evidence.gpu_events.x__one_of__* rollcall.evidence.gpu_events.x__once__* \
  rollcall.evidence.gpu_events.x__named__* rollcall.evidence.gpu_events.x_beside_error__* \
  rollcall.evidence.gpu_events.x_program_evidence__* rollcall.evidence.gpu_owners.* rollcall.checks.gpu_events.* \
  rollcall.evidence.launchers.x_never_started__* rollcall.evidence.launchers.x__any_rank__* \
  rollcall.evidence.launchers.x__stuck__* rollcall.evidence.launchers.x_stop_reason__* rollcall.evidence.clocks.* \
  rollcall.evidence.hangs.x_never_joined__* rollcall.evidence.hangs.x_joining__* \
  rollcall.evidence.hangs.x_stop_reason__* rollcall.evidence.hangs.x_classify__* rollcall.evidence.hangs.x_resolve__* \
  rollcall.evidence.departures.x_departures__* rollcall.evidence.rootcause.x__leader__* \
  rollcall.evidence.rootcause.x__may_lead__* rollcall.evidence.rootcause.x__undecided_departure__* \
  rollcall_workload.node.states.x*Held*see__* rollcall_workload.node.ranks.x*RankFiles*silence__* \
  rollcall_workload.node.ranks.x*RankFiles*_stacks__* rollcall_workload.node.ranks.x*RankProcesses*poll__* \
  rollcall_workload.node.ranks.x*RankProcesses*_gone__* rollcall_workload.node.launcher.x*LauncherWatch*poll__*
.PHONY: mutants
mutants: setup
	rm -rf mutants && mkdir mutants
	$(VENV)/bin/mutmut run --max-children 2 $(foreach m,$(MUTANTS),'$(m)') > mutants/run.log 2>&1 \
	  || { tail -c 3000 mutants/run.log; exit 1; }
	@echo "mutants: $$(tr '\r' '\n' < mutants/run.log | grep -a -E '[0-9]+/[0-9]+ +🎉' | tail -1)"
	@# A mutant whose first changed line follows a comment saying "equivalent mutant" is shown equivalent
	@# there; a timeout is a test the mutant kept from finishing: killed.
	@$(VENV)/bin/mutmut results | sed -n 's/^ *\(.*\): \(survived\|no tests\|suspicious\)$$/\1/p' \
	  > mutants/unkilled.txt; : > mutants/equivalent.txt; : > mutants/survivors.txt; \
	for m in $$(cat mutants/unkilled.txt); do \
	  if $(VENV)/bin/mutmut show "$$m" | awk '/^-/ && !/^--- / && !n++ { eq = prev ~ /# equivalent mutant/ } { prev = $$0 } END { exit !eq }'; \
	  then echo "$$m" >> mutants/equivalent.txt; else echo "$$m" >> mutants/survivors.txt; fi; \
	done; \
	echo "equivalent (each at a comment in the source): $$(wc -l < mutants/equivalent.txt)"; \
	if [ -s mutants/survivors.txt ]; then echo "survivors:"; cat mutants/survivors.txt; \
	  echo "(mutmut show NAME for each)"; exit 1; fi
	@echo "no other mutant survived"

# Unit tests, the local backend (real torchrun), the report in headless Chromium, and the kubernetes backend
# against a real local control plane (hack/cluster.sh builds it once per machine, then reuses the cache).
# The unit tests share nothing machine-wide, so two xdist workers run them, a file's tests on one worker (a
# module's fixture, such as test_workload's two torchrun runs, then runs once). The integration tests run on
# INTEGRATION_WORKERS workers (--dist loadgroup, `make test-integration` alone): a test goes to any free
# worker, but the tests that share something fixed on the machine are a group, one worker's (tests/groups.py):
# the real nodes (their bridge and namespaces), the test Slurm (its ports), the control plane (one cluster).
# More workers than cores: much of these tests' time is spent waiting on bounds, pods and API servers.
# The unit session runs before the other integration tests: run beside the integration session it took 16
# minutes instead of 3, the integration session 27 instead of 21, and three timing-bound tests failed under
# that load. The real nodes' group, the longest path (about 20 minutes on a worker of its own), starts at
# once beside both, in a session of its own (hack/test.sh), the others then on one worker fewer.
INTEGRATION_TESTS ?= tests/local tests/browser tests/cluster tests/k8s tests/real tests/slurm
INTEGRATION_WORKERS ?= 4
test: deps lint cluster-build
	hack/test.sh $(PY) 2 $$(($(INTEGRATION_WORKERS) - 1)) -- $(filter-out tests/real,$(INTEGRATION_TESTS)) -- $(PYTEST_ARGS)

test-integration: deps setup cluster-build
	$(PY) -m pytest -n $(INTEGRATION_WORKERS) --dist loadgroup $(INTEGRATION_TESTS) $(PYTEST_ARGS)

# The kubernetes backend's tests again, against a control plane of the oldest Kubernetes minor EKS still supports
# (K8S_OLDEST in hack/cluster.sh; `make test` runs them against the newest), all of them: about 7 minutes warm on
# 2 cores. Its binaries are built once (about 10 minutes), then cached; Karpenter is the capacity tests'. They
# run the roll call as a JobSet (--job-kind jobset, the JobSet controller running: hack/jobset.sh), make test's
# as an Indexed Job: each kind through every test of tests/k8s.
K8S_OLDEST_TESTS ?= tests/cluster tests/k8s
K8S_OLDEST_JOB_KIND ?= jobset
test-k8s-oldest: setup
	K8S_VERSION=oldest hack/cluster.sh build
	hack/karpenter.sh build
	hack/jobset.sh build
	ROLLCALL_TEST_K8S_VERSION=oldest ROLLCALL_TEST_JOB_KIND=$(K8S_OLDEST_JOB_KIND) \
	  $(PY) -m pytest $(K8S_OLDEST_TESTS) $(PYTEST_ARGS)

# The Debian packages a target needs (hack/deps.sh: each group's, installed when missing, named when it cannot
# be): deps-nodes for the real nodes, deps-slurm for Slurm, deps for every group (make test's).
deps:
	hack/deps.sh

deps-%:
	hack/deps.sh $*

cluster-build: deps
	hack/cluster.sh build
	hack/karpenter.sh build
	hack/jobset.sh build
	hack/pushgateway.sh build

cluster-up:
	@$(if $(filter-out 0,$(REAL)),hack/deps.sh nodes,:)
	hack/cluster.sh up --nodes $(NODES) --profile $(PROFILE) --real-nodes $(REAL)

cluster-down:
	hack/cluster.sh down

cluster-status:
	hack/cluster.sh status

e2e-local: setup
	$(PY) -m pytest tests/e2e --backend local --nodes $(NODES) $(PYTEST_ARGS)

# The roll call through the kubernetes backend on the local cluster's real nodes: pods run the CPU image
# (images/bert-training/Dockerfile.cpu), BERT tiny, 2 ranks per node. Starts the cluster (REAL=2) unless
# one is up; `make cluster-down` removes it.
REAL_KUBECONFIG := .cluster/kubeconfig
e2e-real: deps-nodes setup
	@[ -f $(REAL_KUBECONFIG) ] || hack/cluster.sh up --nodes 1 --profile $(PROFILE) --real-nodes 2
	$(PY) -m pytest tests/e2e --backend kubernetes --kubeconfig $(REAL_KUBECONFIG) --nodes 2 \
	  --image rollcall.local/rollcall-bert:cpu --accelerator cpu --procs-per-node 2 \
	  --node-selector rollcall.test/node=real --workload-env OMP_NUM_THREADS=1 \
	  --workload-args "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 2 --steps-per-epoch 2" $(PYTEST_ARGS)
	@echo "the cluster is still up: make cluster-down removes it"

# The roll call through sbatch on a real slurmctld and two slurmd here (hack/slurm.sh); a cluster this target
# started is stopped again at the end, one that was already up is left up.
SLURM_STATE := $(CURDIR)/.slurm
e2e-slurm: deps-slurm setup
	@was_up=$$(hack/slurm.sh status >/dev/null 2>&1 && echo yes); \
	trap '[ -n "$$was_up" ] || hack/slurm.sh down' EXIT; trap 'exit 130' INT TERM; \
	SLURM_NODES=$(NODES) hack/slurm.sh up >/dev/null; \
	SLURM_CONF=$(SLURM_STATE)/etc/slurm.conf $(PY) -m pytest tests/e2e --backend slurm --accelerator cpu \
	  --nodes $(NODES) $(PYTEST_ARGS)

slurm-up:
	hack/slurm.sh up

slurm-down:
	hack/slurm.sh down

slurm-status:
	hack/slurm.sh status

e2e: setup
	$(PY) -m pytest tests/e2e --backend kubernetes --nodes $(NODES) $(PYTEST_ARGS)

bench: setup
	$(PY) bench/parser.py

bench-scale: setup cluster-build
	$(PY) bench/scale.py

# The TCPStore fan-in of init_process_group at 256, 1024 and 2048 clients, 3 runs each (a few minutes).
bench-store: setup
	$(PY) bench/store_fanin.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache .mypy_cache .ruff_cache
