#!/usr/bin/env python3
"""Every run of the RoFormer experiments (notebooks 26-28) at one scale, in the order they were run, in one process (each data
split is converted to bytes once). A run whose record exists under results/ is skipped; a pre-training run resumes from its checkpoint.

    python tools/roformer_runs.py [GROUP ...]                          # cpu-tiny, as committed (2 CPU threads, hours)
    python tools/roformer_runs.py longtext linear --config cpu-small   # the CPU scale where the classifiers leave chance (hours)
    python tools/roformer_runs.py mlm longtext-pre --config gpu-small  # on a CUDA machine (tools/gpu_session.sh runs these lanes in parallel)
    python tools/roformer_runs.py longtext --config gpu-small --seeds 0 --encodings rope   # groups first: --encodings takes every word after it

Groups: longtext, mlm, linear, linear-control, mlm-control, bench, longtext-pre, glue, longtext-t5 (default: all, in this order). --seeds and --encodings
keep a subset of a group's runs, so lanes of one plan can run side by side; a pre-trained arm needs its `mlm` run first."""
import argparse, importlib, sys, time, torch

SEEDS, LONG_ENCS, MLM_ENCS = (0, 1, 2), ('rope', 'sinusoidal', 'learned', 'alibi', 't5', 'none'), ('rope', 'sinusoidal', 'learned')
# Per scale: the fine-tuning options of the long-text and GLUE runs (the model size and pre-training budget come with --config).
PLANS = {
    'cpu-tiny': dict(lt=['--steps', '60', '--n-test', '400', '--n-valid', '128', '--eval-every', '60', '--lr', '2e-3', '--warmup', '10'],
                     glue=['--max-len', '256', '--steps', '100', '--eval-every', '50', '--n-valid', '512', '--max-tokens', '2048', '--lr', '2e-3'],
                     defer_t5='seeds 1-2 at 1024'),
    # cpu-small: the cpu-tiny model on batches of 16,384 bytes for 600 updates (about 0.4 passes at 512 bytes), scored on 2,000 test reviews;
    # the classifiers leave chance here. T5 (several times sinusoidal's time per update: results/roformer-longtext/cost.json) runs last, in the group 'longtext-t5'.
    'cpu-small': dict(lt=['--steps', '600', '--n-test', '2000', '--n-valid', '512', '--eval-every', '150', '--lr', '2e-3', '--warmup', '30', '--max-tokens', '16384'],
                      glue=['--max-len', '256', '--steps', '400', '--eval-every', '100', '--n-valid', '512', '--max-tokens', '8192', '--lr', '2e-3', '--warmup', '20'],
                      defer_t5='all'),
    # gpu-small: the official 25,000-review test split, 600 updates of 32,768 padded bytes (about 1.7 passes at 512 bytes)
    'gpu-small': dict(lt=['--steps', '600', '--n-valid', '512', '--eval-every', '200', '--lr', '5e-4', '--warmup', '60', '--max-tokens', '32768'],
                      glue=['--max-len', '256', '--steps', '400', '--eval-every', '200', '--n-valid', '512', '--max-tokens', '8192', '--lr', '5e-4', '--warmup', '40'],
                      defer_t5=None),
}


def _deferred(plan, e, L, s) -> bool:
    "Whether a scratch run waits for the group 'longtext-t5', run last: the plan's `defer_t5` says which T5 runs (T5 is the slowest arm)."
    return e == 't5' and (plan['defer_t5'] == 'all' or (plan['defer_t5'] == 'seeds 1-2 at 1024' and L == 1024 and s > 0))

def longtext(plan, config, pre=False, deferred=False):
    "Scratch: every encoding at 512 and 1,024 bytes; pre-trained (`pre`): the MLM encodings. Slow T5 runs (`_deferred`) go to the group 'longtext-t5'."
    if deferred and not plan['defer_t5']: return
    encs = MLM_ENCS if pre else LONG_ENCS
    for L, s in ([(L, s) for s in SEEDS for L in (512, 1024)] if pre else [(L, s) for L in (512, 1024) for s in SEEDS]):
        for e in encs:
            if _deferred(plan, e, L, s) != deferred: continue
            extra = ['--eval-len', '1024'] if L == 512 and s == 0 else []
            yield 'mlm', ['finetune', '--task', 'imdb', *plan['lt'], '--max-len', str(L), '--encoding', e, '--seed', str(s), *config] + extra + (['--pretrained'] if pre else [])

