/* amk-gguf.c: the gguf file parser (untrusted input).
 *
 * The whole file is mapped (or held as GBytes); parsing walks it with a bounds-checked
 * reader, so no read goes past the end whatever the counts and lengths say. Counts are
 * checked against the bytes left before anything is allocated, so a file cannot make
 * the parser allocate much more than its own size. Multi-byte values are read with
 * memcpy: the data of a GBytes or of a tensor has no alignment promise.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>
#include <glib/gi18n-lib.h>
#include <gio/gio.h>

#include "amk-gguf-private.h"
#include "amk-model-spec-private.h"
#include "amk-dtype-private.h"
#include "amk-loader-private.h"

typedef struct {
  char         *key;
  AmkGgufType   type;
  AmkGgufType   element_type;   /* arrays */
  guint64       n;              /* arrays: number of elements */
  union {
    guint64 u;                  /* unsigned integers and bool */
    gint64  i;                  /* signed integers */
    double  f;                  /* floats */
  } v;
  char         *str;            /* STRING */
  gsize         str_len;
  const guint8 *raw;            /* arrays of numbers: n little-endian elements */
  char        **strv;           /* arrays of strings, NULL-terminated */
} Kv;

struct _AmkGguf {
  GBytes        *bytes;
  GMappedFile   *mapped;
  char          *name;          /* for messages */
  guint32        version;
  guint32        alignment;
  Kv            *kvs;
  gsize          n_kvs;
  GHashTable    *kv_index;      /* key -> Kv* */
  AmkGgufTensor *tensors;
  gsize          n_tensors;
  GHashTable    *tensor_index;  /* name -> AmkGgufTensor* */
};

typedef struct {
  guint        block;           /* elements per block */
  guint        size;            /* bytes per block */
  const char  *name;
} TypeInfo;

/* ggml's type traits (block size, bytes per block), as gguf-py's GGML_QUANT_SIZES */
static const TypeInfo type_infos[] = {
  [0] = { 1, 4, "F32" },        [1] = { 1, 2, "F16" },
  [2] = { 32, 18, "Q4_0" },     [3] = { 32, 20, "Q4_1" },
  [6] = { 32, 22, "Q5_0" },     [7] = { 32, 24, "Q5_1" },
  [8] = { 32, 34, "Q8_0" },     [9] = { 32, 40, "Q8_1" },
  [10] = { 256, 84, "Q2_K" },   [11] = { 256, 110, "Q3_K" },
  [12] = { 256, 144, "Q4_K" },  [13] = { 256, 176, "Q5_K" },
  [14] = { 256, 210, "Q6_K" },  [15] = { 256, 292, "Q8_K" },
  [16] = { 256, 66, "IQ2_XXS" }, [17] = { 256, 74, "IQ2_XS" },
  [18] = { 256, 98, "IQ3_XXS" }, [19] = { 256, 50, "IQ1_S" },
  [20] = { 32, 18, "IQ4_NL" },  [21] = { 256, 110, "IQ3_S" },
  [22] = { 256, 82, "IQ2_S" },  [23] = { 256, 136, "IQ4_XS" },
  [24] = { 1, 1, "I8" },        [25] = { 1, 2, "I16" },
  [26] = { 1, 4, "I32" },       [27] = { 1, 8, "I64" },
  [28] = { 1, 8, "F64" },       [29] = { 256, 56, "IQ1_M" },
  [30] = { 1, 2, "BF16" },
  [34] = { 256, 54, "TQ1_0" },  [35] = { 256, 66, "TQ2_0" },
  [39] = { 32, 17, "MXFP4" },
};

static const TypeInfo *
type_info (guint32 type)
{
  if (type >= G_N_ELEMENTS (type_infos) || type_infos[type].block == 0)
    return NULL;
  return &type_infos[type];
}

const char *
amk_ggml_type_name (AmkGgmlType type)
{
  const TypeInfo *info = type_info (type);
  return info != NULL ? info->name : "?";
}

gboolean
amk_ggml_type_size (AmkGgmlType  type,
                    guint       *block,
                    guint       *bytes)
{
  const TypeInfo *info = type_info (type);

  if (info == NULL)
    return FALSE;
  if (block != NULL)
    *block = info->block;
  if (bytes != NULL)
    *bytes = info->size;
  return TRUE;
}

static const char *
value_type_name (AmkGgufType type)
{
  static const char *names[] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
    "string", "array", "uint64", "int64", "float64",
  };
  return (guint) type < G_N_ELEMENTS (names) ? names[type] : "?";
}

