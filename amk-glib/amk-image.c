/* amk-image.c: AmkProgram to and from bytes. The image is one GVariant (little-endian
 * host layout for the raw instruction table); loading treats the bytes as untrusted and
 * verifies the result.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-program-private.h"
#include "amk-error.h"

#define IMAGE_MAGIC "amk-image"
/* magic, ABI version, queues, scratch size, buffers (name, dtype, role, shape, arena
 * offset, contents), counter names, raw instructions, per-queue instruction indices */
#define IMAGE_TYPE "(suuta(syyaxtmay)amsayaai)"

/**
 * amk_program_serialize:
 * @self: a program
 *
 * Serializes the whole image (buffers with their default contents, counters,
 * instructions, queues) to bytes that [ctor@Amk.Program.new_from_bytes] loads back.
 *
 * Returns: (transfer full): the serialized image
 */
GBytes *
amk_program_serialize (AmkProgram *self)
{
  GVariantBuilder buffers, counters, queues;
  g_autoptr(GVariant) image = NULL;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), NULL);

  g_variant_builder_init (&buffers, G_VARIANT_TYPE ("a(syyaxtmay)"));
  for (guint b = 0; b < self->buffers->len; b++)
    {
      AmkBufferInfo *info = g_ptr_array_index (self->buffers, b);
      GVariant *data = NULL;

      if (info->data != NULL)
        data = g_variant_new_from_bytes (G_VARIANT_TYPE_BYTESTRING, info->data, TRUE);
      g_variant_builder_add (&buffers, "(syy@axt@may)",
                             info->name, (guchar) info->dtype, (guchar) info->role,
                             g_variant_new_fixed_array (G_VARIANT_TYPE_INT64, info->shape,
                                                        info->n_dims, sizeof (gint64)),
                             info->arena_offset,
                             g_variant_new_maybe (G_VARIANT_TYPE_BYTESTRING, data));
    }

  g_variant_builder_init (&counters, G_VARIANT_TYPE ("ams"));
  for (guint c = 0; c < self->counter_names->len; c++)
    g_variant_builder_add (&counters, "ms", g_ptr_array_index (self->counter_names, c));

  g_variant_builder_init (&queues, G_VARIANT_TYPE ("aai"));
  for (guint q = 0; q < self->num_queues; q++)
    {
      GArray *queue = g_ptr_array_index (self->queues, q);
      g_variant_builder_add_value (&queues,
                                   g_variant_new_fixed_array (G_VARIANT_TYPE_INT32, queue->data,
                                                              queue->len, sizeof (gint32)));
    }

  image = g_variant_ref_sink (
    g_variant_new ("(suut@a(syyaxtmay)@ams@ay@aai)",
                   IMAGE_MAGIC, (guint32) AMK_ABI_VERSION, self->num_queues, self->scratch_size,
                   g_variant_builder_end (&buffers),
                   g_variant_builder_end (&counters),
                   g_variant_new_fixed_array (G_VARIANT_TYPE_BYTE, self->instructions->data,
                                              self->instructions->len * sizeof (amk_instruction_t), 1),
                   g_variant_builder_end (&queues)));
  return g_variant_get_data_as_bytes (image);
}

/**
 * amk_program_save:
 * @self: a program
 * @path: (type filename): where to write the image
 * @error: return location for a #GError
 *
 * Writes [method@Amk.Program.serialize]'s bytes to @path atomically.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_program_save (AmkProgram  *self,
                  const char  *path,
                  GError     **error)
{
  g_autoptr(GBytes) bytes = NULL;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (path != NULL, FALSE);

  bytes = amk_program_serialize (self);
  return g_file_set_contents (path, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes), error);
}

static gboolean
corrupt (GError **error, const char *what)
{
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT,
               _("The bytes are not a valid amk image: %s"), what);
  return FALSE;
}

static gboolean
load_buffers (AmkProgram *self, GVariant *buffers, GError **error)
{
  GVariantIter iter;
  const char *name;
  guchar dtype, role;
  GVariant *shape_v, *data_v;
  guint64 offset;

  g_variant_iter_init (&iter, buffers);
  while (g_variant_iter_next (&iter, "(&syy@axt@may)", &name, &dtype, &role, &shape_v, &offset, &data_v))
    {
      g_autoptr(GVariant) data = g_variant_get_maybe (data_v);
      gsize n_dims = 0;
      const gint64 *shape = g_variant_get_fixed_array (shape_v, &n_dims, sizeof (gint64));
      gint index;
      gboolean ok;

      index = amk_program_add_buffer_at (self, name, dtype, shape, n_dims, role, offset, error);
      ok = index >= 0;
      if (ok && data != NULL)
        {
          g_autoptr(GBytes) bytes = g_variant_get_data_as_bytes (data);
          ok = amk_program_set_buffer_data (self, index, bytes, error);
        }
      g_variant_unref (shape_v);
      g_variant_unref (data_v);
      if (!ok)
        return FALSE;
    }
  return TRUE;
}

static gboolean
load_queues (AmkProgram *self, GVariant *instructions, GVariant *queues, GError **error)
{
  gsize n_bytes = 0;
  const guint8 *raw = g_variant_get_fixed_array (instructions, &n_bytes, 1);
  gsize n_instructions = n_bytes / sizeof (amk_instruction_t);

  if (n_bytes % sizeof (amk_instruction_t) != 0)
    return corrupt (error, _("the instruction table is not a whole number of instructions"));
  if (n_instructions > AMK_MAX_ENTRIES)
    return corrupt (error, _("too many instructions"));
  if (g_variant_n_children (queues) != self->num_queues)
    return corrupt (error, _("the number of queue lists differs from the number of queues"));

  g_array_set_size (self->instructions, n_instructions);
  if (n_bytes > 0)
    memcpy (self->instructions->data, raw, n_bytes);

  for (guint q = 0; q < self->num_queues; q++)
    {
      g_autoptr(GVariant) list = g_variant_get_child_value (queues, q);
      gsize len = 0;
      const gint32 *indices = g_variant_get_fixed_array (list, &len, sizeof (gint32));
      GArray *queue = g_ptr_array_index (self->queues, q);

      g_array_set_size (queue, 0);
      g_array_append_vals (queue, indices, len);
    }
  return TRUE;
}

/**
 * amk_program_new_from_bytes:
 * @bytes: a serialized image
 * @error: return location for a #GError
 *
 * Loads an image made by [method@Amk.Program.serialize] and verifies it. The bytes are
 * treated as untrusted: anything malformed gives %AMK_PROGRAM_ERROR_CORRUPT, an image of
 * another ABI version %AMK_PROGRAM_ERROR_VERSION, and an image that loads but is unsound
 * the verifier's error.
 *
 * Returns: (transfer full): the verified program, or %NULL with @error set
 */
