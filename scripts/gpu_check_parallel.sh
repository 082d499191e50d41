#!/bin/bash
# The GPU check's parts at once on a machine with two GPUs or more: tests/gpu on GPU 0 (then faults, store
# and timer_load), the notebooks and kernels.py on GPU 1; then, with the machine quiet, the timings that
# compare with another commit (tune.py, dispatch.py, magic.py on GPU 0, and the same of BASE when given);
# last the multi-GPU tests and scale.py's GPU part on every GPU. Each part is scripts/gpu_check.py (or a
# benchmark) with its own results folder and log under RESULTS; RESULTS/phase says how far it got.
#
#   scripts/gpu_check_parallel.sh [RESULTS [BASE]]    (BASE: a checkout of the commit to compare with)
#
# Run it detached (setsid) where a command's time is capped, and read RESULTS/phase and the logs later.
set -u
RESULTS=$(mkdir -p "${1:-test-output/gpu-parallel}" && cd "${1:-test-output/gpu-parallel}" && pwd)
BASE=${2:-}
HERE=$PWD
step() { echo "$(date +%T) $*" >> "$RESULTS/phase"; }
check() {  # GPU, name, gpu_check.py arguments...
    local gpu=$1 name=$2
    shift 2
    CUDA_VISIBLE_DEVICES=$gpu OUT="$RESULTS/$name" python3 scripts/gpu_check.py "$@" > "$RESULTS/$name.log" 2>&1
    step "$name done"
}
timings() {  # folder, label: the timings that compare with another commit, on GPU 0
    (cd "$1" && export CUDA_VISIBLE_DEVICES=0 PYTHONPATH="$1:${PYTHONPATH:-}" TILEBENCH_RESULTS="$RESULTS/$2" &&
        python3 benchmarks/tune.py --skip-tilelang --budget 20 > "$RESULTS/tune_$2.log" 2>&1 &&
        python3 benchmarks/dispatch.py > "$RESULTS/dispatch_$2.log" 2>&1 &&
        python3 benchmarks/magic.py > "$RESULTS/magic_$2.log" 2>&1)
    step "timings $2 done"
}

step start
(check 0 tests --skip notebooks,bench; check 0 misc --skip tests,notebooks --bench faults,store,timer_load) &
(check 1 notebooks --skip tests,bench; check 1 kernels --skip tests,notebooks --bench kernels) &
wait
timings "$HERE" head
if [ -n "$BASE" ]; then timings "$(cd "$BASE" && pwd)" base; fi
python3 -m pytest -q -p no:cacheprovider --junitxml="$RESULTS/multi.xml" tests/gpu/test_multi_gpu.py \
    tests/gpu/test_cluster_gpu.py > "$RESULTS/multi.log" 2>&1
step "multi-GPU tests done"
TILEBENCH_RESULTS="$RESULTS/scale" python3 benchmarks/scale.py --parts gpus > "$RESULTS/scale.log" 2>&1
step "all done"
