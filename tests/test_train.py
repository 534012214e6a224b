"Training harness: DDP replicas stay identical, kill-and-resume equals an uninterrupted run, checkpoints are written atomically."
import os, socket, time, warnings
from pathlib import Path
import pytest, torch
import torch.multiprocessing as mp
from posenc_nb import config as C, engine as E, train as T

# small and fast: a 1500-pair synthetic corpus, a handful of updates, cheap final evaluation
FAST = dict(data_options={'n': 1500}, eval_bleu_sents=10, test_max_sents=10, beam=2, log_every=2)


def _cfg(**kw):
    return C.config_from_name('synthetic-tiny', **{**FAST, **kw})


def _state(path):
    ck = torch.load(path, map_location='cpu', weights_only=False)
    return ck


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def _ddp_worker(rank, world, port, out, cfg):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    res = T.train(cfg, out / 'run', resume=False, device='cpu', progress=False)
    torch.save({k: v.detach().clone() for k, v in res['model'].state_dict().items()}, out / f'rank{rank}.pt')


def test_ddp_two_ranks_identical(tmp_path):
    "(a) two CPU processes (gloo): both replicas end with the same parameters, and only rank 0 wrote run files."
    cfg = _cfg(max_steps=6, ckpt_every=3, eval_every=6, dropout=0.1)
    mp.spawn(_ddp_worker, args=(2, _free_port(), tmp_path, cfg), nprocs=2, join=True)
    a, b = torch.load(tmp_path / 'rank0.pt'), torch.load(tmp_path / 'rank1.pt')
    assert a.keys() == b.keys()
    for k in a: assert torch.equal(a[k], b[k]), k
    ck = _state(tmp_path / 'run' / 'ckpt_0000006.pt')
    assert ck['world_size'] == 2 and len(ck['rng']) == 2 and len(ck['sampler']) == 2
    for k in a: assert torch.equal(ck['model'][k], a[k]), k      # the checkpoint holds the replicas' weights
    assert (tmp_path / 'run' / 'results.json').exists()


class Crash(RuntimeError): pass


def _crash_at(n):
    def f(step):
        if step == n: raise Crash(f"simulated kill at step {n}")
    return f


def test_kill_and_resume_equals_straight_run(tmp_path):
    "(b) N steps straight == N/2 steps, crash, resume, finish: bitwise-equal weights, optimizer and data position."
    torch.set_num_threads(1)
    cfg = _cfg(max_steps=8, ckpt_every=4, eval_every=4, dropout=0.1)     # dropout: the RNG state must be restored too
    st = T.train(cfg, tmp_path / 'straight', resume=False, progress=False)
    with pytest.raises(Crash):
        T.train(cfg, tmp_path / 'killed', resume=False, progress=False, on_step=_crash_at(6))   # dies after ckpt 4
    assert [p.name for p in E._ckpt_paths(tmp_path / 'killed')] == ['ckpt_0000004.pt']
    t0 = time.time(); rk = T.train(cfg, tmp_path / 'killed', resume=True, progress=False); own = time.time() - t0
    assert (st['segments'], rk['segments']) == (1, 2)
    assert rk['wall_time_s'] > own          # the record counts the killed process's time up to its checkpoint as well
    a, b = _state(tmp_path / 'straight' / 'ckpt_0000008.pt'), _state(tmp_path / 'killed' / 'ckpt_0000008.pt')
    for k in a['model']: assert torch.equal(a['model'][k], b['model'][k]), k
    for sa, sb in zip(a['optimizer']['state'].values(), b['optimizer']['state'].values()):
        assert torch.equal(sa['exp_avg'], sb['exp_avg']) and torch.equal(sa['exp_avg_sq'], sb['exp_avg_sq'])
    assert a['sampler'] == b['sampler'] and a['scheduler'] == b['scheduler']
    # the log of the resumed run has no duplicated steps and the same losses
    la = [(r['step'], r['loss']) for r in E.read_metrics(tmp_path / 'straight') if 'loss' in r]
    lb = [(r['step'], r['loss']) for r in E.read_metrics(tmp_path / 'killed') if 'loss' in r]
    assert la == lb


