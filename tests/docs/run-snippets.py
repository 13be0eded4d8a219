# SPDX-License-Identifier: LGPL-2.1-or-later
"""Runs every code snippet of README.md and docs/*.md, so the docs stay true.

Usage: run-snippets.py SRCDIR [VAPIDIR]   (meson runs it as the test 'docs-snippets')

Each fenced block is handled by its tag:
- ```python runs with this Python, ```js with gjs ($AMK_DOCS_GJS), ```vala is compiled
  with valac ($AMK_DOCS_VALAC, --pkg amk-glib-1.0 from VAPIDIR, the C flags from the
  build's uninstalled amk-glib-1.0.pc on PKG_CONFIG_PATH) and then run.
- ```sh and untagged blocks are not run: the sh blocks build, install, fetch the model
  or need a GPU, the untagged ones are diagrams and command lines.
- Any other tag, and any block, is left out only when the line directly above its fence
  says why: <!-- snippet: not run (reason) -->. A tag with no runner and no such line
  fails, so a new language cannot slip past the rule.

Many snippets are fragments, so a small preamble per language supplies what they take
for granted (the constants below): the imports, `path` (the model of $AMK_TEST_GGUF),
a main loop `loop` for JS, a `batch` with its helpers for the Batching fragments, and
for Vala a main () around statements. A snippet that needs the model (it names `path`,
a .gguf file or `batch`) is skipped without AMK_TEST_GGUF. Snippets run in a scratch
folder that holds a link to the model under its own name, so a snippet may open it as
'SmolLM2-135M-Instruct.Q4_1.gguf'.

A snippet fails when it exits non-zero or writes anything to stderr (where the snippets
report the errors they catch). Exit status: 1 if any block failed, 77 if every block
that could run was skipped, else 0.
"""

import os
import re
import subprocess
import sys
import tempfile

RUN_LANGS = ('python', 'js', 'vala')
NOT_RUN_LANGS = {'sh': 'sh: builds, installs or needs a GPU', '': 'not code'}
MARKER_TEXT = '<!-- snippet: not run (reason) -->'
MARKER = re.compile(r'^<!--\s*snippet:\s*not run\s*\((.*)\)\s*-->\s*$')
FENCE = re.compile(r'^```\s*([\w+-]*)\s*$')
TIMEOUT = 120
SHOWN_LINES = 12                   # of a passing snippet's output; all of a failing one's

# What a fragment takes for granted, per language. Python's imports are harmless when
# the snippet has its own; the others are only added when the snippet lacks them.
PY_BASE = '''import os
import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, GLib
path = os.environ.get('AMK_TEST_GGUF', '')
'''
PY_BATCH = '''batch = Amk.Batch.new(Amk.Model.new_from_file(path, None), None, 4)
prompts = {}
def add(prompt, max_tokens): prompts[batch.add(prompt, max_tokens)] = (prompt, max_tokens)
def on_token(b, seq, token_id, piece): print(f'[{seq}] {piece!r}')
'''
JS_IMPORTS = "imports.gi.versions.Amk = '1.0';\nconst {Amk, GLib} = imports.gi;\n"
JS_PATH = "const path = GLib.getenv('AMK_TEST_GGUF') || '';\n"
JS_LOOP = 'const loop = new GLib.MainLoop(null, false);\n'
JS_BATCH = '''const batch = Amk.Batch.new(Amk.Model.new_from_file(path, null), null, 4);
const prompts = new Map();
const add = (prompt, maxTokens) => prompts.set(batch.add(prompt, maxTokens), maxTokens);
'''
VALA_PATH = 'string path = Environment.get_variable ("AMK_TEST_GGUF") ?? "";\n'
VALA_BATCH = '''var batch = new Amk.Batch (new Amk.Model.from_file (path), null, 4);
var max_tokens = new HashTable<uint, uint> (direct_hash, direct_equal);
'''
VALA_MAIN = '''int main () {
%s    try {
%s
    } catch (Error e) {
        printerr ("%%s\\n", e.message);
        return 1;
    }
    return 0;
}
'''


# Comments are left out before looking for names ("critical path" is no `path`).
COMMENTS = {'python': r'#[^\n]*', 'js': r'//[^\n]*|/\*.*?\*/', 'vala': r'//[^\n]*|/\*.*?\*/'}


def bare(lang, code):
    return re.sub(COMMENTS[lang], '', code, flags=re.S)


def uses(name, code):
    return re.search(r'\b%s\b' % name, code) is not None


def declares(name, code):
    return re.search(r'\b(const|let|var)\s+%s\b' % name, code) is not None


def needs_model(code):
    return re.search(r'\bpath\b|\.gguf\b|\bbatch\b', code) is not None


def needs_batch(code):
    # A Batching fragment: it uses a batch that it does not make.
    return uses('batch', code) and not re.search(r'Batch\.new|new Amk\.Batch', code)


def python_source(code):
    return PY_BASE + (PY_BATCH if needs_batch(bare('python', code)) else '') + code


def js_source(full):
    code = bare('js', full)
    pre = '' if 'imports.gi' in code else JS_IMPORTS
    if (uses('path', code) or needs_batch(code)) and not declares('path', code):
        pre += JS_PATH
    if needs_batch(code):
        pre += JS_BATCH
    post = ''
    if uses('loop', code) and not declares('loop', code):
        pre += JS_LOOP
        post = '\nloop.run();\n'
    return pre + full + post


