/* amk-model-builder-private.h: builds a decode-step program, and the prefill chunk beside
 * it, from the neutral description of a model (AmkModelSpec, which a format reader
 * made). Private: the public face is AmkModel (and AmkGenerator, which runs the
 * programs); the unit tests link the builder directly (amk-glib-internal).
 *
 * The layer graph (the op sequence of one decode step) is written once, in
 * amk_model_build_graph(); it reads no file and knows no file format.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gio/gio.h>
#include <amk-glib/amk-glib.h>
#include "amk-model-spec-private.h"

G_BEGIN_DECLS

typedef struct {
  AmkProgram   *program;     /* one compiled decode step */
  AmkTokenizer *tokenizer;
  gint          tokens;      /* i32 [1]: the input token, then the argmax (STATE) */
  gint          pos;         /* i32 [1]: the position of the input token (INPUT) */
  guint         vocab_size;
  gint32        bos_id;      /* -1 when the file names none */
  gint32        eos_id;      /* -1 when the file names none */
  guint         context;     /* KV cache rows */
  guint         n_layers;
  guint         hidden;
  /* added with the Hugging Face loader */
  char         *architecture;   /* "llama" or "qwen3" */
  guint         n_heads;        /* query heads */
  guint         n_kv_heads;     /* key/value heads */
  guint         head_dim;       /* may differ from hidden / n_heads (Qwen3) */
  guint         ffn;            /* the MLP's inner size */
  guint64       weight_bytes;   /* bytes of every CONSTANT buffer (the weights, bf16) */
  gint          logits;         /* f32 [vocab_size] OUTPUT: the step's logits */
  gint32       *eos_ids;        /* every end-of-sequence id the files name, eos_id first */
  guint         n_eos_ids;
  guint         model_context;  /* the context the model was trained for; 0 if unknown */
  /* the prefill chunk (amk_model_build_prefill()), NULL without one */
  AmkProgram   *prefill;
  guint         chunk;          /* its rows */
  gint          prefill_tokens; /* i32 [chunk] (INPUT): the chunk's tokens */
  gint          prefill_pos;    /* i32 [chunk] (INPUT): their positions, -1 a padding row */
} AmkModelBuild;

/* The shared layer graph: adds every weight of `spec` as a bf16 constant and compiles
 * one decode step. Takes a reference on the spec's tokenizer; the spec may be freed
 * afterwards (constants that are slices of a mapped file keep it mapped). */
AmkModelBuild *amk_model_build_graph     (AmkModelSpec   *spec,
                                          guint           n_queues,
                                          guint           context,
                                          GError        **error);
/* Adds the prefill chunk program of `chunk` rows (at least 2) beside the decode step,
 * sharing its weights (the same GBytes) and KV caches by name. */
gboolean       amk_model_build_prefill   (AmkModelBuild  *build,
                                          AmkModelSpec   *spec,
                                          guint           chunk,
                                          AmkDType        activations,
                                          GError        **error);
/* The model's shapes suit the prefill chunk's ops: rows of a multiple of 8 elements for
 * MATMUL, even heads of at most 256 elements for ROPE_ROWS and ATTN_ROWS. */
gboolean       amk_model_prefill_fits    (const AmkModelSpec *spec);
void           amk_model_build_free      (AmkModelBuild  *build);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkModelBuild, amk_model_build_free)

G_END_DECLS
