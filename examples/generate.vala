/* generate.vala: load a GGUF model and stream a few greedy tokens from the CPU executor.
 * Build: valac --pkg amk-glib-1.0 generate.vala; run: ./generate MODEL.gguf [PROMPT]
 * Without a model file (args[1], else $AMK_TEST_GGUF) it exits with 77 ("skipped").
 * SPDX-License-Identifier: LGPL-2.1-or-later */
int main (string[] args) {
    string? path = args.length > 1 ? args[1] : Environment.get_variable ("AMK_TEST_GGUF");
    string prompt = args.length > 2 ? args[2] : "The capital of France is";
    if (path == null || !FileUtils.test (path, FileTest.IS_REGULAR)) {
        printerr ("usage: generate MODEL.gguf [PROMPT]  (or set AMK_TEST_GGUF)\n");
        return 77;
    }
    try {
        var model = new Amk.Model.from_file (path);      /* weights to bf16, one decode step */
        var generator = new Amk.Generator (model, null); /* null: the CPU executor */
        var streamed = new StringBuilder ();
        generator.token.connect ((token_id, piece) => {
            streamed.append (piece);
            print ("%s", piece);
            stdout.flush ();
        });
        print ("%s", prompt);
        string text = generator.generate (prompt, 6);    /* greedy, at most 6 tokens */
        printerr ("\n%u tokens; prompt %u tokens at %.1f tokens/s, generation at %.1f tokens/s\n",
                  generator.generated_tokens, generator.prompt_tokens,
                  generator.prefill_tokens_per_second, generator.tokens_per_second);
        return text == streamed.str ? 0 : 1;
    } catch (Error e) {
        printerr ("%s\n", e.message);
        return 1;
    }
}
