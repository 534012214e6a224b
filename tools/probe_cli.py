"""A careless user's probe of every entry point: bad values, clashing outputs, reruns with other settings, far
positions, truncated files. Each case runs in a process forked from this one (the package imported once), under a
CPU-time limit and an address-space cap, and is classed:

  held       refused with one line naming the flag or field (exit 2), or did what was asked, and kept every file
  lost       a file that was there before (a finished run, a record, a ledger) changed or went away
  mixed      an output that holds parts of two runs
  hang       past the CPU-time limit (or the wall-clock limit)
  crash      a traceback, an internal error, a signal, or exit 1 where nothing failed
  unhelpful  an error that is not one line naming the flag, or a bad value accepted silently

`python tools/probe_cli.py [--jobs 3] [--cpu 60] [--only WORD] [--out probe.jsonl]`; prints the counts, and one line
per case that did not hold. The cases are tiny (a few updates of the synthetic task); set POSENC_DATA for the cases that
read real data (they are skipped, not failed, without it). The same table is a test, tests/test_probe.py: the
cases `is_slow` names (they train, do the work asked, or read real data) run there with POSENC_SLOW=1."""
import argparse, contextlib, gzip, hashlib, io, json, os, resource, shutil, signal, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault('OMP_NUM_THREADS', '1')
os.environ.pop('POSENC_DEBUG', None)
TINY = ['--set', 'data_options={"n": 400}', '--set', 'test_max_sents=5', '--set', 'beam=1', '--set',
        'eval_bleu_sents=0', '--set', 'log_every=1', '--set', 'd_model=16', '--set', 'n_heads=2', '--set', 'd_ff=32',
        '--set', 'n_enc=1', '--set', 'n_dec=1']
