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

/* A program of many rows (tokens) per launch, on the layers of a decode step: a prompt
 * chunk, which only fills KV caches, or a batch step, which also computes each row's
 * logits and greedy next token. */
typedef struct {
  AmkProgram   *program;
  guint         rows;
  gint          tokens;   /* i32 [rows]: the rows' tokens (INPUT; a batch step's is STATE
                           * and holds each row's argmax after the run) */
  gint          pos;      /* i32 [rows] (INPUT): their positions, -1 a padding row */
  gint          seq;      /* i32 [rows] (INPUT): their sequences (cache slots), or -1 for
                           * caches of one sequence */
  gint          logits;   /* f32 [rows, vocab] (OUTPUT) of a batch step or of a chunk with a
                           * head, else -1 */
  gint          head_pos; /* i32 [rows] (INPUT) of a chunk with a head: the positions of the
                           * rows whose logits it computes (the prompt's last row), the
                           * others -1; else -1 */
  gint          next;     /* i32 [rows] (OUTPUT) of a chunk with a head: those rows' argmax */
} AmkModelRows;

void           amk_model_rows_free       (AmkModelRows   *rows);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkModelRows, amk_model_rows_free)

typedef struct {
  AmkProgram   *program;     /* one compiled decode step */
  AmkTokenizer *tokenizer;
  gint          tokens;      /* i32 [1]: the input token, then the argmax (STATE) */
  gint          pos;         /* i32 [1]: the position of the input token (INPUT) */
  guint         vocab_size;
  guint         n_pieces;    /* ids below this have a piece in the tokenizer: at most
                              * vocab_size (an embedding may be padded beyond it) */
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
  /* what the many-row programs are built from, without the file */
  AmkModelParams params;        /* architecture: this build's; source: NULL */
  gint         *weights;        /* the decode step's buffer of each weight, by
                                 * amk_model_build_weight(); the stacked q/k/v weight
                                 * stands at ATTN_Q */
  gboolean      rows_fit;       /* the shapes suit the many-token ops */
  /* the prefill chunk (amk_model_build_prefill()), NULL without one */
  AmkModelRows *prefill;
} AmkModelBuild;

/* A batch: its step, B rows over caches of B sequences, and the prefill chunk that fills
 * one sequence's caches; their own caches, the decode step's weights. */
typedef struct {
  AmkModelRows *step;
  AmkModelRows *prefill;   /* NULL: prompts go through the step */
  guint         slots;
} AmkModelBatch;

void           amk_model_batch_free      (AmkModelBatch  *batch);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkModelBatch, amk_model_batch_free)

/* The shared layer graph: adds every weight of `spec` as a bf16 constant and compiles
 * one decode step. Takes a reference on the spec's tokenizer; the spec may be freed
 * afterwards (constants that are slices of a mapped file keep it mapped). */
AmkModelBuild *amk_model_build_graph     (AmkModelSpec   *spec,
                                          guint           n_queues,
                                          guint           context,
                                          GError        **error);
/* The same with each matrix stored in a block-quantized type whose bit (1 << AmkDType)
 * `keep` has left in that type instead of bf16. */
AmkModelBuild *amk_model_build_graph_keeping (AmkModelSpec *spec,
                                              guint         n_queues,
                                              guint         context,
                                              guint32       keep,
                                              GError      **error);
/* Adds the prefill chunk program of `chunk` rows (at least 2) beside the decode step,
 * sharing its weights (the same GBytes) and KV caches by name. */
gboolean       amk_model_build_prefill   (AmkModelBuild  *build,
                                          guint           chunk,
                                          AmkDType        activations,
                                          gboolean        head,
                                          GError        **error);
/* A batch of `slots` sequences (at least 1) on the decode step's weights, with a prefill
 * chunk of `chunk` rows (0 or 1: none). */
AmkModelBatch *amk_model_build_batch     (AmkModelBuild  *build,
                                          guint           slots,
                                          guint           chunk,
                                          AmkDType        activations,
                                          GError        **error);
/* The model's shapes suit the many-token ops: rows of a multiple of 8 elements for
 * MATMUL, even heads of at most 256 elements for ROPE_ROWS and ATTN_ROWS. */
gboolean       amk_model_prefill_fits    (const AmkModelSpec *spec);
void           amk_model_build_free      (AmkModelBuild  *build);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkModelBuild, amk_model_build_free)

G_END_DECLS