guint
amk_gguf_value_type_size (guint32 type)
{
  switch (type)
    {
    case AMK_GGUF_TYPE_UINT8: case AMK_GGUF_TYPE_INT8: case AMK_GGUF_TYPE_BOOL:
      return 1;
    case AMK_GGUF_TYPE_UINT16: case AMK_GGUF_TYPE_INT16:
      return 2;
    case AMK_GGUF_TYPE_UINT32: case AMK_GGUF_TYPE_INT32: case AMK_GGUF_TYPE_FLOAT32:
      return 4;
    case AMK_GGUF_TYPE_UINT64: case AMK_GGUF_TYPE_INT64: case AMK_GGUF_TYPE_FLOAT64:
      return 8;
    default:
      return 0;
    }
}

static guint16 rd16 (const guint8 *p) { guint16 v; memcpy (&v, p, 2); return GUINT16_FROM_LE (v); }
static guint32 rd32 (const guint8 *p) { guint32 v; memcpy (&v, p, 4); return GUINT32_FROM_LE (v); }
static guint64 rd64 (const guint8 *p) { guint64 v; memcpy (&v, p, 8); return GUINT64_FROM_LE (v); }

static float
rdf32 (const guint8 *p)
{
  guint32 u = rd32 (p);
  float f;
  memcpy (&f, &u, 4);
  return f;
}

static double
rdf64 (const guint8 *p)
{
  guint64 u = rd64 (p);
  double f;
  memcpy (&f, &u, 8);
  return f;
}

/* A malformed file: "Cannot read the GGUF file “file”: detail". */
#define fail(error, code, file, ...) amk_loader_fail (error, code, "GGUF", file, __VA_ARGS__)

/* ---- the bounds-checked reader ------------------------------------------------------ */

typedef struct {
  const guint8 *data;
  gsize         size;
  gsize         pos;
  const char   *file;
  char         *where;         /* what is being read, for messages */
} Reader;

static void
reader_at (Reader *r, char *where)
{
  g_free (r->where);
  r->where = where;
}

static gboolean
reader_take (Reader *r, gsize n, const guint8 **out, GError **error)
{
  if (n > r->size - r->pos)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                 _("the file is truncated: it ends at byte %zu, inside %s"), r->size, r->where);
  *out = r->data + r->pos;
  r->pos += n;
  return TRUE;
}

static gboolean
reader_u32 (Reader *r, guint32 *v, GError **error)
{
  const guint8 *p = NULL;
  if (!reader_take (r, 4, &p, error))
    return FALSE;
  *v = rd32 (p);
  return TRUE;
}

static gboolean
reader_u64 (Reader *r, guint64 *v, GError **error)
{
  const guint8 *p = NULL;
  if (!reader_take (r, 8, &p, error))
    return FALSE;
  *v = rd64 (p);
  return TRUE;
}

/* A gguf_string (u64 length + bytes), copied and NUL-terminated. */
static gboolean
reader_string (Reader *r, guint64 max_length, char **out, gsize *out_len, GError **error)
{
  guint64 len;
  const guint8 *p = NULL;
  char *s;

  if (!reader_u64 (r, &len, error))
    return FALSE;
  if (len > max_length)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                 _("a string of %" PRIu64 " bytes in %s exceeds the limit of %" PRIu64 " bytes"),
                 len, r->where, max_length);
  if (len > r->size - r->pos)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                 _("a string of %" PRIu64 " bytes in %s runs past the end of the file"),
                 len, r->where);
  if (!reader_take (r, (gsize) len, &p, error))
    return FALSE;
  s = g_malloc ((gsize) len + 1);
  memcpy (s, p, (gsize) len);
  s[len] = '\0';
  *out = s;
  if (out_len != NULL)
    *out_len = (gsize) len;
  return TRUE;
}

/* A name (key or tensor name): valid UTF-8 without NUL bytes. */
static gboolean
reader_name (Reader *r, char **out, GError **error)
{
  gsize len = 0;

  if (!reader_string (r, AMK_GGUF_MAX_KEY_LENGTH, out, &len, error))
    return FALSE;
  if (strlen (*out) != len || !g_utf8_validate (*out, len, NULL))
    {
      g_clear_pointer (out, g_free);
      return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                   _("the name in %s is not valid UTF-8 or holds a NUL byte"), r->where);
    }
  return TRUE;
}

/* ---- parsing -------------------------------------------------------------------------- */

static void
kv_clear (Kv *kv)
{
  g_free (kv->key);
  g_free (kv->str);
  g_strfreev (kv->strv);
}

