#!/usr/bin/env bash
# One lent CUDA machine, one call: the GPU checks and the GPU-scale experiments, side by side, stopped at a deadline.
#
#   bash tools/gpu_session.sh smoke OUT   # deps, each chain end to end with a few updates, then the real lanes for RATE_S seconds (step rates)
#   bash tools/gpu_session.sh full OUT    # gpu_check --no-bench beside the real lanes until DEADLINE_S; records as OUT/results.tgz
#
# The machine has no network and no copy of ../shared: the caller carries the data in .gpu/data (POSENC_DATA) and wheels of the
# pure-Python packages its image lacks in .whl (fastcore, datasets, nbdev and their kin), made here with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 -d .whl \
#     datasets==5.2.0 dill multiprocess fastcore==1.14.5 nbdev==2.4.14 execnb==0.1.18 ghapi==1.1.1 fastgit astunparse asttokens \
#     executing pure_eval stack_data ipython ipython_pygments_lexers jedi parso matplotlib_inline pexpect ptyprocess prompt_toolkit \
#     wcwidth traitlets watchdog
# (versions as pip resolved them on 2026-12-04), and `cp -r ../shared/data/{multi30k,glue,imdb,tinyshakespeare,README.md} .gpu/data/`.
# Lanes, each a process of its own:
#   floater  per seed: floater-recipe-1h's sinusoidal base, then its three arms at once (notebook 21)
#   mlm      per (seed, encoding): MLM pre-training, the pre-trained long-text arms, the GLUE arms (notebooks 26, 27)
#   long     per encoding: the long-text arms from scratch at 512 and 1,024 bytes (notebook 27)
#   lm       per variant: the byte-level LM with linear or softmax attention (notebook 28)
#   biascost issue 37's table on CUDA, results/gpu/biascost-cuda.json (benchmarks/biascost.py, about a minute): run
#            it alone, LANES=biascost LANES_AFTER=mlm, so that no other lane shares the GPU while it times
#   floater-bb  per seed 0-4: floater-recipe-1h's block-bias-migrated arm (the ODE ablation; a committed base is trained again
#            into /tmp/rebase for its checkpoint), and seeds 3-4 of floater-migrated and sinusoidal-continued (issue #35)
#   bpe      per encoding: BPE long text (notebook 27's BPE_PLANS['gpu']) at 256 and 128 tokens, 3 seeds, from scratch
#   lm-control  per variant: the linear LM's absolute-encoding controls linear+sinusoidal, linear+learned (notebook 28)
#   length   per seed: the length lab at nanoGPT scale (notebook 30's 'gpu' config: 6 layers, 384 wide, L_train 256), every
#            arm of the board (ARM_SETS['board']: the 9 first arms and the 8 encodings of notebooks 18_*) then the RoPE
#            extensions, into results/length-gpu/ (needs .gpu/data/tinyshakespeare)
# LANES picks them (default: "mlm", since floater-recipe-1h has its records; gpu_check --no-bench always runs beside, niced); LANES_AFTER (e.g. "long") starts when they finish. A lane killed at the deadline loses only
# its unfinished run: every finished run has its record under results/.
# Seen on the first lent H200 (2026-12-04, 540 s): with all four kinds at once (about 25 processes) the GPU was the bottleneck
# (fine-tuning then trained in fp32; it now autocasts bf16 on CUDA, FT_SIZES amp), a 600-update long-text run took about 400 s and no FLOATER base reached 3,000 updates; so one
# kind per session, FLOATER first. The second lent H200 (2026-12-04, 550 + 240 s) finished floater-recipe-1h in 475 s (3 bases of 3,000
# updates side by side in about 159 s, then 9 arms at once in 127-293 s) and, after it, the 9 gpu-small MLM pre-trainings; their weights
# stayed on that machine, so the mlm lanes pre-train again (--weights) before the long-text and GLUE arms. Next:
#   DEADLINE_S=550 LANES=mlm LANES_AFTER=long bash tools/gpu_session.sh full $OUT
set -u
MODE=${1:?smoke or full}; OUT=${2:?output folder}; T0=$(date +%s)
DEADLINE_S=${DEADLINE_S:-520}; RATE_S=${RATE_S:-60}
mkdir -p "$OUT" /tmp/logs
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD POSENC_DATA=$PWD/.gpu/data POSENC_CACHE=$PWD/.cache PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
python3 -c "import torch, datasets, fastcore, posenc_nb.experiments, posenc_nb.mlm, posenc_nb.floater; print('torch', torch.__version__, torch.cuda.get_device_name(), 'bf16', torch.cuda.is_bf16_supported())" || exit 4
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
touch /tmp/start_marker
EXP="python3 -m posenc_nb.experiments run floater-recipe-1h --full --device cuda --work runs/experiments"
RR="nice -n 10 python3 tools/roformer_runs.py --config gpu-small"   # the FLOATER lanes first on the CPUs

