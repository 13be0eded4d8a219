/* amk-model-builder-private.h: builds a decode-step program from a GGUF model and runs
 * greedy generation on it. Private: the public face is AmkModel and AmkGenerator; the
 * `amk` tool and the unit tests link the builder directly (amk-glib-internal).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gio/gio.h>
#include <amk-glib/amk-glib.h>

G_BEGIN_DECLS

typedef struct {
  AmkProgram   *program;     /* one compiled decode step */
  AmkTokenizer *tokenizer;
  gint          tokens;      /* i32 [1]: the input token, then the argmax (STATE) */
  gint          pos;         /* i32 [1]: the position of the input token (INPUT) */
  gint          logits;      /* f32 [vocab]: the step's logits (OUTPUT) */
  guint         vocab_size;
  gint32        bos_id;      /* -1 when the file names none */
  gint32        eos_id;      /* -1 when the file names none */
  guint         context;     /* KV cache rows */
  guint         n_layers;
  guint         hidden;
  char         *architecture;  /* "llama" */
  guint         model_context; /* the context the model was trained for; 0 if unknown */
} AmkModelBuild;

AmkModelBuild *amk_model_build_from_gguf (const char     *path,
                                          guint           n_queues,
                                          guint           context,
                                          GError        **error);
void           amk_model_build_free      (AmkModelBuild  *build);
/* Appends the generated text to `out`; `n_generated` (nullable) gets the token count,
 * `generated` (nullable) the ids (g_free). */
gboolean       amk_model_generate_cpu    (AmkModelBuild  *build,
                                          const char     *prompt,
                                          guint           max_tokens,
                                          GString        *out,
                                          GError        **error);
/* With a launcher (which loads the program) on the GPU, else on a new CPU executor. */
gboolean       amk_model_generate_full   (AmkModelBuild *build,
                                          AmkLauncher   *launcher,
                                            const char    *prompt,
                                            guint          max_tokens,
                                            GString       *out,
                                            gint32       **generated,
                                            gsize         *n_generated,
                                            guint         *n_prompt,
                                            GError       **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkModelBuild, amk_model_build_free)

G_END_DECLS
