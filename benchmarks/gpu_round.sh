#!/usr/bin/env bash
# One GPU session's measurements, in one call (a device call may run 10 minutes at most):
#   1. perflint's fix of the anti-spoofing and speaker workloads against the same workloads
#      on perflint's trainer: `perflint verify <on_trainer script> --fixed <perflint's fix>`,
#      3 runs of each, the warm-up lengthened by the harness past the loaders' prefetch queue;
#   2. the ICL workload on the trainer with FSDP2 and bf16 (benchmarks/fsdp_icl.py).
# The two sides of each comparison are different programs (the trainer seeds, orders and casts
# its own way), so their losses are not expected to agree: --loss-tolerance 1.
# Usage: bash benchmarks/gpu_round.sh OUTDIR [seconds]   (python3 must import torch, libcst)
set -u
OUT=${1:?usage: gpu_round.sh OUTDIR [seconds]}
BUDGET=${2:-480}
START=$(date +%s)
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/runtime${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version())"
  nproc
} > "$OUT/device.txt" 2>&1

for w in antispoofing_seresnet speaker_verification; do
  fixed="fixtures/workloads/.$w.perflint-fixed.py"
  python3 -m perflint fix --unsafe-fixes --no-cache - < "fixtures/workloads/$w.py" > "$fixed" 2> "$OUT/fix_$w.log"
  cp "$fixed" "$OUT/fixed_$w.py"  # the script measured, for the record
  if [ "$w" = speaker_verification ]; then t=$(( $(left) - 10 )); else t=$(( $(left) - 300 )); [ "$t" -gt 130 ] && t=130; fi
  [ "$t" -lt 60 ] && { echo "skipped: $t s left" > "$OUT/verify_$w.log"; continue; }
  echo "+ timeout $t python3 -m perflint verify fixtures/workloads/on_trainer/$w.py --fixed $fixed --steps 5 --warmup 2 --repeats 3 --max-time 0 --timeout 200 --loss-tolerance 1 -- --device cuda" > "$OUT/verify_$w.log"
  timeout "$t" python3 -m perflint verify "fixtures/workloads/on_trainer/$w.py" --fixed "$fixed" --steps 5 --warmup 2 \
      --repeats 3 --max-time 0 --timeout 200 --loss-tolerance 1 --json "$OUT/verify_$w.json" -- --device cuda >> "$OUT/verify_$w.log" 2>&1
  echo "exit $?" >> "$OUT/verify_$w.log"
  [ "$w" = antispoofing_seresnet ] && {
    t=70
    echo "+ timeout $t torchrun --standalone --nproc_per_node 1 benchmarks/fsdp_icl.py --steps 30 --warmup 5 --out $OUT/fsdp_icl.json" > "$OUT/fsdp_icl.log"
    timeout "$t" torchrun --standalone --nproc_per_node 1 benchmarks/fsdp_icl.py --steps 30 --warmup 5 --out "$OUT/fsdp_icl.json" >> "$OUT/fsdp_icl.log" 2>&1
    echo "exit $?" >> "$OUT/fsdp_icl.log"
  }
done
echo "elapsed $(( $(date +%s) - START )) s" >> "$OUT/device.txt"
git rev-parse HEAD >> "$OUT/device.txt" 2>/dev/null