def indent(text, n):
    return ''.join(' ' * n + line for line in text.splitlines(True))


def vala_source(full):
    code = bare('vala', full)
    if re.search(r'\bmain\s*\(', code):
        return full
    pre = VALA_PATH if uses('path', code) or needs_batch(code) else ''
    body = (VALA_BATCH if needs_batch(code) else '') + full
    return VALA_MAIN % (indent(pre, 4), indent(body, 8).rstrip('\n'))


def blocks(md_path):
    """Yields (line of the opening fence, tag, marker reason or None, code)."""
    with open(md_path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    k = 0
    while k < len(lines):
        m = FENCE.match(lines[k])
        if not m:
            k += 1
            continue
        start, tag = k, m.group(1)
        marker = MARKER.match(lines[k - 1]) if k > 0 else None
        k += 1
        while k < len(lines) and lines[k].rstrip() != '```':
            k += 1
        code = '\n'.join(lines[start + 1:k]) + '\n'
        yield start + 1, tag, marker.group(1) if marker else None, code
        k += 1


def run(cmd, cwd, stderr_fails=True):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return f'timed out after {TIMEOUT} s', ''
    if p.returncode != 0:
        why = f'exit {p.returncode}' if p.returncode > 0 else f'killed by signal {-p.returncode}'
        return why, p.stdout + p.stderr
    if p.stderr and stderr_fails:
        return 'wrote to stderr', p.stdout + p.stderr
    return None, p.stdout


def run_block(lang, code, name, work, vapidir):
    """Returns (None or why it failed, output) for one snippet."""
    src = os.path.join(work, name)
    if lang == 'python':
        with open(src + '.py', 'w') as f:
            f.write(python_source(code))
        return run([sys.executable, src + '.py'], work)
    if lang == 'js':
        with open(src + '.js', 'w') as f:
            f.write(js_source(code))
        return run([os.environ['AMK_DOCS_GJS'], src + '.js'], work)
    with open(src + '.vala', 'w') as f:
        f.write(vala_source(code))
    why, out = run([os.environ['AMK_DOCS_VALAC'], '--vapidir', vapidir, '--pkg', 'amk-glib-1.0',
                    '--pkg', 'gio-2.0', '-X', '-w', '-o', src, src + '.vala'], work,
                   stderr_fails=False)       # its warnings, not the snippet's
    if why:
        return 'valac: ' + why, out
    return run([src], work)


def missing_tool(lang, vapidir):
    if lang == 'js' and not os.environ.get('AMK_DOCS_GJS'):
        return 'no gjs'
    if lang == 'vala' and not (os.environ.get('AMK_DOCS_VALAC') and vapidir):
        return 'no valac or no vapi in this build'
    return None


def show(out, limit):
    lines = out.rstrip('\n').split('\n')
    for line in lines[:limit]:
        print('    | ' + line)
    if limit is not None and len(lines) > limit:
        print(f'    | ... ({len(lines) - limit} more lines)')
    sys.stdout.flush()


def main():
    srcdir = sys.argv[1]
    vapidir = sys.argv[2] if len(sys.argv) > 2 else ''
    model = os.environ.get('AMK_TEST_GGUF', '')
    model = model if os.path.isfile(model) else ''      # as the examples: no file, no model
    docs = os.path.join(srcdir, 'docs')
    files = ['README.md'] + sorted('docs/' + n for n in os.listdir(docs) if n.endswith('.md'))
    counts = {'ok': 0, 'skipped': 0, 'FAILED': 0, 'not run': 0}

    with tempfile.TemporaryDirectory(prefix='amk-docs-') as work:
        if model:
            os.symlink(os.path.abspath(model), os.path.join(work, os.path.basename(model)))
        for md in files:
            for line, tag, marker, code in blocks(os.path.join(srcdir, md)):
                out = ''
                if marker is not None:
                    status, note = 'not run', marker
                elif tag in NOT_RUN_LANGS:
                    status, note = 'not run', NOT_RUN_LANGS[tag]
                elif tag not in RUN_LANGS:
                    status, note = 'FAILED', f'no runner for {tag}: mark it {MARKER_TEXT}'
                elif missing_tool(tag, vapidir):
                    status, note = 'skipped', missing_tool(tag, vapidir)
                elif needs_model(bare(tag, code)) and not model:
                    status, note = 'skipped', 'needs AMK_TEST_GGUF'
                else:
                    name = re.sub(r'\W', '-', md) + f'-{line}'
                    why, out = run_block(tag, code, name, work, vapidir)
                    status, note = ('FAILED', why) if why else ('ok', '')
                counts[status] += 1
                note = f' ({note})' if note else ''
                print(f'{md}:{line}: {tag or "text"}: {status}{note}', flush=True)
                if out:                    # what it printed, to read beside the docs
                    show(out, None if status == 'FAILED' else SHOWN_LINES)

    print(', '.join(f'{n} {s}' for s, n in counts.items()))
    if counts['FAILED']:
        return 1
    return 77 if counts['ok'] == 0 else 0


if __name__ == '__main__':
    sys.exit(main())
