/* amk-gguf-writer.c: GGUF version 3 files, streamed to PATH.tmp and renamed to PATH
 * once complete (see amk-gguf-writer-private.h).
 *
 * Each metadata value is serialized when it is set, so the header is written in one
 * pass; the tensors' offsets follow from their types and shapes, so their data can be
 * streamed one tensor at a time without holding the model in memory. The file is
 * written with plain write(2) through a buffer so that the system's reason for a
 * failure (a full disk, a file size limit) reaches the message as it is.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>
#include <glib/gi18n-lib.h>
#include <glib/gstdio.h>
#include <gio/gio.h>

#include "amk-glib.h"
#include "amk-gguf-writer-private.h"

#define BUFFER_SIZE  (1u << 20)

typedef struct {
  char       *key;
  GByteArray *value;          /* the value type and the value, as the file holds them */
} Kv;

typedef struct {
  char        *name;
  AmkGgmlType  type;
  guint        n_dims;
  guint64      dims[AMK_GGUF_MAX_DIMS];
  gsize        n_bytes;
  guint64      offset;        /* from the start of the data section (set by begin) */
} Tensor;

struct _AmkGgufWriter {
  GPtrArray  *kvs;            /* Kv*, in the order set */
  GHashTable *kv_index;       /* key -> Kv* */
  GArray     *tensors;        /* Tensor */
  GHashTable *tensor_names;   /* name (owned by tensors) */
  guint32     alignment;

  /* while writing */
  char       *path;
  char       *tmp_path;
  int         fd;             /* -1 when not writing */
  guint8     *buffer;
  gsize       buffered;
  guint64     offset;         /* bytes in the file, the buffered ones included */
  gsize       next;           /* the next tensor to write */
  gboolean    finished;
};

static void
kv_free (Kv *kv)
{
  g_free (kv->key);
  g_byte_array_unref (kv->value);
  g_free (kv);
}

static void
tensor_clear (Tensor *t)
{
  g_free (t->name);
}

AmkGgufWriter *
amk_gguf_writer_new (void)
{
  AmkGgufWriter *self = g_new0 (AmkGgufWriter, 1);

  self->kvs = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_free);
  self->kv_index = g_hash_table_new (g_str_hash, g_str_equal);
  self->tensors = g_array_new (FALSE, TRUE, sizeof (Tensor));
  g_array_set_clear_func (self->tensors, (GDestroyNotify) tensor_clear);
  self->tensor_names = g_hash_table_new (g_str_hash, g_str_equal);
  self->alignment = AMK_GGUF_DEFAULT_ALIGNMENT;
  self->fd = -1;
  return self;
}

/* Closes and removes an unfinished PATH.tmp. */
static void
abandon (AmkGgufWriter *self)
{
  if (self->fd >= 0)
    {
      close (self->fd);
      self->fd = -1;
      g_unlink (self->tmp_path);
    }
  g_clear_pointer (&self->buffer, g_free);
}

void
amk_gguf_writer_free (AmkGgufWriter *self)
{
  if (self == NULL)
    return;
  abandon (self);
  g_hash_table_unref (self->kv_index);
  g_ptr_array_unref (self->kvs);
  g_hash_table_unref (self->tensor_names);
  g_array_unref (self->tensors);
  g_free (self->path);
  g_free (self->tmp_path);
  g_free (self);
}

/* ---- metadata ------------------------------------------------------------------------ */

static void b_bytes (GByteArray *b, const void *p, gsize n) { g_byte_array_append (b, p, (guint) n); }
static void b_u8 (GByteArray *b, guint8 v) { b_bytes (b, &v, 1); }
static void b_u16 (GByteArray *b, guint16 v) { v = GUINT16_TO_LE (v); b_bytes (b, &v, 2); }
static void b_u32 (GByteArray *b, guint32 v) { v = GUINT32_TO_LE (v); b_bytes (b, &v, 4); }
static void b_u64 (GByteArray *b, guint64 v) { v = GUINT64_TO_LE (v); b_bytes (b, &v, 8); }

