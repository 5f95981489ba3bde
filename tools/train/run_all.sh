#!/usr/bin/env bash
# Train the code target and its drafter from scratch on the GPU machine: corpus -> tokenizer -> target -> drafter,
# plus the held-out evaluation cases. The 4-bit copy is made afterwards with `tensorfold quantize` (README.md).
#
# Usage (from the repository root):  tools/train/run_all.sh [--smoke] [--stages corpus,tokenizer,target,drafter]
#   [--target-minutes M] [--drafter-minutes M] [--distill-minutes M] [--corpus-bytes N] [--tokenizer-bytes N]
#   [--call-seconds S] [--init-target DIR] [--init-drafter DIR] [--target-lr X] [--task-share X] [--site-weight X]
#   [-- more dflash.py arguments, e.g. --distill-seed N]
# --call-seconds S: the device call's limit; each training loop is cut so the call (export and the tar
# included) ends within S seconds of this script's start, whatever the earlier stages took.
# Intermediate products live under $WORK (default /tmp/tensorfold-train) and a stage whose product is already
# there is skipped, so the stages can be split over several device calls while the machine stays warm.
# The models trained in a call come back as $OUT/target.tar.part-* and $OUT/drafter.tar.part-* (split below the
# 16 MB limit on one returned file).
set -euo pipefail

stages=corpus,tokenizer,target,drafter
smoke=0
target_minutes=8
drafter_minutes=7
distill_minutes=1.5
corpus_bytes=250000000  # 0: every Python source found
tokenizer_bytes=30000000
call_seconds=0
init_target=""
init_drafter=""
target_lr=2e-3
task_share=0.4
site_weight=4
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --stages) stages="$2"; shift ;;
    --target-minutes) target_minutes="$2"; shift ;;
    --drafter-minutes) drafter_minutes="$2"; shift ;;
    --distill-minutes) distill_minutes="$2"; shift ;;
    --corpus-bytes) corpus_bytes="$2"; shift ;;
    --tokenizer-bytes) tokenizer_bytes="$2"; shift ;;
    --call-seconds) call_seconds="$2"; shift ;;
    --init-target) init_target="$2"; shift ;;
    --init-drafter) init_drafter="$2"; shift ;;
    --target-lr) target_lr="$2"; shift ;;
    --task-share) task_share="$2"; shift ;;
    --site-weight) site_weight="$2"; shift ;;
    --) shift; break ;;
    *) echo "run_all.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/train-out}"
work="${WORK:-/tmp/tensorfold-train}"
export PYTHONUNBUFFERED=1
mkdir -p "$out" "$work"

if [ "$smoke" = 1 ]; then
  # tiny everything: proves the pipeline end to end in a minute or two, numbers mean nothing
  work="$work-smoke"
  corpus_args=(--max-total-bytes 8000000)
  tokenizer_args=(--vocab-size 2048 --max-bytes 2000000)
  target_args=(--size smoke --minutes 0.3 --seq-len 512 --batch-size 16 --eval-batches 4 --rename-checks 1)
  drafter_args=(--minutes 0.3 --seq-len 512 --batch-size 8 --blocks-per-row 8 --eval-batches 2 --distill-minutes 0.1
    --distill-prompt 128 --distill-tokens 64 --distill-batch 64 --eval-distilled 16)
else
  corpus_args=(--max-total-bytes "$corpus_bytes")
  tokenizer_args=(--max-bytes "$tokenizer_bytes")
  target_args=(--size full --minutes "$target_minutes" --compile --lr "$target_lr" --task-share "$task_share"
    --site-weight "$site_weight")
  drafter_args=(--minutes "$drafter_minutes" --distill-minutes "$distill_minutes")
fi
drafter_args+=("$@")
models="$work/models"
target_dir="$models/tensorfold-code-target"
drafter_dir="$models/tensorfold-code-drafter"

[ -n "$init_target" ] && target_args+=(--init-from "$init_target")
[ -n "$init_drafter" ] && drafter_args+=(--init-from "$init_drafter")
want() { [[ ",$stages," == *",$1,"* ]]; }
stage_start=$SECONDS
call_start=$(date +%s)
# epoch seconds a training loop must end by, leaving $1 seconds for what follows it in this call
end_by() { if [ "$call_seconds" = 0 ]; then echo 0; else echo $((call_start + call_seconds - $1)); fi; }
stage_done() { echo "run_all.sh: $1 done at $((SECONDS - stage_start)) s"; }

if want corpus && [ ! -f "$work/corpus/manifest.json" ]; then
  python3 "$here/corpus.py" --out "$work/corpus" "${corpus_args[@]}"
  stage_done corpus
fi
if want tokenizer && [ ! -f "$work/tokenizer/tokenizer.json" ]; then
  python3 "$here/tokenizer.py" --corpus "$work/corpus" --out "$work/tokenizer" "${tokenizer_args[@]}"
  stage_done tokenizer
fi
if want target; then
  python3 "$here/target.py" --corpus "$work/corpus" --tokenizer "$work/tokenizer" --cache "$work/tokens" \
    --out "$target_dir" --end-by "$(end_by 100)" "${target_args[@]}"
  stage_done target
fi
if want drafter; then
  [ -f "$target_dir/config.json" ] || { echo "run_all.sh: no target at $target_dir; run the target stage first" >&2; exit 1; }
  python3 "$here/dflash.py" --target "$target_dir" --corpus "$work/corpus" --cache "$work/tokens" \
    --out "$drafter_dir" --end-by "$(end_by 60)" "${drafter_args[@]}"
  stage_done drafter
fi

cp "$work/corpus/manifest.json" "$out/corpus-manifest.json"
# The held-out cases the speculation receipts run on (bench/inputs/heldout-eval.jsonl).
python3 "$here/eval_set.py" --corpus "$work/corpus" --out "$out/heldout-eval.jsonl"
# Only the models this call trained come back (a device call returns at most about 64 MB), one tar each.
for stage in target drafter; do
  if want "$stage" && [ -d "$models/tensorfold-code-$stage" ]; then
    tar -C "$work" -cf - "models/tensorfold-code-$stage" | split -b 15m - "$out/$stage.tar.part-"
    echo "run_all.sh: unpack with: cat $stage.tar.part-* | tar -xf - -C <repo root>"
  fi
done
ls -l "$out"
