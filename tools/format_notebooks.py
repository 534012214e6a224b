"""Bring the notebooks' code to the house style (issue 39 step 6) with the smallest change that does it: one statement
per line and lines of at most 120 characters, leaving every other line as it was written.

`python tools/format_notebooks.py [NOTEBOOK ...]` (default: every nbs/*.ipynb) rewrites code cells in place:
1. statements chained with `;` go on lines of their own (a one-line `if x: a; b` becomes a block);
2. a long comment is wrapped, carrying its overflow into the comment lines that follow it;
3. a long one-line docstring becomes a wrapped triple-quoted one;
4. a long trailing comment moves onto its own lines above the line (docments reads a parameter's comment there too);
5. a one-line compound statement (`if x: raise ...`) that is too long becomes a block;
6. any other statement with a long line is formatted by `ruff format` on its own (long string literals first split
   into implicitly concatenated pieces at spaces), so the rest of the cell keeps its compact style.
Cells that do not parse as Python (IPython magics) and nbdev directive lines (`#|`) are left as they are. Run
`nbdev_export` afterwards; `ruff check posenc_nb` (the Makefile's `lint`) then checks the exported code."""
import ast, io, json, re, subprocess, sys, textwrap, tokenize
from pathlib import Path

WIDTH = 120
INDENT = '    '


def lead(line):
    "The leading whitespace of `line`."
    return line[:len(line) - len(line.lstrip())]


def char_col(line, byte_col):
    "The character column of a UTF-8 byte column in `line` (ast reports byte offsets)."
    return len(line.encode()[:byte_col].decode(errors='ignore'))


def parse(src):
    "The module of `src`, or None when it does not parse (IPython magics, shell escapes)."
    try:
        return ast.parse(src)
    except SyntaxError:
        return None


def bodies(tree):
    "Every statement list in `tree` with the node that owns it."
    for node in ast.walk(tree):
        for field in ('body', 'orelse', 'finalbody'):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield node, block


def header_body(lines, block):
    "True when the first statement of `block` shares its line with the header that opens the block (`if x: a`)."
    first = block[0]
    line = lines[first.lineno - 1]
    return line[:char_col(line, first.col_offset)].strip() != ''


def owner_indent(lines, owner, block):
    "Indentation of the header line of `block` (the owner's line, or the `else:`/`finally:` line above the block)."
    first = block[0]
    line = lines[first.lineno - 1]
    if header_body(lines, block):
        return lead(line) if not isinstance(owner, ast.Module) else ''
    return lead(lines[owner.lineno - 1])


def split_statements(src):
    "Put statements chained with `;` on lines of their own; a header line whose body is chained becomes a block."
    tree = parse(src)
    if tree is None or ';' not in src:
        return src
    lines = src.split('\n')
    edits = []   # (line index, char col where the cut starts, char col where the moved text starts, new indentation)
    for owner, block in bodies(tree):
        chained = any(b.lineno == a.end_lineno for a, b in zip(block, block[1:]))
        if not chained:
            continue
        on_header = header_body(lines, block)
        if on_header:
            indent = owner_indent(lines, owner, block) + INDENT
            first = block[0]
            line = lines[first.lineno - 1]
            col = char_col(line, first.col_offset)
            cut = len(line[:col].rstrip())
            edits.append((first.lineno - 1, cut, col, indent))
        else:
            indent = lead(lines[block[0].lineno - 1])
        for a, b in zip(block, block[1:]):
            if b.lineno != a.end_lineno:
                continue
            line = lines[b.lineno - 1]
            start = char_col(line, a.end_col_offset)
            col = char_col(line, b.col_offset)
            edits.append((b.lineno - 1, start, col, indent))
    for i, cut, col, indent in sorted(edits, reverse=True):
        line = lines[i]
        lines[i] = line[:cut].rstrip() + '\n' + indent + line[col:]
    out = '\n'.join(lines)
    new = parse(out)
    return out if new is not None and ast.dump(new) == ast.dump(tree) else src


