# SPDX-License-Identifier: LGPL-2.1-or-later
"""The chat page of `amk serve` (GET /), used in headless Chromium as a person would.

Starts `amk serve --cpu --port 0` with the model of AMK_TEST_GGUF and Chromium with
--headless=new, and drives the page over the DevTools protocol (the websocket module:
Debian's python3-websocket). Exit 77, a skip, without the model, the serve command
(libsoup 3), Chromium or the websocket module. It checks:

- the page loads with no script error and shows the server's model;
- a question typed and sent with the Send button streams an answer that mentions Paris
  (greedy: temperature 0, seed 0, set in the settings panel);
- Shift+Enter makes a new line and Enter sends the second turn, whose request carries
  the whole conversation and the settings;
- Stop during a long answer: the page says it stopped, no more text comes, and the
  server answers the next request at once (the abandoned generation was cancelled); the
  page then carries on with the partial answer in its conversation;
- then a clean stop of the server on SIGTERM.

Usage: test-amk-chat-page.py PATH/TO/amk [--screenshot PNG]
  --screenshot saves the page after the second turn (docs/chat-page.png comes from it).
"""

import base64
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from amk_serve_process import Failure, Server, check

SKIP = 77
QUESTION = 'What is the capital of France?'


class Browser:
    """Headless Chromium with a fresh profile, and a DevTools connection to its page.

    Calls are synchronous: call() sends a command and reads until its answer, keeping
    the events that come meanwhile in self.events (script errors, console messages and
    the requests the page sends)."""

    def __init__(self, chromium):
        import websocket

        self.profile = tempfile.mkdtemp(prefix='amk-chat-page-')
        self.log = open(os.path.join(self.profile, 'chromium.log'), 'w+')
        args = [chromium, '--headless=new', '--remote-debugging-port=0',
                '--user-data-dir=' + self.profile, '--no-first-run', '--no-default-browser-check',
                '--no-proxy-server', '--disable-gpu', '--disable-extensions', '--disable-dev-shm-usage',
                '--window-size=960,760', 'about:blank']
        if os.geteuid() == 0:
            args.append('--no-sandbox')   # Chromium's sandbox refuses to run as root
        # its own process group: the renderers go with it at the end
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        port_file = os.path.join(self.profile, 'DevToolsActivePort')
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().count('\n') >= 1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Failure('Chromium did not open its DevTools port: ' + self.log_tail())
            time.sleep(0.1)
        port = int(open(port_file).read().split('\n')[0])
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
        conn.request('GET', '/json/list')
        pages = [t for t in json.loads(conn.getresponse().read()) if t['type'] == 'page']
        conn.close()
        check(pages, 'Chromium has no page')
        # no Origin header: Chromium refuses DevTools connections from other origins
        self.ws = websocket.create_connection(pages[0]['webSocketDebuggerUrl'], timeout=120,
                                              suppress_origin=True)
        self.next_id = 0
        self.events = []

    def log_tail(self):
        self.log.seek(0)
        return self.log.read()[-3000:]

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({'id': self.next_id, 'method': method, 'params': params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get('id') == self.next_id:
                check('error' not in message, f'{method}: {message.get("error")}')
                return message['result']
            if 'method' in message:
                self.events.append(message)

    def evaluate(self, expression):
        result = self.call('Runtime.evaluate', expression=expression, returnByValue=True,
                           awaitPromise=True)
        check('exceptionDetails' not in result,
              f'{expression}: {result.get("exceptionDetails", {}).get("exception", {}).get("description")}')
        return result['result'].get('value')

    def wait_for(self, expression, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            check(time.monotonic() < deadline, f'{what}: not within {timeout} s')
            time.sleep(0.1)

    def click(self, selector):
        """A mouse click at the middle of the element, checked to be the one on top there."""
        x, y, on_top = self.evaluate(f'''(() => {{
            const e = document.querySelector({json.dumps(selector)});
            e.scrollIntoView({{block: 'nearest'}});
            const r = e.getBoundingClientRect();
            const x = r.x + r.width / 2, y = r.y + r.height / 2;
            const hit = document.elementFromPoint(x, y);
            return [x, y, hit !== null && (hit === e || e.contains(hit))];
        }})()''')
        check(on_top, f'{selector} is hidden or covered')
        for kind in ('mousePressed', 'mouseReleased'):
            self.call('Input.dispatchMouseEvent', type=kind, x=x, y=y, button='left', clickCount=1)

    def fill(self, selector, text):
        """Replaces the field's text as typing would."""
        self.evaluate(f'(() => {{ const e = document.querySelector({json.dumps(selector)}); '
                      f'e.focus(); e.select(); }})()')
        self.call('Input.insertText', text=text)
        value = self.evaluate(f'document.querySelector({json.dumps(selector)}).value')
        check(value == text, f'{selector} holds {value!r} after typing {text!r}')

    def press_enter(self, shift=False):
        """Enter (Shift+Enter) in the focused element, with the text a keyboard sends."""
        keys = dict(key='Enter', code='Enter', windowsVirtualKeyCode=13, nativeVirtualKeyCode=13,
                    modifiers=8 if shift else 0)
        self.call('Input.dispatchKeyEvent', type='keyDown', text='\r', **keys)
        self.call('Input.dispatchKeyEvent', type='keyUp', **keys)

    def chat_requests(self):
        """The bodies the page posted to v1/chat/completions, in order."""
        bodies = []
        for event in self.events:
            if event['method'] != 'Network.requestWillBeSent':
                continue
            request = event['params']['request']
            if not request['url'].endswith('/v1/chat/completions'):
                continue
            data = request.get('postData')
            if data is None:
                data = self.call('Network.getRequestPostData',
                                 requestId=event['params']['requestId'])['postData']
            bodies.append(json.loads(data))
        return bodies

    def problems(self):
        """Script errors, console errors and failed loads that the page reported."""
        found = []
        for event in self.events:
            method, params = event['method'], event['params']
            if method == 'Runtime.exceptionThrown':
                details = params['exceptionDetails']
                found.append(details.get('exception', {}).get('description', details.get('text')))
            elif method == 'Runtime.consoleAPICalled' and params['type'] in ('error', 'assert'):
                found.append(' '.join(str(a.get('value', a.get('description'))) for a in params['args']))
            elif method == 'Log.entryAdded' and params['entry']['level'] == 'error':
                found.append(f'{params["entry"]["text"]} ({params["entry"].get("url", "")})')
        return found


# What the page shows: the messages' roles, states and texts, the status and buttons.
PAGE_STATE = '''(() => ({
    messages: [...document.querySelectorAll('#log .message')].map((m) => ({
        role: m.classList.contains('user') ? 'user' : 'assistant',
        state: m.dataset.state || null,
        text: m.querySelector('.content').textContent,
        note: m.querySelector('.note') ? m.querySelector('.note').textContent : null,
    })),
    status: document.getElementById('status').textContent,
    prompt: document.getElementById('prompt').value,
    sendEnabled: !document.getElementById('send').disabled,
    stopEnabled: !document.getElementById('stop').disabled,
}))()'''
LAST_ANSWER_STATE = "(document.querySelector('#log .message.assistant:last-child') || {dataset: {}}).dataset.state"


def wait_answer(page, timeout=120):
    """The last answer once it no longer streams, with the page around it."""
    page.wait_for(f"['done', 'stopped', 'error'].includes({LAST_ANSWER_STATE})", timeout,
                  'the answer to finish')
    state = page.evaluate(PAGE_STATE)
    return state['messages'][-1], state


def test_load(page, server):
    page.call('Emulation.setDeviceMetricsOverride', width=1100, height=720, deviceScaleFactor=1,
              mobile=False)
    page.call('Page.navigate', url=server.url)
    model = page.wait_for("document.readyState === 'complete' && document.getElementById('model').textContent",
                          30, 'the page to load and show the model')
    check(model == server.model_id, f'the page shows the model {model!r}, not {server.model_id!r}')
    check(page.evaluate("document.activeElement.id") == 'prompt', 'the message box does not have the focus')
    labels = page.evaluate('''[...document.querySelectorAll('textarea, input')]
        .filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id)''')
    check(labels == [], f'fields without a label: {labels}')
    print(f'ok: the page loads and shows the model {model}')


def test_first_turn(page):
    # open beside the conversation on a wide page, folded on a narrow one
    if not page.evaluate("document.getElementById('settings').open"):
        page.click('#settings summary')
    page.fill('#temperature', '0')
    page.fill('#seed', '0')
    page.fill('#max_tokens', '64')
    page.fill('#prompt', QUESTION)
    start = time.monotonic()
    page.click('#send')
    answer, state = wait_answer(page)
    text = answer['text']
    check(answer['state'] == 'done', f'the answer ended as {answer["state"]}: {state}')
    check([m['role'] for m in state['messages']] == ['user', 'assistant'] and
          state['messages'][0]['text'] == QUESTION, f'the conversation shows {state["messages"]}')
    check(text.strip() != '' and 'Paris' in text, f'the answer does not mention Paris: {text!r}')
    check(state['prompt'] == '' and state['sendEnabled'] and not state['stopEnabled'],
          f'after the answer: {state}')
    check(re.match(r'\d+ tokens', state['status']), f'status {state["status"]!r}')
    print(f'ok: Send streams {text!r} in {time.monotonic() - start:.1f} s ({state["status"]})')
    return text


def test_second_turn(page, first_answer):
    """Shift+Enter is a new line, Enter sends; the request has the whole conversation."""
    page.fill('#prompt', 'And of Germany?')
    page.press_enter(shift=True)
    page.call('Input.insertText', text='Answer in one sentence.')
    state = page.evaluate(PAGE_STATE)
    check(state['prompt'] == 'And of Germany?\nAnswer in one sentence.' and len(state['messages']) == 2,
          f'Shift+Enter: the box holds {state["prompt"]!r}, {len(state["messages"])} messages')
    page.press_enter()
    answer, state = wait_answer(page)
    check(answer['state'] == 'done' and answer['text'].strip(), f'second answer: {answer}')
    body = page.chat_requests()[-1]
    roles = [m['role'] for m in body['messages']]
    check(roles == ['user', 'assistant', 'user'], f'the second request has the roles {roles}')
    check(body['messages'][1]['content'] == first_answer and
          body['messages'][2]['content'] == 'And of Germany?\nAnswer in one sentence.',
          f'the second request has {body["messages"]}')
    check(body['stream'] is True and body['temperature'] == 0 and body['seed'] == 0 and
          body['max_tokens'] == 64 and body['top_p'] == 1, f'the request settings: {body}')
    print(f'ok: Enter sends the second turn with the whole conversation: {answer["text"]!r}')


def test_stop(page, server):
    """Stop during a long answer: the page stops, the server cancels and answers at once."""
    page.fill('#system', 'You are a storyteller.')
    page.fill('#max_tokens', '2000')
    page.fill('#prompt', 'Write a long story about a lighthouse keeper.')
    page.click('#send')
    page.wait_for(f"{LAST_ANSWER_STATE} === 'streaming' && "
                  "document.querySelector('#log .message.assistant:last-child .content').textContent.length >= 40",
                  120, 'the long answer to stream 40 characters')
    state = page.evaluate(PAGE_STATE)
    check(state['stopEnabled'] and not state['sendEnabled'], f'while streaming: {state}')
    page.click('#stop')
    answer, state = wait_answer(page, timeout=10)
    check(answer['state'] == 'stopped' and answer['note'] == 'Stopped.' and state['status'] == 'Stopped.',
          f'after Stop: {answer}, status {state["status"]!r}')
    check(state['sendEnabled'] and not state['stopEnabled'], f'after Stop: {state}')
    time.sleep(1.5)
    later = page.evaluate(PAGE_STATE)['messages'][-1]['text']
    check(later == answer['text'], 'text still came after Stop')
    body = page.chat_requests()[-1]
    check(body['messages'][0] == {'role': 'system', 'content': 'You are a storyteller.'} and
          body['max_tokens'] == 2000, f'the long request: {body}')

    # 2000 tokens take minutes on a CPU: an answer within seconds means they were cancelled
    start = time.monotonic()
    status, _, reply = server.post('/v1/chat/completions', {
        'messages': [{'role': 'user', 'content': QUESTION}], 'max_tokens': 4, 'temperature': 0})
    seconds = time.monotonic() - start
    check(status == 200 and reply['choices'][0]['message']['content'], f'after Stop: {status} {reply}')
    check(seconds < 20, f'the next request took {seconds:.1f} s: the stopped generation ran on')
    print(f'ok: Stop after {len(answer["text"])} characters; the server answered the next '
          f'request in {seconds:.1f} s')
    return answer['text']


def test_after_stop(page, partial):
    page.fill('#max_tokens', '16')
    page.fill('#prompt', QUESTION)
    page.press_enter()
    answer, state = wait_answer(page)
    check(answer['state'] == 'done' and answer['text'].strip(), f'after Stop, the page answers {answer}')
    body = page.chat_requests()[-1]
    roles = [m['role'] for m in body['messages']]
    check(roles == ['system', 'user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user'],
          f'the turn after Stop has the roles {roles}')
    check(body['messages'][6]['content'] == partial, 'the stopped answer is not in the conversation')
    print(f'ok: the page goes on after Stop, the partial answer kept: {answer["text"]!r}')


def main():
    args = sys.argv[1:]
    screenshot = None
    if len(args) == 3 and args[1] == '--screenshot':
        screenshot = args[2]
        args = args[:1]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    amk = args[0]
    model = os.environ.get('AMK_TEST_GGUF', '')
    if not model or not os.path.isfile(model):
        print('SKIP: set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)')
        return SKIP
    commands = subprocess.run([amk, '--help'], capture_output=True, text=True).stdout
    if not re.search(r'^\s+serve\s', commands, re.MULTILINE):
        print('SKIP: this amk has no serve command (built without libsoup 3)')
        return SKIP
    chromium = (os.environ.get('AMK_TEST_CHROMIUM') or shutil.which('chromium') or
                shutil.which('chromium-browser') or shutil.which('google-chrome'))
    if not chromium:
        print('SKIP: no Chromium (apt-get install chromium, or set AMK_TEST_CHROMIUM)')
        return SKIP
    if importlib.util.find_spec('websocket') is None:
        print('SKIP: no websocket module for this Python (apt-get install python3-websocket)')
        return SKIP

    start = time.monotonic()
    server = Server(amk, model)
    page = None
    try:
        page = Browser(chromium)
        for domain in ('Page', 'Runtime', 'Log', 'Network'):
            page.call(domain + '.enable')
        test_load(page, server)
        first = test_first_turn(page)
        test_second_turn(page, first)
        if screenshot:
            shot = page.call('Page.captureScreenshot', format='png')
            with open(screenshot, 'wb') as f:
                f.write(base64.b64decode(shot['data']))
            print(f'ok: screenshot in {screenshot}')
        partial = test_stop(page, server)
        test_after_stop(page, partial)
        problems = page.problems()
        check(not problems, f'the page reported errors: {problems}')
        server.proc.send_signal(signal.SIGTERM)
        status = server.proc.wait(timeout=30)
        check(status == 0, f'amk serve exited with {status} on SIGTERM')
    except Exception as e:
        print(f'FAIL: {e}', file=sys.stderr)
        if page is not None:
            try:
                print('--- the page:', json.dumps(page.evaluate(PAGE_STATE), indent=1), file=sys.stderr)
                print('--- its reports:', page.problems(), file=sys.stderr)
            except Exception:
                pass
            print('--- chromium:', page.log_tail(), file=sys.stderr)
        print('--- amk serve stderr:', '\n'.join(server.stderr_lines()), file=sys.stderr)
        raise
    finally:
        if page is not None:
            page.close()
        server.stop()
    print(f'ok: the chat page in {time.monotonic() - start:.1f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
