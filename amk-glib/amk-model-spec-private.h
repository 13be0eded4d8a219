/* amk-model-spec-private.h: the neutral description of a model, between the format
 * readers and the graph builder.
 *
 * A reader (amk-gguf-model.c for a GGUF file, amk-hf-model.c for a Hugging Face
 * checkpoint folder) fills one AmkModelSpec: the hyperparameters, one tensor source per
 * weight the layer graph may ask for (its name, element type, shape and stored bytes,
 * a slice of the mapped file), the tokenizer and the end-of-sequence ids. The builder
 * (amk-model-builder.c) takes only this; it never sees a file format.
 *
 *   amk-gguf.c ─→ amk-gguf-model.c ─┐
 *                                   ├─→ AmkModelSpec ─→ amk-model-builder.c ─→ AmkModel
 *   amk-safetensors.c, amk-json.c ─→ amk-hf-model.c ─┘
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gio/gio.h>
#include "amk-glib.h"

G_BEGIN_DECLS

/* The hyperparameters of a Llama-family decoder, as the layer graph needs them. */
typedef struct {
  const char *architecture;           /* "llama" or "qwen3" (a static string) */
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
  AMK_MODEL_N_WEIGHTS
} AmkModelWeight;

#define AMK_MODEL_WEIGHT_FIRST_LAYER  AMK_MODEL_WEIGHT_ATTN_NORM

/* The element types a weight can be stored in and converted to bf16 from; OTHER is any
 * type the file format knows but amk-glib cannot convert (its name in type_name). */
typedef enum {
  AMK_MODEL_TENSOR_F32,
  AMK_MODEL_TENSOR_F16,
  AMK_MODEL_TENSOR_BF16,
  AMK_MODEL_TENSOR_Q8_0,
  AMK_MODEL_TENSOR_Q4_0,
  AMK_MODEL_TENSOR_Q4_1,
  AMK_MODEL_TENSOR_Q5_0,
  AMK_MODEL_TENSOR_Q5_1,
  AMK_MODEL_TENSOR_Q2_K,
  AMK_MODEL_TENSOR_Q3_K,
  AMK_MODEL_TENSOR_Q4_K,
  AMK_MODEL_TENSOR_Q5_K,
  AMK_MODEL_TENSOR_Q6_K,
  AMK_MODEL_TENSOR_OTHER,
} AmkModelTensorType;

#define AMK_MODEL_TENSOR_MAX_DIMS  8

/* Where one weight's bytes are. */
typedef struct {
  char               *name;             /* the file's name of the tensor */
  const char         *type_name;        /* as the file format writes it (static) */
  AmkModelTensorType  type;
  guint               n_dims;
  guint64             shape[AMK_MODEL_TENSOR_MAX_DIMS];  /* PyTorch order */
  guint64             n_elements;
  GBytes             *data;             /* the stored bytes: a slice of the mapped file */
  char               *file;             /* the file holding it, for messages */
  guint               unpermute_heads;  /* q/k rows permuted by llama.cpp's converter for
                                         * this many heads (undone on conversion); 0 none */
} AmkModelTensor;

typedef struct {
  AmkModelParams      params;
  char               *architecture;   /* owns params.architecture's string */
  char               *source;         /* owns params.source's string (display name) */
  const char * const *names;          /* the file's tensor names, by AmkModelWeight (static) */
  const char         *layer_format;   /* a per-layer name from the layer and names[w] */
  GHashTable         *tensors;        /* the weights the file has: index -> AmkModelTensor */
  AmkTokenizer       *tokenizer;
  GArray             *eos_ids;        /* gint32: every end-of-sequence id, the main one first */
} AmkModelSpec;

/* An empty description of the model at `source` (a display name), whose tensors are
 * named `names[weight]`, per layer with `layer_format` (such as "blk.%u.%s"). */
AmkModelSpec         *amk_model_spec_new          (const char          *source,
                                                   const char * const  *names,
                                                   const char          *layer_format);
void                  amk_model_spec_free         (AmkModelSpec        *spec);
/* Sets params (copying the architecture). */
void                  amk_model_spec_set_params   (AmkModelSpec        *spec,
                                                   const AmkModelParams *params);
/* The file's name of `weight` (of `layer` for the per-layer ones). */
char                 *amk_model_spec_tensor_name  (AmkModelSpec        *spec,
                                                   AmkModelWeight       weight,
                                                   guint                layer);
/* Adds the source of `weight` for the reader to fill (name and file set), or returns it. */
AmkModelTensor       *amk_model_spec_add_tensor   (AmkModelSpec        *spec,
                                                   AmkModelWeight       weight,
                                                   guint                layer,
                                                   const char          *file);
/* The tensor source of `weight`, or NULL when the file has none. */
AmkModelTensor       *amk_model_spec_tensor       (AmkModelSpec        *spec,
                                                   AmkModelWeight       weight,
                                                   guint                layer);
/* Whether the decode step holds `weight` of `layer`: the file has it, it is not the
 * output matrix tied to the token embedding, nor a q/k norm of a model without them. */
