# SPDX-License-Identifier: LGPL-2.1-or-later
"""What the `amk serve` tests share: their failure type and check(), and the server
process on a port the system picks (test-amk-serve.py, test-amk-chat-page.py)."""

import http.client
import json
import os
import queue
import re
import subprocess
import threading
import time

# the tests talk to 127.0.0.1 only, whatever proxy the environment names
os.environ['NO_PROXY'] = os.environ['no_proxy'] = '127.0.0.1,localhost'


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


class Server:
    """The `amk serve` process on the CPU executor: its URL, port and model id once it
    says it listens, its stderr kept."""

    def __init__(self, amk, model):
        self.proc = subprocess.Popen(
            [amk, 'serve', '--cpu', '--host', '127.0.0.1', '--port', '0', '--model', model],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr = []
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        try:
            line = self.lines.get(timeout=120)
        except queue.Empty:
            line = None
        found = re.search(r'(http://127\.0\.0\.1:(\d+)/) \(model (.+), (.+)\)$', line or '')
        if not (found and line.startswith('amk serve:') and found.group(4) == 'CPU executor'):
            self.stop()
            raise Failure(f'no listening line (got {line!r}); amk serve exited with '
                          f'{self.proc.returncode}: ' + '\n'.join(self.stderr_lines()))
        self.url, self.port, self.model_id = found.group(1), int(found.group(2)), found.group(3)

    def stop(self):
        """Kills the server if it still runs (a failed test leaves nothing behind)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        time.sleep(0.1)            # the reader threads take the last lines

    def stderr_lines(self):
        return [line for line in self.stderr if line is not None]

    @staticmethod
    def _read(stream, put):
        for line in stream:
            put(line.rstrip('\n'))
        put(None)

    def connection(self, timeout=120):
        return http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None):
        """(status, headers, parsed JSON or raw text) of one request on a new connection."""
        conn = self.connection()
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers or {'Content-Type': 'application/json'})
        response = conn.getresponse()
        data = response.read().decode()
        conn.close()
        try:
            data = json.loads(data)
        except ValueError:
            pass
        return response.status, response.headers, data

    def post(self, path, body):
        return self.request('POST', path, body)
