"""Write the support matrix of `posenc_nb.hf.use_encoding` over the installed transformers (every model type with a
causal-LM class, tiny random models, every encoding a Hugging Face forward can feed: exact or refused, why) to
results/hf/support_matrix.json, with its provenance. Notebook 17_hf and the README show it; tests/test_hf.py recomputes
every row and compares it with this record when the installed transformers is the record's version.
Run from a clean checkout: `nice -n 5 env OMP_NUM_THREADS=1 python tools/hf_matrix.py` (minutes on one CPU thread)."""
import json
import torch
import transformers
from posenc_nb.hf_matrix import support_matrix
from posenc_nb.utils import atomic_write, provenance, results_dir

if __name__ == '__main__':
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    record = dict(what='posenc_nb.hf.support_matrix(): per model type, each encoding exact or refused (why)',
                  transformers_version=transformers.__version__,
                  provenance=provenance(command='python tools/hf_matrix.py'), rows=support_matrix())
    path = results_dir() / 'hf' / 'support_matrix.json'
    atomic_write(path, json.dumps(record, indent=1, ensure_ascii=False) + '\n')
    print(f"{path}: {sum('cells' in r for r in record['rows'])} model types in the matrix")