def test_atomic_save_survives_crash(tmp_path, monkeypatch):
    "(c) a crash in the middle of torch.save leaves the previous checkpoint intact and no temp file behind."
    path = tmp_path / 'ckpt.pt'
    E.atomic_save({'step': 1, 'w': torch.arange(5)}, path)
    real_save = torch.save
    def dying_save(obj, f, *a, **k):
        f.write(b'PK\x03\x04 half a checkpoint')
        raise Crash("killed during save")
    monkeypatch.setattr(torch, 'save', dying_save)
    with pytest.raises(Crash): E.atomic_save({'step': 2, 'w': torch.zeros(5)}, path)
    monkeypatch.setattr(torch, 'save', real_save)
    ck = torch.load(path)
    assert ck['step'] == 1 and torch.equal(ck['w'], torch.arange(5))
    assert [p.name for p in tmp_path.iterdir()] == ['ckpt.pt']


def test_resume_after_crash_during_checkpoint(tmp_path, monkeypatch):
    "A run killed while writing its second checkpoint resumes from the first; stray temp files and a corrupt file are skipped."
    torch.set_num_threads(1)
    cfg = _cfg(max_steps=4, ckpt_every=2, eval_every=4, eval_bleu_sents=0)
    real_save = torch.save
    calls = []
    def save_once_then_die(obj, f, *a, **k):
        calls.append(1)
        if len(calls) == 2: f.write(b'garbage'); raise Crash("killed during the second checkpoint")
        return real_save(obj, f, *a, **k)
    monkeypatch.setattr(torch, 'save', save_once_then_die)
    with pytest.raises(Crash): T.train(cfg, tmp_path / 'r', resume=False, progress=False)
    monkeypatch.setattr(torch, 'save', real_save)
    run = tmp_path / 'r'
    assert [p.name for p in E._ckpt_paths(run)] == ['ckpt_0000002.pt']
    (run / 'ckpt_0000003.pt.abc.tmp').write_bytes(b'left by a SIGKILL')       # what a hard kill mid-write leaves
    (run / 'ckpt_0000003.pt').write_bytes(b'not a zip')                         # and a corrupt newer file
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        res = T.train(cfg, run, resume=True, progress=False)
    assert any('unreadable checkpoint' in str(x.message) for x in w)
    assert res['step'] == 4 and not list(run.glob('*.tmp'))
    m, tok, c = T.load_checkpoint(run / 'ckpt_0000004.pt')
    assert c == cfg and tok.vocab_size == m.cfg.tgt_vocab


def test_wall_clock_budget(tmp_path):
    "max_minutes alone ends a run (checked after every update), and the step count is recorded."
    torch.set_num_threads(1)
    cfg = _cfg(max_steps=None, max_minutes=1e-4, log_every=2, eval_every=100, ckpt_every=100, eval_bleu_sents=0)
    res = T.train(cfg, tmp_path / 'b', resume=False, progress=False)
    assert res['step'] == 1 and res['train_time_s'] > 1e-4 * 60     # the first update already spends 6 ms
    assert [p.name for p in E._ckpt_paths(tmp_path / 'b')] == ['ckpt_0000001.pt']
    # resuming a run whose budget is spent adds no update: it only repeats the final evaluation
    again = T.train(cfg, tmp_path / 'b', resume=True, progress=False)
    assert again['step'] == 1 and again['train_time_s'] == pytest.approx(res['train_time_s'], abs=0.5)
    assert again['bleu'] == pytest.approx(res['bleu']) and again['valid_loss'] == pytest.approx(res['valid_loss'])
    assert [p.name for p in E._ckpt_paths(tmp_path / 'b')] == ['ckpt_0000001.pt']