static gboolean
read_scalar (Reader *r, Kv *kv, guint32 type, GError **error)
{
  const guint8 *p = NULL;

  if (!reader_take (r, amk_gguf_value_type_size (type), &p, error))
    return FALSE;
  switch (type)
    {
    case AMK_GGUF_TYPE_UINT8:   kv->v.u = p[0]; break;
    case AMK_GGUF_TYPE_INT8:    kv->v.i = (gint8) p[0]; break;
    case AMK_GGUF_TYPE_UINT16:  kv->v.u = rd16 (p); break;
    case AMK_GGUF_TYPE_INT16:   kv->v.i = (gint16) rd16 (p); break;
    case AMK_GGUF_TYPE_UINT32:  kv->v.u = rd32 (p); break;
    case AMK_GGUF_TYPE_INT32:   kv->v.i = (gint32) rd32 (p); break;
    case AMK_GGUF_TYPE_FLOAT32: kv->v.f = rdf32 (p); break;
    case AMK_GGUF_TYPE_UINT64:  kv->v.u = rd64 (p); break;
    case AMK_GGUF_TYPE_INT64:   kv->v.i = (gint64) rd64 (p); break;
    case AMK_GGUF_TYPE_FLOAT64: kv->v.f = rdf64 (p); break;
    case AMK_GGUF_TYPE_BOOL:
      if (p[0] > 1)
        return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                     _("the bool value of key “%s” is %u, not 0 or 1"), kv->key, p[0]);
      kv->v.u = p[0];
      break;
    default:
      g_assert_not_reached ();
    }
  return TRUE;
}

static gboolean
read_value (Reader *r, Kv *kv, GError **error)
{
  guint32 type;

  if (!reader_u32 (r, &type, error))
    return FALSE;
  kv->type = type;
  if (amk_gguf_value_type_size (type) > 0)
    return read_scalar (r, kv, type, error);
  /* every string is read back as a C string, so a NUL inside one would silently cut it
   * short ("llama\0gpt2" read as "llama"): refuse it */
  if (type == AMK_GGUF_TYPE_STRING)
    {
      if (!reader_string (r, AMK_GGUF_MAX_STRING_LENGTH, &kv->str, &kv->str_len, error))
        return FALSE;
      if (strlen (kv->str) != kv->str_len)
        return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                     _("the string value of key “%s” holds a NUL byte"), kv->key);
      return TRUE;
    }
  if (type == AMK_GGUF_TYPE_ARRAY)
    {
      guint32 element_type;
      guint64 n;
      guint size;

      if (!reader_u32 (r, &element_type, error) || !reader_u64 (r, &n, error))
        return FALSE;
      kv->element_type = element_type;
      kv->n = n;
      if (element_type == AMK_GGUF_TYPE_ARRAY)
        return fail (error, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, r->file,
                     _("key “%s” holds an array of arrays"), kv->key);
      if (n > AMK_GGUF_MAX_ARRAY_LENGTH)
        return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                     _("the array of key “%s” has %" PRIu64 " elements, more than the limit of %" PRIu64),
                     kv->key, n, AMK_GGUF_MAX_ARRAY_LENGTH);
      size = amk_gguf_value_type_size (element_type);
      if (size > 0)
        {
          if (n > (r->size - r->pos) / size)
            return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                         _("the array of key “%s” (%" PRIu64 " elements) runs past the end of the file"),
                         kv->key, n);
          if (element_type == AMK_GGUF_TYPE_BOOL)
            for (guint64 i = 0; i < n; i++)
              if (r->data[r->pos + i] > 1)
                return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                             _("element %" PRIu64 " of the bool array of key “%s” is not 0 or 1"),
                             i, kv->key);
          return reader_take (r, (gsize) n * size, &kv->raw, error);
        }
      if (element_type == AMK_GGUF_TYPE_STRING)
        {
          /* every string takes at least its 8-byte length */
          if (n > (r->size - r->pos) / 8)
            return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                         _("the string array of key “%s” (%" PRIu64 " elements) runs past the end of the file"),
                         kv->key, n);
          kv->strv = g_new0 (char *, (gsize) n + 1);
          for (guint64 i = 0; i < n; i++)
            {
              gsize len = 0;

              if (!reader_string (r, AMK_GGUF_MAX_STRING_LENGTH, &kv->strv[i], &len, error))
                return FALSE;
              if (strlen (kv->strv[i]) != len)
                return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                             _("element %" PRIu64 " of the string array of key “%s” holds a NUL byte"),
                             i, kv->key);
            }
          return TRUE;
        }
      return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                   _("the array of key “%s” has the unknown element type %u"), kv->key, element_type);
    }
  return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
               _("key “%s” has the unknown value type %u"), kv->key, type);
}

