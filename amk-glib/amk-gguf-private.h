/* amk-gguf-private.h: the gguf file parser (untrusted input).
 *
 * Reads GGUF version 3 (little-endian) files: the metadata (every value type, arrays
 * of scalars and of strings), the tensor infos and the tensor data, and dequantizes the
 * tensor types amk-glib uses (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
 * K-quants Q2_K to Q6_K; amk-dequant.c) to bf16. Every offset,
 * count and length of the file is bounds-checked; a malformed file gives a GError in
 * AMK_MODEL_ERROR, never a crash: AMK_MODEL_ERROR_CORRUPT (corrupt, truncated, out of
 * bounds), AMK_MODEL_ERROR_UNSUPPORTED_VERSION (another version, big-endian),
 * AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE (an unknown tensor type),
 * AMK_MODEL_ERROR_INVALID_METADATA (a key that is missing or of another type). A file
 * that cannot be read or mapped is a G_IO_ERROR.
 *
 * Tensor dimensions are in ggml order: dims[0] is the fastest-varying one (the length
 * of a row), so a [rows, cols] PyTorch weight has dims = { cols, rows }.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include "amk-model-spec-private.h"

G_BEGIN_DECLS

/* gguf metadata value types (gguf_type) */
typedef enum {
  AMK_GGUF_TYPE_UINT8 = 0,
  AMK_GGUF_TYPE_INT8 = 1,
  AMK_GGUF_TYPE_UINT16 = 2,
  AMK_GGUF_TYPE_INT16 = 3,
  AMK_GGUF_TYPE_UINT32 = 4,
  AMK_GGUF_TYPE_INT32 = 5,
  AMK_GGUF_TYPE_FLOAT32 = 6,
  AMK_GGUF_TYPE_BOOL = 7,
  AMK_GGUF_TYPE_STRING = 8,
  AMK_GGUF_TYPE_ARRAY = 9,
  AMK_GGUF_TYPE_UINT64 = 10,
  AMK_GGUF_TYPE_INT64 = 11,
  AMK_GGUF_TYPE_FLOAT64 = 12,
} AmkGgufType;

/* ggml tensor types (ggml_type); only some are dequantized, all known ones load */
typedef enum {
  AMK_GGML_TYPE_F32 = 0,
  AMK_GGML_TYPE_F16 = 1,
  AMK_GGML_TYPE_Q4_0 = 2,
  AMK_GGML_TYPE_Q4_1 = 3,
  AMK_GGML_TYPE_Q5_0 = 6,
  AMK_GGML_TYPE_Q5_1 = 7,
  AMK_GGML_TYPE_Q8_0 = 8,
  AMK_GGML_TYPE_Q8_1 = 9,
  AMK_GGML_TYPE_Q2_K = 10,
  AMK_GGML_TYPE_Q3_K = 11,
  AMK_GGML_TYPE_Q4_K = 12,
  AMK_GGML_TYPE_Q5_K = 13,
  AMK_GGML_TYPE_Q6_K = 14,
  AMK_GGML_TYPE_Q8_K = 15,
  AMK_GGML_TYPE_I8 = 24,
  AMK_GGML_TYPE_I16 = 25,
  AMK_GGML_TYPE_I32 = 26,
  AMK_GGML_TYPE_I64 = 27,
  AMK_GGML_TYPE_F64 = 28,
  AMK_GGML_TYPE_BF16 = 30,
} AmkGgmlType;

#define AMK_GGUF_VERSION            3
#define AMK_GGUF_DEFAULT_ALIGNMENT  32
#define AMK_GGUF_MAX_DIMS           4

/* Limits on what a file may declare (beyond "fits in the file"). */
#define AMK_GGUF_MAX_TENSORS        (1u << 20)
#define AMK_GGUF_MAX_KV             (1u << 20)
#define AMK_GGUF_MAX_KEY_LENGTH     65535u
#define AMK_GGUF_MAX_STRING_LENGTH  (G_GUINT64_CONSTANT (1) << 30)
#define AMK_GGUF_MAX_ARRAY_LENGTH   (G_GUINT64_CONSTANT (1) << 30)
#define AMK_GGUF_MAX_ALIGNMENT      (1u << 20)

typedef struct _AmkGguf AmkGguf;

typedef struct {
  const char   *name;
  AmkGgmlType   type;
  guint         n_dims;
  guint64       dims[AMK_GGUF_MAX_DIMS];   /* ggml order; unused ones are 1 */
  guint64       n_elements;
  guint64       offset;                    /* from the start of the data section */
  const guint8 *data;                      /* inside the file; no alignment promised */
  gsize         n_bytes;
  const char   *file;                      /* the file's display name, for messages */
} AmkGgufTensor;

AmkGguf              *amk_gguf_open               (const char   *path,
                                                   GError      **error);
