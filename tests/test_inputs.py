"""Inputs checked where they enter: corpora split on '\\n' only, parallel files of equal length, data-file errors
naming the file and row, sizes and seeds checked with one line, and `translate` capping a line before decoding."""
import gzip
from pathlib import Path
import pytest

TINY = ['--set', 'data_options={"n": 400}', '--set', 'test_max_sents=5', '--set', 'beam=1', '--set',
        'eval_bleu_sents=0', '--set', 'log_every=1', '--set', 'd_model=16', '--set', 'n_heads=2', '--set', 'd_ff=32',
        '--set', 'n_enc=1', '--set', 'n_dec=1']


def _gz(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, 'wt', encoding='utf-8') as f: f.write(text)


def test_parallel_lines_split_on_newline_only(tmp_path, monkeypatch):
    "A U+2028 or U+0085 inside an English line is data: pair 7 is still English 7 with German 7."
    en = [f'english {i}' for i in range(10)]
    de = [f'deutsch {i}' for i in range(10)]
    en[6] = 'english 6 with\u2028a line separator and\x85a next-line mark'
    _gz(tmp_path / 'multi30k' / 'train.en.gz', '\n'.join(en) + '\n')
    _gz(tmp_path / 'multi30k' / 'train.de.gz', '\n'.join(de) + '\n')
    monkeypatch.setenv('POSENC_DATA', str(tmp_path))
    from posenc_nb.data import load_parallel
    pairs = load_parallel('multi30k', 'train')
    assert len(pairs) == 10 and pairs[6] == (en[6], 'deutsch 6') and pairs[7] == ('english 7', 'deutsch 7')


def test_parallel_files_of_other_lengths_are_named(tmp_path, monkeypatch):
    _gz(tmp_path / 'multi30k' / 'train.en.gz', 'a\nb\nc\n')
    _gz(tmp_path / 'multi30k' / 'train.de.gz', 'a\nb\n')
    monkeypatch.setenv('POSENC_DATA', str(tmp_path))
    from posenc_nb.data import DataUnavailable, load_parallel
    with pytest.raises(DataUnavailable, match=r'train\.en\.gz has 3, .*train\.de\.gz has 2 lines'):
        load_parallel('multi30k', 'train')


@pytest.mark.parametrize('text,says', [('sentence\tlabel\nfine\t1\nno label here\n', "row 2 has no 'label' field"),
                                       ('sentence\tlabel\nfine\tpositive\n', "label 'positive' is not an integer"),
                                       ('sentence\tlabel\n', 'holds no rows')])
def test_labelled_file_errors_name_file_and_row(text, says, tmp_path, monkeypatch):
    f = tmp_path / 'glue' / 'sst2' / 'train.tsv'
    f.parent.mkdir(parents=True)
    f.write_text(text)
    monkeypatch.setenv('POSENC_DATA', str(tmp_path))
    from posenc_nb.data import DataUnavailable, load_labelled
    with pytest.raises(DataUnavailable, match=f'data file {f}.*{says}'):
        load_labelled('sst2', 'train')


def test_empty_text_corpus_is_named(tmp_path, monkeypatch):
    f = tmp_path / 'tinyshakespeare' / 'input.txt'
    f.parent.mkdir(parents=True)
    f.write_text('')
    monkeypatch.setenv('POSENC_DATA', str(tmp_path))
    from posenc_nb.data import DataUnavailable, load_text
    with pytest.raises(DataUnavailable, match=f'data file {f} holds 0 characters'):
        load_text('tinyshakespeare')


@pytest.mark.parametrize('kw,says', [(dict(d_model=0), 'd_model=0'), (dict(d_model=-64), 'd_model=-64'),
                                     (dict(d_model=64.5), 'd_model=64.5'), (dict(n_heads=0), 'n_heads=0'),
                                     (dict(max_len=-5), 'max_len=-5'), (dict(d_model=30), 'not divisible')])
def test_make_posenc_sizes(kw, says):
    "Every encoding, the same one line (no ZeroDivisionError, no encoding built on a width of 0)."
    from posenc_nb.core import list_posencs, make_posenc
    for name in list_posencs():
        with pytest.raises(ValueError, match=says):
            make_posenc(name, **{'d_model': 64, 'n_heads': 4, **kw})


@pytest.mark.parametrize('argv,says', [
    (['cli', 'compare', '--config', 'synthetic-tiny', '--encodings', 'rope', '--seeds', str(2 ** 66)], '--seeds'),
    (['length', 'run', '--seeds', str(2 ** 66), '--config', 'smoke'], '--seeds')])
def test_huge_seeds_are_one_line(argv, says, tmp_path, monkeypatch, call):
    monkeypatch.chdir(tmp_path)
    rc, last = call(argv + ['--out', str(tmp_path / 'o')])
    assert rc == 2 and says in last and 'Overflow' not in last, last


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
    from posenc_nb import cli
    d = tmp_path_factory.mktemp('tr') / 'run'
    assert cli.main(['train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY, '--out', str(d)]) == 0
    return d


@pytest.mark.parametrize('line', ['w' * 200_000, ' '.join(['x' * 200] * 999)])
def test_translate_caps_a_long_line_before_decoding(line, tiny_run, tmp_path, call):
    "200,000 characters without a space, or 999 words of 200 letters: refused at once, naming the line."
    (tmp_path / 'in.txt').write_text('a b\n' + line + '\n')
    rc, last = call(['cli', 'translate', '--ckpt', str(tiny_run), '--input', str(tmp_path / 'in.txt')])
    assert rc == 2 and 'line 2 has' in last and 'characters' in last, last