static void
b_string (GByteArray *b, const char *s, gsize len)
{
  b_u64 (b, len);
  b_bytes (b, s, len);
}

/* Appends one scalar of `type` (1, 2, 4 or 8 bytes) from the low bits of `bits`. */
static void
b_scalar (GByteArray *b, AmkGgufType type, guint64 bits)
{
  switch (amk_gguf_value_type_size (type))
    {
    case 1: b_u8 (b, (guint8) bits); break;
    case 2: b_u16 (b, (guint16) bits); break;
    case 4: b_u32 (b, (guint32) bits); break;
    case 8: b_u64 (b, bits); break;
    default: g_assert_not_reached ();
    }
}

/* Takes `value` (type and value) as the value of `key`, replacing an earlier one. */
static void
set_value (AmkGgufWriter *self, const char *key, GByteArray *value)
{
  Kv *kv = g_hash_table_lookup (self->kv_index, key);

  if (kv != NULL)
    {
      g_byte_array_unref (kv->value);
      kv->value = value;
      return;
    }
  kv = g_new0 (Kv, 1);
  kv->key = g_strdup (key);
  kv->value = value;
  g_ptr_array_add (self->kvs, kv);
  g_hash_table_insert (self->kv_index, kv->key, kv);
}

static GByteArray *
new_value (AmkGgufType type)
{
  GByteArray *b = g_byte_array_new ();

  b_u32 (b, type);
  return b;
}

void
amk_gguf_writer_set_uint (AmkGgufWriter *self,
                          const char    *key,
                          AmkGgufType    type,
                          guint64        value)
{
  GByteArray *b;

  g_return_if_fail (self != NULL && key != NULL);
  g_return_if_fail (type == AMK_GGUF_TYPE_UINT8 || type == AMK_GGUF_TYPE_UINT16 ||
                    type == AMK_GGUF_TYPE_UINT32 || type == AMK_GGUF_TYPE_UINT64);

  b = new_value (type);
  b_scalar (b, type, value);
  set_value (self, key, b);
}

void
amk_gguf_writer_set_int (AmkGgufWriter *self,
                         const char    *key,
                         AmkGgufType    type,
                         gint64         value)
{
  GByteArray *b;

  g_return_if_fail (self != NULL && key != NULL);
  g_return_if_fail (type == AMK_GGUF_TYPE_INT8 || type == AMK_GGUF_TYPE_INT16 ||
                    type == AMK_GGUF_TYPE_INT32 || type == AMK_GGUF_TYPE_INT64);

  b = new_value (type);
  b_scalar (b, type, (guint64) value);
  set_value (self, key, b);
}

void
amk_gguf_writer_set_u32 (AmkGgufWriter *self,
                         const char    *key,
                         guint32        value)
{
  amk_gguf_writer_set_uint (self, key, AMK_GGUF_TYPE_UINT32, value);
}

void
amk_gguf_writer_set_f32 (AmkGgufWriter *self,
                         const char    *key,
                         float          value)
{
  GByteArray *b;
  guint32 bits;

  g_return_if_fail (self != NULL && key != NULL);

  memcpy (&bits, &value, 4);
  b = new_value (AMK_GGUF_TYPE_FLOAT32);
  b_u32 (b, bits);
  set_value (self, key, b);
}

void
amk_gguf_writer_set_f64 (AmkGgufWriter *self,
                         const char    *key,
                         double         value)
{
  GByteArray *b;
  guint64 bits;

  g_return_if_fail (self != NULL && key != NULL);

  memcpy (&bits, &value, 8);
  b = new_value (AMK_GGUF_TYPE_FLOAT64);
  b_u64 (b, bits);
  set_value (self, key, b);
}

void
amk_gguf_writer_set_bool (AmkGgufWriter *self,
                          const char    *key,
                          gboolean       value)
{
  GByteArray *b;

  g_return_if_fail (self != NULL && key != NULL);

  b = new_value (AMK_GGUF_TYPE_BOOL);
  b_u8 (b, value ? 1 : 0);
  set_value (self, key, b);
}