def test_progress_flag_controls_the_bar(tmp_path, capsys):
    "`progress=False` draws no tqdm bar (it used to be overwritten inside `train`); `progress=True` draws one on stderr."
    torch.set_num_threads(1)
    cfg = _cfg(max_steps=2, eval_every=2, ckpt_every=2, eval_bleu_sents=0)
    T.train(cfg, tmp_path / 'quiet', resume=False, progress=False)
    assert '2/2' not in capsys.readouterr().err
    T.train(cfg, tmp_path / 'loud', resume=False, progress=True)
    assert '2/2' in capsys.readouterr().err


# Reference of the training loop before it was split into the engine (issue 13), produced at commit 0f82c83 with
#   git worktree add ../old 0f82c83 && cd ../old && python -m posenc_nb.cli train --config synthetic-tiny \
#       --max-steps 50 --out X --threads 1 --fresh --json
# (metrics.jsonl of that run: train loss 6.420913267671392 at step 25 and 5.448477155808407 at step 50).
OLD_LOOP_VALID_LOSS_50 = 5.291858883848919
OLD_LOOP_TRAIN_LOSSES_50 = [(25, 6.420913267671392), (50, 5.448477155808407)]


def test_engine_reproduces_old_loop(tmp_path, capsys):
    "`posenc train --config synthetic-tiny --max-steps 50` gives the old loop's validation loss and losses, and draws no bar."
    import json
    from posenc_nb.cli import main
    assert main(['train', '--config', 'synthetic-tiny', '--max-steps', '50', '--out', str(tmp_path / 'r'), '--threads', '1',
                 '--fresh', '--json']) == 0
    out, err = capsys.readouterr()
    res = json.loads(out.strip().splitlines()[-1])
    assert res['valid_loss'] == pytest.approx(OLD_LOOP_VALID_LOSS_50, rel=1e-6, abs=0)
    losses = [(r['step'], r['loss']) for r in E.read_metrics(tmp_path / 'r') if 'loss' in r]
    assert [s for s, _ in losses] == [s for s, _ in OLD_LOOP_TRAIN_LOSSES_50]
    assert [l for _, l in losses] == pytest.approx([l for _, l in OLD_LOOP_TRAIN_LOSSES_50], rel=1e-6, abs=0)
    assert '50/50' not in err and 'it/s' not in err


def _committed_configs():
    root = Path(__file__).resolve().parents[1] / 'results'
    return sorted(root.glob('**/config.json')) + [p for p in sorted(root.glob('**/results.json'))]


def test_every_committed_config_loads():
    "Every TrainConfig record committed under results/ (flat layout of earlier versions) loads, field for field."
    import json
    paths = _committed_configs()
    assert len(paths) > 50, paths      # the experiment folders hold one config.json per run
    for p in paths:
        d = json.loads(p.read_text())
        d = d.get('config', d) if p.name == 'results.json' else d
        cfg = C.TrainConfig.from_dict(d)
        d = C.upgrade_config_dict(d)                                  # older field names (a stream provider's own) -> today's
        for k, v in d.items():
            got = getattr(cfg, k)
            assert (list(got) if isinstance(got, tuple) else got) == v, (p, k)
        assert C.TrainConfig.from_dict(__import__('dataclasses').asdict(cfg)) == cfg, p     # and the nested layout round-trips
        assert set(d) <= set(cfg.flat_dict()), p                # flat_dict (experiments' config.json) writes the same layout


def test_flat_overrides_reach_the_model(tmp_path):
    "`config_from_name(name, d_model=...)`, `posenc train --set d_model=...` and checkpoints all see the nested model."
    from posenc_nb.args import make_config
    c = C.config_from_name('synthetic-tiny', d_model=32, n_heads=2)
    assert (c.model.d_model, c.model.n_heads, C.CONFIGS['synthetic-tiny'].d_model) == (32, 2, 64)
    c2 = make_config('synthetic-tiny', ['d_model=66', 'n_heads=6', 'dropout=0.2'])
    assert (c2.model.d_model, c2.model.n_heads, c2.model.dropout) == (66, 6, 0.2)
    torch.set_num_threads(1)
    cfg = _cfg(max_steps=1, eval_every=1, ckpt_every=1, eval_bleu_sents=0, d_model=32, n_heads=2)
    T.train(cfg, tmp_path / 'r', resume=False, progress=False)
    m, _, c3 = T.load_checkpoint(E._ckpt_paths(tmp_path / 'r')[-1])
    assert c3 == cfg and m.cfg.d_model == 32 and _state(E._ckpt_paths(tmp_path / 'r')[-1])['config']['model']['d_model'] == 32