static gboolean
read_tensor_info (Reader *r, AmkGguf *self, AmkGgufTensor *t, GError **error)
{
  char *name = NULL;
  guint32 n_dims, type;
  const TypeInfo *info;
  guint64 n = 1, n_blocks, n_bytes;

  if (!reader_name (r, &name, error))
    return FALSE;
  t->name = name;   /* owned by self->tensors, freed with it */
  reader_at (r, g_strdup_printf (_("the info of tensor “%s”"), name));
  if (!reader_u32 (r, &n_dims, error))
    return FALSE;
  if (n_dims > AMK_GGUF_MAX_DIMS)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                 _("tensor “%s” has %u dimensions, more than %d"), name, n_dims, AMK_GGUF_MAX_DIMS);
  /* a scalar (gguf-py writes a 0-d array with no dimensions) is one element */
  t->n_dims = MAX (n_dims, 1);
  for (guint d = 0; d < AMK_GGUF_MAX_DIMS; d++)
    t->dims[d] = 1;
  for (guint d = 0; d < n_dims; d++)
    {
      if (!reader_u64 (r, &t->dims[d], error))
        return FALSE;
      if (t->dims[d] > G_MAXINT64 || !g_uint64_checked_mul (&n, n, t->dims[d]) || n > G_MAXINT64)
        return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                     _("the dimensions of tensor “%s” overflow"), name);
    }
  t->n_elements = n;
  if (!reader_u32 (r, &type, error) || !reader_u64 (r, &t->offset, error))
    return FALSE;
  info = type_info (type);
  if (info == NULL)
    return fail (error, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, r->file,
                 _("tensor “%s” has the unknown type %u"), name, type);
  t->type = type;
  if (t->dims[0] % info->block != 0)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                 _("the rows of tensor “%s” (%" PRIu64 " elements) are not a whole number of %s blocks of %u"),
                 name, t->dims[0], info->name, info->block);
  n_blocks = n / info->block;
  if (!g_uint64_checked_mul (&n_bytes, n_blocks, info->size) || n_bytes > G_MAXSIZE)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                 _("the byte size of tensor “%s” overflows"), name);
  t->n_bytes = (gsize) n_bytes;
  if (g_hash_table_contains (self->tensor_index, name))
    return fail (error, AMK_MODEL_ERROR_CORRUPT, r->file,
                 _("tensor “%s” appears twice"), name);
  g_hash_table_insert (self->tensor_index, name, t);
  return TRUE;
}

static gboolean
parse (AmkGguf *self, GError **error)
{
  Reader r = { 0 };
  gboolean ok = FALSE;
  guint64 n_tensors, n_kvs, data_start;
  gsize data_size;

  r.data = g_bytes_get_data (self->bytes, &r.size);
  r.file = self->name;
  reader_at (&r, g_strdup (_("the header")));

  if (r.size < 4 || memcmp (r.data, "GGUF", 4) != 0)
    {
      fail (error, AMK_MODEL_ERROR_CORRUPT, r.file, _("it does not start with the magic “GGUF”"));
      goto out;
    }
  r.pos = 4;
  if (!reader_u32 (&r, &self->version, error))
    goto out;
  if (self->version != AMK_GGUF_VERSION)
    {
      if (GUINT32_SWAP_LE_BE (self->version) == AMK_GGUF_VERSION)
        fail (error, AMK_MODEL_ERROR_UNSUPPORTED_VERSION, r.file, _("big-endian GGUF files are not supported"));
      else
        fail (error, AMK_MODEL_ERROR_UNSUPPORTED_VERSION, r.file,
              _("GGUF version %u is not supported (only version %d is)"),
              self->version, AMK_GGUF_VERSION);
      goto out;
    }
  if (!reader_u64 (&r, &n_tensors, error) || !reader_u64 (&r, &n_kvs, error))
    goto out;
  /* a tensor info takes at least 24 bytes, a key/value pair at least 13 */
  if (n_tensors > AMK_GGUF_MAX_TENSORS || n_tensors > (r.size - r.pos) / 24)
    {
      fail (error, AMK_MODEL_ERROR_CORRUPT, r.file,
            _("the tensor count %" PRIu64 " is larger than the file or the limit of %u allows"),
            n_tensors, AMK_GGUF_MAX_TENSORS);
      goto out;
    }
  if (n_kvs > AMK_GGUF_MAX_KV || n_kvs > (r.size - r.pos) / 13)
    {
      fail (error, AMK_MODEL_ERROR_CORRUPT, r.file,
            _("the metadata count %" PRIu64 " is larger than the file or the limit of %u allows"),
            n_kvs, AMK_GGUF_MAX_KV);
      goto out;
    }

  self->kvs = g_new0 (Kv, (gsize) n_kvs);
  for (gsize i = 0; i < n_kvs; i++)
    {
      Kv *kv = &self->kvs[i];

      reader_at (&r, g_strdup_printf (_("metadata key #%zu"), i));
      self->n_kvs = i + 1;
      if (!reader_name (&r, &kv->key, error))
        goto out;
      reader_at (&r, g_strdup_printf (_("the value of key “%s”"), kv->key));
      if (g_hash_table_contains (self->kv_index, kv->key))
        {
          fail (error, AMK_MODEL_ERROR_CORRUPT, r.file, _("key “%s” appears twice"), kv->key);
          goto out;
        }
      g_hash_table_insert (self->kv_index, kv->key, kv);
      if (!read_value (&r, kv, error))
        goto out;
    }

  self->tensors = g_new0 (AmkGgufTensor, (gsize) n_tensors);
  for (gsize i = 0; i < n_tensors; i++)
    {
      reader_at (&r, g_strdup_printf (_("tensor info #%zu"), i));
      self->n_tensors = i + 1;
      self->tensors[i].file = self->name;
      if (!read_tensor_info (&r, self, &self->tensors[i], error))
        goto out;
    }

  self->alignment = AMK_GGUF_DEFAULT_ALIGNMENT;
  if (g_hash_table_contains (self->kv_index, "general.alignment"))
    {
      Kv *kv = g_hash_table_lookup (self->kv_index, "general.alignment");
      if (kv->type != AMK_GGUF_TYPE_UINT32 || kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) != 0 ||
          kv->v.u > AMK_GGUF_MAX_ALIGNMENT)
        {
          fail (error, AMK_MODEL_ERROR_CORRUPT, r.file,
                _("general.alignment must be a uint32 power of two of at most %u"),
                AMK_GGUF_MAX_ALIGNMENT);
          goto out;
        }
      self->alignment = (guint32) kv->v.u;
    }

  /* r.pos + alignment cannot overflow: both are far below G_MAXSIZE */
  data_start = ((guint64) r.pos + self->alignment - 1) / self->alignment * self->alignment;
  if (n_tensors > 0 && data_start > r.size)
    {
      fail (error, AMK_MODEL_ERROR_CORRUPT, r.file,
            _("the file is truncated: it ends at byte %zu, before its data section"), r.size);
      goto out;
    }
  data_size = data_start <= r.size ? r.size - (gsize) data_start : 0;
  for (gsize i = 0; i < n_tensors; i++)
    {
      AmkGgufTensor *t = &self->tensors[i];

      if (t->offset % self->alignment != 0)
        {
          fail (error, AMK_MODEL_ERROR_CORRUPT, r.file,
                _("the data of tensor “%s” at offset %" PRIu64 " is not aligned to %u bytes"),
                t->name, t->offset, self->alignment);
          goto out;
        }
      if (t->offset > data_size || t->n_bytes > data_size - t->offset)
        {
          fail (error, AMK_MODEL_ERROR_CORRUPT, r.file,
                _("the data of tensor “%s” (%zu bytes at offset %" PRIu64 ") runs past the end of the file"),
                t->name, t->n_bytes, t->offset);
          goto out;
        }
      t->data = r.data + data_start + t->offset;
    }
  ok = TRUE;

