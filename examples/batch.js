// batch.js: several prompts generated together (greedy) on the CPU executor, one launch
// per step for all of them, stepped here one step at a time: a fourth prompt joins
// between two steps, once the first sequence has finished.
// Run from a build: GI_TYPELIB_PATH=$B/introspection LD_LIBRARY_PATH=$B/amk-glib \
//   gjs batch.js SmolLM2-135M-Instruct.Q4_1.gguf
// Without a model file (ARGV[0], else $AMK_TEST_GGUF) it exits with 77 ("skipped").
// SPDX-License-Identifier: LGPL-2.1-or-later
imports.gi.versions.Amk = '1.0';
const {Amk, GLib} = imports.gi;
const System = imports.system;

const path = ARGV[0] || GLib.getenv('AMK_TEST_GGUF') || '';
if (!GLib.file_test(path, GLib.FileTest.IS_REGULAR)) {
    printerr('usage: gjs batch.js MODEL.gguf  (or set AMK_TEST_GGUF)');
    System.exit(77);
}
const reasonName = reason => Object.keys(Amk.FinishReason).find(k => Amk.FinishReason[k] === reason);

const model = Amk.Model.new_from_file(path, null);
const batch = Amk.Batch.new(model, null, 4);   // null: a CPU executor; at most 4 sequences
const prompts = new Map();                     // id -> [prompt, max_tokens]
const streamed = new Map();                    // id -> the pieces of its token signals
const add = (prompt, maxTokens) => prompts.set(batch.add(prompt, maxTokens), [prompt, maxTokens]);
batch.connect('token', (b, id, tokenId, piece) => {
    streamed.set(id, (streamed.get(id) || '') + piece);
    print(`[${id}] ${JSON.stringify(piece)}`);
});
batch.connect('finished', (b, id, reason) => print(`[${id}] finished: ${reasonName(reason)}`));
add('The capital of France is', 8);
add('Once upon a time', 12);
add('1, 2, 3,', 6);
while (batch.n_active > 0) {
    batch.step(null);                          // one launch: a token for every sequence
    if (prompts.size === 3 && batch.n_active < 3)
        add('The sun rises in the', 5);        // joins in the slot the finished one left
}

let nTokens = 0;
for (const [id, [prompt, maxTokens]] of prompts) {
    const text = batch.get_text(id), reason = batch.get_finish_reason(id);
    const n = batch.get_tokens(id).length;
    print(`${id}: ${JSON.stringify(prompt)} -> ${JSON.stringify(text)} (${reasonName(reason)})`);
    if ((streamed.get(id) || '') !== text)
        throw new Error(`sequence ${id}: the streamed pieces are not its text`);
    if (reason !== Amk.FinishReason.LENGTH && reason !== Amk.FinishReason.STOP)
        throw new Error(`sequence ${id} ended with ${reasonName(reason)}`);
    if (n === 0 || n > maxTokens)
        throw new Error(`sequence ${id}: ${n} tokens, asked for at most ${maxTokens}`);
    nTokens += n;
}
printerr(`${nTokens} tokens in ${batch.steps} launches`);
if (prompts.size !== 4 || batch.steps >= nTokens)
    throw new Error('the sequences did not share their launches');
