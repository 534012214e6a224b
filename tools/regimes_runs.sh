#!/usr/bin/env bash
# The runs of issue #35 ("regimes"), in the order they are worth running on a shared CPU, one process, resumable:
# every command skips a run whose record exists and resumes a pre-training run from its checkpoint, so rerunning
# this script after an interruption continues where it stopped. Run from a clean checkout (records carry git_dirty).
#   nice -n 19 bash tools/regimes_runs.sh [STAGE ...]      # default: every CPU stage below, in order
# Stages and their measured or estimated cost on one core of the 2-core CPU (see each record's wall_time_s):
#   ngram       the bag-of-n-grams reference on IMDb (one process, minutes)
#   linear      linear+sinusoidal and linear+learned, cpu-small, 3 seeds (6 runs of about 2.5 minutes)
#   mlm         none and learned-bert pre-training, cpu-small (600 updates), 3 seeds (6 runs of about 3 minutes)
set -euo pipefail
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(ngram linear mlm)
for st in "${stages[@]}"; do
  echo "== $st $(date -u +%FT%TZ)"
  case "$st" in
    ngram)  python -m posenc_nb.long_text ngram ;;
    linear) python tools/roformer_runs.py linear-control --config cpu-small ;;
    mlm)    python tools/roformer_runs.py mlm-control --config cpu-small ;;
    *) echo "unknown stage $st; choose from ngram linear mlm" >&2; exit 2 ;;
  esac
done