out:
  g_free (r.where);
  return ok;
}

AmkGguf *
amk_gguf_open_bytes (GBytes      *bytes,
                     const char  *name,
                     GError     **error)
{
  g_autoptr(AmkGguf) self = NULL;

  g_return_val_if_fail (bytes != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = g_new0 (AmkGguf, 1);
  self->bytes = g_bytes_ref (bytes);
  self->name = g_strdup (name != NULL ? name : "(bytes)");
  self->kv_index = g_hash_table_new (g_str_hash, g_str_equal);
  self->tensor_index = g_hash_table_new (g_str_hash, g_str_equal);
  if (!parse (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

AmkGguf *
amk_gguf_open (const char  *path,
               GError     **error)
{
  g_autoptr(GMappedFile) mapped = NULL;
  g_autoptr(GBytes) bytes = NULL;
  g_autofree char *display = NULL;
  GError *local = NULL;
  AmkGguf *self;

  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  mapped = g_mapped_file_new (path, FALSE, &local);
  if (mapped == NULL)
    {
      g_set_error_literal (error, G_IO_ERROR, g_io_error_from_file_error (local->code),
                           local->message);
      g_error_free (local);
      return NULL;
    }
  bytes = g_mapped_file_get_bytes (mapped);
  display = g_filename_display_name (path);
  self = amk_gguf_open_bytes (bytes, display, error);
  return self;
}

void
amk_gguf_free (AmkGguf *self)
{
  if (self == NULL)
    return;
  for (gsize i = 0; i < self->n_kvs; i++)
    kv_clear (&self->kvs[i]);
  g_free (self->kvs);
  for (gsize i = 0; i < self->n_tensors; i++)
    g_free ((char *) self->tensors[i].name);
  g_free (self->tensors);
  g_hash_table_unref (self->kv_index);
  g_hash_table_unref (self->tensor_index);
  g_bytes_unref (self->bytes);
  g_free (self->name);
  g_free (self);
}

guint32
amk_gguf_get_version (AmkGguf *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->version;
}

guint32
amk_gguf_get_alignment (AmkGguf *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->alignment;
}

/* ---- metadata access ------------------------------------------------------------------ */

gsize
amk_gguf_get_n_keys (AmkGguf *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_kvs;
}

const char *
amk_gguf_get_key (AmkGguf *self,
                  gsize    index)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (index < self->n_kvs, NULL);
  return self->kvs[index].key;
}

gboolean
amk_gguf_has_key (AmkGguf    *self,
                  const char *key)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  return g_hash_table_contains (self->kv_index, key);
}

static const Kv *
lookup (AmkGguf *self, const char *key, GError **error)
{
  const Kv *kv = g_hash_table_lookup (self->kv_index, key);

  if (kv == NULL)
    g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                 _("The GGUF file “%s” has no metadata key “%s”"), self->name, key);
  return kv;
}

static gboolean
wrong_type (AmkGguf *self, const Kv *kv, const char *expected, GError **error)
{
  g_autofree char *actual = kv->type == AMK_GGUF_TYPE_ARRAY
    ? g_strdup_printf ("array of %s", value_type_name (kv->element_type))
    : g_strdup (value_type_name (kv->type));

  g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
               _("The metadata key “%s” of the GGUF file “%s” is of type %s, expected %s"),
               kv->key, self->name, actual, expected);
  return FALSE;
}