gboolean              amk_model_spec_holds        (AmkModelSpec        *spec,
                                                   AmkModelWeight       weight,
                                                   guint                layer);
/* The bytes of the weights the decode step holds, every one of them in bf16. */
guint64               amk_model_spec_bf16_bytes   (AmkModelSpec        *spec);
/* Takes the tokenizer's main EOS id and then `ids` (NULL: none) as the EOS ids, without
 * repeats. */
void                  amk_model_spec_set_tokenizer (AmkModelSpec       *spec,
                                                    AmkTokenizer       *tokenizer,
                                                    GArray             *extra_eos_ids);
/* Hyperparameters the graph can be built from: every count positive and bounded, the
 * heads grouped evenly and of even length (AMK_MODEL_ERROR_INVALID_METADATA). */
gboolean              amk_model_params_check      (const AmkModelParams *params,
                                                   GError             **error);

/* The weight as little-endian bf16, exactly rows × cols values (rows 0: a vector of
 * cols), after checking that the tensor is there and has that shape; *name (may be
 * NULL) points into the spec. A bf16 tensor is the file's bytes themselves. */
GBytes               *amk_model_spec_load_bf16    (AmkModelSpec        *spec,
                                                   AmkModelWeight       weight,
                                                   guint                layer,
                                                   guint64              rows,
                                                   guint64              cols,
                                                   const char         **name,
                                                   GError             **error);

/* Set in a keep mask: a matrix stays in its block type only where a GPU's MATVEC streams
 * it faster as stored than as bf16, i.e. where COLUMNS takes it (each lane's columns
 * loaded straight into registers, kernels/ops-matvec-columns.cuh): Q4_K and Q5_K, Q8_0
 * with rows of a multiple of 256, Q6_K of 2048. Elsewhere the ring's arithmetic, not
 * memory, bounds it, so bf16 is faster. */
#define AMK_KEEP_WHERE_GPU_FASTER (1u << 31)

/* The block-quantized AmkDType a matrix stored in one stays in when `keep` has its bit
 * (1 << AmkDType) and its rows are whole blocks (and, with AMK_KEEP_WHERE_GPU_FASTER,
 * COLUMNS takes them), or -1: it becomes bf16. */
gint                  amk_model_tensor_kept_dtype (const AmkModelTensor *t,
                                                   guint32               keep);
/* amk_model_spec_load_bf16(), except that a matrix (rows > 0) stored in a block-quantized
 * type whose bit (1 << AmkDType) is set in `keep` comes as the file's blocks (the rope
 * permutation undone on whole rows); *dtype says which: BF16 or that type. */
GBytes               *amk_model_spec_load_weight  (AmkModelSpec        *spec,
                                                   AmkModelWeight       weight,
                                                   guint                layer,
                                                   guint64              rows,
                                                   guint64              cols,
                                                   guint32              keep,
                                                   AmkDType            *dtype,
                                                   const char         **name,
                                                   GError             **error);

/* Converts n_elements values stored as `type` (little-endian; Q types in whole blocks)
 * to bf16, rounded to nearest even. FALSE for AMK_MODEL_TENSOR_OTHER. */
gboolean              amk_model_tensor_type_to_bf16 (AmkModelTensorType  type,
                                                     const guint8       *data,
                                                     gsize               n_elements,
                                                     guint16            *out);
/* The bytes n_elements values of `type` take; 0 for OTHER or a count that is not a
 * whole number of blocks. */
gsize                 amk_model_tensor_type_bytes  (AmkModelTensorType  type,
                                                    guint64             n_elements);

/* The q/k row order of llama.cpp's convert_hf_to_gguf.py (`permute`) on n_rows rows of
 * row_bytes bytes (any values: bf16, floats, a quantized type's blocks) in n_heads heads,
 * in place: to_gguf applies it, else undoes it (to Hugging Face's rotate-half order).
 * AMK_MODEL_ERROR_TENSOR_SHAPE unless n_rows is a multiple of 2 n_heads. */
gboolean              amk_model_permute_qk_rows   (guint8              *rows,
                                                   gsize                n_rows,
                                                   gsize                row_bytes,
                                                   guint                n_heads,
                                                   gboolean             to_gguf,
                                                   GError             **error);
/* Undoes the q/k row permutation of llama.cpp's convert_hf_to_gguf.py (`permute`) in
 * place: `rows` holds n_rows rows of n_cols values (row-major); n_heads is the head
 * count the converter used (n_head for Q, n_head_kv for K). Afterwards the rows are in
 * Hugging Face's rotate-half order. Fails (AMK_MODEL_ERROR_TENSOR_SHAPE) when n_rows is
 * not a multiple of 2 * n_heads. */
gboolean              amk_model_unpermute_qk      (guint16             *rows,
                                                   gsize                n_rows,
                                                   gsize                n_cols,
                                                   guint                n_heads,
                                                   GError             **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkModelSpec, amk_model_spec_free)

G_END_DECLS