def wrap_words(text, width):
    "Greedy word wrap of `text` into lines of at most `width` characters (a longer word stays whole)."
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or ['']


def comment_lines(src):
    "Line numbers (1-based) of lines that are only a comment, and of lines that end with one: {line: comment column}."
    full, trailing = {}, {}
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return full, trailing
    for t in toks:
        if t.type == tokenize.COMMENT:
            line = t.line.split('\n')[0] if t.line else ''
            (full if line[:t.start[1]].strip() == '' else trailing)[t.start[0]] = t.start[1]
    return full, trailing


def wrap_comment(lines, i):
    "Wrap the long comment line `i`, carrying the overflow into the next line when it continues the same comment."
    line = lines[i]
    m = re.match(r'(\s*#+\s?)(.*)', line)
    prefix, text = m.group(1), m.group(2)
    if text.startswith('|'):
        return False
    parts = wrap_words(text, WIDTH - len(prefix))
    if len(parts) == 1:
        return False
    nxt = lines[i + 1] if i + 1 < len(lines) else None
    nm = re.match(r'(\s*#+\s?)(.*)', nxt) if nxt is not None else None
    if nm and nm.group(1) == prefix and nm.group(2).strip() and not re.match(r'[-*•|]|\d+[.)]\s', nm.group(2)):
        lines[i:i + 2] = [prefix + parts[0], prefix + ' '.join(parts[1:]) + ' ' + nm.group(2)]
    else:
        lines[i:i + 1] = [prefix + p for p in parts]
    return True


def docstring_nodes(tree):
    "Docstring expressions of `tree`: the first string statement of the module, each class and each function."
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = getattr(first, 'value', None)
            if isinstance(first, ast.Expr) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield node, first


def fix_docstring(lines, tree, i):
    "Rewrap the docstring that holds line `i` when it is long: a triple-quoted string with its own indentation."
    for owner, doc in docstring_nodes(tree):
        if not doc.lineno - 1 <= i <= doc.end_lineno - 1:
            continue
        seg = '\n'.join(lines[doc.lineno - 1:doc.end_lineno])
        indent = lead(lines[doc.lineno - 1])
        body = seg.strip()
        m = re.match(r'^([rR]?)("""|\'\'\'|"|\')(.*)\2$', body, re.S)
        if not m or '\\ ' in m.group(3):
            return False
        prefix, quote, text = m.groups()
        if len(quote) == 1 and ('"""' in text or text.endswith('"')):
            return False
        close = quote if len(quote) == 3 else '"""'
        out = []
        for k, para in enumerate(text.split('\n')):
            first, rest = (indent + prefix + close, indent) if k == 0 else (lead(para), lead(para))
            content = para if k == 0 else para.strip()
            if len(first + content) <= WIDTH:
                out.append(first + content)
            else:
                out.extend(textwrap.wrap(content, WIDTH, initial_indent=first, subsequent_indent=rest,
                                         break_long_words=False, break_on_hyphens=False))
        if len(out[-1]) + 3 > WIDTH:
            out.append(indent)
        out[-1] += close
        lines[doc.lineno - 1:doc.end_lineno] = out
        return True
    return False


def def_line(tree, lineno):
    "True when line `lineno` opens a function or class definition (a comment above it would leave the definition)."
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.lineno == lineno
               for n in ast.walk(tree))


def wrap_from_import(lines, i):
    "Wrap a long `from x import a, b, c` line in parentheses, the names filled up to WIDTH and aligned."
    m = re.match(r'(\s*from\s+\S+\s+import\s+)([\w, ]+)$', lines[i])
    if not m:
        return False
    head, names = m.group(1) + '(', [n.strip() for n in m.group(2).split(',') if n.strip()]
    out, cur = [], head
    for k, n in enumerate(names):
        piece = n + (', ' if k < len(names) - 1 else ')')
        if len(cur) + len(piece.rstrip()) > WIDTH and cur.strip():
            out.append(cur.rstrip())
            cur = ' ' * len(head)
        cur += piece
    out.append(cur)
    lines[i:i + 1] = out
    return len(out) > 1


