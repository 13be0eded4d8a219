/* test-amk.vala: the Amk API from Vala, through the generated vapi: a three-queue chain
 * checked against values computed here, errordomains in catch clauses, and the launcher
 * without a usable GPU.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */

const int N = 40;
const int TILES = 4;
const int SIZE = N / TILES;
const int OFFSET = 3;
const int OUT_LEN = N + 2 * OFFSET;

static GLib.Bytes floats_to_bytes (float[] values) {
    var raw = new uint8[values.length * sizeof (float)];
    Memory.copy (raw, values, raw.length);
    return new GLib.Bytes (raw);
}

static float[] bytes_to_floats (GLib.Bytes bytes) {
    var values = new float[bytes.get_size () / sizeof (float)];
    Memory.copy (values, bytes.get_data (), bytes.get_size ());
    return values;
}

static float[] random_floats (int n) {
    var values = new float[n];
    for (int k = 0; k < n; k++) {
        values[k] = (float) (Random.double_range (0.25, 8.0) * (Random.boolean () ? 1.0 : -1.0));
    }
    return values;
}

static bool same_float (float a, float b) {
    return (a.is_nan () && b.is_nan ()) || a == b;
}

/* q0: a[t] = in[t] + in[t];  q1: b[t] = a[t] + w[t];  q2: out[OFFSET + t] = b[t] */
class Chain {
    public Amk.Program program;
    public int input;
    public int weights;
    public int output;

    /* ADD over [lo, lo + count) of all three operands */
    static void set_add_params (Amk.Program p, int i, int lo, int count) throws GLib.Error {
        p.set_param_int (i, "dst_offset", lo);
        p.set_param_int (i, "a_offset", lo);
        p.set_param_int (i, "b_offset", lo);
        p.set_param_int (i, "count", count);
    }

    public Chain (float[] w) throws GLib.Error {
        program = new Amk.Program (3);
        input = program.add_buffer ("in", Amk.DType.F32, new int64[] { N }, Amk.BufferRole.INPUT);
        weights = program.add_buffer ("w", Amk.DType.F32, new int64[] { N }, Amk.BufferRole.CONSTANT);
        int a = program.add_buffer ("a", Amk.DType.F32, new int64[] { N }, Amk.BufferRole.SCRATCH);
        int b = program.add_buffer ("b", Amk.DType.F32, new int64[] { N }, Amk.BufferRole.SCRATCH);
        output = program.add_buffer ("out", Amk.DType.F32, new int64[] { OUT_LEN }, Amk.BufferRole.OUTPUT);
        program.set_buffer_data (weights, floats_to_bytes (w));
        int c0 = program.add_counter ("a-done");
        int c1 = program.add_counter ("b-done");
        for (int t = 0; t < TILES; t++) {
            int lo = t * SIZE;
            int i = program.add_instruction (0, Amk.Opcode.ADD, new int[] { a, input, input });
            set_add_params (program, i, lo, SIZE);
            program.set_signal (i, c0, 1);
            i = program.add_instruction (1, Amk.Opcode.ADD, new int[] { b, a, weights });
            set_add_params (program, i, lo, SIZE);
            program.add_wait (i, c0, t + 1);
            program.set_signal (i, c1, 1);
            i = program.add_instruction (2, Amk.Opcode.COPY, new int[] { output, b });
            program.set_param_int (i, "dst_offset", OFFSET + lo);
            program.set_param_int (i, "src_offset", lo);
            program.set_param_int (i, "count", SIZE);
            program.add_wait (i, c1, t + 1);
        }
    }
}

static void test_chain () {
    try {
        var w = random_floats (N);
        var chain = new Chain (w);
        var ex = new Amk.CpuExecutor (chain.program);
        assert (chain.program.verified);
        for (uint64 seed = 0; seed < 16; seed++) {
            var x = random_floats (N);
            var before = new float[OUT_LEN];
            for (int k = 0; k < OUT_LEN; k++) {
                before[k] = float.NAN;
            }
            ex.upload (chain.input, floats_to_bytes (x));
            ex.upload (chain.output, floats_to_bytes (before));
            ex.seed = seed;
            ex.run ();
            var result = bytes_to_floats (ex.download (chain.output));
            assert (result.length == OUT_LEN);
            for (int k = 0; k < OUT_LEN; k++) {
                float want = before[k];
                if (k >= OFFSET && k < OFFSET + N) {
                    float twice = x[k - OFFSET] + x[k - OFFSET];
                    want = twice + w[k - OFFSET];
                }
                if (!same_float (result[k], want)) {
                    error ("seed %" + uint64.FORMAT + " out[%d] = %g, expected %g", seed, k, result[k], want);
                }
            }
        }
    } catch (GLib.Error e) {
        error ("unexpected error: %s", e.message);
    }
}

static void test_round_trip () {
    try {
        var chain = new Chain (random_floats (N));
        var copy = new Amk.Program.from_bytes (chain.program.serialize ());
        assert (copy.verified);
        assert (copy.get_n_instructions () == 3 * TILES);
        assert (copy.get_buffer_name (chain.output) == "out");
        var x = floats_to_bytes (random_floats (N));
        var e1 = new Amk.CpuExecutor (chain.program);
        var e2 = new Amk.CpuExecutor (copy);
        e1.upload (chain.input, x);
        e2.upload (chain.input, x);
        e1.run ();
        e2.run ();
        assert (e1.download (chain.output).compare (e2.download (chain.output)) == 0);
    } catch (GLib.Error e) {
        error ("unexpected error: %s", e.message);
    }
}