void
amk_gguf_writer_set_string (AmkGgufWriter *self,
                            const char    *key,
                            const char    *value,
                            gsize          len)
{
  GByteArray *b;

  g_return_if_fail (self != NULL && key != NULL);
  g_return_if_fail (value != NULL || len == 0);

  b = new_value (AMK_GGUF_TYPE_STRING);
  b_string (b, value, len);
  set_value (self, key, b);
}

void
amk_gguf_writer_set_array (AmkGgufWriter *self,
                           const char    *key,
                           AmkGgufType    element_type,
                           const void    *elements,
                           gsize          n)
{
  const guint size = amk_gguf_value_type_size (element_type);
  const guint8 *p = elements;
  GByteArray *b;

  g_return_if_fail (self != NULL && key != NULL);
  g_return_if_fail (size > 0);
  g_return_if_fail (elements != NULL || n == 0);

  b = new_value (AMK_GGUF_TYPE_ARRAY);
  b_u32 (b, element_type);
  b_u64 (b, n);
  for (gsize i = 0; i < n; i++)
    {
      guint64 bits = 0;

      switch (size)
        {
        case 1: bits = p[i]; break;
        case 2: { guint16 v; memcpy (&v, p + 2 * i, 2); bits = v; } break;
        case 4: { guint32 v; memcpy (&v, p + 4 * i, 4); bits = v; } break;
        default: memcpy (&bits, p + 8 * i, 8); break;
        }
      if (element_type == AMK_GGUF_TYPE_BOOL)
        bits = bits != 0;
      b_scalar (b, element_type, bits);
    }
  set_value (self, key, b);
}

void
amk_gguf_writer_set_string_array (AmkGgufWriter      *self,
                                  const char         *key,
                                  const char * const *strings,
                                  gsize               n)
{
  GByteArray *b;

  g_return_if_fail (self != NULL && key != NULL);
  g_return_if_fail (strings != NULL || n == 0);

  b = new_value (AMK_GGUF_TYPE_ARRAY);
  b_u32 (b, AMK_GGUF_TYPE_STRING);
  b_u64 (b, n);
  for (gsize i = 0; i < n; i++)
    b_string (b, strings[i], strlen (strings[i]));
  set_value (self, key, b);
}

gboolean
amk_gguf_writer_copy_key (AmkGgufWriter  *self,
                          AmkGguf        *source,
                          const char     *key,
                          GError        **error)
{
  AmkGgufType type, element_type;
  gsize n = 0;

  g_return_val_if_fail (self != NULL && source != NULL && key != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!amk_gguf_get_key_type (source, key, &type, &element_type, &n, error))
    return FALSE;
  switch (type)
    {
    case AMK_GGUF_TYPE_UINT8: case AMK_GGUF_TYPE_UINT16:
    case AMK_GGUF_TYPE_UINT32: case AMK_GGUF_TYPE_UINT64:
      {
        guint64 v = 0;

        if (!amk_gguf_get_u64 (source, key, &v, error))
          return FALSE;
        amk_gguf_writer_set_uint (self, key, type, v);
        return TRUE;
      }
    case AMK_GGUF_TYPE_INT8: case AMK_GGUF_TYPE_INT16:
    case AMK_GGUF_TYPE_INT32: case AMK_GGUF_TYPE_INT64:
      {
        gint64 v = 0;

        if (!amk_gguf_get_i64 (source, key, &v, error))
          return FALSE;
        amk_gguf_writer_set_int (self, key, type, v);
        return TRUE;
      }
    case AMK_GGUF_TYPE_FLOAT32: case AMK_GGUF_TYPE_FLOAT64:
      {
        double v = 0.0;

        if (!amk_gguf_get_f64 (source, key, &v, error))
          return FALSE;
        /* (a float32 read as a double converts back exactly) */
        if (type == AMK_GGUF_TYPE_FLOAT32)
          amk_gguf_writer_set_f32 (self, key, (float) v);
        else
          amk_gguf_writer_set_f64 (self, key, v);
        return TRUE;
      }
    case AMK_GGUF_TYPE_BOOL:
      {
        gboolean v = FALSE;

        if (!amk_gguf_get_bool (source, key, &v, error))
          return FALSE;
        amk_gguf_writer_set_bool (self, key, v);
        return TRUE;
      }
    case AMK_GGUF_TYPE_STRING:
      {
        const char *v = NULL;
        gsize len = 0;

        if (!amk_gguf_get_string (source, key, &v, &len, error))
          return FALSE;
        amk_gguf_writer_set_string (self, key, v, len);
        return TRUE;
      }
    case AMK_GGUF_TYPE_ARRAY:
      if (element_type == AMK_GGUF_TYPE_STRING)
        {
          const char * const *v = amk_gguf_get_string_array (source, key, &n, error);

          if (v == NULL)
            return FALSE;
          amk_gguf_writer_set_string_array (self, key, v, n);
        }
      else
        {
          const guint8 *raw = amk_gguf_get_array_data (source, key, &element_type, &n, error);
          GByteArray *b;

          if (raw == NULL)
            return FALSE;
          /* the elements are little-endian already: copied as they are */
          b = new_value (AMK_GGUF_TYPE_ARRAY);
          b_u32 (b, element_type);
          b_u64 (b, n);
          b_bytes (b, raw, n * amk_gguf_value_type_size (element_type));
          set_value (self, key, b);
        }
      return TRUE;
    default:
      g_assert_not_reached ();
    }
}

