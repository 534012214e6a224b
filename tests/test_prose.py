"""The pages' prose checked against the code, the records and itself: facts that were once wrong stay right.

Fast: it reads the notebooks' sources and the committed ledger; nothing is executed."""
import ast, inspect, json, math, re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs'


def cells(stem, kind='markdown'):
    "The sources of one notebook's cells of a kind."
    nb = json.loads((NBS / f'{stem}.ipynb').read_text())
    return [''.join(c['source']) for c in nb['cells'] if c['cell_type'] == kind]


def section(stem, heading):
    "The markdown of one section (from its heading to the next heading of any level)."
    text = '\n'.join(cells(stem))
    m = re.search(rf'^#+\s+{re.escape(heading)}\s*$(.*?)(?=^#+\s|\Z)', text, re.M | re.S)
    assert m, f'{stem}: no section {heading!r}'
    return m.group(1)


def summary(stem):
    "The `> summary` line under a notebook's H1."
    for s in cells(stem):
        m = re.search(r'^#\s+.+$\n+>\s*(.+)$', s, re.M)
        if m: return m.group(1)
    raise AssertionError(f'{stem}: no summary line')


# Words about how a page came to be written (a session, a lent machine, a deadline) rather than about the package.
PROCESS_WORDS = re.compile(r"\b(this|the|that|each|one) session\b|session's deadline|could not be read|waits for a GPU"
                           r"|\blent\b|while this (section|page|notebook) was written", re.I)
PAGES = sorted(p.stem for p in NBS.glob('*.ipynb'))


@pytest.mark.parametrize('stem', PAGES)
def test_pages_speak_of_the_package_not_of_their_writing(stem):
    hits = [m.group(0) for s in cells(stem) + cells(stem, 'code') for m in PROCESS_WORDS.finditer(s)]
    assert not hits, f'{stem}: {hits}'


def test_process_words_are_caught():
    "The rule itself: the phrases it exists for are found, the tool's name and ordinary prose are not."
    for bad in ('its value could not be read in this session', 'ran on a lent H200 GPU',
                'the `mlm-control` lane waits for a GPU', "before the session's deadline"):
        assert PROCESS_WORDS.search(bad), bad
    for fine in ('`tools/gpu_session.sh full OUT`', 'a session of training', 'the test split was read'):
        assert not PROCESS_WORDS.search(fine), fine


def test_code_llama_is_not_credited_with_the_ntk_rule():
    "Code Llama set its base to 10^6 by hand; the NTK rule (bloc97) is a formula in the factor."
    beyond = section('10_rope', 'Beyond the trained length: PI, NTK, YaRN, xPos')
    ntk = next(line for line in beyond.splitlines() if '**NTK-aware scaling**' in line)
    credit = re.search(r'\(bloc97 2023[^)]*\)', ntk)
    assert credit and 'Code Llama' not in credit.group(0)
    assert re.search(r'Code Llama.*?sets \$b = 10\^6\$ by hand', ntk), 'say what Code Llama did: b = 10^6, set by hand'
    from posenc_nb.rotary import scaled_inv_freq
    rule = scaled_inv_freq(128, scaling='ntk', factor=4.0)[1].item() ** (-64)
    assert 40_000 < rule < 42_000                                     # "about 41,000", as the page says


def test_rotary_summary_names_the_default_angle_precision():
    from posenc_nb.rotary import RotaryCache
    import torch
    default = inspect.signature(RotaryCache).parameters['angle_dtype'].default
    name = {torch.float64: 'fp64', torch.float32: 'fp32'}[default]
    s = summary('10_rotary')
    assert re.search(rf'\b{name}\b by default', s), f'10_rotary summary: {s!r} (the default is {name})'


def test_rotary_points_to_where_the_extension_rules_are_derived():
    "10_rotary has no derivation of PI/NTK/YaRN; it must point to 10_rope's section, which must exist."
    text = '\n'.join(cells('10_rotary'))
    assert 'own section below' not in text
    assert re.search(r'derived in `10_rope`, section \*Beyond the trained length\*', text)
    section('10_rope', 'Beyond the trained length: PI, NTK, YaRN, xPos')


def test_sinusoidal_wavelengths_as_computed():
    "The longest wavelength is 2*pi*b^((d-2)/d), short of 2*pi*b: the prose and the docs say so, the code agrees."
    text = '\n'.join(cells('01_baselines'))
    assert 'from $2\\pi$ to $2\\pi b$.' not in text and '2\\pi b^{(d-2)/d}' in text
    from posenc_nb.baselines import sinusoidal_table, _inv_freq
    src = inspect.getsource(sinusoidal_table)
    assert 'longest wavelength is 2*pi*base' not in src
    for d in (4, 64):
        w = 2 * math.pi / _inv_freq(d, 10000.)
        assert math.isclose(w.max().item(), 2 * math.pi * 10000. ** ((d - 2) / d), rel_tol=1e-9)
        assert w.max() < 2e4 * math.pi


def test_decay_sum_keeps_index_and_imaginary_unit_apart():
    "In the long-term decay bound the pairs are indexed by k and i is only the imaginary unit (written \\mathrm{i})."
    text = section('10_rope', 'Long-term decay')
    assert not re.search(r'e\^\{i\(', text), 'write the imaginary unit as \\mathrm{i}'
    assert not re.search(r'_\{?i\b|_i\b|\\sum_\{?i', text.replace('\\mathrm{i}', '')), 'index the pairs by k'
    assert '\\mathrm{i}' in text


def test_delta_is_not_attributed_to_the_paper_unchecked():
    text = '\n'.join(cells('11_dynamics'))
    assert not re.search(r"paper uses \$\\Delta|the paper's spacing", text)


WORDS = {'two': 2, 'three': 3, 'four': 4, 'five': 5}


def bottom_line_experiments(stem):
    "The experiments a page's `BottomLine(...)` reports, from its source."
    for s in cells(stem, 'code'):
        if 'BottomLine(' not in s: continue
        for node in ast.walk(ast.parse('\n'.join(l for l in s.splitlines() if not l.startswith('#|')))):
            if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'BottomLine':
                for kw in node.keywords:
                    if kw.arg == 'experiments': return ast.literal_eval(kw.value)
    return []


@pytest.mark.parametrize('stem', [s for s in PAGES if re.match(r'(2\d|30)_', s)])
def test_seed_counts_stated_are_the_ledgers(stem):
    "A page's summary that says 'N seeds each' must have N seeds in every arm of every ledger entry it reports."
    m = re.search(r'\b(two|three|four|five|\d+) seeds each\b', summary(stem))
    if not m: return
    n = WORDS.get(m.group(1)) or int(m.group(1))
    exps = set(bottom_line_experiments(stem))
    ledger = json.loads((ROOT / 'results' / 'claims.json').read_text())
    short = {(e['id'], arm): len(a.get('records', [])) for e in ledger if e['experiment'] in exps
             for arm, a in e['arms'].items() if len(a.get('records', [])) != n}
    assert not short, f'{stem} says {m.group(0)}; the ledger has {short}'