def split_import(lines, i):
    "Split a long `import a, b, c` line into several `import` lines of at most WIDTH characters."
    m = re.match(r'(\s*)import ([\w., ]+)$', lines[i])
    if not m:
        return False
    head = m.group(1) + 'import '
    names = [n.strip() for n in m.group(2).split(',')]
    out, cur = [], []
    for n in names:
        if cur and len(head + ', '.join(cur + [n])) > WIDTH:
            out.append(head + ', '.join(cur))
            cur = []
        cur.append(n)
    out.append(head + ', '.join(cur))
    lines[i:i + 1] = out
    return len(out) > 1


def move_trailing_comment(lines, i, col):
    "Move the trailing comment of line `i` onto wrapped comment lines above it, at that line's indentation."
    line = lines[i]
    if i and lines[i - 1].rstrip().endswith('\\'):
        return False
    code, comment = line[:col].rstrip(), line[col:]
    m = re.match(r'#+\s?', comment)
    text = comment[m.end():]
    indent = lead(line)
    above = [indent + '# ' + p for p in wrap_words(text, WIDTH - len(indent) - 2)]
    lines[i:i + 1] = above + [code]
    return True


def expand_header(lines, tree, i):
    "Turn the one-line compound statement on line `i` (`if x: raise ...`) into a block."
    for owner, block in bodies(tree):
        first = block[0]
        if first.lineno - 1 == i and header_body(lines, block):
            line = lines[i]
            col = char_col(line, first.col_offset)
            indent = owner_indent(lines, owner, block) + INDENT
            lines[i:i + 1] = [line[:col].rstrip(), indent + line[col:]]
            return True
    return False


def split_strings(seg, room):
    "Split string literals of `seg` longer than `room` into implicitly concatenated pieces at spaces."
    toks = list(tokenize.generate_tokens(io.StringIO(seg).readline))
    lines = seg.split('\n')
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    out, last = [], 0
    for t in toks:
        if t.type != tokenize.STRING or t.start[0] != t.end[0] or len(t.string) <= room:
            continue
        m = re.match(r'^([a-zA-Z]*)(["\'])(.*)\2$', t.string, re.S)
        if not m or 'b' in m.group(1).lower():
            continue
        prefix, q, body = m.groups()
        pieces = split_literal(body, room - len(prefix) - 2, 'f' in prefix.lower())
        if len(pieces) < 2:
            continue
        start = offsets[t.start[0] - 1] + t.start[1]
        end = offsets[t.end[0] - 1] + t.end[1]
        plain = prefix.replace('f', '').replace('F', '')
        parts = [(prefix if '{' in p else plain) + q + p + q for p in pieces]
        out.append(seg[last:start] + ' '.join(parts))
        last = end
    out.append(seg[last:])
    return ''.join(out)


def split_literal(body, room, fstring):
    "Cut a string literal's body at spaces into pieces of at most `room` characters; never inside `{}` of an f-string."
    pieces, cur, depth, best = [], 0, 0, None
    k = 0
    while k < len(body):
        ch = body[k]
        if fstring and ch == '{':
            depth += 1
        elif fstring and ch == '}':
            depth = max(0, depth - 1)
        elif ch == ' ' and depth == 0:
            best = k + 1
        if k - cur >= room and best and best > cur:
            pieces.append(body[cur:best])
            cur = best
            best = None
        k += 1
    pieces.append(body[cur:])
    return [p for p in pieces if p]


OPEN, CLOSE = '([{', ')]}'
KEYWORD_CUTS = ('and', 'or', 'if', 'else', 'for')