TRAIN = ['cli', 'train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY]


def snapshot(path) -> dict:
    "Every file under `path` (or the file itself): name -> SHA-256; lock files and temp files aside."
    p = Path(path)
    files = [p] if p.is_file() else sorted(q for q in p.rglob('*') if q.is_file()) if p.is_dir() else []
    return {str(q.relative_to(p.parent)): hashlib.sha256(q.read_bytes()).hexdigest() for q in files
            if not q.name.endswith('.lock') and not q.name.endswith('.tmp')}


# ---------------------------------------------------------------------------------------------------------- fixtures
class Fixtures:
    "Runs and records made once, copied into each case's folder as it needs them."
    def __init__(self, base: Path): self.base, self.made = base, {}

    def get(self, name: str) -> Path:
        if name not in self.made:
            out = self.base / name
            getattr(self, '_' + name)(out)
            self.made[name] = out
        return self.made[name]

    def _fin(self, out):                      # a finished tiny translation run
        assert call(['cli', 'train', '--config', 'synthetic-tiny', '--max-steps', '4', '--set', 'ckpt_every=2', *TINY,
                     '--out', str(out)]) == 0, 'fixture fin'

    def _lin(self, out):                      # a linear-schedule run of 3 updates
        assert call(['cli', 'train', '--config', 'synthetic-tiny', '--max-steps', '3', '--set', 'lr_schedule=linear',
                     *TINY, '--out', str(out)]) == 0, 'fixture lin'

    def _cmp(self, out):                      # a finished comparison of one encoding
        assert call(['cli', 'compare', '--config', 'synthetic-tiny', '--encodings', 'rope', '--max-steps', '2', *TINY,
                     '--no-plot', '--out', str(out)]) == 0, 'fixture cmp'

    def _ex(self, out):                       # published run records of two encodings and two seeds (no training)
        from posenc_nb.store import fingerprint, publish
        for enc in ('rope', 'sinusoidal'):
            for s in (0, 1):
                cfg = {'enc_pe': enc, 'seed': s}
                hyps = ''.join(f'w{i} {enc[0]} {s}\n' for i in range(30))
                refs = {'config.json': json.dumps({**cfg, 'data': 'synthetic', 'test_split': 'test',
                                                   'data_options': {'n': 30}}),
                        'metrics.json': json.dumps({'encoding': enc, 'seed': s, 'bleu': 10.0 + s}), 'test.hyp': hyps}
                publish(out / f'{enc}-s{s}', refs, {'fingerprint': fingerprint(cfg)})


def call(argv, stdin=None) -> int:
    "Run an entry point in this process: ['cli', 'train', ...] is `python -m posenc_nb.cli train ...`."
    import importlib
    mod = importlib.import_module(f'posenc_nb.{argv[0]}')
    if stdin is not None: sys.stdin = io.StringIO(stdin)
    return int(mod.main(argv[1:]) or 0)


# ---------------------------------------------------------------------------------------------------------- cases
def C(id, argv, expect='refuse', needle=None, setup=None, guard=None, env=None, hold=None, post=None, data=False,
      was=None, slow=None):
    """A case: `argv` with {w} (its folder) and fixture names ({fin}, {cmp}, ...) filled in at run time. `was`: what
    the probe found before the package held it ('lost', 'mixed', 'hang', 'unhelpful'), for the cases issue 59 named;
    `slow`: True or False where the rule of `is_slow` misjudges the case (measured: seconds of work before the refusal,
    or a refusal that only copies a fixture made once per run)."""
    return dict(id=id, argv=argv, expect=expect, needle=needle, setup=setup, guard=guard, env=env or {}, hold=hold,
                post=post, data=data, was=was, slow=slow)


def copy_of(name, to='run'):
    "Setup: a copy of fixture `name` as {w}/`to`."
    def setup(w, fx): shutil.copytree(fx.get(name), w / to)
    setup.trains = name in ('fin', 'lin', 'cmp')          # a fixture trained once, for seconds
    return setup


def write(rel, text, gz=False):
    def setup(w, fx):
        p = w / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if gz:
            with gzip.open(p, 'wt') as f: f.write(text)
        else: p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return setup


def both(*fs):
    def setup(w, fx):
        for f in fs: f(w, fx)
    setup.trains = any(getattr(f, 'trains', False) for f in fs)
    return setup


def api(code):
    "A case run as Python in the child: `code` is executed; a ValueError/TypeError is its one-line refusal."
    return ['api', code]


def train_cases() -> list:
    out = ['--out', '{w}/t']
    bad_sets = [('seed=-1', 'seed'), ('seed=100000000000000000000', 'seed'), ('lr=-1', 'lr'), ('lr=nan', 'lr'),
                ('lr=0', 'lr'), ('lr=inf', 'lr'), ('betas=[0.9]', 'betas'), ('betas=[0.9,1.5]', 'betas'),
                ('name=x', 'name'), ('test_max_sents=-195', 'test_max_sents'), ('test_max_sents=0', 'test_max_sents'),
                ('max_steps=0', 'max_steps'), ('max_minutes=nan', 'max_minutes'), ('max_minutes=-1', 'max_minutes'),
                ('dropout=1.5', 'dropout'), ('label_smoothing=-0.1', 'label_smoothing'), ('warmup=-5', 'warmup'),
                ('grad_clip=0', 'grad_clip'), ('adam_eps=0', 'adam_eps'), ('weight_decay=-1', 'weight_decay'),
                ('len_penalty=-1', 'len_penalty'), ('max_train_len=0', 'max_train_len'), ('enc_pe=nosuch', 'nosuch'),
                ('dec_pe=nosuch', 'nosuch'), ('nosuchkey=1', 'nosuchkey'), ('lr', 'lr'), ('lr=abc', 'lr'),
                ('data_options=notjson', 'data_options'), ('pe_options={"max_len": 5}', 'max_len'),
                ('max_len=1000000000', 'max_len'), ('lr_schedule=nosuch', 'nosuch'), ('data=nosuch', 'nosuch'),
                ('test_split=nosuch', 'nosuch'), ('valid_split=nosuch', 'nosuch'), ('tokenizer=nosuch', 'nosuch'),
                ('activation=nosuch', 'nosuch'), ('amp=fp8', 'amp'), ('n_heads=0', 'n_heads'),
                ('d_model=31', 'd_model'), ('vocab_size=0', 'vocab_size'), ('eval_every=0', 'eval_every'),
                ('log_every=0', 'log_every'), ('ckpt_every=0', 'ckpt_every'), ('keep_ckpts=0', 'keep_ckpts'),
                ('beam=0', 'beam'), ('beam=100000', 'beam'), ('max_tokens=1', 'max_tokens'),
                ('streams=nosuch', 'nosuch'), ('max_train_len=1', 'max_train_len')]
    learned = lambda s: ['--set', 'enc_pe=learned'] if s.startswith('max_len=') else []
    budget = lambda s: TRAIN[:4] + TINY if s.startswith('max_steps=') else TRAIN      # no --max-steps beside it
    cs = [C(f'train --set {s}', budget(s) + learned(s) + ['--set', s] + out, needle=n) for s, n in bad_sets]
    cs += [C('train --set pe_options base=-5 (rope)', TRAIN + ['--set', 'enc_pe=rope', '--set',
                                                            'pe_options={"base": -5}'] + out, needle='base'),
           C('train --seed -1', TRAIN + ['--seed', '-1'] + out, needle='seed'),
           C('train --max-steps -3', TRAIN + ['--max-steps', '-3'] + out, needle='max'),
           C('train --max-minutes nan', TRAIN + ['--max-minutes', 'nan'] + out, needle='minutes'),
           C('train --config nosuch', ['cli', 'train', '--config', 'nosuch'] + out, needle='nosuch'),
           C('train --enc-pe nosuch', TRAIN + ['--enc-pe', 'nosuch'] + out, needle='--enc-pe'),
           C('train --device gpu', TRAIN + ['--device', 'gpu'] + out, needle='--device'),
           C('train --device cuda:7', TRAIN + ['--device', 'cuda:7'] + out, needle='--device'),
           C('train --threads 0', TRAIN + ['--threads', '0'] + out, needle='--threads'),
           C('train --out is a file', TRAIN + ['--out', '{w}/f'], needle='--out', setup=write('f', 'x'), guard='f'),
           C('train --out unwritable', TRAIN + ['--out', '/proc/t'], needle='/proc'),
           C('train empty test split', ['cli', 'train', '--config', 'synthetic-tiny', '--set', 'data=multi30k',
                                        '--set', 'tokenizer=bpe'] + out, needle='empty',
             setup=both(*[write(f'data/multi30k/{s}.{l}.gz', ''.join(f'a b {i}\n' for i in range(n)), gz=True)
                          for s, n in (('train', 30), ('val', 4), ('test_2016_flickr', 0)) for l in ('en', 'de')]),
             env={'POSENC_DATA': '{w}/data'})]
    fresh = ['max_tokens=1', 'streams=nosuch', 'max_train_len=1', 'lr=1e30', 'lr=-1', 'seed=-1', 'betas=[0.9]',
             'enc_pe=nosuch']
    cs += [C(f'train --fresh --set {s} over a finished run', TRAIN[:4] + ['--max-steps', '4', *TINY, '--set', s,
                                                                         '--fresh', '--out', '{w}/run'],
             expect='refuse_any', needle=s.split('=')[0] if s != 'lr=1e30' else 'earlier run', setup=copy_of('fin'),
             guard='run') for s in fresh]
    cs += [C('train resume with another lr', TRAIN[:4] + ['--max-steps', '4', *TINY, '--set', 'lr=0.1', '--out',
                                                          '{w}/run'], needle='lr', setup=copy_of('fin'), guard='run'),
           C('train resume of a finished run, same settings', TRAIN[:4] + ['--max-steps', '4', '--set', 'ckpt_every=2',
                                                                           *TINY, '--out',
                                                                           '{w}/run'], expect='ok',
             setup=copy_of('fin'), guard='run/results.json'),
           C('train linear schedule resumed with more steps', TRAIN[:4] + ['--max-steps', '6', '--set',
                                                                          'lr_schedule=linear', *TINY, '--out',
                                                                          '{w}/run'],
             needle='schedule', setup=copy_of('lin'), guard='run'),
           C('train into a compare record', TRAIN[:4] + ['--max-steps', '6', '--set', 'enc_pe=rope', *TINY,
                                                         '--out', '{w}/cmp/rope-s0'],
             needle='record', setup=copy_of('cmp', 'cmp'), guard='cmp'),
           C('train into a folder another run holds', TRAIN + out, needle='in use', hold='t'),
           C('compare over a hand-edited record config', ['cli', 'compare', '--config', 'synthetic-tiny', '--encodings',
                                                        'rope', '--max-steps', '2', *TINY, '--no-plot', '--out',
                                                        '{w}/cmp'], needle='changed',
             setup=both(copy_of('cmp', 'cmp'), lambda w, fx: (w / 'cmp/rope-s0/config.json').write_text('{"lr": 1}')),
             guard='cmp')]
    return cs


def compare_cases() -> list:
    base = ['cli', 'compare', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY, '--no-plot']
    out = ['--out', '{w}/c']
    return [C('compare --encodings ,', base + ['--encodings', ','] + out, needle='--encodings'),
            C('compare --encodings nosuch', base + ['--encodings', 'nosuch'] + out, needle='--encodings'),
            C('compare --encodings rope,nosuch', base + ['--encodings', 'rope,nosuch'] + out, needle='nosuch'),
            C('compare --seeds -1', base + ['--encodings', 'rope', '--seeds', '-1'] + out, needle='seed'),
            C('compare --max-steps 0', base + ['--encodings', 'rope', '--max-steps', '0'] + out, needle='max'),
            C('compare --set lr=-1', base + ['--encodings', 'rope', '--set', 'lr=-1'] + out, needle='lr'),
            C('compare --out is a file', base + ['--encodings', 'rope', '--out', '{w}/f'], needle='--out',
              setup=write('f', 'x'), guard='f'),
            C('compare rerun with another --max-steps', base[:4] + ['--max-steps', '3', *TINY, '--no-plot',
                                                                     '--encodings', 'rope', '--out', '{w}/cmp'],
              needle='other settings', setup=copy_of('cmp', 'cmp'), guard='cmp'),
            C('compare rerun with another --set', base + ['--encodings', 'rope', '--set', 'lr=0.001', '--out',
                                                          '{w}/cmp'], needle='other settings',
              setup=copy_of('cmp', 'cmp'), guard='cmp'),
            C('compare rerun, same settings (skips)', base + ['--encodings', 'rope', '--out', '{w}/cmp'], expect='ok',
              setup=copy_of('cmp', 'cmp'), guard='cmp/rope-s0'),
            C('compare while another holds --out', base + ['--encodings', 'rope'] + out, needle='in use', hold='c'),
            C('compare --device gpu', base + ['--encodings', 'rope', '--device', 'gpu'] + out, needle='--device'),
            C('compare --seeds abc', base + ['--encodings', 'rope', '--seeds', 'abc'] + out, needle='--seeds')]


def harness_cases() -> list:
    ex = lambda *a: ['experiments', *a]
    cs = [C('experiments run nosuch', ex('run', 'nosuch', '--steps', '1', '--out', '{w}/r'), needle='nosuch',
            slow=True),
          C('experiments run --steps 0', ex('run', 'multi30k', '--steps', '0', '--out', '{w}/r'),
            needle='--steps'),
          C('experiments run --steps -1', ex('run', 'multi30k', '--steps', '-1', '--out', '{w}/r'),
            needle='--steps'),
          C('experiments run --minutes nan', ex('run', 'multi30k', '--minutes', 'nan', '--out', '{w}/r'),
            needle='--minutes'),
          C('experiments run --minutes -1', ex('run', 'multi30k', '--minutes', '-1', '--out', '{w}/r'),
            needle='--minutes'),
          C('experiments run --encodings nosuch', ex('run', 'multi30k', '--encodings', 'nosuch', '--steps', '1',
                                                     '--out', '{w}/r'), needle='nosuch'),
          C('experiments run --seeds -1', ex('run', 'multi30k', '--seeds', '-1', '--steps', '1', '--out',
                                             '{w}/r'), needle='seed'),
          C('experiments run --set lr=-1', ex('run', 'multi30k', '--set', 'lr=-1', '--steps', '1', '--out',
                                              '{w}/r'), needle='lr'),
          C('experiments list', ex('list'), expect='ok'),
          C('experiments summarize a missing folder', ex('summarize', '{w}/nosuch'), needle='nosuch'),
          C('experiments summarize', ex('summarize', '{w}/ex'), expect='ok', setup=copy_of('ex', 'ex'), guard='ex'),
          C('experiments summarize a truncated metrics.json', ex('summarize', '{w}/ex'), needle='metrics.json',
            setup=both(copy_of('ex', 'ex'), write('ex/rope-s0/metrics.json', '{"enc')), guard='ex'),
          C('experiments summarize a replaced test.hyp', ex('summarize', '{w}/ex'), needle='test.hyp',
            setup=both(copy_of('ex', 'ex'), write('ex/rope-s0/test.hyp', 'other\n')), guard='ex'),
          C('experiments compare', ex('compare', '{w}/ex', '--samples', '20', '--out', '{w}/sig.json'),
            expect='ok', setup=copy_of('ex', 'ex'), guard='ex'),
          C('experiments compare a replaced test.hyp', ex('compare', '{w}/ex', '--samples', '20'), needle='test.hyp',
            setup=both(copy_of('ex', 'ex'), write('ex/rope-s0/test.hyp', 'other\n')), guard='ex'),
          C('experiments compare --baseline nosuch', ex('compare', '{w}/ex', '--baseline', 'nosuch'),
            needle='nosuch', setup=copy_of('ex', 'ex'), guard='ex'),
          C('experiments compare --seed 7 (no such runs)', ex('compare', '{w}/ex', '--seed', '7'), needle='7',
            setup=copy_of('ex', 'ex'), guard='ex'),
          C('experiments compare an empty folder', ex('compare', '{w}/empty'), needle='empty',
            setup=lambda w, fx: (w / 'empty').mkdir()),
          C('experiments compare --out into a record', ex('compare', '{w}/ex', '--samples', '20', '--out',
                                                          '{w}/ex/rope-s0/metrics.json'),
            needle='--out', setup=copy_of('ex', 'ex'), guard='ex'),
          C('experiments compare --out with other settings', ex('compare', '{w}/ex', '--samples', '30', '--out',
                                                                '{w}/sig.json'),
            needle='samples', setup=both(copy_of('ex', 'ex'), lambda w, fx: call(
                ['experiments', 'compare', str(w / 'ex'), '--samples', '20', '--out', str(w / 'sig.json')])),
            guard='sig.json'),
          C('experiments compare --out a folder', ex('compare', '{w}/ex', '--samples', '20', '--out', '{w}/ex'),
            needle='--out', setup=copy_of('ex', 'ex'), guard='ex')]
    cs += [C(f'experiments compare --samples {n}', ex('compare', '{w}/ex', '--samples', n), needle='--samples',
             setup=copy_of('ex', 'ex')) for n in ('0', '-5', '100000000', 'abc')]
    return cs


def mlm_cases() -> list:
    pre = lambda *a: ['mlm', 'pretrain', *a]
    ft = lambda *a: ['mlm', 'finetune', *a]
    o = ['--out', '{w}/r.json']
    from dataclasses import asdict, replace
    def record(steps):
        def setup(w, fx):
            from posenc_nb.mlm import MLM_CONFIGS
            from posenc_nb.store import write_output
            cfg = asdict(replace(MLM_CONFIGS['cpu-tiny'], encoding='rope', seed=0, steps=steps))
            write_output(w / 'r.json', {'experiment': 'mlm-pretrain', 'config': cfg}, cfg)
        return setup
    return [C('mlm pretrain --steps 0', pre('--steps', '0', *o), needle='--steps'),
            C('mlm pretrain --steps -1', pre('--steps', '-1', *o), needle='--steps'),
            C('mlm pretrain --lr -1', pre('--steps', '2', '--lr', '-1', *o), needle='lr'),
            C('mlm pretrain --lr nan', pre('--steps', '2', '--lr', 'nan', *o), needle='lr'),
            C('mlm pretrain --encoding nosuch', pre('--steps', '2', '--encoding', 'nosuch', *o), needle='nosuch'),
            C('mlm pretrain --config nosuch', pre('--steps', '2', '--config', 'nosuch', *o), needle='nosuch'),
            C('mlm pretrain --seed -1', pre('--steps', '2', '--seed', '-1', *o), needle='seed'),
            C('mlm pretrain --threads 0', pre('--steps', '2', '--threads', '0', *o), needle='--threads'),
            C('mlm pretrain --out with other settings', pre('--steps', '2', *o), needle='steps', setup=record(3),
              guard='r.json'),
            C('mlm pretrain --out, same settings (skips)', pre('--steps', '2', *o), expect='ok', setup=record(2),
              guard='r.json'),
            C('mlm pretrain while another writes --out', pre('--steps', '2', *o), needle='in use', hold='r.json'),
            C('mlm pretrain --out a folder', pre('--steps', '2', '--out', '{w}'), needle='--out'),
            C('mlm pretrain --out into a record', pre('--steps', '2', '--out', '{w}/ex/rope-s0/x.json'),
              needle='--out', setup=copy_of('ex', 'ex'), guard='ex'),
            C('mlm pretrain, run folder held in the shared cache', pre('--steps', '2', *o), needle='cache',
              hold='cache/roformer-runs/mlm-cpu-tiny-steps2-rope-seed0', env={'POSENC_CACHE': '{w}/cache'}),
            C('mlm finetune --eval-every 0', ft('--eval-every', '0', *o), needle='--eval-every'),
            C('mlm finetune --steps 0', ft('--steps', '0', *o), needle='--steps'),
            C('mlm finetune --task nosuch', ft('--task', 'nosuch', '--steps', '2', *o), needle='nosuch'),
            C('mlm finetune --max-len 0', ft('--max-len', '0', '--steps', '2', *o), needle='max'),
            C('mlm finetune --n-test -1', ft('--n-test', '-1', '--steps', '2', *o), needle='n', slow=True),
            C('mlm finetune --lr -1', ft('--lr', '-1', '--steps', '2', *o), needle='lr'),
            C('mlm finetune --max-tokens 0', ft('--max-tokens', '0', '--steps', '2', *o), needle='max', data=True),
            C('mlm finetune --warmup -1', ft('--warmup', '-1', '--steps', '2', *o), needle='warmup'),
            C('mlm finetune --pretrained with a scratch record', ft('--pretrained', '--steps', '2', *o),
              needle='init_run', guard='r.json', setup=lambda w, fx: __import__('posenc_nb.store').store.write_output(
                  w / 'r.json', {'experiment': 'finetune', 'init_run': None}, {'task': 'sst2', 'init_run': None}))]


def long_text_cases() -> list:
    lt = lambda *a: ['long_text', *a]
    o = ['--out', '{w}/b.json']
    def rec(name, body, settings):
        def setup(w, fx): __import__('posenc_nb.store').store.write_output(w / name, body, settings)
        return setup
    bpe_old = dict(encoding='rope', seed=0, plan='cpu', max_len=256, max_steps=1500, n_test=5000)
    return [C('long_text bpe --steps 0', lt('bpe', '--steps', '0', *o), needle='--steps'),
            C('long_text bpe --steps -1', lt('bpe', '--steps', '-1', *o), needle='--steps'),
            C('long_text bpe --encoding nosuch', lt('bpe', '--steps', '2', '--encoding', 'nosuch', *o),
              needle='nosuch'),
            C('long_text bpe --max-len 0', lt('bpe', '--steps', '2', '--max-len', '0', *o), needle='max'),
            C('long_text bpe --plan nosuch', lt('bpe', '--steps', '2', '--plan', 'nosuch', *o), needle='nosuch'),
            C('long_text bpe --n-test 0', lt('bpe', '--steps', '2', '--n-test', '0', *o), needle='n'),
            C('long_text bpe --seed -1', lt('bpe', '--steps', '2', '--seed', '-1', *o), needle='seed'),
            C('long_text bpe --out with other settings', lt('bpe', '--steps', '7', *o), needle='max_steps',
              setup=rec('b.json', {'experiment': 'finetune-bpe'}, bpe_old), guard='b.json'),
            C('long_text bpe while another writes --out', lt('bpe', '--steps', '7', *o), needle='in use',
              hold='b.json'),
            C('long_text lengths --limits 0', lt('lengths', '--limits', '0', *o), needle='limits'),
            C('long_text lengths --limits -5', lt('lengths', '--limits', '-5', *o), needle='limits'),
            C('long_text lengths --limits abc', lt('lengths', '--limits', 'abc', *o), needle='limits'),
            C('long_text lengths --out with other settings', lt('lengths', '--limits', '64', *o), needle='limits',
              setup=write('b.json', json.dumps({'experiment': 'bpe-lengths', 'vocab_size': 8000,
                                                'limits': [128, 256, 512]})), guard='b.json'),
            C('long_text lengths --vocab-size 0', lt('lengths', '--vocab-size', '0', *o), needle='vocab', data=True),
            C('long_text ngram --Cs -1', lt('ngram', '--Cs', '-1', *o), needle='Cs'),
            C('long_text ngram --Cs 0', lt('ngram', '--Cs', '0', *o), needle='Cs'),
            C('long_text ngram --n-test 0', lt('ngram', '--n-test', '0', *o), needle='n'),
            C('long_text ngram --out with other settings', lt('ngram', '--Cs', '1', *o), needle='Cs',
              setup=write('b.json', json.dumps({'experiment': 'ngram-reference', 'config': {
                  'Cs': [0.5, 2.0], 'n_test': 5000, 'subset_seed': 0}})), guard='b.json'),
            C('long_text bench --out a folder', lt('bench', '--out', '{w}'), needle='--out'),
            C('long_text bpe --out into a record', lt('bpe', '--steps', '2', '--out', '{w}/ex/rope-s0/b.json'),
              needle='--out', setup=copy_of('ex', 'ex'), guard='ex')]


def classify_cases() -> list:
    cl = lambda *a: ['classify', *a]
    o = ['--out', '{w}/g']
    def rec(w, fx):
        p = w / 'g' / 'cola' / 'sinusoidal_seed0.json'
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps({'task': 'cola', 'encoding': 'sinusoidal', 'config': {'max_steps': 500}}))
    return [C('classify without a budget', cl('--task', 'cola', *o), needle='--steps'),
            C('classify --steps 0', cl('--task', 'cola', '--steps', '0', *o), needle='--steps'),
            C('classify --steps -1', cl('--task', 'cola', '--steps', '-1', *o), needle='--steps'),
            C('classify --minutes nan', cl('--task', 'cola', '--minutes', 'nan', *o), needle='--minutes'),
            C('classify --minutes -1', cl('--task', 'cola', '--minutes', '-1', *o), needle='--minutes'),
            C('classify --task nosuch', cl('--task', 'nosuch', '--steps', '2', *o), needle='nosuch'),
            C('classify --encoding nosuch', cl('--task', 'cola', '--encoding', 'nosuch', '--steps', '2', *o),
              needle='nosuch'),
            C('classify --seed -1', cl('--task', 'cola', '--seed', '-1', '--steps', '2', *o), needle='seed'),
            C('classify --threads 0', cl('--task', 'cola', '--threads', '0', '--steps', '2', *o), needle='--threads'),
            C('classify --out with another budget', cl('--task', 'cola', '--encoding', 'sinusoidal', '--steps', '3',
                                                       *o), needle='max_steps', setup=rec, guard='g', data=True),
            C('classify --out a file', cl('--task', 'cola', '--steps', '2', '--out', '{w}/f'), needle='--out',
              setup=write('f', 'x'), guard='f')]


