/* amk-safetensors-private.h: the safetensors file parser (untrusted input).
 *
 * Opens one .safetensors file, or a folder holding model.safetensors or a sharded
 * checkpoint (model.safetensors.index.json naming its shards in "weight_map"). The
 * header is an 8-byte little-endian length and a JSON object parsed with json-glib;
 * every tensor's data_offsets are checked against its dtype and shape, the data
 * section, and the other tensors (no overlaps). Errors, never a crash:
 * AMK_MODEL_ERROR_CORRUPT (corrupt, truncated, out of bounds),
 * AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE (an unknown dtype), and G_IO_ERROR for a
 * missing or unreadable file or shard.
 *
 * Shapes are in the file's (PyTorch) order: shape[0] is the slowest-varying dimension.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include "amk-model-spec-private.h"

G_BEGIN_DECLS

typedef enum {
  AMK_SAFETENSORS_DTYPE_BOOL,
  AMK_SAFETENSORS_DTYPE_U8,
  AMK_SAFETENSORS_DTYPE_I8,
  AMK_SAFETENSORS_DTYPE_F8_E5M2,
  AMK_SAFETENSORS_DTYPE_F8_E4M3,
  AMK_SAFETENSORS_DTYPE_I16,
  AMK_SAFETENSORS_DTYPE_U16,
  AMK_SAFETENSORS_DTYPE_F16,
  AMK_SAFETENSORS_DTYPE_BF16,
  AMK_SAFETENSORS_DTYPE_I32,
  AMK_SAFETENSORS_DTYPE_U32,
  AMK_SAFETENSORS_DTYPE_F32,
  AMK_SAFETENSORS_DTYPE_F64,
  AMK_SAFETENSORS_DTYPE_I64,
  AMK_SAFETENSORS_DTYPE_U64,
} AmkSafetensorsDType;

#define AMK_SAFETENSORS_MAX_DIMS          8
#define AMK_SAFETENSORS_MAX_HEADER        (100u * 1024 * 1024)  /* as the reference crate */
#define AMK_SAFETENSORS_MAX_SHARDS        4096

typedef struct _AmkSafetensors AmkSafetensors;

typedef struct {
  const char          *name;
  AmkSafetensorsDType  dtype;
  guint                n_dims;
  guint64              shape[AMK_SAFETENSORS_MAX_DIMS];
  guint64              n_elements;
  const guint8        *data;       /* inside the file; no alignment promised */
  gsize                n_bytes;
  const char          *file;       /* the shard's display name, for messages */
  GBytes              *bytes;      /* the shard's whole contents (borrowed) */
} AmkSafetensorsTensor;

/* A .safetensors file, or a folder (model.safetensors.index.json, else model.safetensors). */
AmkSafetensors              *amk_safetensors_open           (const char      *path_or_dir,
                                                             GError         **error);
/* One file's bytes (kept referenced); `name` is used in messages only (may be NULL). */
AmkSafetensors              *amk_safetensors_open_bytes     (GBytes          *bytes,
                                                             const char      *name,
                                                             GError         **error);
void                         amk_safetensors_free           (AmkSafetensors  *self);

gsize                        amk_safetensors_get_n_tensors  (AmkSafetensors  *self);
/* In file order (shard by shard, then by data offset). */
const AmkSafetensorsTensor  *amk_safetensors_get_tensor     (AmkSafetensors  *self,
                                                             gsize            index);
const AmkSafetensorsTensor  *amk_safetensors_find_tensor    (AmkSafetensors  *self,
                                                             const char      *name);
/* A string of the "__metadata__" object of the (first) file, or NULL. */
const char                  *amk_safetensors_get_metadata   (AmkSafetensors  *self,
                                                             const char      *key);
const char                  *amk_safetensors_dtype_name     (AmkSafetensorsDType dtype);
guint                        amk_safetensors_dtype_size     (AmkSafetensorsDType dtype);
/* The tensor's data without a copy: a slice of the (mapped) shard, which it keeps. */
GBytes                      *amk_safetensors_tensor_ref_data (const AmkSafetensorsTensor *tensor);
/* The neutral element type of a dtype (AMK_MODEL_TENSOR_OTHER: no conversion). */
AmkModelTensorType           amk_safetensors_dtype_to_model (AmkSafetensorsDType dtype);
/* Fills `out` (tensor->n_elements values) from BF16, F16 or F32 data, rounded (RNE). */
gboolean                     amk_safetensors_tensor_to_bf16 (const AmkSafetensorsTensor *tensor,
                                                             guint16         *out,
                                                             GError         **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkSafetensors, amk_safetensors_free)

G_END_DECLS