LANES=${LANES:-mlm}
lanes() {   # $1, $2: extra arguments of every FLOATER / RoFormer run (smoke: a few updates into a scratch folder)
  local fx=$1 rx=$2
  [[ " $LANES " == *" floater "* ]] && for s in 0 1 2; do
    ( $EXP --encodings sinusoidal-base --seeds $s $fx && for arm in floater-migrated floater-official sinusoidal-continued; do
        $EXP --encodings $arm --seeds $s $fx > /tmp/logs/floater-$arm-$s.log 2>&1 & done; wait ) > /tmp/logs/floater-base-$s.log 2>&1 &
  done
  [[ " $LANES " == *" floater-bb "* ]] && for s in 0 1 2 3 4; do   # the block-bias ablation (5 seeds) and seeds 3-4 of the other arms
    base=(--encodings sinusoidal-base --seeds $s); [ -f results/floater-recipe-1h/sinusoidal-base-s$s/metrics.json ] && base+=(--out /tmp/rebase)
    arms=(block-bias-migrated); [ $s -ge 3 ] && arms+=(floater-migrated sinusoidal-continued)
    ( $EXP "${base[@]}" $fx && for arm in "${arms[@]}"; do      # a committed base is trained again for its checkpoint (same seed, same run)
        $EXP --encodings $arm --seeds $s $fx > /tmp/logs/floater-$arm-$s.log 2>&1 & done; wait ) > /tmp/logs/floater-bb-base-$s.log 2>&1 &
  done
  [[ " $LANES " == *" bpe "* ]] && for e in rope sinusoidal learned alibi t5 none; do ( for s in 0 1 2; do for L in 256 128; do
    python3 -m posenc_nb.long_text bpe --plan gpu --device cuda --encoding $e --max-len $L --seed $s; done; done ) > /tmp/logs/bpe-$e.log 2>&1 & done
  [[ " $LANES " == *" lm-control "* ]] && for v in linear+sinusoidal linear+learned; do $RR linear-control --encodings $v $rx > /tmp/logs/lm-$v.log 2>&1 & done
  [[ " $LANES " == *" mlm "* ]] && for s in 0 1 2; do for e in rope sinusoidal learned; do    # groups first: --encodings takes every word after it
    $RR mlm longtext-pre glue --seeds $s --encodings $e $rx > /tmp/logs/mlm-$e-$s.log 2>&1 &
  done; done
  # the MLM gates' arms (no positions, learned rows at BERT's scale): with "mlm", every gpu-small MLM arm from one commit
  [[ " $LANES " == *" mlm-control "* ]] && $RR mlm-control $rx > /tmp/logs/mlm-control.log 2>&1 &
  [[ " $LANES " == *" long "* ]] && for e in rope sinusoidal learned alibi t5 none; do $RR longtext --encodings $e $rx > /tmp/logs/long-$e.log 2>&1 & done
  [[ " $LANES " == *" lm "* ]] && for v in linear linear-rope softmax-rope; do $RR linear --encodings $v $rx > /tmp/logs/lm-$v.log 2>&1 & done
  [[ " $LANES " == *" length "* ]] && for s in 0 1 2; do ( python3 -m posenc_nb.length run --config gpu --device cuda --seeds $s \
    --encodings board --out results/length-gpu --runs runs/length-gpu $rx && python3 -m posenc_nb.length extend --device cuda --seeds $s \
    --out results/length-gpu/extend --runs runs/length-gpu ) > /tmp/logs/length-$s.log 2>&1 & done   # notebook 30, nanoGPT scale
  [[ " $LANES " == *" biascost "* ]] && python3 benchmarks/biascost.py --device cuda ${3:---reps 5} \
    --out results/gpu/biascost-cuda.json > /tmp/logs/biascost.log 2>&1 &    # alone on the GPU, or timings mean nothing
  return 0
}