def translate_cases() -> list:
    tr = lambda *a: ['cli', 'translate', '--ckpt', '{w}/run', *a]
    inp = write('in.txt', 'a b c\n')
    fin = copy_of('fin')
    return [C('translate --beam 100000', tr('--input', '{w}/in.txt', '--beam', '100000'), needle='--beam',
              setup=both(fin, inp)),
            C('translate --beam 0', tr('--input', '{w}/in.txt', '--beam', '0'), needle='--beam', setup=both(fin, inp)),
            C('translate --beam -3', tr('--input', '{w}/in.txt', '--beam', '-3'), needle='--beam',
              setup=both(fin, inp)),
            C('translate --len-penalty -1', tr('--input', '{w}/in.txt', '--len-penalty', '-1'), needle='len',
              setup=both(fin, inp)),
            C('translate --len-penalty nan', tr('--input', '{w}/in.txt', '--len-penalty', 'nan'), needle='len',
              setup=both(fin, inp)),
            C('translate --batch-tokens 0', tr('--input', '{w}/in.txt', '--batch-tokens', '0'), needle='--batch',
              setup=both(fin, inp)),
            C('translate a 200,000-word line', tr('--input', '{w}/long.txt'), needle='words',
              setup=both(fin, write('long.txt', 'a b\n' + ' '.join(['w'] * 200000) + '\n'))),
            C('translate a 1,001-word line', tr('--input', '{w}/long.txt'), needle='words',
              setup=both(fin, write('long.txt', ' '.join(['w'] * 1001) + '\n'))),
            C('translate --output is --input', tr('--input', '{w}/in.txt', '--output', '{w}/in.txt'),
              needle='--output', setup=both(fin, inp), guard='in.txt'),
            C('translate --output into a record', tr('--input', '{w}/in.txt', '--output', '{w}/ex/rope-s0/test.hyp'),
              needle='--output', setup=both(fin, inp, copy_of('ex', 'ex')), guard='ex'),
            C('translate --output a folder', tr('--input', '{w}/in.txt', '--output', '{w}'), needle='--output',
              setup=both(fin, inp)),
            C('translate --ckpt missing', ['cli', 'translate', '--ckpt', '{w}/nosuch', '--input', '{w}/in.txt'],
              needle='nosuch', setup=inp),
            C('translate --ckpt a text file', ['cli', 'translate', '--ckpt', '{w}/in.txt', '--input', '{w}/in.txt'],
              needle='in.txt', setup=inp),
            C('translate --input missing', tr('--input', '{w}/nosuch.txt'), needle='nosuch', setup=fin),
            C('translate a binary input', tr('--input', '{w}/bin.txt'), needle='bin.txt',
              setup=both(fin, write('bin.txt', b'\xff\xfe\x00abc\n'))),
            C('translate an empty input', tr('--input', '{w}/e.txt', '--output', '{w}/o.txt'), expect='ok',
              setup=both(fin, write('e.txt', ''))),
            C('translate', tr('--input', '{w}/in.txt', '--output', '{w}/o.txt', '--beam', '2'), expect='ok',
              setup=both(fin, inp)),
            C('evaluate lines differ', ['cli', 'evaluate', '--hyp', '{w}/h.txt', '--ref', '{w}/r.txt'],
              needle='line', setup=both(write('h.txt', 'a\nb\n'), write('r.txt', 'a\n'))),
            C('evaluate --ref missing', ['cli', 'evaluate', '--hyp', '{w}/h.txt', '--ref', '{w}/nosuch'],
              needle='nosuch', setup=write('h.txt', 'a\n')),
            C('evaluate a binary hyp', ['cli', 'evaluate', '--hyp', '{w}/h.txt', '--ref', '{w}/r.txt'],
              needle='h.txt', setup=both(write('h.txt', b'\xff\xfe\n'), write('r.txt', 'a\n'))),
            C('evaluate', ['cli', 'evaluate', '--hyp', '{w}/h.txt', '--ref', '{w}/r.txt'], expect='ok',
              setup=both(write('h.txt', 'a b c\n'), write('r.txt', 'a b c\n')))]


