// generate.js: load a GGUF model, then stream a few greedy tokens from the CPU executor
// with generate_async (the token signal comes in this main loop, before the callback).
// Run from a build: GI_TYPELIB_PATH=$B/introspection LD_LIBRARY_PATH=$B/amk-glib \
//   gjs generate.js SmolLM2-135M-Instruct.Q4_1.gguf "The capital of France is"
// Without a model file (ARGV[0], else $AMK_TEST_GGUF) it exits with 77 ("skipped").
// SPDX-License-Identifier: LGPL-2.1-or-later
imports.gi.versions.Amk = '1.0';
const {Amk, GLib} = imports.gi;
const System = imports.system;

const path = ARGV[0] || GLib.getenv('AMK_TEST_GGUF') || '';
const prompt = ARGV[1] || 'The capital of France is';
if (!GLib.file_test(path, GLib.FileTest.IS_REGULAR)) {
    printerr('usage: gjs generate.js MODEL.gguf [PROMPT]  (or set AMK_TEST_GGUF)');
    System.exit(77);
}

const model = Amk.Model.new_from_file(path, null);   // weights to bf16, one decode step
const generator = Amk.Generator.new(model, null);   // null: the CPU executor
let streamed = '';
generator.connect('token', (gen, tokenId, piece) => {
    streamed += piece;
    print(`token ${tokenId}: ${JSON.stringify(piece)}`);
});

const loop = new GLib.MainLoop(null, false);
let text = null;
generator.generate_async(prompt, 6, null, (gen, result) => {
    text = gen.generate_finish(result);
    loop.quit();
});
loop.run();
print(`${prompt}${text}`);
print(`${generator.generated_tokens} tokens; prompt ${generator.prompt_tokens} tokens at ` +
      `${generator.prefill_tokens_per_second.toFixed(1)} tokens/s, ` +
      `generation at ${generator.tokens_per_second.toFixed(1)} tokens/s`);
if (text !== streamed)
    throw new Error('the streamed pieces are not the text');
