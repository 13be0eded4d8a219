// SPDX-License-Identifier: LGPL-2.1-or-later
//
// GJS: Amk.Batch on tests/data/tiny-llama (CPU executor): two prompts generated
// together get the tokens Amk.Generator gives each alone, the signals stream them, and a
// full batch throws Amk.BatchError.FULL.

imports.gi.versions.Amk = '1.0';
const {Amk, GLib} = imports.gi;
imports.searchPath.unshift(GLib.path_get_dirname(imports.system.programPath));
const {test, assert, assertEqual, assertThrows, done} = imports.tap;

const TESTS = GLib.getenv('G_TEST_SRCDIR') ||
    GLib.build_filenamev([GLib.path_get_dirname(imports.system.programPath), '..']);
const TINY = GLib.build_filenamev([TESTS, 'data', 'tiny-llama']);
const PROMPTS = [['The capital of France is', 8], ['Once upon a time', 12]];

function load() {
    const model = new Amk.Model({path: TINY});
    model.init(null);
    return model;
}

// The generator's greedy tokens for a prompt, on a model of their own.
function alone(prompt, n) {
    const generator = Amk.Generator.new(load(), null);
    generator.generate(prompt, n, null);
    return Array.from(generator.get_tokens());
}

test('two prompts together get the tokens each gets alone', () => {
    const batch = Amk.Batch.new(load(), null, 2);
    const streamed = new Map(), finished = [];
    batch.connect('token', (b, id, token, piece) =>
        streamed.set(id, (streamed.get(id) || []).concat([token])));
    batch.connect('finished', (b, id, reason) => finished.push([id, reason]));
    const ids = PROMPTS.map(([prompt, n]) => batch.add(prompt, n));
    assertEqual(batch.n_active, 2, 'n-active');
    assert(batch.run(null), 'run');
    assertEqual(batch.n_active, 0, 'n-active after the run');
    ids.forEach((id, i) => {
        const want = alone(...PROMPTS[i]);
        const got = Array.from(batch.get_tokens(id));
        assertEqual(JSON.stringify(got), JSON.stringify(want), `tokens of ${PROMPTS[i][0]}`);
        assertEqual(JSON.stringify(streamed.get(id)), JSON.stringify(want), 'streamed tokens');
        const reason = want.length === PROMPTS[i][1]
            ? Amk.FinishReason.LENGTH : Amk.FinishReason.STOP;
        assertEqual(batch.get_finish_reason(id), reason, 'finish reason');
        assert(finished.some(([f, r]) => f === id && r === reason), '::finished');
    });
    // a step per token of the longest, and one for the end-of-sequence token of one that stopped
    assertEqual(batch.steps, Math.max(...PROMPTS.map(([prompt, n]) => {
        const length = alone(prompt, n).length;
        return length < n ? length + 1 : length;
    })), 'steps');
});

test('a full batch is FULL, an unknown id UNKNOWN_SEQUENCE', () => {
    const batch = Amk.Batch.new(load(), null, 1);
    const id = batch.add(...PROMPTS[0]);
    const e = assertThrows(Amk.batch_error_quark(), Amk.BatchError.FULL,
        () => batch.add(...PROMPTS[1]), 'add');
    assert(/1/.test(e.message), e.message);
    assertEqual(batch.n_active, 1, 'n-active');
    assertThrows(Amk.batch_error_quark(), Amk.BatchError.UNKNOWN_SEQUENCE,
        () => batch.get_text(id + 1), 'get_text');
});

done();