def other_cases() -> list:
    ln, sp, lm = (lambda *a: ['length', *a]), (lambda *a: ['speed', *a]), (lambda *a: ['linear_lm', *a])
    cl = lambda *a: ['claims', '--root', '{w}/res', *a]
    def results(cut=None, text=None):
        def setup(w, fx):
            shutil.copytree(ROOT / 'results', w / 'res')
            if cut: (w / 'res' / cut).write_text(text if text is not None else (ROOT / 'results' / cut).read_text()[:9])
        return setup
    mlm_rec = 'roformer-mlm/cpu-small-lr0.001_learned-bert_seed0.json'
    sp_o = ['--out', '{w}/s.json', '--reps', '1', '--length', '16', '--encodings', 'rope', '--d-model', '16',
            '--n-heads', '2', '--n-layers', '1', '--d-ff', '32', '--batch', '2', '--dec-steps', '2', '--train-steps',
            '1']
    return [C('length run --steps 0', ln('run', '--steps', '0', '--out', '{w}/l'), needle='--steps'),
            C('length run --steps -1', ln('run', '--steps', '-1', '--out', '{w}/l'), needle='--steps'),
            C('length run --encodings nosuch', ln('run', '--encodings', 'nosuch', '--steps', '1', '--out', '{w}/l'),
              needle='nosuch'),
            C('length run --seeds -1', ln('run', '--seeds', '-1', '--steps', '1', '--out', '{w}/l'), needle='seed'),
            C('length run --config nosuch', ln('run', '--config', 'nosuch', '--steps', '1', '--out', '{w}/l'),
              needle='nosuch'),
            C('length extend with no runs', ln('extend', '--out', '{w}/l', '--runs', '{w}/runs'), needle='run'),
            C('length sample with no records', ln('sample', '--out', '{w}/l', '--runs', '{w}/runs'), needle='record'),
            C('length sample --temperature -1', ln('sample', '--temperature', '-1', '--out', '{w}/l'),
              needle='temperature'),
            C('claims --check on the committed results', ['claims', '--root', str(ROOT / 'results'), '--check'],
              expect='ok'),                     # in place: a copy outside git cannot show when claims were registered
            C('claims on a truncated ledger', cl('--check'), needle='claims.json', setup=results('claims.json'),
              guard='res', slow=True),
            C('claims on a truncated record', cl('--check'), needle='seed0.json', setup=results(mlm_rec), guard='res',
              slow=True),
            C('claims on a missing root', ['claims', '--root', '{w}/nosuch'], needle='nosuch'),
            C('claims --register an unknown id', cl('--register', 'nosuch'), needle='nosuch', setup=results(),
              guard='res', slow=True),
            C('claims on a record whose file changed', cl('--check'), needle='changed', guard='res', slow=True,
              setup=results('xl-synthetic-gold-r/xl-input@oracle-gold-s0/metrics.json', '{"encoding": "x"}')),
            C('speed --length 0', sp(*sp_o, '--length', '0'), needle='--length'),
            C('speed --length -1', sp(*sp_o, '--length', '-1'), needle='--length'),
            C('speed --batch 0', sp(*sp_o, '--batch', '0'), needle='--batch'),
            C('speed --reps 0', sp(*sp_o, '--reps', '0'), needle='--reps'),
            C('speed --encodings nosuch', sp(*sp_o, '--encodings', 'nosuch'), needle='nosuch'),
            C('speed --d-model 15', sp(*sp_o, '--d-model', '15'), needle='d'),
            C('speed --out a folder', sp(*sp_o, '--out', '{w}'), needle='--out'),
            C('speed --out into a record', sp(*sp_o, '--out', '{w}/ex/rope-s0/s.json'), needle='--out',
              setup=copy_of('ex', 'ex'), guard='ex'),
            C('speed, tiny', sp(*sp_o), expect='ok'),
            C('linear_lm train --variant nosuch', lm('train', '--variant', 'nosuch'), needle='nosuch'),
            C('linear_lm train --config nosuch', lm('train', '--config', 'nosuch'), needle='nosuch'),
            C('linear_lm train --seed -1', lm('train', '--seed', '-1'), needle='seed'),
            C('linear_lm train --threads 0', lm('train', '--threads', '0'), needle='--threads'),
            C('posenc list', ['cli', 'list'], expect='ok'),
            C('posenc nosuch', ['cli', 'nosuch'], needle='nosuch'),
            C('posenc train with no --config', ['cli', 'train'], needle='--config')]