def test_checkpoint_with_flat_config_loads(tmp_path):
    "A checkpoint written before TrainConfig nested ModelConfig (flat `config` dict) still loads and resumes."
    import dataclasses
    torch.set_num_threads(1)
    cfg = _cfg(max_steps=2, eval_every=2, ckpt_every=1, keep_ckpts=2, eval_bleu_sents=0)
    T.train(cfg, tmp_path / 'r', resume=False, progress=False)
    for p in E._ckpt_paths(tmp_path / 'r'):
        ck = _state(p); d = ck['config']; m = d.pop('model')
        ck['config'] = {**d, **{k: m[k] for k in C._MODEL_FIELDS}}         # the old flat layout
        assert 'model' not in ck['config'] and 'd_model' in ck['config']
        E.atomic_save(ck, p)
    _, _, c = T.load_checkpoint(E._ckpt_paths(tmp_path / 'r')[-1])
    assert c == cfg
    res = T.train(dataclasses.replace(cfg, max_steps=3), tmp_path / 'r', resume=True, progress=False)
    assert res['step'] == 3 and res['segments'] == 2


TOY_WORDS = ['ka', 'lo', 'mi', 'nu', 'pe', 'ro']

def _toy_reverse(split, n=300):
    "A toy corpus: the target is the source backwards; its own split seeds its sentences."
    import random
    rng = random.Random(f'{split}-{n}')
    sents = [[rng.choice(TOY_WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n if split == 'train' else 30)]
    return [(' '.join(s), ' '.join(reversed(s))) for s in sents]


@pytest.mark.parametrize('tokenizer', [None, 'corpus'])
def test_registered_corpus_trains_with_its_own_tokenizer(tmp_path, tokenizer):
    "A corpus registered with its own tokenizer trains with it: not a BPE, not the synthetic corpus's word list."
    from posenc_nb.data import DATASETS, SPECIALS, ParallelSpec, register_dataset, word_tokenizer
    register_dataset(ParallelSpec('toy-reverse', generate=_toy_reverse, tokenizer=lambda: word_tokenizer(TOY_WORDS)))
    try:
        cfg = C.config_from_name('synthetic-tiny', data='toy-reverse', tokenizer=tokenizer, data_options={'n': 200},
                                 max_steps=3, eval_every=3, eval_bleu_sents=5, test_max_sents=5, beam=1)
        res = T.train(cfg, tmp_path / 'run', progress=False)
        tok = res['tokenizer']
        assert tok.kind == 'word' and tok.vocab_size == len(SPECIALS) + len(TOY_WORDS)
        assert tok.encode('ka ro') == [len(SPECIALS) + TOY_WORDS.index('ka'), len(SPECIALS) + TOY_WORDS.index('ro')]
        assert res['model'].cfg.src_vocab == tok.vocab_size == res['model'].cfg.tgt_vocab
        _, saved, saved_cfg = T.load_checkpoint(E._ckpt_paths(tmp_path / 'run')[-1])
        assert saved.to_str() == tok.to_str() and saved_cfg.data == 'toy-reverse'
        bpe = T.train(C.config_from_name(cfg, tokenizer='bpe', vocab_size=300), tmp_path / 'bpe', progress=False)
        assert bpe['tokenizer'].kind == 'bpe'                  # asked for: the BPE, trained on the toy corpus
    finally: del DATASETS['toy-reverse']


def test_a_corpus_without_a_tokenizer_refuses_corpus():
    with pytest.raises(ValueError, match="data='multi30k' declares no tokenizer"):
        T._make_tokenizer(C.config_from_name('multi30k-base', tokenizer='corpus'), ['a b'])