static gboolean
out_of_range (AmkGguf *self, const Kv *kv, const char *expected, GError **error)
{
  g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
               _("The value of the metadata key “%s” of the GGUF file “%s” does not fit in a %s"),
               kv->key, self->name, expected);
  return FALSE;
}

static gboolean
is_unsigned (guint32 type)
{
  return type == AMK_GGUF_TYPE_UINT8 || type == AMK_GGUF_TYPE_UINT16 ||
         type == AMK_GGUF_TYPE_UINT32 || type == AMK_GGUF_TYPE_UINT64;
}

static gboolean
is_signed (guint32 type)
{
  return type == AMK_GGUF_TYPE_INT8 || type == AMK_GGUF_TYPE_INT16 ||
         type == AMK_GGUF_TYPE_INT32 || type == AMK_GGUF_TYPE_INT64;
}

gboolean
amk_gguf_get_key_type (AmkGguf     *self,
                       const char  *key,
                       AmkGgufType *type,
                       AmkGgufType *element_type,
                       gsize       *n_elements,
                       GError     **error)
{
  const Kv *kv;

  g_return_val_if_fail (self != NULL && key != NULL, FALSE);
  if ((kv = lookup (self, key, error)) == NULL)
    return FALSE;
  if (type != NULL)
    *type = kv->type;
  if (element_type != NULL)
    *element_type = kv->type == AMK_GGUF_TYPE_ARRAY ? kv->element_type : kv->type;
  if (n_elements != NULL)
    *n_elements = kv->type == AMK_GGUF_TYPE_ARRAY ? (gsize) kv->n : 1;
  return TRUE;
}

gboolean
amk_gguf_get_u64 (AmkGguf     *self,
                  const char  *key,
                  guint64     *value,
                  GError     **error)
{
  const Kv *kv;

  g_return_val_if_fail (self != NULL && key != NULL && value != NULL, FALSE);
  if ((kv = lookup (self, key, error)) == NULL)
    return FALSE;
  if (is_unsigned (kv->type))
    *value = kv->v.u;
  else if (is_signed (kv->type))
    {
      if (kv->v.i < 0)
        return out_of_range (self, kv, "uint64", error);
      *value = (guint64) kv->v.i;
    }
  else
    return wrong_type (self, kv, "an unsigned integer", error);
  return TRUE;
}

gboolean
amk_gguf_get_u32 (AmkGguf     *self,
                  const char  *key,
                  guint32     *value,
                  GError     **error)
{
  guint64 v = 0;

  g_return_val_if_fail (self != NULL && key != NULL && value != NULL, FALSE);
  if (!amk_gguf_get_u64 (self, key, &v, error))
    return FALSE;
  if (v > G_MAXUINT32)
    return out_of_range (self, g_hash_table_lookup (self->kv_index, key), "uint32", error);
  *value = (guint32) v;
  return TRUE;
}

gboolean
amk_gguf_get_i64 (AmkGguf     *self,
                  const char  *key,
                  gint64      *value,
                  GError     **error)
{
  const Kv *kv;

  g_return_val_if_fail (self != NULL && key != NULL && value != NULL, FALSE);
  if ((kv = lookup (self, key, error)) == NULL)
    return FALSE;
  if (is_signed (kv->type))
    *value = kv->v.i;
  else if (is_unsigned (kv->type))
    {
      if (kv->v.u > G_MAXINT64)
        return out_of_range (self, kv, "int64", error);
      *value = (gint64) kv->v.u;
    }
  else
    return wrong_type (self, kv, "an integer", error);
  return TRUE;
}

gboolean
amk_gguf_get_f64 (AmkGguf     *self,
                  const char  *key,
                  double      *value,
                  GError     **error)
{
  const Kv *kv;

  g_return_val_if_fail (self != NULL && key != NULL && value != NULL, FALSE);
  if ((kv = lookup (self, key, error)) == NULL)
    return FALSE;
  if (kv->type != AMK_GGUF_TYPE_FLOAT32 && kv->type != AMK_GGUF_TYPE_FLOAT64)
    return wrong_type (self, kv, "a float", error);
  *value = kv->v.f;
  return TRUE;
}

