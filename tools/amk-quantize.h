/* amk-quantize.h: a model (a GGUF file or a Hugging Face checkpoint folder) rewritten as
 * a GGUF file of another tensor type mix: what `amk quantize` runs (amk-quantize.c),
 * without any printing.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* The mixes (see amk-quantize.c for which tensor gets which type). */
typedef enum {
  AMK_QUANTIZE_Q8_0,
  AMK_QUANTIZE_Q4_K_M,
  AMK_QUANTIZE_Q5_K_M,
  AMK_QUANTIZE_Q6_K,
  AMK_QUANTIZE_F16,
  AMK_QUANTIZE_BF16,
} AmkQuantizeMix;

/* A --type name ("q4_k_m") to its mix; an unknown one is a G_OPTION_ERROR_BAD_VALUE
 * that lists the known ones. */
gboolean     amk_quantize_mix_from_name (const char           *name,
                                         AmkQuantizeMix       *mix,
                                         GError              **error);
const char  *amk_quantize_mix_name      (AmkQuantizeMix        mix);

/* A model path that is there, and a checkpoint folder if it is a folder: the plain
 * G_IO_ERROR_NOT_FOUND sentence otherwise (before any reader's). */
gboolean     amk_quantize_check_input   (const char           *path,
                                         GError              **error);

#define AMK_QUANTIZE_MAX_TYPES 64

typedef struct {
  guint    n_tensors;
  guint64  n_elements;
  guint64  bytes_in;                         /* the source tensors' stored bytes */
  guint64  bytes_out;                        /* the written tensors' bytes */
  guint64  file_bytes;                       /* the whole output file */
  guint    count[AMK_QUANTIZE_MAX_TYPES];    /* tensors written per ggml type */
  guint64  bytes[AMK_QUANTIZE_MAX_TYPES];    /* and their bytes */
} AmkQuantizeSummary;

/* Called before tensor `index` of `n` (named `name` in the output, written as the ggml
 * type named `type`) is converted. */
typedef void (*AmkQuantizeProgress) (guint        index,
                                     guint        n,
                                     const char  *name,
                                     const char  *type,
                                     gpointer     user_data);

/* Writes `out` from `in` (never over `in` itself) through out.tmp; fills `summary`.
 * `progress` is called in the calling thread; `cancellable` is checked between tensors
 * (G_IO_ERROR_CANCELLED, and out.tmp removed). */
gboolean     amk_quantize_model         (const char           *in,
                                         const char           *out,
                                         AmkQuantizeMix        mix,
                                         AmkQuantizeProgress   progress,
                                         gpointer              user_data,
                                         AmkQuantizeSummary   *summary,
                                         GCancellable         *cancellable,
                                         GError              **error);

G_END_DECLS
