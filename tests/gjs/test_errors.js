// SPDX-License-Identifier: LGPL-2.1-or-later
//
// GJS: errors arrive as GLib.Error that match their domain and code: a deadlock, a
// dtype mismatch, bytes that are no image, a changed program, a tokenizer of another
// kind, a file that is no model, and the launcher on a machine without a usable GPU.

imports.gi.versions.Amk = '1.0';
const {Amk, GLib} = imports.gi;
imports.searchPath.unshift(GLib.path_get_dirname(imports.system.programPath));
const {test, skip, assert, assertEqual, assertThrows, done} = imports.tap;

const PROGRAM = Amk.program_error_quark();
const LAUNCH = Amk.launch_error_quark();

test('two-queue cycle is a DEADLOCK naming the queue and counter', () => {
    const p = Amk.Program.new(2);
    const x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT);
    const c0 = p.add_counter('ping'), c1 = p.add_counter('pong');
    let i = p.add_instruction(0, Amk.Opcode.FILL, [x]);
    p.set_param_int(i, 'count', 4);
    p.set_param_float(i, 'value', 1.5);
    p.add_wait(i, c1, 1);
    p.set_signal(i, c0, 1);
    i = p.add_instruction(1, Amk.Opcode.NOP, []);
    p.add_wait(i, c0, 1);
    p.set_signal(i, c1, 1);
    const e = assertThrows(PROGRAM, Amk.ProgramError.DEADLOCK, () => p.verify(), 'verify');
    assert(e.matches(Amk.program_error_quark(), Amk.ProgramError.DEADLOCK), 'matches');
    assert(/queue 0/.test(e.message) && /pong/.test(e.message), e.message);
    assertThrows(PROGRAM, Amk.ProgramError.DEADLOCK, () => Amk.CpuExecutor.new(p), 'executor');
    assertEqual(p.verified, false, 'verified');
});

test('COPY f32 -> i32 is INVALID', () => {
    const p = Amk.Program.new(1);
    const d = p.add_buffer('d', Amk.DType.I32, [4], Amk.BufferRole.OUTPUT);
    const s = p.add_buffer('s', Amk.DType.F32, [4], Amk.BufferRole.INPUT);
    const i = p.add_instruction(0, Amk.Opcode.COPY, [d, s]);
    p.set_param_int(i, 'count', 4);
    assertThrows(PROGRAM, Amk.ProgramError.INVALID, () => p.verify(), 'verify');
});

test('parameters by name: round trip, unknown name and wrong type are INVALID', () => {
    const p = Amk.Program.new(1);
    const x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT);
    const i = p.add_instruction(0, Amk.Opcode.FILL, [x]);
    p.set_param_int(i, 'offset', 1);
    p.set_param_float(i, 'value', -2.5);
    // a getter returns [true, value] and throws on failure
    assertEqual(p.get_param_int(i, 'offset')[1], 1, 'offset');
    assertEqual(p.get_param_int(i, 'count')[1], 0, 'count not set');
    assertEqual(p.get_param_float(i, 'value')[1], -2.5, 'value');
    assertThrows(PROGRAM, Amk.ProgramError.INVALID, () => p.set_param_int(i, 'rows', 1), 'name');
    assertThrows(PROGRAM, Amk.ProgramError.INVALID, () => p.set_param_int(i, 'value', 1), 'float');
    assertThrows(PROGRAM, Amk.ProgramError.INVALID, () => p.set_param_float(i, 'count', 1), 'int');
    assertThrows(PROGRAM, Amk.ProgramError.OUT_OF_RANGE, () => p.get_param_int(i + 1, 'count'),
        'instruction');
});

test('bad queue and bad counter are OUT_OF_RANGE', () => {
    const p = Amk.Program.new(2);
    assertThrows(PROGRAM, Amk.ProgramError.OUT_OF_RANGE,
        () => p.add_instruction(5, Amk.Opcode.NOP, []), 'queue');
    const i = p.add_instruction(1, Amk.Opcode.NOP, []);
    assertThrows(PROGRAM, Amk.ProgramError.OUT_OF_RANGE, () => p.add_wait(i, 3, 1), 'counter');
});

