"""The run lists in tools/: every committed RoFormer record was made by a command of its scale's plan, and the plan's
filters and argument checks do what tools/gpu_session.sh relies on."""
import importlib.util, json
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('roformer_runs', ROOT / 'tools' / 'roformer_runs.py')
rr = importlib.util.module_from_spec(spec); spec.loader.exec_module(rr)


def plan_commands(config: str) -> set:
    "The command line each run of a scale's plan records (`python -m posenc_nb.MODULE ARGS`)."
    cfg = [] if config == 'cpu-tiny' else ['--config', config]
    return {' '.join(['python', '-m', f'posenc_nb.{mod}', *argv]) for g in rr.GROUPS for mod, argv in rr.GROUPS[g](rr.PLANS[config], cfg)}


@pytest.mark.parametrize('config', list(rr.PLANS))
def test_committed_records_come_from_the_plan(config):
    recs = [json.loads(f.read_text()) for d in ('roformer-mlm', 'roformer-glue', 'roformer-longtext', 'roformer-linear')
            for f in sorted((ROOT / 'results' / d).glob(f'*{config}_*.json'))]
    if config == 'cpu-tiny': assert len(recs) >= 100          # the committed CPU scale: every group, 3 seeds
    plan = plan_commands(config)                                  # a pre-training made for its fine-tuning ends in --weights
    missing = [r['command'] for r in recs if r['command'] not in plan and r['command'].removesuffix(' --weights') not in plan]
    assert not missing, missing[:3]


def test_filters_keep_one_lane():
    runs = [argv for g in ('mlm', 'longtext-pre') for _, argv in rr.GROUPS[g](rr.PLANS['gpu-small'], ['--config', 'gpu-small'])]
    kept = [a for a in runs if rr._keep(a, [0], ['rope'])]
    assert kept and all(a[a.index('--seed') + 1] == '0' and a[a.index('--encoding') + 1] == 'rope' for a in kept)
    assert len(kept) == 1 + 2                                   # the pre-training run, then its arms at 512 and 1,024 bytes


def test_group_names_after_encodings_are_refused(capsys):
    with pytest.raises(SystemExit) as e: rr.main(['--encodings', 'rope', 'mlm'])
    assert e.value.code == 2 and 'put the groups first' in capsys.readouterr().err


def test_pretraining_keeps_its_weights_when_fine_tuning_follows(monkeypatch):
    seen, threads = [], rr.torch.get_num_threads()
    class Module:                                                  # stands in for posenc_nb.mlm: notes each run instead of making it
        @staticmethod
        def main(argv): seen.append(argv); return 0
    monkeypatch.setattr(rr.importlib, 'import_module', lambda name: Module)
    try:
        rr.main(['mlm', '--config', 'gpu-small', '--seeds', '0', '--encodings', 'rope'])
        assert [a[0] for a in seen] == ['pretrain'] and '--weights' not in seen[0]
        seen.clear(); rr.main(['mlm', 'longtext-pre', '--config', 'gpu-small', '--seeds', '0', '--encodings', 'rope'])
        assert [a[0] for a in seen] == ['pretrain', 'finetune', 'finetune'] and seen[0][-1] == '--weights'
        # another budget: the fine-tuning starts from the pre-training of that budget (its own run folder)
        seen.clear(); rr.main(['mlm', 'longtext-pre', '--seeds', '0', '--encodings', 'rope', '--steps', '4'])
        assert ['--steps', '4'] == seen[0][seen[0].index('--steps'):][:2] and '--pretrain-steps' not in seen[0]
        assert all(a[a.index('--pretrain-steps') + 1] == '4' for a in seen[1:])
    finally: rr.torch.set_num_threads(threads)
