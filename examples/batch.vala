/* batch.vala: several prompts generated together (greedy) on the CPU executor, one launch
 * per step for all of them; a fourth prompt joins once the first sequence has finished.
 * Build: valac --pkg amk-glib-1.0 batch.vala; run: ./batch MODEL.gguf
 * Without a model file (args[1], else $AMK_TEST_GGUF) it exits with 77 ("skipped").
 * SPDX-License-Identifier: LGPL-2.1-or-later */
int main (string[] args) {
    string? path = args.length > 1 ? args[1] : Environment.get_variable ("AMK_TEST_GGUF");
    if (path == null || !FileUtils.test (path, FileTest.IS_REGULAR)) {
        printerr ("usage: batch MODEL.gguf  (or set AMK_TEST_GGUF)\n");
        return 77;
    }
    try {
        var model = new Amk.Model.from_file (path);
        var batch = new Amk.Batch (model, null, 4);   /* null: a CPU executor; 4 sequences */
        var max_tokens = new HashTable<uint, uint> (direct_hash, direct_equal);
        var streamed = new HashTable<uint, string> (direct_hash, direct_equal);
        batch.token.connect ((id, token_id, piece) => {
            streamed[id] = (streamed[id] ?? "") + piece;
            print ("[%u] \"%s\"\n", id, piece.escape ());
        });
        batch.finished.connect ((id, reason) => {
            print ("[%u] finished: %s\n", id, reason.to_string ());
            if (max_tokens.size () == 3) {            /* the first to finish: one more joins */
                try {
                    max_tokens[batch.add ("The sun rises in the", 5)] = 5;
                } catch (Error e) {
                    printerr ("%s\n", e.message);
                }
            }
        });
        max_tokens[batch.add ("The capital of France is", 8)] = 8;
        max_tokens[batch.add ("Once upon a time", 12)] = 12;
        max_tokens[batch.add ("1, 2, 3,", 6)] = 6;
        batch.run ();                                 /* steps until every one has finished */

        uint n_tokens = 0;
        var ids = max_tokens.get_keys ();
        ids.sort ((a, b) => a < b ? -1 : a > b ? 1 : 0);
        foreach (uint id in ids) {
            string text = batch.get_text (id);
            Amk.FinishReason reason = batch.get_finish_reason (id);
            uint n = batch.get_tokens (id).length;
            print ("%u: \"%s\" (%s)\n", id, text.escape (), reason.to_string ());
            if (text != (streamed[id] ?? "") || n == 0 || n > max_tokens[id] ||
                (reason != Amk.FinishReason.LENGTH && reason != Amk.FinishReason.STOP)) {
                printerr ("sequence %u: %u tokens, its pieces \"%s\"\n", id, n, streamed[id]);
                return 1;
            }
            n_tokens += n;
        }
        printerr ("%u tokens in %u launches\n", n_tokens, batch.steps);
        return max_tokens.size () == 4 && batch.steps < n_tokens ? 0 : 1;
    } catch (Error e) {
        printerr ("%s\n", e.message);
        return 1;
    }
}
