/* amk-model-builder-private.h: builds a decode-step program from a model (a GGUF file
 * or a Hugging Face checkpoint folder). Private: the public face is AmkModel (and
 * AmkGenerator, which runs the step); the unit tests and fuzz targets link the builder
 * directly (amk-glib-internal).
 *
 * The layer graph (the op sequence of one decode step) is written once, in
 * amk_model_build_graph(): a loader fills an AmkModelParams from its file's
 * hyperparameters and hands over an AmkModelWeightSource that returns each named weight
 * as bf16 in the expected shape (amk-model.c: GGUF; amk-hf-model.c: safetensors and
 * config.json).
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
} AmkModelBuild;

/* The hyperparameters of a Llama-family decoder, as the layer graph needs them. */
typedef struct {
  const char *architecture;           /* "llama" or "qwen3" */
  guint       n_layers;
  guint       hidden;
  guint       n_heads;
  guint       n_kv_heads;
  guint       head_dim;               /* q has n_heads × head_dim rows */
  guint       ffn;
  guint64     vocab;
  gfloat      eps;                    /* RMSNORM epsilon */
  gfloat      rope_theta;
  gfloat      rope_factor;            /* Llama-3 scaling factor, 0: plain RoPE */
  gfloat      rope_low_freq_factor;
  gfloat      rope_high_freq_factor;
  guint       rope_original_context;
  gboolean    qk_norm;                /* Qwen3: RMSNORM per head of q and k before RoPE */
  gboolean    tied_embeddings;        /* the output matrix is the token embedding */
  guint       model_context;          /* the context it was trained for; 0 if unknown */
  const char *source;                 /* the file they come from, for messages */
} AmkModelParams;

/* The weights the graph asks for; the shapes are in rows × columns (PyTorch order). */
typedef enum {
  AMK_MODEL_WEIGHT_TOKEN_EMBD,    /* [vocab, hidden] */
  AMK_MODEL_WEIGHT_OUTPUT_NORM,   /* [hidden] */
  AMK_MODEL_WEIGHT_OUTPUT,        /* [vocab, hidden]; not asked for when tied */
  AMK_MODEL_WEIGHT_ATTN_NORM,     /* per layer from here on: [hidden] */
  AMK_MODEL_WEIGHT_ATTN_Q,        /* [n_heads × head_dim, hidden], rotate-half order */
  AMK_MODEL_WEIGHT_ATTN_K,        /* [n_kv_heads × head_dim, hidden], rotate-half order */
  AMK_MODEL_WEIGHT_ATTN_V,        /* [n_kv_heads × head_dim, hidden] */
  AMK_MODEL_WEIGHT_ATTN_OUTPUT,   /* [hidden, n_heads × head_dim] */
  AMK_MODEL_WEIGHT_ATTN_Q_NORM,   /* [head_dim], with qk_norm only */
  AMK_MODEL_WEIGHT_ATTN_K_NORM,   /* [head_dim], with qk_norm only */
  AMK_MODEL_WEIGHT_FFN_NORM,      /* [hidden] */
  AMK_MODEL_WEIGHT_FFN_GATE,      /* [ffn, hidden] */
  AMK_MODEL_WEIGHT_FFN_UP,        /* [ffn, hidden] */
  AMK_MODEL_WEIGHT_FFN_DOWN,      /* [hidden, ffn] */
} AmkModelWeight;

typedef struct _AmkModelWeightSource AmkModelWeightSource;

struct _AmkModelWeightSource {
  /* Returns the weight (of `layer`, for the per-layer ones) as little-endian bf16 bytes,
   * exactly rows × cols values (rows 0: a vector of cols), after checking that the
   * file's tensor has that shape; `name` gets the file's name of the tensor (g_free). */
  GBytes *(*load) (AmkModelWeightSource  *self,
                   AmkModelWeight         weight,
                   guint                  layer,
                   guint64                rows,
                   guint64                cols,
                   char                 **name,
                   GError               **error);
};

/* The shared layer graph: adds every weight as a bf16 constant and compiles one decode
 * step. Takes a reference on `tokenizer`. */
AmkModelBuild *amk_model_build_graph     (const AmkModelParams  *params,
                                          AmkModelWeightSource  *source,
                                          AmkTokenizer          *tokenizer,
                                          guint                  n_queues,
                                          guint                  context,
                                          GError               **error);

/* A .gguf file (or any regular file) → amk_model_build_from_gguf(); a folder →
 * amk_model_build_from_hf(). */
AmkModelBuild *amk_model_build_from_path (const char     *path,
                                          guint           n_queues,
                                          guint           context,
                                          GError        **error);
AmkModelBuild *amk_model_build_from_gguf (const char     *path,
                                          guint           n_queues,
                                          guint           context,
                                          GError        **error);
/* A Hugging Face checkpoint folder: config.json, model.safetensors (or sharded with
 * model.safetensors.index.json), tokenizer.json; generation_config.json and
 * tokenizer_config.json when present. */
AmkModelBuild *amk_model_build_from_hf   (const char     *dir,
                                          guint           n_queues,
                                          guint           context,
                                          GError        **error);
/* config.json's text to hyperparameters (what the HF loader does first; fuzzed). */
gboolean       amk_model_parse_hf_config (const char     *text,
                                          gsize           len,
                                          const char     *file,
                                          AmkModelParams *params,
                                          GError        **error);
void           amk_model_build_free      (AmkModelBuild  *build);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkModelBuild, amk_model_build_free)

G_END_DECLS