test('random bytes are CORRUPT, a patched ABI version is VERSION', () => {
    const junk = new Uint8Array(200).map(() => Math.floor(Math.random() * 256));
    assertThrows(PROGRAM, Amk.ProgramError.CORRUPT,
        () => Amk.Program.new_from_bytes(new GLib.Bytes(junk)), 'junk');

    const p = Amk.Program.new(1);
    p.add_instruction(0, Amk.Opcode.NOP, []);
    const image = p.serialize().toArray().slice();
    // "(suut...)": the magic string "amk-image\0", then the version at the next multiple of 4
    const version = (10 + 3) & ~3;
    new DataView(image.buffer).setUint32(version, 99, true);
    assertThrows(PROGRAM, Amk.ProgramError.VERSION,
        () => Amk.Program.new_from_bytes(new GLib.Bytes(image)), 'version');
});

test('a changed program is NOT_VERIFIED for its old executor', () => {
    const p = Amk.Program.new(1);
    p.add_instruction(0, Amk.Opcode.NOP, []);
    const ex = Amk.CpuExecutor.new(p);
    ex.run();
    p.add_instruction(0, Amk.Opcode.NOP, []);
    assertThrows(PROGRAM, Amk.ProgramError.NOT_VERIFIED, () => ex.run(), 'run');
});

test('a tokenizer.json of another model is UNSUPPORTED_MODEL, a bad id UNKNOWN_ID', () => {
    const TOKENIZER = Amk.tokenizer_error_quark();
    const vocab = '{"a": 0, "b": 1, "ab": 2}';
    const pre = '"pre_tokenizer": {"type": "ByteLevel"}';
    assertThrows(TOKENIZER, Amk.TokenizerError.UNSUPPORTED_MODEL,
        () => Amk.Tokenizer.new_from_json_data(
            `{${pre}, "model": {"type": "WordPiece", "vocab": ${vocab}, "merges": []}}`, -1),
        'WordPiece');
    const tok = Amk.Tokenizer.new_from_json_data(
        `{${pre}, "model": {"type": "BPE", "vocab": ${vocab}, "merges": ["a b"]}}`, -1);
    assertEqual(tok.decode(tok.encode('ab', false)), 'ab', 'round trip');
    assertThrows(TOKENIZER, Amk.TokenizerError.UNKNOWN_ID, () => tok.decode([3]), 'decode');
});

test('a file that is no model is a ModelError CORRUPT naming the file', () => {
    const [file, stream] = imports.gi.Gio.File.new_tmp('amk-XXXXXX.gguf');
    stream.get_output_stream().write_all('not a model\n', null);
    stream.close(null);
    const e = assertThrows(Amk.model_error_quark(), Amk.ModelError.CORRUPT,
        () => Amk.Model.new_from_file(file.get_path(), null), 'new_from_file');
    assert(e.message.includes(file.get_basename()), e.message);
    file.delete(null);
});

const haveCuda = Amk.Launcher.get_have_cuda();
const nDevices = Amk.Launcher.get_device_count();
if (haveCuda && nDevices > 0) {
    skip('launcher without GPU', 'a CUDA device is present');
} else {
    const code = haveCuda ? Amk.LaunchError.NO_DEVICE : Amk.LaunchError.UNSUPPORTED;

    test('launcher load/launch fail with NO_DEVICE or UNSUPPORTED', () => {
        const p = Amk.Program.new(1);
        p.add_instruction(0, Amk.Opcode.NOP, []);
        const l = Amk.Launcher.new(0);
        assertThrows(LAUNCH, code, () => l.load(p), 'load');
        assertThrows(LAUNCH, code, () => l.supports_cooperative(), 'supports_cooperative');
        assertThrows(LAUNCH, code, () => l.kernel_attributes(256, 0), 'kernel_attributes');
        assertThrows(LAUNCH, code, () => l.launch(null), 'launch');
    });

    test('launch_async reports the same error', () => {
        const l = Amk.Launcher.new(0);
        const loop = new GLib.MainLoop(null, false);
        let error = null;
        l.launch_async(null, (source, result) => {
            try {
                source.launch_finish(result);
            } catch (e) {
                error = e;
            }
            loop.quit();
        });
        GLib.timeout_add_seconds(GLib.PRIORITY_DEFAULT, 30, () => {
            loop.quit();
            return GLib.SOURCE_REMOVE;
        });
        loop.run();
        assert(error !== null, 'an error');
        assert(error.matches(LAUNCH, code), `${error}`);
    });
}

done();
