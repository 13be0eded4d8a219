// chat.js: the chat page of `amk serve`. Each turn posts the whole conversation to the
// same server's v1/chat/completions with "stream": true and shows the answer as its
// server-sent events arrive; Stop aborts the fetch, and the server cancels a generation
// whose client hung up.
// SPDX-License-Identifier: LGPL-2.1-or-later
'use strict';

const $ = (id) => document.getElementById(id);
const log = $('log');
const form = $('composer');
const promptBox = $('prompt');
const sendButton = $('send');
const stopButton = $('stop');
const statusLine = $('status');
const SETTINGS = ['system', 'temperature', 'top_p', 'max_tokens', 'seed'];
const NUMBERS = ['temperature', 'top_p', 'max_tokens', 'seed'];
const SAVED = 'amk-chat-settings';

let history = [];        // the conversation's messages, {role, content}, without the system prompt
let controller = null;   // the AbortController of the answer streaming now, else null
let modelId = null;

function setStatus(text, isError = false) {
  statusLine.textContent = text;
  statusLine.classList.toggle('error', isError);
}

function setBusy(busy) {
  sendButton.disabled = busy;
  stopButton.disabled = !busy;
}

// Keeps the newest text in view, unless the reader scrolled up to read earlier turns.
function scrollDown(force = false) {
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 48;
  if (force || atBottom)
    log.scrollTop = log.scrollHeight;
}

function addMessage(role, text) {
  const item = document.createElement('article');
  const who = document.createElement('div');
  const content = document.createElement('div');

  item.className = 'message ' + role;
  who.className = 'role';
  who.textContent = role === 'user' ? 'You' : 'Assistant';
  content.className = 'content';
  content.textContent = text;   // text, never markup: the model's output is not trusted
  item.append(who, content);
  log.append(item);
  scrollDown(true);
  return item;
}

function addNote(item, text) {
  const note = document.createElement('div');
  note.className = 'note';
  note.textContent = text;
  item.append(note);
}

function requestBody() {
  const messages = [];
  const system = $('system').value.trim();
  const body = { messages, stream: true, stream_options: { include_usage: true } };

  if (system)
    messages.push({ role: 'system', content: system });
  messages.push(...history);
  if (modelId)
    body.model = modelId;
  // an empty field leaves the server's default
  for (const name of NUMBERS) {
    const value = $(name).value.trim();
    if (value !== '')
      body[name] = Number(value);
  }
  return body;
}

// The message of an error answer: OpenAI's {"error": {"message"}} or the status line.
async function errorMessage(response) {
  try {
    const body = await response.json();
    if (body.error && body.error.message)
      return body.error.message;
  } catch (e) {
    // not JSON: the status says it
  }
  return `${response.status} ${response.statusText}`;
}

// The data of each server-sent event of @response, as the events complete.
async function* serverSentEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';

  for (;;) {
    const { value, done } = await reader.read();
    if (done)
      return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const data = buffer.slice(0, end).split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      buffer = buffer.slice(end + 2);
      if (data)
        yield data;
    }
  }
}

async function send(text) {
  const userItem = addMessage('user', text);
  const answerItem = addMessage('assistant', '');
  const content = answerItem.querySelector('.content');
  const reply = { role: 'assistant', content: '' };
  let finish = null;
  let usage = null;

  history.push({ role: 'user', content: text });
  answerItem.dataset.state = 'streaming';
  controller = new AbortController();
  setBusy(true);
  setStatus('Generating…');
  try {
    const response = await fetch('v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(requestBody()),
      signal: controller.signal,
    });
    if (!response.ok)
      throw new Error(await errorMessage(response));
    for await (const data of serverSentEvents(response)) {
      if (data === '[DONE]')
        break;
      const chunk = JSON.parse(data);
      if (chunk.error)
        throw new Error(chunk.error.message);
      if (chunk.usage)
        usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice)
        continue;
      if (choice.delta && choice.delta.content) {
        reply.content += choice.delta.content;
        content.textContent = reply.content;
        scrollDown();
      }
      if (choice.finish_reason)
        finish = choice.finish_reason;
    }
    if (finish === null)
      throw new Error('the answer ended before the server finished it');
    history.push(reply);
    answerItem.dataset.state = 'done';
    if (finish === 'length')
      addNote(answerItem, 'Cut at max tokens.');
    setStatus(usage ? `${usage.completion_tokens} tokens (prompt ${usage.prompt_tokens}).` : 'Done.');
  } catch (error) {
    const stopped = error.name === 'AbortError';

    if (!answerItem.isConnected)
      return;   // New chat took the turn away
    if (reply.content === '') {
      // no answer to keep: the turn goes back to the message box, to send again
      userItem.remove();
      answerItem.remove();
      history.pop();
      if (promptBox.value === '')
        promptBox.value = text;
    } else {
      // a partial answer stays in the conversation, as the model said it
      history.push(reply);
      answerItem.dataset.state = stopped ? 'stopped' : 'error';
      addNote(answerItem, stopped ? 'Stopped.' : `Error: ${error.message}`);
    }
    setStatus(stopped ? 'Stopped.' : `Error: ${error.message}`, !stopped);
  } finally {
    controller = null;
    setBusy(false);
    promptBox.focus();
  }
}

function stop() {
  if (controller)
    controller.abort();
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  const text = promptBox.value.trim();
  if (text === '' || controller)
    return;
  promptBox.value = '';
  send(text);
});

// Enter sends, Shift+Enter is a new line (and Enter that ends an input method's
// composition stays the input method's); Escape stops the answer.
promptBox.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  } else if (event.key === 'Escape') {
    stop();
  }
});

stopButton.addEventListener('click', stop);

$('new-chat').addEventListener('click', () => {
  stop();
  history = [];
  log.replaceChildren();
  setStatus('');
  promptBox.focus();
});

// The settings are kept in this browser from one visit to the next.
function loadSettings() {
  try {
    const saved = JSON.parse(localStorage.getItem(SAVED) || '{}');
    for (const name of SETTINGS)
      if (typeof saved[name] === 'string')
        $(name).value = saved[name];
  } catch (e) {
    // no storage (a private window) or a broken entry: the defaults
  }
}

function saveSettings() {
  const values = {};
  for (const name of SETTINGS)
    values[name] = $(name).value;
  try {
    localStorage.setItem(SAVED, JSON.stringify(values));
  } catch (e) {
    // no storage: the settings last as long as the page
  }
}

for (const name of SETTINGS)
  $(name).addEventListener('change', saveSettings);
loadSettings();
// beside the conversation there is room to show them
if (matchMedia('(min-width: 56rem)').matches)
  $('settings').open = true;

fetch('v1/models')
  .then((response) => response.json())
  .then((list) => {
    modelId = list.data[0].id;
    $('model').textContent = modelId;
  })
  .catch(() => setStatus('The server did not list its model.', true));
