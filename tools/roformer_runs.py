#!/usr/bin/env python3
"""Every run of the RoFormer experiments (notebooks 26-28), in the order they were run, in one process (each data split is
converted to bytes once). A run whose record exists under results/ is skipped; a pre-training run resumes from its checkpoint.
Usage: python tools/roformer_runs.py [GROUP ...]   (groups: longtext, mlm, linear, bench, longtext-pre, glue, longtext-t5; default: all, in this order)"""
import sys, time, torch

SEEDS, LONG_ENCS, MLM_ENCS = (0, 1, 2), ('rope', 'sinusoidal', 'learned', 'alibi', 't5', 'none'), ('rope', 'sinusoidal', 'learned')
LT = ['finetune', '--task', 'imdb', '--steps', '60', '--n-test', '400', '--n-valid', '128', '--eval-every', '60', '--lr', '2e-3', '--warmup', '10']

def longtext(pre=False, deferred=False):
    "T5 at 1,024 (about 4 minutes a run here) is deferred for seeds 1 and 2 to the group 'longtext-t5', run last."
    encs = MLM_ENCS if pre else LONG_ENCS
    for L, s in ([(L, s) for s in SEEDS for L in (512, 1024)] if pre else [(L, s) for L in (512, 1024) for s in SEEDS]):
        for e in encs:
            if (e == 't5' and L == 1024 and s > 0) != deferred: continue
            extra = ['--eval-len', '1024'] if L == 512 and s == 0 else []
            yield 'mlm', LT + ['--max-len', str(L), '--encoding', e, '--seed', str(s)] + extra + (['--pretrained'] if pre else [])

def mlm():
    for s in SEEDS:
        for e in MLM_ENCS: yield 'mlm', ['pretrain', '--encoding', e, '--seed', str(s)]

def glue():
    for s in SEEDS:
        for task in ('sst2', 'cola'):
            for e in MLM_ENCS:
                for pre in ([], ['--pretrained']):
                    yield 'mlm', ['finetune', '--task', task, '--max-len', '256', '--steps', '100', '--eval-every', '50', '--n-valid', '512',
                                  '--max-tokens', '2048', '--lr', '2e-3', '--encoding', e, '--seed', str(s)] + pre

def linear():
    for s in SEEDS:
        for v in ('linear', 'linear-rope', 'softmax-rope'): yield 'linear_lm', ['train', '--variant', v, '--seed', str(s)]
    yield 'linear_lm', ['bench']

GROUPS = {'longtext': longtext, 'mlm': mlm, 'linear': linear, 'bench': lambda: iter([('long_text', ['bench'])]), 'longtext-pre': lambda: longtext(pre=True), 'glue': glue, 'longtext-t5': lambda: longtext(deferred=True)}

if __name__ == '__main__':
    torch.set_num_threads(1)
    import importlib
    for g in sys.argv[1:] or list(GROUPS):
        for mod, argv in GROUPS[g]():
            t = time.time(); rc = importlib.import_module(f'posenc_nb.{mod}').main(argv)
            if rc: sys.exit(f'[{g}] {mod} {" ".join(argv)} exited with status {rc}')   # main reports errors as a status, not an exception
            print(f'  [{g}] {time.time() - t:.0f}s {" ".join(argv)}', flush=True)