def api_cases() -> list:
    far = ("import torch\nfrom posenc_nb.core import Positions\nfrom posenc_nb.model import ModelConfig, Seq2Seq\n"
           "m = Seq2Seq(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32, "
           "enc_pe='{enc}', max_len=64))\n"
           "o = m(torch.arange(2, 10)[None], Positions(torch.arange(8)[None] + 10 ** 8), torch.tensor([[1, 5]]), "
           "Positions(torch.tensor([[0, 1]])))\nassert torch.isfinite(o).all()\n")
    cs = [C(f'{enc} at position 1e8', api(far.replace('{enc}', enc)), expect='ok_or_refuse', needle='position')
          for enc in ('sinusoidal', 'rope', 'alibi', 't5', 'shaw', 'xl-rope', 'xl-headxl', 'xl-head', 'xl-input',
                      'learned', 'floater', 'none')]
    rope = "from posenc_nb.rope import RoPE, rotary_from_hf\nfrom posenc_nb.rotary import RotaryCache\n"
    cs += [C('RoPE(base=-5)', api(rope + 'RoPE(16, 2, base=-5)'), needle='base'),
           C('RotaryCache(base=nan)', api(rope + "RotaryCache(8, base=float('nan'))"), needle='base'),
           C('rotary_from_hf(None)', api(rope + 'rotary_from_hf(None)'), needle='None'),
           C('rotary_from_hf theta=-1', api(rope + "rotary_from_hf({'head_dim': 8, 'rope_theta': -1})"),
             needle='rope_theta'),
           C('rotary_from_hf dynamic factor=-2', api(rope + "rotary_from_hf({'head_dim': 8, 'max_position_embeddings':"
                                                            " 64, 'rope_scaling': {'rope_type': 'dynamic', "
                                                            "'factor': -2}})"), needle='factor'),
           C('rotary_from_hf linear factor=-2', api(rope + "rotary_from_hf({'head_dim': 8, 'rope_scaling': "
                                                           "{'rope_type': 'linear', 'factor': -2}})"), needle='factor'),
           C('learned max_len=1e9', api("from posenc_nb.core import make_posenc\n"
                                        "make_posenc('learned', 16, 2, max_len=10 ** 9)"), needle='max_len')]
    return cs