def string_cut(tok, line, cont):
    "A cut inside the one-line string token `tok` at its last space that keeps the first piece within WIDTH."
    m = re.match(r'^([a-zA-Z]*)(["\'])(.*)\2$', tok.string, re.S)
    if not m or 'b' in m.group(1).lower():
        return None
    prefix, q, body = m.groups()
    fstring, depth, best = 'f' in prefix.lower(), 0, None
    start = tok.start[1] + len(prefix) + 1
    for k, ch in enumerate(body):
        if fstring and ch == '{':
            depth += 1
        elif fstring and ch == '}':
            depth = max(0, depth - 1)
        elif ch == ' ' and depth == 0 and start + k + 2 <= WIDTH and k + 1 < len(body) and body[k - 1:k] != '\\':
            best = k + 1
    if best is None or start + best < cont + 20:
        return None
    head, tail = body[:best], body[best:]
    plain = prefix.replace('f', '').replace('F', '')
    first = line[:start] + head + q
    second = (prefix if '{' in tail else plain) + q + tail + q + line[tok.end[1]:]
    if not ('{' in head) and fstring:
        first = line[:tok.start[1]] + plain + line[tok.start[1] + len(prefix):start] + head + q
    return len(first), first, second


def fill_line(lines, i):
    """Break the long line `i` at the last comma, string or `and`/`or`/`if`/`for` inside brackets that keeps it within
    WIDTH; the rest goes on a continuation line aligned after the open bracket."""
    src = '\n'.join(lines)
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    line = lines[i]
    stack, cuts, prev = [], [], None
    for t in toks:
        if t.start[0] > i + 1:
            break
        on_line = t.start[0] == i + 1
        if on_line and stack:
            c = stack[-1]
            cont = c[1] + 1 if c[0] == i + 1 else len(lead(line))
            if t.type == tokenize.OP and t.string == ',' and t.end[1] <= WIDTH:
                cuts.append((t.end[1], line[:t.end[1]], line[t.end[1]:].lstrip(), cont))
            elif t.type == tokenize.NAME and t.string in KEYWORD_CUTS and t.start[1] <= WIDTH + 1:
                cuts.append((t.start[1], line[:t.start[1]].rstrip(), line[t.start[1]:], cont))
            elif t.type == tokenize.STRING and getattr(prev, 'type', 0) == tokenize.STRING and t.start[1] <= WIDTH + 1:
                cuts.append((t.start[1], line[:t.start[1]].rstrip(), line[t.start[1]:], cont))
            if t.type == tokenize.STRING and t.start[0] == t.end[0] and t.start[1] < WIDTH < t.end[1]:
                sc = string_cut(t, line, cont)
                if sc:
                    cuts.append((sc[0], sc[1], sc[2], cont))
        if t.type == tokenize.OP and t.string in OPEN:
            stack.append(t.start)
        elif t.type == tokenize.OP and t.string in CLOSE and stack:
            stack.pop()
        if t.type not in (tokenize.NL, tokenize.COMMENT):
            prev = t
    good = [c for c in cuts if len(c[1].rstrip()) <= WIDTH and c[3] < WIDTH - 30 and len(c[1].strip()) > 1
            and c[3] + len(c[2]) < len(line)]
    if not good:
        return False
    _, first, rest, cont = max(good, key=lambda c: len(c[1].rstrip()))
    lines[i:i + 1] = [first.rstrip(), ' ' * cont + rest.lstrip()]
    return True