running() { jobs -pr | grep -vx "${GC_PID:-none}"; }   # the lanes still running (not the niced gpu_check)
wait_lanes() { while [ -n "$(running)" ] && [ $(( $(date +%s) - T0 )) -lt $1 ]; do sleep 5; done; }
wait_until() {   # wait for every lane, or kill them all at $1 seconds after the start
  while [ -n "$(jobs -pr)" ] && [ $(( $(date +%s) - T0 )) -lt $1 ]; do sleep 5; done
  for p in $(jobs -pr); do pkill -TERM -P $p 2>/dev/null; kill -TERM $p 2>/dev/null; done; sleep 3
  pkill -KILL -f posenc_nb.experiments 2>/dev/null; pkill -KILL -f roformer_runs 2>/dev/null; wait 2>/dev/null
}

if [ "$MODE" = smoke ]; then
  # 1. every chain end to end with a few updates, records into a scratch copy of results/ (thrown away)
  cp -r results /tmp/results_real
  lanes "--steps 4 --set test_max_sents=16 ckpt_every=2 eval_every=2 --out /tmp/smoke/floater --work /tmp/smokework" "--steps 4" "--quick"
  wait_until $(( DEADLINE_S - RATE_S ))
  find results -newer /tmp/start_marker -type f | sort > "$OUT/smoke_records.txt"
  rm -rf results .cache/roformer-runs runs; mv /tmp/results_real results
  # 2. the real lanes for RATE_S seconds: step rates under the full load
  mkdir -p /tmp/smoke; mv /tmp/logs /tmp/smoke/logs; mkdir -p /tmp/logs; T0=$(date +%s); lanes "" ""
  for arm in floater-migrated floater-official sinusoidal-continued; do    # the arms' rates, warm-started from the smoke base
    $EXP --encodings $arm --seeds 0 --steps 1000 --out /tmp/smoke/arms --work /tmp/smokework > /tmp/logs/rate-$arm.log 2>&1 & done
  wait_until $RATE_S
  tar czf "$OUT/rates.tgz" runs /tmp/smokework .cache/roformer-runs /tmp/logs /tmp/smoke 2>/dev/null
else
  nice -n 10 python3 tools/gpu_check.py --no-bench --out results/gpu > /tmp/logs/gpu_check.log 2>&1 &   # correctness only: the GPU is shared
  GC_PID=$!
  lanes "" ""
  if [ -n "${LANES_AFTER:-}" ]; then   # when LANES finish early, LANES_AFTER gets the rest of the time
    wait_lanes $DEADLINE_S; echo "lanes $LANES done at $(( $(date +%s) - T0 )) s"; LANES=$LANES_AFTER; lanes "" ""; fi
  wait_until $DEADLINE_S
  tar czf "$OUT/results.tgz" $(find results -newer /tmp/start_marker -type f) 2>/dev/null
  tar czf "$OUT/logs.tgz" /tmp/logs runs/experiments/*/*/curve.jsonl .cache/roformer-runs/*/metrics.jsonl 2>/dev/null
fi
tail -n 3 /tmp/logs/*.log
echo "gpu_session $MODE: $(( $(date +%s) - T0 )) s"