def committed(*copies):
    "Setup: {w}/results as a checkout's committed results (a registry.json) with copies of committed folders."
    def setup(w, fx):
        (w / 'results').mkdir()
        shutil.copy(ROOT / 'results' / 'registry.json', w / 'results' / 'registry.json')
        for c in copies: shutil.copytree(ROOT / 'results' / c, w / 'results' / c)
    return setup


def length_run(steps='2'):
    "Setup: a smoke length-lab run of rope seed 0 into {w}/a, its checkpoint in {w}/runs (reads POSENC_DATA)."
    def setup(w, fx):
        assert call(['length', 'run', '--config', 'smoke', '--encodings', 'rope', '--seeds', '0', '--steps', steps,
                     '--out', str(w / 'a'), '--runs', str(w / 'runs')]) == 0, 'length run setup'
    setup.trains = True
    return setup


def corpus_plus_one(w, fx):
    "Setup: a copy of Tiny Shakespeare under {w}/data that gained one character ('~' is not in it)."
    src = Path(os.environ['POSENC_DATA']) / 'tinyshakespeare' / 'input.txt'
    (w / 'data' / 'tinyshakespeare').mkdir(parents=True)
    (w / 'data' / 'tinyshakespeare' / 'input.txt').write_text(src.read_text() + '~\n')


def committed_cases() -> list:
    "Lost and mixed: committed results, comparison and experiment folders of one design, run folders of one setting."
    cmp = ['cli', 'compare', '--config', 'synthetic-tiny', *TINY, '--no-plot']
    ext = ['experiments', 'run', 'extrapolation', '--encodings', 'rope', '--seeds', '5']
    sample = ['length', 'sample', '--encoding', 'rope', '--seed', '0', '--out', '{w}/s.json', '--runs', '{w}/runs']
    return [C('train --out results/extrapolation (committed)', TRAIN + ['--out', 'results/extrapolation'],
              needle='committed results', setup=committed('extrapolation'), guard='results', was='mixed'),
            C('train --out a new folder in committed results', TRAIN + ['--out', 'results/new'],
              needle='committed results', setup=committed(), guard='results'),
            C('compare --out committed results, a run it lacks', cmp + ['--encodings', 'rope', '--seeds', '5',
                                                                        '--max-steps', '2', '--out',
                                                                        'results/extrapolation'],
              needle='committed results', setup=committed('extrapolation'), guard='results', was='mixed'),
            C('experiments run, other settings, its committed default folder', ext + ['--steps', '2'],
              needle='committed results', setup=committed('extrapolation'), guard='results', was='mixed'),
            C('experiments run --set, its committed default folder', ext + ['--set', 'd_model=32'],
              needle='committed results', setup=committed('extrapolation'), guard='results'),
            C('experiments run --registered nosuch', ext + ['--registered', 'nosuch'], needle='--registered',
              setup=committed('extrapolation'), guard='results'),
            C('experiments compare --out committed results', ['experiments', 'compare', 'results/extrapolation',
                                                              '--baseline', 'rope', '--samples', '5', '--out',
                                                              'results/sig.json'],
              needle='committed results', setup=committed('extrapolation'), guard='results'),
            C('speed --out committed results', ['speed', '--reps', '1', '--length', '16', '--encodings', 'rope',
                                                '--out', 'results/s.json'], needle='committed results',
              setup=committed(), guard='results'),
            C('length run, new records into committed results', ['length', 'run', '--config', 'smoke', '--encodings',
                                                                 'rope', '--seeds', '7'],
              needle='committed results', setup=committed('length'), guard='results'),
            C('length sample, its own committed record (kept)', ['length', 'sample'], expect='ok',
              setup=committed('length'), guard='results'),
            C('compare --out a finished train run', cmp + ['--encodings', 'rope', '--max-steps', '2', '--out',
                                                           '{w}/run'],
              needle='training run', setup=copy_of('fin'), guard='run', was='lost', slow=False),
            C('compare rerun: another --max-steps and an encoding it lacks', cmp + ['--encodings', 'alibi',
                                                                                    '--max-steps', '3', '--out',
                                                                                    '{w}/cmp'],
              needle='max_steps', setup=copy_of('cmp', 'cmp'), guard='cmp', was='mixed'),
            C('length run: other --steps, another --out, the same --runs', ['length', 'run', '--config', 'smoke',
                                                                            '--encodings', 'rope', '--seeds', '0',
                                                                            '--steps', '3', '--out', '{w}/b',
                                                                            '--runs', '{w}/runs'],
              needle='steps', setup=length_run(), guard='runs', data=True, was='mixed'),
            C('length sample: a record of other settings than the checkpoint', sample,
              needle='other settings', setup=both(length_run(), lambda w, fx: shutil.copy(
                  ROOT / 'results' / 'length' / 'rope_seed0.json', w / 'rope_seed0.json')), guard='runs', data=True),
            C('length sample: the corpus gained a character', sample[:-4] + ['--out', '{w}/o/s.json', '--runs',
                                                                             '{w}/runs'],
              needle='another corpus', setup=both(length_run(), corpus_plus_one), guard='runs', data=True, was='mixed',
              env={'POSENC_DATA': '{w}/data'})]


