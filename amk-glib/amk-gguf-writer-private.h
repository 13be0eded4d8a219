/* amk-gguf-writer-private.h: writes GGUF version 3 files (little-endian), the format
 * amk-gguf.c reads.
 *
 * Metadata first (any value type the reader knows, in the order set; setting a key
 * again replaces its value in place), then the tensor infos; the data offsets follow
 * from the types and shapes, aligned to general.alignment (32 unless set). Writing
 * streams: amk_gguf_writer_begin() writes everything before the data into PATH.tmp,
 * amk_gguf_writer_write_tensor() each tensor's bytes in the order they were added, and
 * amk_gguf_writer_finish() renames PATH.tmp to PATH. On any failure, and when the writer
 * is freed before finishing, PATH.tmp is removed: PATH is never half written.
 *
 * Errors: G_IO_ERROR from the file system (G_IO_ERROR_NO_SPACE for a full disk),
 * AMK_MODEL_ERROR_TENSOR_SHAPE for a tensor whose rows are not whole blocks or whose
 * bytes are not those of its type and shape.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include "amk-gguf-private.h"

G_BEGIN_DECLS

typedef struct _AmkGgufWriter AmkGgufWriter;

AmkGgufWriter *amk_gguf_writer_new              (void);
void           amk_gguf_writer_free             (AmkGgufWriter       *self);

/* metadata */
void           amk_gguf_writer_set_uint         (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 AmkGgufType          type,
                                                 guint64              value);
void           amk_gguf_writer_set_int          (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 AmkGgufType          type,
                                                 gint64               value);
void           amk_gguf_writer_set_u32          (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 guint32              value);
void           amk_gguf_writer_set_f32          (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 float                value);
void           amk_gguf_writer_set_f64          (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 double               value);
void           amk_gguf_writer_set_bool         (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 gboolean             value);
/* `len` bytes (no NUL inside: the reader refuses them). */
void           amk_gguf_writer_set_string       (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 const char          *value,
                                                 gsize                len);
/* n elements of a numeric `element_type`, in host order (gint32 for INT32, guint8 0/1
 * for BOOL, ...). */
void           amk_gguf_writer_set_array        (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 AmkGgufType          element_type,
                                                 const void          *elements,
                                                 gsize                n);
void           amk_gguf_writer_set_string_array (AmkGgufWriter       *self,
                                                 const char          *key,
                                                 const char * const  *strings,
                                                 gsize                n);
/* The value of `key` in `source`, of the same type. */
gboolean       amk_gguf_writer_copy_key         (AmkGgufWriter       *self,
                                                 AmkGguf             *source,
                                                 const char          *key,
                                                 GError             **error);
gboolean       amk_gguf_writer_has_key          (AmkGgufWriter       *self,
                                                 const char          *key);
void           amk_gguf_writer_remove_key       (AmkGgufWriter       *self,
                                                 const char          *key);
/* A power of two up to AMK_GGUF_MAX_ALIGNMENT; also sets general.alignment. */
void           amk_gguf_writer_set_alignment    (AmkGgufWriter       *self,
                                                 guint32              alignment);

/* tensors: dims in ggml order (dims[0] the row length) */
gboolean       amk_gguf_writer_add_tensor       (AmkGgufWriter       *self,
                                                 const char          *name,
                                                 AmkGgmlType          type,
                                                 guint                n_dims,
                                                 const guint64       *dims,
                                                 GError             **error);
gsize          amk_gguf_writer_get_n_tensors    (AmkGgufWriter       *self);
/* The bytes tensor `index` takes in the file (without the padding). */
gsize          amk_gguf_writer_tensor_bytes     (AmkGgufWriter       *self,
                                                 gsize                index);

/* writing */
gboolean       amk_gguf_writer_begin            (AmkGgufWriter       *self,
                                                 const char          *path,
                                                 GError             **error);
/* The next tensor's bytes: exactly amk_gguf_writer_tensor_bytes() of them. */
gboolean       amk_gguf_writer_write_tensor     (AmkGgufWriter       *self,
                                                 const void          *data,
                                                 gsize                n_bytes,
                                                 GError             **error);
gboolean       amk_gguf_writer_finish           (AmkGgufWriter       *self,
                                                 GError             **error);
/* The bytes written to the file so far (all of it after finish). */
guint64        amk_gguf_writer_get_offset       (AmkGgufWriter       *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkGgufWriter, amk_gguf_writer_free)

G_END_DECLS
