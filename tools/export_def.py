"""Export one helper a notebook defined for its tests, so a split can move it (tools/split_notebook.py): the code cell
that starts with `PREFIX` is cut after its first statement, which becomes an `#| export` cell; the rest stays a test
cell right after it. `python tools/export_def.py NOTEBOOK PREFIX`"""
import ast, json, sys


def export_def(path, prefix):
    "Cut and export the first statement of the one code cell of `path` that starts with `prefix`."
    nb = json.load(open(path))
    hits = [k for k, c in enumerate(nb['cells'])
            if c['cell_type'] == 'code' and ''.join(c['source']).startswith(prefix)]
    if len(hits) != 1:
        sys.exit(f'{len(hits)} code cells start with {prefix!r}')
    cell = nb['cells'][hits[0]]
    lines = ''.join(cell['source']).split('\n')
    end = ast.parse('\n'.join(lines)).body[0].end_lineno
    head, tail = '\n'.join(lines[:end]), '\n'.join(lines[end:]).strip('\n')
    cell['source'] = ('#| export\n' + head).splitlines(keepends=True)
    if tail:
        rest = {'cell_type': 'code', 'execution_count': None, 'metadata': {}, 'outputs': [],
                'source': tail.splitlines(keepends=True)}
        nb['cells'].insert(hits[0] + 1, rest)
    open(path, 'w').write(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')


if __name__ == '__main__':
    export_def(sys.argv[1], sys.argv[2])