AmkProgram *
amk_program_new_from_bytes (GBytes  *bytes,
                            GError **error)
{
  g_autoptr(GVariant) image = NULL;
  g_autoptr(GVariant) buffers = NULL;
  g_autoptr(GVariant) counters = NULL;
  g_autoptr(GVariant) instructions = NULL;
  g_autoptr(GVariant) queues = NULL;
  g_autoptr(AmkProgram) self = NULL;
  const char *magic;
  guint32 abi_version, num_queues;
  guint64 scratch_size;

  g_return_val_if_fail (bytes != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  image = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE (IMAGE_TYPE), bytes, FALSE));
  if (!g_variant_is_normal_form (image))
    {
      corrupt (error, _("the data is truncated or malformed"));
      return NULL;
    }
  g_variant_get (image, "(&suut@a(syyaxtmay)@ams@ay@aai)", &magic, &abi_version, &num_queues,
                 &scratch_size, &buffers, &counters, &instructions, &queues);
  if (!g_str_equal (magic, IMAGE_MAGIC))
    {
      corrupt (error, _("the magic string is missing"));
      return NULL;
    }
  if (abi_version != AMK_ABI_VERSION)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_VERSION,
                   _("The image was made for ABI version %u; this library reads version %d. Rebuild the image with this library."),
                   abi_version, AMK_ABI_VERSION);
      return NULL;
    }
  if (num_queues < 1 || num_queues > AMK_MAX_QUEUES)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("The image has %u queues; between 1 and %u are allowed"),
                   num_queues, AMK_MAX_QUEUES);
      return NULL;
    }
  if (g_variant_n_children (counters) > AMK_MAX_ENTRIES ||
      g_variant_n_children (buffers) > AMK_MAX_ENTRIES)
    {
      corrupt (error, _("too many buffers or counters"));
      return NULL;
    }

  self = amk_program_new (num_queues);
  if (!load_buffers (self, buffers, error))
    return NULL;
  amk_program_set_scratch_size (self, scratch_size);

  for (gsize c = 0; c < g_variant_n_children (counters); c++)
    {
      g_autoptr(GVariant) child = g_variant_get_child_value (counters, c);
      g_autoptr(GVariant) name = g_variant_get_maybe (child);
      amk_program_add_counter (self, name != NULL ? g_variant_get_string (name, NULL) : NULL);
    }

  if (!load_queues (self, instructions, queues, error))
    return NULL;
  if (!amk_program_verify (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * amk_program_new_from_file:
 * @path: (type filename): a file written by [method@Amk.Program.save]
 * @error: return location for a #GError
 *
 * Loads and verifies an image from a file, like [ctor@Amk.Program.new_from_bytes].
 *
 * Returns: (transfer full): the verified program, or %NULL with @error set
 */
AmkProgram *
amk_program_new_from_file (const char  *path,
                           GError     **error)
{
  g_autoptr(GMappedFile) file = NULL;
  g_autoptr(GBytes) bytes = NULL;

  g_return_val_if_fail (path != NULL, NULL);

  file = g_mapped_file_new (path, FALSE, error);
  if (file == NULL)
    return NULL;
  bytes = g_mapped_file_get_bytes (file);
  return amk_program_new_from_bytes (bytes, error);
}