gboolean
amk_gguf_get_f32 (AmkGguf     *self,
                  const char  *key,
                  float       *value,
                  GError     **error)
{
  double v = 0.0;

  g_return_val_if_fail (self != NULL && key != NULL && value != NULL, FALSE);
  if (!amk_gguf_get_f64 (self, key, &v, error))
    return FALSE;
  *value = (float) v;
  return TRUE;
}

gboolean
amk_gguf_get_bool (AmkGguf     *self,
                   const char  *key,
                   gboolean    *value,
                   GError     **error)
{
  const Kv *kv;

  g_return_val_if_fail (self != NULL && key != NULL && value != NULL, FALSE);
  if ((kv = lookup (self, key, error)) == NULL)
    return FALSE;
  if (kv->type != AMK_GGUF_TYPE_BOOL)
    return wrong_type (self, kv, "bool", error);
  *value = kv->v.u != 0;
  return TRUE;
}

gboolean
amk_gguf_get_string (AmkGguf     *self,
                     const char  *key,
                     const char **value,
                     gsize       *length,
                     GError     **error)
{
  const Kv *kv;

  g_return_val_if_fail (self != NULL && key != NULL && value != NULL, FALSE);
  if ((kv = lookup (self, key, error)) == NULL)
    return FALSE;
  if (kv->type != AMK_GGUF_TYPE_STRING)
    return wrong_type (self, kv, "string", error);
  *value = kv->str;
  if (length != NULL)
    *length = kv->str_len;
  return TRUE;
}

const char * const *
amk_gguf_get_string_array (AmkGguf     *self,
                           const char  *key,
                           gsize       *n,
                           GError     **error)
{
  const Kv *kv;

  g_return_val_if_fail (self != NULL && key != NULL, NULL);
  if ((kv = lookup (self, key, error)) == NULL)
    return NULL;
  if (kv->type != AMK_GGUF_TYPE_ARRAY || kv->element_type != AMK_GGUF_TYPE_STRING)
    {
      wrong_type (self, kv, "array of string", error);
      return NULL;
    }
  if (n != NULL)
    *n = (gsize) kv->n;
  return (const char * const *) kv->strv;
}

static gboolean
array_lookup (AmkGguf *self, const char *key, const char *expected, const Kv **out, GError **error)
{
  const Kv *kv;

  if ((kv = lookup (self, key, error)) == NULL)
    return FALSE;
  if (kv->type != AMK_GGUF_TYPE_ARRAY || kv->strv != NULL)
    return wrong_type (self, kv, expected, error);
  *out = kv;
  return TRUE;
}

const guint8 *
amk_gguf_get_array_data (AmkGguf      *self,
                         const char   *key,
                         AmkGgufType  *element_type,
                         gsize        *n,
                         GError      **error)
{
  const Kv *kv = NULL;

  g_return_val_if_fail (self != NULL && key != NULL, NULL);
  g_return_val_if_fail (element_type != NULL && n != NULL, NULL);
  if (!array_lookup (self, key, "array of numbers", &kv, error))
    return NULL;
  *element_type = kv->element_type;
  *n = (gsize) kv->n;
  /* (an empty array has no bytes in the file: any non-NULL pointer will do) */
  return kv->raw != NULL ? kv->raw : (const guint8 *) "";
}

gint32 *
amk_gguf_get_i32_array (AmkGguf     *self,
                        const char  *key,
                        gsize       *n,
                        GError     **error)
{
  g_autofree gint32 *values = NULL;
  const Kv *kv = NULL;
  guint size;

  g_return_val_if_fail (self != NULL && key != NULL, NULL);
  if (!array_lookup (self, key, "array of int32", &kv, error))
    return NULL;
  if (!is_signed (kv->element_type) && !is_unsigned (kv->element_type))
    {
      wrong_type (self, kv, "array of int32", error);
      return NULL;
    }
  size = amk_gguf_value_type_size (kv->element_type);
  values = g_new (gint32, MAX (kv->n, 1));
  for (gsize i = 0; i < kv->n; i++)
    {
      const guint8 *p = kv->raw + i * size;
      gint64 v;

      switch (kv->element_type)
        {
        case AMK_GGUF_TYPE_UINT8:  v = p[0]; break;
        case AMK_GGUF_TYPE_INT8:   v = (gint8) p[0]; break;
        case AMK_GGUF_TYPE_UINT16: v = rd16 (p); break;
        case AMK_GGUF_TYPE_INT16:  v = (gint16) rd16 (p); break;
        case AMK_GGUF_TYPE_UINT32: v = rd32 (p); break;
        case AMK_GGUF_TYPE_INT32:  v = (gint32) rd32 (p); break;
        case AMK_GGUF_TYPE_INT64:  v = (gint64) rd64 (p); break;
        case AMK_GGUF_TYPE_UINT64: v = rd64 (p) > G_MAXINT32 ? G_MAXINT64 : (gint64) rd64 (p); break;
        default: g_assert_not_reached ();
        }
      if (v < G_MININT32 || v > G_MAXINT32)
        {
          out_of_range (self, kv, "int32", error);
          return NULL;
        }
      values[i] = (gint32) v;
    }
  if (n != NULL)
    *n = (gsize) kv->n;
  return g_steal_pointer (&values);
}