gboolean
amk_gguf_writer_has_key (AmkGgufWriter *self,
                         const char    *key)
{
  g_return_val_if_fail (self != NULL && key != NULL, FALSE);
  return g_hash_table_contains (self->kv_index, key);
}

void
amk_gguf_writer_remove_key (AmkGgufWriter *self,
                            const char    *key)
{
  Kv *kv;

  g_return_if_fail (self != NULL && key != NULL);

  kv = g_hash_table_lookup (self->kv_index, key);
  if (kv == NULL)
    return;
  g_hash_table_remove (self->kv_index, key);
  g_ptr_array_remove (self->kvs, kv);
}

void
amk_gguf_writer_set_alignment (AmkGgufWriter *self,
                               guint32        alignment)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (alignment > 0 && (alignment & (alignment - 1)) == 0 &&
                    alignment <= AMK_GGUF_MAX_ALIGNMENT);

  amk_gguf_writer_set_u32 (self, "general.alignment", alignment);
}

/* ---- tensors ----------------------------------------------------------------------- */

gboolean
amk_gguf_writer_add_tensor (AmkGgufWriter  *self,
                            const char     *name,
                            AmkGgmlType     type,
                            guint           n_dims,
                            const guint64  *dims,
                            GError        **error)
{
  Tensor t = { 0 };
  guint block = 0, bytes = 0;
  guint64 n = 1, n_bytes;

  g_return_val_if_fail (self != NULL && name != NULL, FALSE);
  g_return_val_if_fail (n_dims >= 1 && n_dims <= AMK_GGUF_MAX_DIMS && dims != NULL, FALSE);
  g_return_val_if_fail (self->fd < 0 && !self->finished, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!amk_ggml_type_size (type, &block, &bytes))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE,
                   _("Cannot write the tensor “%s”: %u is not a GGUF tensor type"), name, type);
      return FALSE;
    }
  for (guint d = 0; d < n_dims; d++)
    if (!g_uint64_checked_mul (&n, n, dims[d]) || n > G_MAXINT64)
      {
        g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE,
                     _("Cannot write the tensor “%s”: its dimensions overflow"), name);
        return FALSE;
      }
  if (dims[0] % block != 0)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE,
                   _("Cannot write the tensor “%s” as %s: its rows of %" PRIu64 " elements are "
                     "not a whole number of blocks of %u"),
                   name, amk_ggml_type_name (type), dims[0], block);
      return FALSE;
    }
  if (!g_uint64_checked_mul (&n_bytes, n / block, bytes) || n_bytes > G_MAXSIZE)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE,
                   _("Cannot write the tensor “%s”: its size overflows"), name);
      return FALSE;
    }
  if (g_hash_table_contains (self->tensor_names, name))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("Cannot write the tensor “%s” twice"), name);
      return FALSE;
    }
  t.name = g_strdup (name);
  t.type = type;
  t.n_dims = n_dims;
  for (guint d = 0; d < AMK_GGUF_MAX_DIMS; d++)
    t.dims[d] = d < n_dims ? dims[d] : 1;
  t.n_bytes = (gsize) n_bytes;
  g_array_append_val (self->tensors, t);
  g_hash_table_add (self->tensor_names, g_array_index (self->tensors, Tensor, self->tensors->len - 1).name);
  return TRUE;
}