def input_cases() -> list:
    "Inputs checked where they enter: line separators, sizes, seeds, long lines."
    aligned = ("from posenc_nb.data import load_parallel\np = load_parallel('multi30k', 'train')\n"
               "assert len(p) == 10 and p[7] == ('e7', 'd7') and '\\u2028' in p[6][0], p[5:8]\n")
    en = ''.join(f'e{i}' + ('\u2028x\x85y' if i == 6 else '') + '\n' for i in range(10))
    de = ''.join(f'd{i}' + ('\u2029z' if i == 2 else '') + '\n' for i in range(10))
    cs = [C('multi30k lines holding U+2028, U+0085, U+2029', api(aligned), expect='ok', env={'POSENC_DATA': '{w}/d'},
            was='mixed',
            setup=both(write('d/multi30k/train.en.gz', en, gz=True), write('d/multi30k/train.de.gz', de, gz=True))),
          C('multi30k language files of other lengths', api("from posenc_nb.data import load_parallel\n"
                                                            "load_parallel('multi30k', 'train')"),
            needle='train.de.gz has 2', env={'POSENC_DATA': '{w}/d'},
            setup=both(write('d/multi30k/train.en.gz', 'a\nb\nc\n', gz=True),
                       write('d/multi30k/train.de.gz', 'a\nb\n', gz=True))),
          C('sst2 row without a label', api("from posenc_nb.data import load_labelled\nload_labelled('sst2', 'train')"),
            needle='row 2', env={'POSENC_DATA': '{w}/d'}, was='unhelpful',
            setup=write('d/glue/sst2/train.tsv', 'sentence\tlabel\nok\t1\nno label\n')),
          C('compare --seeds 2**66', ['cli', 'compare', '--config', 'synthetic-tiny', '--encodings', 'rope', '--seeds',
                                      str(2 ** 66), '--out', '{w}/c'], needle='--seeds', was='unhelpful'),
          C('length run --seeds 2**66', ['length', 'run', '--config', 'smoke', '--seeds', str(2 ** 66), '--out',
                                         '{w}/l'], needle='--seeds'),
          C('translate a 200,000-character line without spaces',
            ['cli', 'translate', '--ckpt', '{w}/run', '--input', '{w}/long.txt'], needle='characters', was='hang',
            slow=False, setup=both(copy_of('fin'), write('long.txt', 'a b\n' + 'w' * 200_000 + '\n'))),
          C('translate 999 words of 200 letters', ['cli', 'translate', '--ckpt', '{w}/run', '--input', '{w}/long.txt'],
            needle='characters', was='hang',
            setup=both(copy_of('fin'), write('long.txt', ' '.join(['x' * 200] * 999) + '\n')))]
    sizes = [('d_model=0', 'd_model'), ('d_model=-64', 'd_model'), ('d_model=64.5', 'd_model'),
             ('n_heads=0', 'n_heads'), ('max_len=-5', 'max_len')]
    from posenc_nb.core import list_posencs
    for kw, needle in sizes:
        args = {'d_model': '64', 'n_heads': '4', 'max_len': '64', **dict([kw.split('=')])}
        for enc in list_posencs():
            cs.append(C(f'make_posenc({enc!r}, {kw})', api(
                f"from posenc_nb.core import make_posenc\nmake_posenc({enc!r}, d_model={args['d_model']}, "
                f"n_heads={args['n_heads']}, max_len={args['max_len']})"), needle=needle, was='unhelpful'))
    return cs


def all_cases() -> list:
    groups = [train_cases(), compare_cases(), harness_cases(), mlm_cases(), long_text_cases(), classify_cases(),
              translate_cases(), other_cases(), api_cases(), committed_cases(), input_cases()]
    out = []                                   # interleaved, so a partial run covers every entry point
    while any(groups):
        for g in groups:
            if g: out.append(g.pop(0))
    return out


# ---------------------------------------------------------------------------------------------------------- running
def _fill(s: str, w: Path, fx: Fixtures) -> str:
    return s.replace('{w}', str(w))


def _child(case: dict, w: Path, cpu: int):
    "In the forked child: limits, output to files, the entry point run; exits with its status."
    from posenc_nb import store
    from posenc_nb.args import INPUT_ERRORS
    store._HELD.clear()                                        # the parent's locks are not this process's
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    os.chdir(w)
    for k, v in case['env'].items(): os.environ[k] = _fill(v, w, None)
    out, err = open(w / '.stdout', 'w'), open(w / '.stderr', 'w')
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout, sys.stderr = io.TextIOWrapper(os.fdopen(1, 'wb', 0), write_through=True), \
        io.TextIOWrapper(os.fdopen(2, 'wb', 0), write_through=True)
    argv = [_fill(a, w, None) for a in case['argv']]
    rc = 1
    try:
        if argv[0] == 'api':
            try:
                exec(compile(argv[1], '<case>', 'exec'), {})
                rc = 0
            except INPUT_ERRORS as e:                   # the package's own bad-input errors: a one-line refusal
                print(f'error: {e}', file=sys.stderr)
                rc = 2
        else: rc = call(argv, stdin='')
    except SystemExit as e: rc = e.code if isinstance(e.code, int) else 0
    except BaseException:
        import traceback
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def classify(case: dict, rc, sig, err: str, changed: bool, timed_out: bool) -> tuple:
    "(class, why) of a finished case."
    last = err.strip().splitlines()[-1] if err.strip() else ''
    if timed_out or sig in (signal.SIGXCPU, signal.SIGKILL): return 'hang', 'past the time limit'
    if changed: return 'lost', 'a file that was there before changed'
    if sig is not None: return 'crash', f'signal {sig}'
    if 'Traceback' in err or 'internal error' in err or 'MemoryError' in err: return 'crash', last[:200]
    clean = rc == 2 and (case['needle'] or '').lower() in last.lower()
    if case['expect'] == 'ok': return ('held', '') if rc == 0 else ('unhelpful' if rc == 2 else 'crash', last[:200])
    if case['expect'] == 'ok_or_refuse':
        return ('held', '') if rc == 0 or clean else ('unhelpful', last[:200])
    if rc == 0: return 'unhelpful', 'a bad value accepted silently'
    if case['expect'] == 'refuse_any': clean = rc in (1, 2) and (case['needle'] or '').lower() in last.lower()
    return ('held', '') if clean else ('unhelpful', f'rc={rc}: {last[:200]}')