float *
amk_gguf_get_f32_array (AmkGguf     *self,
                        const char  *key,
                        gsize       *n,
                        GError     **error)
{
  g_autofree float *values = NULL;
  const Kv *kv = NULL;

  g_return_val_if_fail (self != NULL && key != NULL, NULL);
  if (!array_lookup (self, key, "array of float32", &kv, error))
    return NULL;
  if (kv->element_type != AMK_GGUF_TYPE_FLOAT32 && kv->element_type != AMK_GGUF_TYPE_FLOAT64)
    {
      wrong_type (self, kv, "array of float32", error);
      return NULL;
    }
  values = g_new (float, MAX (kv->n, 1));
  for (gsize i = 0; i < kv->n; i++)
    values[i] = kv->element_type == AMK_GGUF_TYPE_FLOAT32
      ? rdf32 (kv->raw + i * 4) : (float) rdf64 (kv->raw + i * 8);
  if (n != NULL)
    *n = (gsize) kv->n;
  return g_steal_pointer (&values);
}

/* ---- tensors -------------------------------------------------------------------------- */

gsize
amk_gguf_get_n_tensors (AmkGguf *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_tensors;
}

const AmkGgufTensor *
amk_gguf_get_tensor (AmkGguf *self,
                     gsize    index)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (index < self->n_tensors, NULL);
  return &self->tensors[index];
}

const AmkGgufTensor *
amk_gguf_find_tensor (AmkGguf    *self,
                      const char *name)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);
  return g_hash_table_lookup (self->tensor_index, name);
}

AmkModelTensorType
amk_ggml_type_to_model (AmkGgmlType type)
{
  switch (type)
    {
    case AMK_GGML_TYPE_F32: return AMK_MODEL_TENSOR_F32;
    case AMK_GGML_TYPE_F16: return AMK_MODEL_TENSOR_F16;
    case AMK_GGML_TYPE_BF16: return AMK_MODEL_TENSOR_BF16;
    case AMK_GGML_TYPE_Q8_0: return AMK_MODEL_TENSOR_Q8_0;
    case AMK_GGML_TYPE_Q4_0: return AMK_MODEL_TENSOR_Q4_0;
    case AMK_GGML_TYPE_Q4_1: return AMK_MODEL_TENSOR_Q4_1;
    case AMK_GGML_TYPE_Q5_0: return AMK_MODEL_TENSOR_Q5_0;
    case AMK_GGML_TYPE_Q5_1: return AMK_MODEL_TENSOR_Q5_1;
    case AMK_GGML_TYPE_Q2_K: return AMK_MODEL_TENSOR_Q2_K;
    case AMK_GGML_TYPE_Q3_K: return AMK_MODEL_TENSOR_Q3_K;
    case AMK_GGML_TYPE_Q4_K: return AMK_MODEL_TENSOR_Q4_K;
    case AMK_GGML_TYPE_Q5_K: return AMK_MODEL_TENSOR_Q5_K;
    case AMK_GGML_TYPE_Q6_K: return AMK_MODEL_TENSOR_Q6_K;
    default: return AMK_MODEL_TENSOR_OTHER;
    }
}

GBytes *
amk_gguf_tensor_ref_data (AmkGguf             *self,
                          const AmkGgufTensor *t)
{
  const guint8 *base;

  g_return_val_if_fail (self != NULL && t != NULL, NULL);

  base = g_bytes_get_data (self->bytes, NULL);
  return g_bytes_new_from_bytes (self->bytes, (gsize) (t->data - base), t->n_bytes);
}

gboolean
amk_gguf_tensor_to_bf16 (const AmkGgufTensor  *t,
                         guint16              *out,
                         GError              **error)
{
  g_return_val_if_fail (t != NULL, FALSE);
  g_return_val_if_fail (out != NULL || t->n_elements == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!amk_model_tensor_type_to_bf16 (amk_ggml_type_to_model (t->type), t->data,
                                      (gsize) t->n_elements, out))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE,
                   _("Tensor “%s” of the GGUF file “%s” is of type %s, which cannot be converted to bf16 (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"),
                   t->name, t->file, amk_ggml_type_name (t->type));
      return FALSE;
    }
  return TRUE;
}