gsize
amk_gguf_writer_get_n_tensors (AmkGgufWriter *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->tensors->len;
}

gsize
amk_gguf_writer_tensor_bytes (AmkGgufWriter *self,
                              gsize          index)
{
  g_return_val_if_fail (self != NULL && index < self->tensors->len, 0);
  return g_array_index (self->tensors, Tensor, index).n_bytes;
}

/* ---- writing ------------------------------------------------------------------------- */

/* A failed system call on PATH.tmp: the error (named after PATH, the file the user asked
 * for), and the unfinished file removed. */
static gboolean
fail_errno (AmkGgufWriter *self, int saved_errno, GError **error)
{
  g_autofree char *display = g_filename_display_name (self->path);

  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
               _("Cannot write “%s”: %s"), display, g_strerror (saved_errno));
  abandon (self);
  g_unlink (self->tmp_path);
  return FALSE;
}

static gboolean
flush (AmkGgufWriter *self, GError **error)
{
  gsize done = 0;

  while (done < self->buffered)
    {
      gssize n = write (self->fd, self->buffer + done, self->buffered - done);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return fail_errno (self, errno, error);
      if (n == 0)
        return fail_errno (self, ENOSPC, error);
      done += (gsize) n;
    }
  self->buffered = 0;
  return TRUE;
}

static gboolean
put (AmkGgufWriter *self, const void *data, gsize n, GError **error)
{
  const guint8 *p = data;

  while (n > 0)
    {
      gsize room = BUFFER_SIZE - self->buffered, take = MIN (room, n);

      memcpy (self->buffer + self->buffered, p, take);
      self->buffered += take;
      self->offset += take;
      p += take;
      n -= take;
      if (self->buffered == BUFFER_SIZE && !flush (self, error))
        return FALSE;
    }
  return TRUE;
}

/* Zeros up to the next multiple of the alignment. */
static gboolean
pad (AmkGgufWriter *self, GError **error)
{
  static const guint8 zeros[64] = { 0 };

  while (self->offset % self->alignment != 0)
    {
      gsize n = MIN (sizeof zeros, self->alignment - self->offset % self->alignment);

      if (!put (self, zeros, n, error))
        return FALSE;
    }
  return TRUE;
}

/* The data alignment general.alignment asks for (it may have been copied from another
 * file), checked as the reader checks it. */
static gboolean
read_alignment (AmkGgufWriter *self, GError **error)
{
  const Kv *kv = g_hash_table_lookup (self->kv_index, "general.alignment");
  guint32 type, value = 0;

  self->alignment = AMK_GGUF_DEFAULT_ALIGNMENT;
  if (kv == NULL)
    return TRUE;
  memcpy (&type, kv->value->data, 4);
  if (kv->value->len == 8)
    memcpy (&value, kv->value->data + 4, 4);
  if (GUINT32_FROM_LE (type) != AMK_GGUF_TYPE_UINT32 || kv->value->len != 8 ||
      (value = GUINT32_FROM_LE (value)) == 0 || (value & (value - 1)) != 0 ||
      value > AMK_GGUF_MAX_ALIGNMENT)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                   _("Cannot write a GGUF file whose general.alignment is not a uint32 power "
                     "of two of at most %u"), AMK_GGUF_MAX_ALIGNMENT);
      return FALSE;
    }
  self->alignment = value;
  return TRUE;
}

