/* amk-model-readers-private.h: the format readers, each making the neutral description
 * of a model (amk-model-spec-private.h) from its files. AmkModel picks the reader by the
 * path (a folder: Hugging Face), the unit tests and fuzz targets call them directly.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-model-spec-private.h"

G_BEGIN_DECLS

/* A GGUF file of a "llama" or "qwen3" model (amk-gguf-model.c). */
AmkModelSpec         *amk_gguf_model_read         (const char          *path,
                                                   GError             **error);
/* llama.cpp's name of `weight` (of `layer` for the per-layer ones), as the GGUF reader
 * looks it up: "token_embd.weight", "blk.3.attn_q.weight", ... */
char                 *amk_gguf_model_tensor_name  (AmkModelWeight       weight,
                                                   guint                layer);
/* A Hugging Face checkpoint folder: config.json, model.safetensors (or sharded with
 * model.safetensors.index.json), tokenizer.json; generation_config.json and
 * tokenizer_config.json when present (amk-hf-model.c). */
AmkModelSpec         *amk_hf_model_read           (const char          *dir,
                                                   GError             **error);
/* config.json's text to hyperparameters (what the HF reader does first; fuzzed);
 * params->architecture is a static string, params->source is `file`. */
gboolean              amk_model_parse_hf_config   (const char          *text,
                                                   gsize                len,
                                                   const char          *file,
                                                   AmkModelParams      *params,
                                                   GError             **error);

G_END_DECLS
