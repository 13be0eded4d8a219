# SPDX-License-Identifier: LGPL-2.1-or-later
"""`amk serve`, the OpenAI-compatible HTTP server, driven as a client would.

Starts `amk serve --cpu --port 0` with the model of AMK_TEST_GGUF (exit 77, a skip,
without it or without the serve command, which needs libsoup 3) and checks: /v1/models;
a greedy completion (through curl) against `amk generate` on the same prompt; a streamed
chat completion as raw server-sent events and through the `openai` client (skipped with
a note when it is not installed); stop strings, whole and streamed; two clients at once;
clients that go away mid-stream or while waiting, and the next request still answered;
the errors (malformed JSON, a wrong type, a prompt beyond the context, a body over
1 MiB, an unknown path, a wrong method); the chat page's files at / (their types); then
a clean stop on SIGTERM.

Usage: test-amk-serve.py PATH/TO/amk
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from amk_serve_process import Failure, Server, check

SKIP = 77
PROMPT = 'The capital of France is'


def check_error(result, status, what, param=None, code=None):
    got_status, _, body = result
    check(got_status == status, f'{what}: status {got_status}, not {status}: {body!r}')
    check(isinstance(body, dict) and isinstance(body.get('error'), dict),
          f'{what}: no error object: {body!r}')
    error = body['error']
    check(set(error) == {'message', 'type', 'param', 'code'}, f'{what}: error keys {sorted(error)}')
    check(isinstance(error['message'], str) and error['message'], f'{what}: no message')
    check(error['type'] == ('invalid_request_error' if status < 500 else 'server_error'),
          f'{what}: type {error["type"]}')
    if param is not None:
        check(error['param'] == param, f'{what}: param {error["param"]!r}, not {param!r}')
    if code is not None:
        check(error['code'] == code, f'{what}: code {error["code"]!r}, not {code!r}')
    return error


def sse_events(raw):
    """The data of each server-sent event of a text/event-stream body."""
    events = []
    for block in raw.split('\n\n'):
        if not block.strip():
            continue
        check(block.startswith('data: '), f'an event is not "data: ...": {block!r}')
        events.append(block[len('data: '):])
    return events


def stream(server, path, body):
    """The JSON chunks of a streamed answer, checked to end with data: [DONE]."""
    conn = server.connection()
    conn.request('POST', path, body=json.dumps(body), headers={'Content-Type': 'application/json'})
    response = conn.getresponse()
    check(response.status == 200, f'{path} stream: status {response.status}')
    check(response.headers.get('Content-Type', '').startswith('text/event-stream'),
          f'{path} stream: Content-Type {response.headers.get("Content-Type")}')
    events = sse_events(response.read().decode())
    conn.close()
    check(events and events[-1] == '[DONE]', f'{path} stream does not end with [DONE]: {events[-2:]}')
    return [json.loads(e) for e in events[:-1]]


def test_models(server):
    status, _, body = server.request('GET', '/v1/models')
    check(status == 200 and body['object'] == 'list', f'/v1/models: {status} {body!r}')
    check(len(body['data']) == 1 and body['data'][0]['object'] == 'model', f'/v1/models: {body!r}')
    model_id = body['data'][0]['id']
    check(model_id == os.path.basename(os.environ['AMK_TEST_GGUF']).removesuffix('.gguf'),
          f'model id {model_id!r}')
    status, _, body = server.request('GET', '/v1/models/' + model_id)
    check(status == 200 and body['id'] == model_id, f'/v1/models/ID: {status} {body!r}')
    check_error(server.request('GET', '/v1/models/no-such-model'), 404, 'an unknown model',
                code='model_not_found')
    return model_id


def test_completion(server, amk, model_id):
    """A greedy completion through curl is the text `amk generate` gives."""
    body = json.dumps({'model': model_id, 'prompt': PROMPT, 'max_tokens': 8, 'temperature': 0})
    if shutil.which('curl'):
        out = subprocess.run(['curl', '-sS', '--noproxy', '*', '-H', 'Content-Type: application/json',
                              '-d', body, server.url + 'v1/completions'],
                             capture_output=True, text=True, timeout=120)
        check(out.returncode == 0, f'curl failed: {out.stderr}')
        answer = json.loads(out.stdout)
    else:
        print('note: no curl; the completion goes through http.client')
        answer = server.post('/v1/completions', json.loads(body))[2]
    check(answer.get('object') == 'text_completion' and answer['id'].startswith('cmpl-'), f'{answer!r}')
    choice = answer['choices'][0]
    usage = answer['usage']
    # --quiet prints just the generated pieces, then a newline
    generated = subprocess.run([amk, 'generate', '--cpu', '--model', os.environ['AMK_TEST_GGUF'],
                                '-n', '8', '--quiet', PROMPT], capture_output=True, text=True, timeout=120)
    check(generated.returncode == 0, f'amk generate failed: {generated.stderr}')
    expected = generated.stdout.removesuffix('\n')
    check(choice['text'] == expected, f'served {choice["text"]!r}, amk generate {expected!r}')
    check(usage['completion_tokens'] == 8 and choice['finish_reason'] == 'length', f'{answer!r}')
    check(usage['prompt_tokens'] > 0 and usage['total_tokens'] == usage['prompt_tokens'] + 8, f'{usage!r}')
    print(f'ok: completion {choice["text"]!r} (as amk generate), usage {usage}')


def test_chat_stream(server, model_id):
    """A streamed chat completion: raw events, a role first, deltas, a finish, [DONE]."""
    messages = [{'role': 'system', 'content': 'You are brief.'},
                {'role': 'user', 'content': 'What is the capital of France?'}]
    request = {'model': model_id, 'messages': messages, 'max_tokens': 8, 'temperature': 0, 'stream': True,
               'stream_options': {'include_usage': True}}
    chunks = stream(server, '/v1/chat/completions', request)
    check(all(c['object'] == 'chat.completion.chunk' for c in chunks), 'chunk objects')
    check(len({c['id'] for c in chunks}) == 1, 'chunks of one answer with several ids')
    check(chunks[0]['choices'][0]['delta'].get('role') == 'assistant', f'first chunk {chunks[0]!r}')
    usage = chunks[-1]
    check(usage['choices'] == [] and usage['usage']['completion_tokens'] >= 1, f'usage chunk {usage!r}')
    finish = chunks[-2]['choices'][0]
    check(finish['finish_reason'] in ('stop', 'length') and finish['delta'] == {}, f'finish chunk {finish!r}')
    text = ''.join(c['choices'][0]['delta'].get('content', '') for c in chunks[:-1])
    check(text.strip() != '', 'the streamed deltas are empty')
    print(f'ok: chat stream of {len(chunks)} chunks: {text!r}')
    return text


def test_openai_client(server, model_id, streamed_text):
    try:
        import openai
    except ImportError:
        print('SKIP part: the openai package is not installed for this Python '
              '(pip install --break-system-packages openai); its checks are left out')
        return
    client = openai.OpenAI(base_url=server.url + 'v1', api_key='none', max_retries=0, timeout=120)
    check([m.id for m in client.models.list()] == [model_id], 'openai: models.list')
    messages = [{'role': 'system', 'content': 'You are brief.'},
                {'role': 'user', 'content': 'What is the capital of France?'}]
    answer = client.chat.completions.create(model=model_id, messages=messages, max_tokens=8, temperature=0)
    text = answer.choices[0].message.content
    check(answer.choices[0].message.role == 'assistant' and text, f'openai: {answer!r}')
    check(answer.usage.completion_tokens >= 1 and answer.usage.prompt_tokens > 0,
          f'openai usage {answer.usage!r}')
    deltas = [c.choices[0].delta.content or '' for c in
              client.chat.completions.create(model=model_id, messages=messages, max_tokens=8,
                                             temperature=0, stream=True)
              if c.choices]
    check(''.join(deltas) == text == streamed_text,
          f'openai: streamed {"".join(deltas)!r}, whole {text!r}, raw stream {streamed_text!r}')
    try:
        client.chat.completions.create(model=model_id, messages=messages, temperature=5)
        raise Failure('openai: temperature 5 was accepted')
    except openai.BadRequestError as e:
        check(e.status_code == 400 and 'temperature' in str(e), f'openai: {e}')
    print(f'ok: openai client {openai.__version__}: {text!r}, streamed alike')


def test_stop(server):
    """A stop string ends the text before it, whole and streamed (where the text that may
    start a stop string is held back until it is known not to)."""
    request = {'prompt': '1, 2, 3, 4, 5,', 'max_tokens': 12, 'temperature': 0}
    status, _, plain = server.post('/v1/completions', request)
    check(status == 200, f'{plain!r}')
    full = plain['choices'][0]['text']
    check(' 8' in full, f'the greedy text {full!r} has no " 8" to stop at')
    status, _, body = server.post('/v1/completions', dict(request, stop=[' 8', 'never']))
    text = body['choices'][0]['text']
    check(status == 200 and text == full[:full.index(' 8')], f'stop " 8": {text!r} from {full!r}')
    check(body['choices'][0]['finish_reason'] == 'stop', f'finish_reason {body["choices"][0]!r}')
    chunks = stream(server, '/v1/completions', dict(request, stop=' 8', stream=True))
    streamed = ''.join(c['choices'][0]['text'] for c in chunks)
    check(streamed == text, f'streamed with stop: {streamed!r}, not {text!r}')
    check(chunks[-1]['choices'][0]['finish_reason'] == 'stop', f'{chunks[-1]!r}')
    print(f'ok: stop " 8": {text!r} (of {full!r}), streamed alike')


def test_concurrent(server):
    results = {}

    def ask(key, prompt):
        results[key] = server.post('/v1/completions', {'prompt': prompt, 'max_tokens': 4, 'temperature': 0})

    threads = [threading.Thread(target=ask, args=(k, p))
               for k, p in (('a', PROMPT), ('b', 'Once upon a time'))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for key in 'ab':
        status, _, body = results.get(key, (None, None, None))
        check(status == 200 and body['usage']['completion_tokens'] >= 1,
              f'concurrent {key}: {status} {body!r}')
    print(f'ok: two clients at once: {results["a"][2]["choices"][0]["text"]!r}, '
          f'{results["b"][2]["choices"][0]["text"]!r}')


def raw_request(server, body):
    sock = socket.create_connection(('127.0.0.1', server.port), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
                 b'Content-Length: %d\r\n\r\n' % len(data) + data)
    return sock


def test_disconnect(server):
    """A client gone mid-stream, and one gone while waiting, cancel their generations:
    the next request is answered at once, not after their hundreds of tokens."""
    sock = raw_request(server, {'prompt': 'Once upon a time', 'max_tokens': 500, 'stream': True,
                                'temperature': 0})
    received = b''
    while received.count(b'data: ') < 2:
        more = sock.recv(4096)
        check(more, 'the stream ended early')
        received += more
    check(received.startswith(b'HTTP/1.1 200'), f'stream start: {received[:80]!r}')
    sock.close()
    waiting = raw_request(server, {'prompt': 'Once upon a time', 'max_tokens': 500})
    time.sleep(0.3)
    waiting.close()
    start = time.monotonic()
    status, _, body = server.post('/v1/completions', {'prompt': PROMPT, 'max_tokens': 2, 'temperature': 0})
    seconds = time.monotonic() - start
    check(status == 200 and body['choices'][0]['text'], f'after the disconnects: {status} {body!r}')
    check(seconds < 20, f'the next request took {seconds:.1f} s: the abandoned generations ran on')
    print(f'ok: clients gone mid-stream and while waiting; the next answered in {seconds:.1f} s')


def test_page(server):
    """The chat page and its files, compiled into amk (test-amk-chat-page.py uses it in
    a browser): each with its type and the policy that keeps the page to this server."""
    types = {'/': 'text/html', '/chat.js': 'text/javascript', '/chat.css': 'text/css',
             '/favicon.svg': 'image/svg+xml'}
    for path, content_type in types.items():
        status, headers, body = server.request('GET', path)
        check(status == 200 and headers.get('Content-Type', '').startswith(content_type),
              f'GET {path}: {status} {headers.get("Content-Type")}')
        check(headers.get('Content-Security-Policy', '').startswith("default-src 'self'"),
              f'GET {path}: Content-Security-Policy {headers.get("Content-Security-Policy")}')
        check(isinstance(body, str) and len(body) > 100, f'GET {path}: {len(body)} bytes')
    status, _, page = server.request('GET', '/')
    check('<script src="chat.js"' in page and 'href="chat.css"' in page, 'the page does not load its files')
    status, headers, body = server.request('HEAD', '/')
    check(status == 200 and body == '' and headers.get('Content-Type', '').startswith('text/html'),
          f'HEAD /: {status} {body!r}')
    check_error(server.request('GET', '/index.html'), 404, 'a file the page does not have')
    print('ok: the chat page at / with chat.js, chat.css and favicon.svg')


def test_errors(server):
    check_error(server.request('POST', '/v1/completions', body='{"prompt": "x",'), 400, 'malformed JSON',
                code='invalid_json')
    check_error(server.request('POST', '/v1/chat/completions', body='[1, 2]'), 400, 'a JSON array body')
    check_error(server.request('POST', '/v1/completions', body='[' * 100000), 400, 'deep nesting')
    check_error(server.post('/v1/completions', {'prompt': 42}), 400, 'a number prompt', param='prompt',
                code='invalid_type')
    check_error(server.post('/v1/completions', {'prompt': 'x', 'max_tokens': 'ten'}), 400,
                'a string max_tokens', param='max_tokens', code='invalid_type')
    check_error(server.post('/v1/completions', {'prompt': 'x', 'top_p': 0}), 400, 'top_p 0', param='top_p')
    check_error(server.post('/v1/completions', {'prompt': 'x', 'stop': [1]}), 400, 'a number stop',
                param='stop')
    check_error(server.post('/v1/completions', {'max_tokens': 4}), 400, 'no prompt', param='prompt',
                code='missing_required_parameter')
    check_error(server.post('/v1/chat/completions', {'messages': [{'role': 'user'}]}), 400,
                'a message without content', param='messages[0].content')
    check_error(server.post('/v1/chat/completions', {'messages': 'hi'}), 400, 'messages as a string',
                param='messages')
    error = check_error(server.post('/v1/completions', {'prompt': 'hello ' * 3000}), 400,
                        'a prompt beyond the context', code='context_length_exceeded')
    check('2048' in error['message'], f'the context limit is not in {error["message"]!r}')
    check_error(server.request('POST', '/v1/completions', body='{"prompt": "' + 'a' * (2 << 20) + '"}'), 413,
                'a 2 MiB body', code='request_too_large')
    check_error(server.request('GET', '/v1/nowhere'), 404, 'an unknown path')
    result = server.request('POST', '/')
    check_error(result, 405, 'POST on the chat page')
    check(result[1].get('Allow') == 'GET', f'405 without Allow: GET: {result[1]}')
    result = server.request('GET', '/v1/chat/completions')
    check_error(result, 405, 'GET on chat completions')
    check(result[1].get('Allow') == 'POST', f'405 without Allow: POST: {result[1]}')
    check_error(server.request('DELETE', '/v1/models'), 405, 'DELETE on models')
    status, _, _ = server.request('GET', '/v1/models')
    check(status == 200, 'the server does not answer after the errors')
    print('ok: 400 (malformed JSON, types, values, context), 413, 404, 405 as OpenAI error objects')


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    amk = sys.argv[1]
    model = os.environ.get('AMK_TEST_GGUF', '')
    if not model or not os.path.isfile(model):
        print('SKIP: set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)')
        return SKIP
    commands = subprocess.run([amk, '--help'], capture_output=True, text=True).stdout
    if not re.search(r'^\s+serve\s', commands, re.MULTILINE):
        print('SKIP: this amk has no serve command (built without libsoup 3)')
        return SKIP

    start = time.monotonic()
    server = Server(amk, model)
    try:
        model_id = test_models(server)
        test_completion(server, amk, model_id)
        streamed = test_chat_stream(server, model_id)
        test_openai_client(server, model_id, streamed)
        test_stop(server)
        test_concurrent(server)
        test_disconnect(server)
        test_page(server)
        test_errors(server)
        server.proc.send_signal(signal.SIGTERM)
        status = server.proc.wait(timeout=30)
        check(status == 0, f'amk serve exited with {status} on SIGTERM')
        time.sleep(0.1)
        noise = [line for line in server.stderr_lines() if 'CRITICAL' in line or 'WARNING' in line]
        check(not noise, f'amk serve warned: {noise}')
    except Exception as e:
        server.stop()
        print(f'FAIL: {e}', file=sys.stderr)
        print('--- amk serve stderr:', file=sys.stderr)
        print('\n'.join(server.stderr_lines()), file=sys.stderr)
        raise
    print(f'ok: amk serve in {time.monotonic() - start:.1f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