gboolean
amk_gguf_writer_begin (AmkGgufWriter  *self,
                       const char     *path,
                       GError        **error)
{
  g_autoptr(GByteArray) head = g_byte_array_new ();
  guint64 data_offset = 0;

  g_return_val_if_fail (self != NULL && path != NULL, FALSE);
  g_return_val_if_fail (self->fd < 0 && !self->finished, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  g_free (self->path);
  g_free (self->tmp_path);
  self->path = g_strdup (path);
  self->tmp_path = g_strconcat (path, ".tmp", NULL);
  if (!read_alignment (self, error))
    return FALSE;

  b_bytes (head, "GGUF", 4);
  b_u32 (head, AMK_GGUF_VERSION);
  b_u64 (head, self->tensors->len);
  b_u64 (head, self->kvs->len);
  for (guint i = 0; i < self->kvs->len; i++)
    {
      const Kv *kv = g_ptr_array_index (self->kvs, i);

      b_string (head, kv->key, strlen (kv->key));
      b_bytes (head, kv->value->data, kv->value->len);
    }
  for (guint i = 0; i < self->tensors->len; i++)
    {
      Tensor *t = &g_array_index (self->tensors, Tensor, i);

      data_offset = (data_offset + self->alignment - 1) / self->alignment * self->alignment;
      t->offset = data_offset;
      data_offset += t->n_bytes;
      b_string (head, t->name, strlen (t->name));
      b_u32 (head, t->n_dims);
      for (guint d = 0; d < t->n_dims; d++)
        b_u64 (head, t->dims[d]);
      b_u32 (head, t->type);
      b_u64 (head, t->offset);
    }

  /* a PATH.tmp left by a run that was killed is ours to replace */
  g_unlink (self->tmp_path);
  self->fd = g_open (self->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (self->fd < 0)
    {
      int saved_errno = errno;
      g_autofree char *display = g_filename_display_name (self->tmp_path);

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   _("Cannot create “%s”: %s"), display, g_strerror (saved_errno));
      return FALSE;
    }
  self->buffer = g_malloc (BUFFER_SIZE);
  self->buffered = 0;
  self->offset = 0;
  self->next = 0;
  return put (self, head->data, head->len, error) && pad (self, error);
}

gboolean
amk_gguf_writer_write_tensor (AmkGgufWriter  *self,
                              const void     *data,
                              gsize           n_bytes,
                              GError        **error)
{
  const Tensor *t;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (data != NULL || n_bytes == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (self->fd < 0 || self->next >= self->tensors->len)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   _("Cannot write a tensor: the file is not open or has all its tensors"));
      return FALSE;
    }
  t = &g_array_index (self->tensors, Tensor, self->next);
  if (n_bytes != t->n_bytes)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE,
                   _("Cannot write the tensor “%s”: it has %zu bytes, not the %zu of its "
                     "type and shape"), t->name, n_bytes, t->n_bytes);
      abandon (self);
      return FALSE;
    }
  if (!put (self, data, n_bytes, error) || !pad (self, error))
    return FALSE;
  self->next++;
  return TRUE;
}

gboolean
amk_gguf_writer_finish (AmkGgufWriter  *self,
                        GError        **error)
{
  int fd;

  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (self->fd < 0 || self->next != self->tensors->len)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   _("Cannot finish the GGUF file: %zu of its %u tensors were written"),
                   self->next, self->tensors->len);
      abandon (self);
      return FALSE;
    }
  /* the data reaches the disk before the rename makes it PATH, so that a crash
   * leaves the old PATH or the whole new one */
  if (!flush (self, error))
    return FALSE;
  if (fsync (self->fd) != 0 && errno != EINVAL)
    return fail_errno (self, errno, error);
  fd = self->fd;
  self->fd = -1;
  g_clear_pointer (&self->buffer, g_free);
  if (close (fd) != 0 || g_rename (self->tmp_path, self->path) != 0)
    return fail_errno (self, errno, error);
  self->finished = TRUE;
  return TRUE;
}

guint64
amk_gguf_writer_get_offset (AmkGgufWriter *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->offset;
}