def ruff_format(code, width):
    "`code` formatted by ruff at `width` (quotes as written), or None when ruff cannot format it."
    cmd = ['ruff', 'format', '--line-length', str(width), '--config', 'format.quote-style="preserve"',
           '--stdin-filename', 'cell.py', '-']
    r = subprocess.run(cmd, input=code, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def enclosing_statement(tree, lineno):
    "The innermost statement spanning line `lineno`, and whether `lineno` is in a compound statement's header."
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= lineno <= node.end_lineno:
            if best is None or node.lineno >= best.lineno and node.end_lineno <= best.end_lineno:
                best = node
    return best


def header_end(node):
    "The last line of a compound statement's header (the line before its body starts), or its end for a simple one."
    body = getattr(node, 'body', None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return body[0].lineno - 1
    return node.end_lineno


def format_statement(lines, tree, i):
    "Reformat, with ruff, the statement (or compound header) that holds the long line `i`."
    node = enclosing_statement(tree, i + 1)
    if node is None:
        return False
    first, last = node.lineno - 1, header_end(node) - 1
    if not first <= i <= last:
        return False
    decos = getattr(node, 'decorator_list', [])
    if decos:
        first = min(d.lineno for d in decos) - 1
    compound = last < node.end_lineno - 1
    indent = lead(lines[node.lineno - 1])
    seg = '\n'.join(lines[first:last + 1])
    seg = textwrap.dedent(seg) if all(line.startswith(indent) or not line.strip() for line in lines[first:last + 1]) \
        else None
    if seg is None:
        return False
    width = WIDTH - len(indent)
    seg = split_strings(seg, max(40, width - 12))
    code = seg + ('\n' + INDENT + 'pass\n' if compound else '\n')
    out = ruff_format(code, width)
    if out is None:
        return False
    out = out.rstrip('\n').split('\n')
    if compound:
        if out[-1].strip() != 'pass':
            return False
        out = out[:-1]
    new = [(indent + line) if line.strip() else '' for line in out]
    if new == lines[first:last + 1]:
        return False
    lines[first:last + 1] = new
    return True


def fix_long_lines(src, limit=400):
    "Fix long lines of `src` one at a time, from the top, until none is left that a rule above can fix."
    skip = set()
    for _ in range(limit):
        tree = parse(src)
        if tree is None:
            return src
        lines = src.split('\n')
        full, trailing = comment_lines(src)
        todo = [i for i, line in enumerate(lines) if len(line) > WIDTH and i not in skip]
        if not todo:
            return src
        i = todo[0]
        before, same_tree = src, True
        if i + 1 in full:
            done = wrap_comment(lines, i)
        elif fix_docstring(lines, tree, i):
            done = True
        elif i + 1 in trailing and len(lines[i][:trailing[i + 1]].rstrip()) <= WIDTH and not def_line(tree, i + 1):
            done = move_trailing_comment(lines, i, trailing[i + 1])
        elif wrap_from_import(lines, i):
            done = True
        elif split_import(lines, i):
            done, same_tree = True, False   # one import statement becomes several: the names are the same
        elif expand_header(lines, tree, i):
            done = True
        elif fill_line(lines, i):
            done = True
        else:
            done = format_statement(lines, tree, i)
        new = '\n'.join(lines)
        changed = same_tree and ast.dump(parse(new) or tree) != ast.dump(tree) and not docstring_change(tree, new)
        if not done or parse(new) is None or changed:
            skip.add(i)
            src = before
            continue
        src = new
    return src


def docstring_change(tree, new):
    "True when `new` differs from `tree` only in docstring whitespace and string-literal splits (same values)."
    a, b = parse(new), tree
    if a is None:
        return False
    return ast.dump(normalize(a)) == ast.dump(normalize(b))


def normalize(tree):
    "A copy of `tree` with every docstring's whitespace collapsed (wrapping a docstring changes only that)."
    tree = ast.parse(ast.unparse(tree))
    for _, doc in docstring_nodes(tree):
        doc.value.value = ' '.join(doc.value.value.split())
    return tree


def format_source(src):
    "The house style of one code cell's source (nbdev directive lines untouched: they are comments)."
    src = split_statements(src)
    return fix_long_lines(src)


def format_notebook(path):
    "Format every code cell of the notebook at `path` in place; returns the number of cells changed."
    nb = json.loads(Path(path).read_text())
    changed = 0
    for cell in nb['cells']:
        if cell['cell_type'] != 'code':
            continue
        src = ''.join(cell['source'])
        new = format_source(src)
        if new != src:
            cell['source'] = new.splitlines(keepends=True)
            changed += 1
    if changed:
        Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    return changed


if __name__ == '__main__':
    paths = sys.argv[1:] or sorted(str(p) for p in Path('nbs').glob('*.ipynb'))
    for p in paths:
        n = format_notebook(p)
        print(f'{p}: {n} cells changed')
