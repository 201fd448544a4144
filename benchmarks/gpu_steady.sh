#!/usr/bin/env bash
# Steady-state GPU measurements of one workload (anti-spoofing by default), in one call (a device call may
# run 10 minutes at most). Runs long enough to span several of the loaders' bursts, which the
# 5-step runs of gpu_round.sh did not:
#   1. perflint's fix against the same workload on perflint's trainer (150 measured steps);
#   2. the original workload against perflint's fix (40 measured steps: the original is slow).
# The harness lengthens each run's warm-up until the loaders' prefetch queue is drained.
# The trainer side is a different program (it seeds, orders and casts its own way), so its
# losses are not expected to agree with the fix's: --loss-tolerance 1 for comparison 1.
# Usage: bash benchmarks/gpu_steady.sh OUTDIR [seconds] [trainer-steps] [original-steps]
#        WORKLOAD=speaker_verification picks another workload; original-steps 0 skips comparison 2.
#        (python3 must import torch and libcst)
set -u
OUT=${1:?usage: gpu_steady.sh OUTDIR [seconds] [trainer-steps] [original-steps]}
BUDGET=${2:-480}
LONG=${3:-150}
SHORT=${4:-40}
START=$(date +%s)
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/runtime${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version())"
  nproc
  git rev-parse HEAD 2>/dev/null
} > "$OUT/device.txt" 2>&1
DEV=${DEVICE:-cuda}
w=${WORKLOAD:-antispoofing_seresnet}
fixed="fixtures/workloads/.$w.perflint-fixed.py"
python3 -m perflint fix --unsafe-fixes --no-cache - < "fixtures/workloads/$w.py" > "$fixed" 2> "$OUT/fix.log"
cp "$fixed" "$OUT/fixed_$w.py"  # the script measured, for the record
run() {  # name, seconds, script, verify arguments...
  local name=$1 t=$2 script=$3; shift 3
  [ "$t" -lt 30 ] && { echo "skipped: $t s left" > "$OUT/$name.log"; return; }
  echo "+ python3 -m perflint verify $script --json $OUT/$name.json $*" > "$OUT/$name.log"
  timeout "$t" python3 -m perflint verify "$script" --json "$OUT/$name.json" "$@" >> "$OUT/$name.log" 2>&1
  echo "exit $?" >> "$OUT/$name.log"
}
t=$(( $(left) * 45 / 100 ))
[ "$SHORT" -eq 0 ] && t=$(( $(left) - 5 ))  # no second comparison: the first gets the whole budget
run trainer_vs_fix "$t" "fixtures/workloads/on_trainer/$w.py" --fixed "$fixed" --steps "$LONG" --warmup 2 \
    --repeats 3 --max-time 0 --timeout 200 --loss-tolerance 1 -- --device "$DEV"
[ "$SHORT" -gt 0 ] && run original_vs_fix $(( $(left) - 5 )) "fixtures/workloads/$w.py" --fixed "$fixed" --steps "$SHORT" --warmup 2 \
    --repeats 3 --max-time 0 --timeout 200 -- --device "$DEV"
echo "elapsed $(( $(date +%s) - START )) s" >> "$OUT/device.txt"