def start(case: dict, w: Path, fx: Fixtures, cpu: int) -> dict:
    "Set the case up and fork its child; the running state."
    w.mkdir(parents=True)
    if case['setup']: case['setup'](w, fx)
    guard = w / case['guard'] if case['guard'] else None
    before = snapshot(guard) if guard else None
    held = None
    if case['hold']:
        from posenc_nb.store import lock_folder, lock_output
        p = w / case['hold']
        held = (lock_output(p) if p.suffix == '.json' else lock_folder(p))
        held.__enter__()
    pid = os.fork()
    if pid == 0: _child(case, w, cpu)
    return dict(case=case, w=w, pid=pid, t0=time.time(), guard=guard, before=before, held=held)


def finish(st: dict, status, timed_out: bool) -> dict:
    if st['held'] is not None: st['held'].__exit__(None, None, None)
    w, case = st['w'], st['case']
    rc = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
    err = (w / '.stderr').read_text(errors='replace') if (w / '.stderr').exists() else ''
    changed = st['guard'] is not None and snapshot(st['guard']) != st['before']
    cls, why = classify(case, rc, sig, err, changed, timed_out)
    return dict(id=case['id'], cls=cls, why=why, rc=rc, seconds=round(time.time() - st['t0'], 1))


def is_slow(case: dict) -> bool:
    "A case that trains, does the work asked, or reads real data: seconds each (the table-driven test runs it with "
    "POSENC_SLOW=1); a case's own `slow` overrides the rule."
    if case['slow'] is not None: return case['slow']
    return (case['data'] or case['expect'] != 'refuse' or getattr(case['setup'], 'trains', False)
            or case['hold'] is not None)


def preload():
    "Import every entry point once, in this process: the forked cases inherit the modules instead of importing them."
    import posenc_nb.cli, posenc_nb.experiments, posenc_nb.mlm, posenc_nb.long_text, posenc_nb.classify  # noqa
    import posenc_nb.length, posenc_nb.claims, posenc_nb.speed, posenc_nb.linear_lm  # noqa


def run_one(case: dict, w: Path, fx: Fixtures, cpu: int = 60, wall: int = 300) -> dict:
    "Set one case up, run it in its own forked child to its end, and classify it (the table-driven test's entry)."
    st, t0 = start(case, w, fx, cpu), time.time()
    while True:
        pid, status = os.waitpid(st['pid'], os.WNOHANG)
        if pid: return finish(st, status, False)
        if time.time() - t0 > wall:
            os.kill(st['pid'], signal.SIGKILL)
            os.waitpid(st['pid'], 0)
            return finish(st, None, True)
        time.sleep(0.05)

CLASSES = ('held', 'lost', 'mixed', 'hang', 'crash', 'unhelpful', 'setup failed')


def _last(path) -> dict:
    "id -> the last result of each case in a probe's JSON-lines file (a rerun's result replaces the first)."
    return {r['id']: r for r in map(json.loads, Path(path).read_text().splitlines()) if r}


def summary(path) -> int:
    rs = _last(path)
    for r in rs.values():
        if r['cls'] != 'held': print(f"{r['cls']:9s} {r['id']} -- {r.get('why', '')}")
    print(json.dumps({'cases': len(rs), **{k: sum(r['cls'] == k for r in rs.values()) for k in CLASSES},
                      'not run': len([c for c in all_cases() if c['id'] not in rs])}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog='tools/probe_cli.py', description=__doc__.split('\n')[0])
    ap.add_argument('--jobs', type=int, default=3, help='cases run at once (default 3)')
    ap.add_argument('--cpu', type=int, default=60, help='CPU seconds a case may use before it counts as a hang')
    ap.add_argument('--wall', type=int, default=900, help='wall-clock seconds before a case counts as a hang')
    ap.add_argument('--only', default='', help='run the cases whose id contains this')
    ap.add_argument('--out', default='probe.jsonl', help='one JSON line per case (appended as they finish)')
    ap.add_argument('--list', action='store_true', help='list the cases and exit')
    ap.add_argument('--skip-held', metavar='FILE', help="skip the cases that held in FILE (a probe's --out): a rerun")
    ap.add_argument('--summary', metavar='FILE', help="print the counts of FILE, each case's last result, and exit")
    args = ap.parse_args(argv)
    if args.summary: return summary(args.summary)
    held = {r['id'] for r in _last(args.skip_held).values() if r['cls'] == 'held'} if args.skip_held else set()
    cases = [c for c in all_cases() if args.only in c['id'] and c['id'] not in held]
    if args.list:
        for c in cases: print(c['id'])
        print(f'{len(cases)} cases')
        return 0
    if not os.environ.get('POSENC_DATA'): cases = [c for c in cases if not c['data']]
    preload()
    base = Path(tempfile.mkdtemp(prefix='probe-'))
    fx, todo, running, results = Fixtures(base / 'fixtures'), list(enumerate(cases)), {}, []
    with open(args.out, 'a') as log:
        while todo or running:
            while todo and len(running) < args.jobs:
                i, case = todo.pop(0)
                try: st = start(case, base / f'case{i:03d}', fx, args.cpu)
                except Exception as e:                                   # a setup that failed: the probe's fault
                    results.append(dict(id=case['id'], cls='setup failed', why=f'{type(e).__name__}: {e}'[:200]))
                    log.write(json.dumps(results[-1]) + '\n')
                    continue
                running[st['pid']] = st
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                for p, st in list(running.items()):
                    if time.time() - st['t0'] > args.wall:
                        os.kill(p, signal.SIGKILL)
                        os.waitpid(p, 0)
                        results.append(finish(running.pop(p), None, True))
                time.sleep(0.5)
                continue
            if pid in running: results.append(finish(running.pop(pid), status, False))
            else: continue
            log.write(json.dumps(results[-1]) + '\n')
            log.flush()
            r = results[-1]
            print(f"[{len(results)}/{len(cases)}] {r['cls']:9s} {r['id']}" + (f" -- {r['why']}" if r['why'] else ''),
                  flush=True)
    counts = {k: sum(r['cls'] == k for r in results) for k in CLASSES}
    print(json.dumps({'cases': len(results), **counts}))
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == '__main__': sys.exit(main())
