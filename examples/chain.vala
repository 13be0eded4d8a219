/* chain.vala: three queues, each stage waits on the previous stage's counter.
 *   q0: a = x + x      q1: b = a + 1 (FILL then ADD)      q2: y = b
 * Build: valac --pkg amk-glib-1.0 chain.vala   SPDX-License-Identifier: LGPL-2.1-or-later */
int main () {
    const int N = 8;
    try {
        var p = new Amk.Program (3);
        int64[] shape = { N };
        int x = p.add_buffer ("x", Amk.DType.F32, shape, Amk.BufferRole.INPUT);
        int a = p.add_buffer ("a", Amk.DType.F32, shape, Amk.BufferRole.SCRATCH);
        int one = p.add_buffer ("one", Amk.DType.F32, shape, Amk.BufferRole.SCRATCH);
        int b = p.add_buffer ("b", Amk.DType.F32, shape, Amk.BufferRole.SCRATCH);
        int y = p.add_buffer ("y", Amk.DType.F32, shape, Amk.BufferRole.OUTPUT);
        int c0 = p.add_counter ("a-ready"), c1 = p.add_counter ("b-ready");
        int i = p.add_instruction (0, Amk.Opcode.ADD, { a, x, x });
        p.set_param_int (i, "count", N); p.set_signal (i, c0, 1);
        i = p.add_instruction (1, Amk.Opcode.FILL, { one });
        p.set_param_int (i, "count", N); p.set_param_float (i, "value", 1.0f);
        i = p.add_instruction (1, Amk.Opcode.ADD, { b, a, one });
        p.set_param_int (i, "count", N); p.add_wait (i, c0, 1); p.set_signal (i, c1, 1);
        i = p.add_instruction (2, Amk.Opcode.COPY, { y, b });
        p.set_param_int (i, "count", N); p.add_wait (i, c1, 1);
        var ex = new Amk.CpuExecutor (p);   /* verifies the program: no deadlock, no bad index */
        var xs = new float[N];
        for (int k = 0; k < N; k++) xs[k] = Random.int_range (-100, 100);
        var raw = new uint8[N * sizeof (float)];
        Memory.copy (raw, xs, raw.length);
        ex.upload (x, new Bytes (raw));
        ex.run ();
        var result = ex.download (y);          /* keep the GBytes alive while ys points into it */
        unowned float[] ys = (float[]) result.get_data ();
        for (int k = 0; k < N; k++) {
            print ("x = %g  y = %g\n", xs[k], ys[k]);
            if (ys[k] != 2 * xs[k] + 1) return 1;
        }
    } catch (Error e) { printerr ("%s\n", e.message); return 1; }
    return 0;
}