static void test_struct_sizes () {
    var sizes = Amk.StructSizes.get ();
    assert (sizes.abi_version == 1);
    assert (sizes.instruction == 128);
    assert (sizes.device_program == 128);
    var p = (Amk.Program) Object.new (typeof (Amk.Program), "num-queues", 3);
    assert (p.num_queues == 3);
}

static void test_deadlock () {
    var p = new Amk.Program (2);
    try {
        int c0 = p.add_counter ("ping");
        int c1 = p.add_counter ("pong");
        int i = p.add_instruction (0, Amk.Opcode.NOP, null);
        p.add_wait (i, c1, 1);
        p.set_signal (i, c0, 1);
        i = p.add_instruction (1, Amk.Opcode.NOP, null);
        p.add_wait (i, c0, 1);
        p.set_signal (i, c1, 1);
    } catch (GLib.Error e) {
        error ("building: %s", e.message);
    }
    try {
        p.verify ();
        assert_not_reached ();
    } catch (Amk.ProgramError.DEADLOCK e) {
        assert (e.matches (Amk.ProgramError.quark (), Amk.ProgramError.DEADLOCK));
        assert ("queue 0" in e.message);
        assert ("pong" in e.message);
    } catch (GLib.Error e) {
        error ("wrong error: %s", e.message);
    }
    assert (!p.verified);
}

static void test_program_errors () {
    var p = new Amk.Program (1);
    try {
        p.add_instruction (4, Amk.Opcode.NOP, null);
        assert_not_reached ();
    } catch (Amk.ProgramError.OUT_OF_RANGE e) {
    } catch (GLib.Error e) {
        error ("wrong error: %s", e.message);
    }
    try {
        int i = p.add_instruction (0, Amk.Opcode.FILL, null);
        p.set_param_int (i, "count", 4);
        p.set_param_float (i, "value", 1.5f);
        int count;
        float value;
        p.get_param_int (i, "count", out count);
        p.get_param_float (i, "value", out value);
        assert (count == 4);
        assert (value == 1.5f);
        foreach (var name in new string[] { "no_such", "value" }) {
            try {
                p.set_param_int (i, name, 1); /* not FILL's; a float */
                assert_not_reached ();
            } catch (Amk.ProgramError.INVALID e) {
            }
        }
        try {
            p.set_param_float (i + 1, "value", 1.0f);
            assert_not_reached ();
        } catch (Amk.ProgramError.OUT_OF_RANGE e) {
        }
    } catch (GLib.Error e) {
        error ("wrong error: %s", e.message);
    }
    try {
        new Amk.Program.from_bytes (new GLib.Bytes ("not an image".data));
        assert_not_reached ();
    } catch (Amk.ProgramError e) {
        assert (e is Amk.ProgramError.CORRUPT);
    } catch (GLib.Error e) {
        error ("wrong error: %s", e.message);
    }
}

static void test_trap () {
    try {
        var p = new Amk.Program (1);
        int i = p.add_instruction (0, Amk.Opcode.TRAP, null);
        p.set_param_int (i, "code", 4242);
        var ex = new Amk.CpuExecutor (p);
        try {
            ex.run ();
            assert_not_reached ();
        } catch (Amk.LaunchError.ABORTED e) {
            var record = ex.get_last_abort ();
            assert (record != null);
            assert (record.code == Amk.AbortCode.TRAP);
            assert (record.detail == 4242);
        }
    } catch (GLib.Error e) {
        error ("unexpected error: %s", e.message);
    }
}

static bool expected_launch_error (out int code) {
    code = Amk.LaunchError.UNSUPPORTED;
    if (!Amk.Launcher.get_have_cuda ()) {
        return true;
    }
    code = Amk.LaunchError.NO_DEVICE;
    return Amk.Launcher.get_device_count () == 0;
}

static void test_launcher_without_gpu () {
    int code;
    if (!expected_launch_error (out code)) {
        Test.skip ("a CUDA device is present");
        return;
    }
    var p = new Amk.Program (1);
    var launcher = new Amk.Launcher (0);
    try {
        p.add_instruction (0, Amk.Opcode.NOP, null);
        launcher.load (p);
        assert_not_reached ();
    } catch (Amk.LaunchError e) {
        assert (e.code == code);
        assert (e.matches (Amk.LaunchError.quark (), code));
    } catch (GLib.Error e) {
        error ("wrong error: %s", e.message);
    }
    try {
        launcher.supports_cooperative ();
        assert_not_reached ();
    } catch (Amk.LaunchError e) {
        assert (e.code == code);
    } catch (GLib.Error e) {
        error ("wrong error: %s", e.message);
    }

    var loop = new MainLoop ();
    GLib.Error? async_error = null;
    launcher.launch_async.begin (null, (obj, res) => {
        try {
            launcher.launch_async.end (res);
        } catch (GLib.Error e) {
            async_error = e;
        }
        loop.quit ();
    });
    loop.run ();
    assert (async_error != null);
    assert (async_error.matches (Amk.LaunchError.quark (), code));
}

int main (string[] args) {
    Test.init (ref args);
    Test.add_func ("/amk/vala/chain", test_chain);
    Test.add_func ("/amk/vala/round-trip", test_round_trip);
    Test.add_func ("/amk/vala/struct-sizes", test_struct_sizes);
    Test.add_func ("/amk/vala/errors/deadlock", test_deadlock);
    Test.add_func ("/amk/vala/errors/program", test_program_errors);
    Test.add_func ("/amk/vala/errors/trap", test_trap);
    Test.add_func ("/amk/vala/launcher/no-gpu", test_launcher_without_gpu);
    return Test.run ();
}