/* `name` is used in messages only (may be NULL). The bytes are kept referenced. */
AmkGguf              *amk_gguf_open_bytes         (GBytes       *bytes,
                                                   const char   *name,
                                                   GError      **error);
void                  amk_gguf_free               (AmkGguf      *self);

/* The bytes of a scalar metadata value of `type`; 0 for string, array and unknown types. */
guint                 amk_gguf_value_type_size    (guint32       type);
guint32               amk_gguf_get_version        (AmkGguf      *self);
guint32               amk_gguf_get_alignment      (AmkGguf      *self);

/* metadata */
gsize                 amk_gguf_get_n_keys         (AmkGguf      *self);
const char           *amk_gguf_get_key            (AmkGguf      *self,
                                                   gsize         index);
gboolean              amk_gguf_has_key            (AmkGguf      *self,
                                                   const char   *key);
/* The value type of `key`; for an array also its element type and length. */
gboolean              amk_gguf_get_key_type       (AmkGguf      *self,
                                                   const char   *key,
                                                   AmkGgufType  *type,
                                                   AmkGgufType  *element_type,
                                                   gsize        *n_elements,
                                                   GError      **error);
/* Integers of any gguf integer type whose value fits; floats of either width. */
gboolean              amk_gguf_get_u32            (AmkGguf      *self,
                                                   const char   *key,
                                                   guint32      *value,
                                                   GError      **error);
gboolean              amk_gguf_get_u64            (AmkGguf      *self,
                                                   const char   *key,
                                                   guint64      *value,
                                                   GError      **error);
gboolean              amk_gguf_get_i64            (AmkGguf      *self,
                                                   const char   *key,
                                                   gint64       *value,
                                                   GError      **error);
gboolean              amk_gguf_get_f32            (AmkGguf      *self,
                                                   const char   *key,
                                                   float        *value,
                                                   GError      **error);
gboolean              amk_gguf_get_f64            (AmkGguf      *self,
                                                   const char   *key,
                                                   double       *value,
                                                   GError      **error);
gboolean              amk_gguf_get_bool           (AmkGguf      *self,
                                                   const char   *key,
                                                   gboolean     *value,
                                                   GError      **error);
/* Borrowed, NUL-terminated (an embedded NUL ends it early; `length` is the full one). */
gboolean              amk_gguf_get_string         (AmkGguf      *self,
                                                   const char   *key,
                                                   const char  **value,
                                                   gsize        *length,
                                                   GError      **error);
/* Borrowed NULL-terminated vector of `*n` strings, valid until amk_gguf_free(). */
const char * const   *amk_gguf_get_string_array   (AmkGguf      *self,
                                                   const char   *key,
                                                   gsize        *n,
                                                   GError      **error);
/* The elements of an array of numbers or bools as the file holds them (little-endian,
 * borrowed), with their type and count; an array of strings is the wrong type. */
const guint8         *amk_gguf_get_array_data     (AmkGguf      *self,
                                                   const char   *key,
                                                   AmkGgufType  *element_type,
                                                   gsize        *n,
                                                   GError      **error);
/* Newly allocated copies (g_free); element types converted where the value fits. */
gint32               *amk_gguf_get_i32_array      (AmkGguf      *self,
                                                   const char   *key,
                                                   gsize        *n,
                                                   GError      **error);
float                *amk_gguf_get_f32_array      (AmkGguf      *self,
                                                   const char   *key,
                                                   gsize        *n,
                                                   GError      **error);

/* tensors */
gsize                 amk_gguf_get_n_tensors      (AmkGguf      *self);
const AmkGgufTensor  *amk_gguf_get_tensor         (AmkGguf      *self,
                                                   gsize         index);
const AmkGgufTensor  *amk_gguf_find_tensor        (AmkGguf      *self,
                                                   const char   *name);
const char           *amk_ggml_type_name          (AmkGgmlType   type);
/* The elements and bytes of one block of `type` (1 and the element size for F32, F16,
 * ...); FALSE for a type ggml does not define. */
gboolean              amk_ggml_type_size          (AmkGgmlType   type,
                                                   guint        *block,
                                                   guint        *bytes);
/* Fills `out` (tensor->n_elements values) with the tensor rounded to bf16 (RNE). */
gboolean              amk_gguf_tensor_to_bf16     (const AmkGgufTensor *tensor,
                                                   guint16      *out,
                                                   GError      **error);

/* The neutral element type of a ggml type (AMK_MODEL_TENSOR_OTHER where amk-glib has no
 * conversion), and the tensor's stored bytes as a slice of the file (no copy). */
AmkModelTensorType    amk_ggml_type_to_model      (AmkGgmlType   type);
GBytes               *amk_gguf_tensor_ref_data    (AmkGguf      *self,
                                                   const AmkGgufTensor *tensor);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkGguf, amk_gguf_free)

G_END_DECLS