def mlm(plan, config):
    for s in SEEDS:
        for e in MLM_ENCS: yield 'mlm', ['pretrain', '--encoding', e, '--seed', str(s), *config]

def mlm_control(plan, config):
    "The pre-training baselines that learn or say why not: no positions, and learned rows at BERT's scale (`mlm.MLM_ARMS`)."
    for e in ('none', 'learned-bert'):                   # arm-major, as linear_control
        for s in SEEDS: yield 'mlm', ['pretrain', '--encoding', e, '--seed', str(s), *config]

def glue(plan, config):
    for s in SEEDS:
        for task in ('sst2', 'cola'):
            for e in MLM_ENCS:
                for pre in ([], ['--pretrained']):
                    yield 'mlm', ['finetune', '--task', task, *plan['glue'], '--encoding', e, '--seed', str(s), *config] + pre

def linear(plan, config):
    for s in SEEDS:
        for v in ('linear', 'linear-rope', 'softmax-rope'): yield 'linear_lm', ['train', '--variant', v, '--seed', str(s), *config]
    if not config: yield 'linear_lm', ['bench']                      # the cost benchmark is a CPU record

def linear_control(plan, config):
    "The linear LM's absolute-encoding controls (the paper's Performer baseline has absolute positions), against the arms of 'linear'."
    for v in ('linear+sinusoidal', 'linear+learned'):    # arm-major: a partial run leaves whole arms (3 seeds each)
        for s in SEEDS: yield 'linear_lm', ['train', '--variant', v, '--seed', str(s), *config]

GROUPS = {'longtext': longtext, 'mlm': mlm, 'linear': linear, 'linear-control': linear_control, 'mlm-control': mlm_control, 'bench': lambda plan, config: iter([('long_text', ['bench'])] if not config else []),
          'longtext-pre': lambda plan, config: longtext(plan, config, pre=True), 'glue': glue,
          'longtext-t5': lambda plan, config: longtext(plan, config, deferred=True)}


def _keep(argv, seeds, encodings) -> bool:
    "Whether a run's arguments pass the --seeds / --encodings filters (runs without a seed or an encoding always pass)."
    opt = lambda k: argv[argv.index(k) + 1] if k in argv else None
    s, e = opt('--seed'), opt('--encoding') or opt('--variant')
    return (s is None or seeds is None or int(s) in seeds) and (e is None or encodings is None or e in encodings)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('groups', nargs='*', choices=[[], *GROUPS], default=[], metavar='GROUP', help=f"any of {', '.join(GROUPS)} (default: all)")
    ap.add_argument('--config', default='cpu-tiny', choices=list(PLANS), help='scale: model size, budgets, test split (default: cpu-tiny)')
    ap.add_argument('--seeds', type=int, nargs='+', help='only these seeds')
    ap.add_argument('--encodings', nargs='+', help='only these encodings (linear: variants)')
    ap.add_argument('--steps', type=int, help="every run's updates, replacing the plan's (a smoke test of the chain): pre-training records and run folders are named for the budget (mlm.run_name), fine-tuning starts from them")
    a = ap.parse_args(argv)
    swallowed = [g for g in a.encodings or [] if g in GROUPS]
    if swallowed: ap.error(f"--encodings took the group name(s) {', '.join(swallowed)}: put the groups first, e.g. roformer_runs.py {' '.join(swallowed)} --encodings {a.encodings[0]}")
    torch.set_num_threads(1)
    plan, config = PLANS[a.config], ([] if a.config == 'cpu-tiny' else ['--config', a.config])
    needs_weights = bool({'longtext-pre', 'glue'} & set(a.groups or GROUPS))
    for g in a.groups or list(GROUPS):
        for mod, run in GROUPS[g](plan, config):
            if not _keep(run, a.seeds, a.encodings): continue
            if a.steps and run[0] in ('pretrain', 'finetune', 'train'): run = [*run, '--steps', str(a.steps)]
            if a.steps and '--pretrained' in run: run = [*run, '--pretrain-steps', str(a.steps)]   # from that budget's run
            if run[0] == 'pretrain' and needs_weights: run = [*run, '--weights']   # the fine-tuning below starts from these weights
            t = time.time(); rc = importlib.import_module(f'posenc_nb.{mod}').main(run)
            if rc: sys.exit(f'[{g}] {mod} {" ".join(run)} exited with status {rc}')   # main reports errors as a status, not an exception
            print(f'  [{g}] {time.time() - t:.0f}s {" ".join(run)}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
