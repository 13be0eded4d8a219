/* amk-gguf-convert-private.h: a Hugging Face checkpoint's description (AmkModelSpec) in
 * llama.cpp's GGUF conventions, written so that amk-gguf-model.c reads the same model
 * back: the hyperparameter keys, the Llama 3 RoPE table, the tokenizer arrays and
 * llama's q/k row order. `amk quantize` makes a checkpoint folder's GGUF file with them.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-gguf-writer-private.h"
#include "amk-model-spec-private.h"

G_BEGIN_DECLS

/* general.architecture and the "<arch>.*" keys of `hp`; `context` (the checkpoint's
 * max_position_embeddings, 0 if unknown) becomes <arch>.context_length. */
void      amk_gguf_convert_params      (AmkGgufWriter         *writer,
                                        const AmkModelParams  *hp,
                                        guint                  context);

/* The checkpoint's max_position_embeddings (config.json of `dir`), 0 when it has none. */
gboolean  amk_gguf_convert_read_context (const char           *dir,
                                        guint                 *context,
                                        GError               **error);

/* Llama 3 RoPE scaling as llama.cpp keeps it: the rope.scaling keys set, and the table
 * of head_dim / 2 frequency divisors for the F32 tensor "rope_freqs.weight" returned
 * (g_free); NULL with no error for plain RoPE. Scalings amk's GGUF reader would not
 * recognise (frequency factors other than 1 and 4) fail with
 * AMK_MODEL_ERROR_UNSUPPORTED_FEATURE. */
float    *amk_gguf_convert_rope_freqs  (AmkGgufWriter         *writer,
                                        const AmkModelParams  *hp,
                                        gsize                 *n,
                                        GError               **error);

/* tokenizer.ggml.* (model "gpt2": the tokens, their types, the merges, the
 * pre-tokenizer's name, BOS, EOS, add_bos_token) and tokenizer.chat_template of a
 * tokenizer.json's tokenizer. The pre-tokenizer's name is one whose GGUF tokenizer
 * encodes a sample text as `tokenizer` does, one with the very same pre-tokenizer steps
 * first; none of them: AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, naming `source`. */
gboolean  amk_gguf_convert_tokenizer   (AmkGgufWriter         *writer,
                                        AmkTokenizer          *tokenizer,
                                        const char            *source,
                                        GError               **error);

/* llama.cpp's q or k row order for its interleaved RoPE (convert_hf_to_gguf.py's
 * permute), in place: n_rows rows of n_cols floats in n_heads heads; the inverse of
 * amk_model_unpermute_qk(). AMK_MODEL_ERROR_TENSOR_SHAPE unless n_rows is a multiple of
 * 2 n_heads. */
gboolean  amk_gguf_convert_permute_qk  (float                 *rows,
                                        gsize                  n_rows,
                                        gsize                  n_cols,
                                        guint                  n_heads,
                                        GError               **error);

G_END_DECLS
