/* amk-program.c: AmkProgram, the image builder.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>

#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-program-private.h"
#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"
#include "amk-enum-types.h"

/**
 * AmkProgram:
 *
 * A megakernel image: a table of buffers, a set of counters, and one queue of
 * instructions per thread block.
 *
 * A program is built with [method@Amk.Program.add_buffer],
 * [method@Amk.Program.add_counter] and [method@Amk.Program.add_instruction] (the raw
 * layer: each instruction names its opcode, the buffers it touches, its parameter
 * slots, the counters it waits on and the counter it signals), or loaded from bytes
 * with [ctor@Amk.Program.new_from_bytes]. Before it runs it is verified
 * ([method@Amk.Program.verify]): every index and size is checked, and an abstract run
 * of the queues proves that it cannot deadlock.
 *
 * A verified program runs on the host with [class@Amk.CpuExecutor] or on a CUDA device
 * with [class@Amk.Launcher]. Both obey the same semantics: block `q` runs queue `q` in
 * order; an instruction starts once every wait `counter >= target` holds; once the whole
 * block finished it, its signal adds `amount` to its counter.
 */

enum {
  PROP_0,
  PROP_NUM_QUEUES,
  PROP_SCRATCH_SIZE,
  PROP_VERIFIED,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (AmkProgram, amk_program, G_TYPE_OBJECT)

void
amk_buffer_info_free (AmkBufferInfo *info)
{
  if (info == NULL)
    return;
  g_free (info->name);
  g_free (info->shape);
  g_clear_pointer (&info->data, g_bytes_unref);
  g_free (info);
}

static void
ensure_queues (AmkProgram *self)
{
  while (self->queues->len < self->num_queues)
    g_ptr_array_add (self->queues, g_array_new (FALSE, FALSE, sizeof (gint32)));
}

static void
amk_program_finalize (GObject *object)
{
  AmkProgram *self = AMK_PROGRAM (object);

  g_hash_table_unref (self->buffer_names); /* its keys belong to the buffers */
  g_ptr_array_unref (self->buffers);
  g_ptr_array_unref (self->counter_names);
  g_array_unref (self->instructions);
  g_ptr_array_unref (self->queues);
  g_array_unref (self->ops);

  G_OBJECT_CLASS (amk_program_parent_class)->finalize (object);
}

static void
amk_program_get_property (GObject    *object,
                          guint       prop_id,
                          GValue     *value,
                          GParamSpec *pspec)
{
  AmkProgram *self = AMK_PROGRAM (object);

  switch (prop_id)
    {
    case PROP_NUM_QUEUES:
      g_value_set_uint (value, self->num_queues);
      break;
    case PROP_SCRATCH_SIZE:
      g_value_set_uint64 (value, self->scratch_size);
      break;
    case PROP_VERIFIED:
      g_value_set_boolean (value, self->verified);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_program_set_property (GObject      *object,
                          guint         prop_id,
                          const GValue *value,
                          GParamSpec   *pspec)
{
  AmkProgram *self = AMK_PROGRAM (object);

  switch (prop_id)
    {
    case PROP_NUM_QUEUES:
      self->num_queues = g_value_get_uint (value);
      ensure_queues (self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_program_class_init (AmkProgramClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = amk_program_finalize;
  object_class->get_property = amk_program_get_property;
  object_class->set_property = amk_program_set_property;

  /**
   * AmkProgram:num-queues:
   *
   * The number of instruction queues, from 1 to 65536; the launcher runs one thread
   * block per queue. Another count is out of the property's range: GObject warns and
   * the program keeps 1 queue (and [ctor@Amk.Program.new] refuses it with a critical).
   */
  properties[PROP_NUM_QUEUES] =
    g_param_spec_uint ("num-queues", NULL, NULL,
                       1, AMK_MAX_QUEUES, 1,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkProgram:scratch-size:
   *
   * The size in bytes of the scratch arena that holds the scratch buffers.
   */
  properties[PROP_SCRATCH_SIZE] =
    g_param_spec_uint64 ("scratch-size", NULL, NULL,
                         0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkProgram:verified:
   *
   * Whether the program passed [method@Amk.Program.verify] since its last change.
   */
  properties[PROP_VERIFIED] =
    g_param_spec_boolean ("verified", NULL, NULL, FALSE,
                          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
amk_program_init (AmkProgram *self)
{
  self->num_queues = 1;
  self->buffers = g_ptr_array_new_with_free_func ((GDestroyNotify) amk_buffer_info_free);
  self->buffer_names = g_hash_table_new (g_str_hash, g_str_equal);
  self->counter_names = g_ptr_array_new_with_free_func (g_free);
  self->instructions = g_array_new (FALSE, TRUE, sizeof (amk_instruction_t));
  self->queues = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  self->ops = g_array_new (FALSE, TRUE, sizeof (AmkOpInfo));
}

/**
 * amk_program_new:
 * @num_queues: the number of queues (thread blocks), from 1 to 65536
 *
 * Creates an empty program with @num_queues queues. Another count is a programmer
 * error (a critical and %NULL): check a count that comes from outside first, or use
 * an executor's [method@Amk.Executor.get_preferred_queues].
 *
 * Returns: (transfer full): a new program
 */
AmkProgram *
amk_program_new (guint num_queues)
{
  g_return_val_if_fail (num_queues >= 1 && num_queues <= AMK_MAX_QUEUES, NULL);
  return g_object_new (AMK_TYPE_PROGRAM, "num-queues", num_queues, NULL);
}

const char *
amk_opcode_nick (guint opcode)
{
  GEnumClass *klass = g_type_class_ref (AMK_TYPE_OPCODE);
  GEnumValue *value = g_enum_get_value (klass, (gint) opcode);
  const char *nick = value != NULL ? value->value_nick : "unknown";

  g_type_class_unref (klass);  /* the nick is static: the class stays in GLib's table */
  return nick;
}

void
amk_program_invalidate (AmkProgram *self)
{
  if (self->verified)
    {
      self->verified = FALSE;
      g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_VERIFIED]);
    }
}

/**
 * amk_program_get_num_queues:
 * @self: a program
 *
 * Gets the number of queues.
 *
 * Returns: the number of queues
 */
guint
amk_program_get_num_queues (AmkProgram *self)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), 0);
  return self->num_queues;
}

/**
 * amk_program_get_scratch_size:
 * @self: a program
 *
 * Gets the size of the scratch arena in bytes.
 *
 * Returns: the size of the scratch arena in bytes
 */
guint64
amk_program_get_scratch_size (AmkProgram *self)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), 0);
  return self->scratch_size;
}

void
amk_program_set_scratch_size (AmkProgram *self, guint64 size)
{
  self->scratch_size = size;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SCRATCH_SIZE]);
}

/**
 * amk_program_get_verified:
 * @self: a program
 *
 * Tells whether the program passed [method@Amk.Program.verify] since its last change.
 *
 * Returns: whether the program passed [method@Amk.Program.verify] since its last change
 */
gboolean
amk_program_get_verified (AmkProgram *self)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  return self->verified;
}

guint64
amk_arena_place (guint64 *arena_end, guint64 size)
{
  guint64 offset = (*arena_end + AMK_ARENA_ALIGNMENT - 1) & ~(guint64) (AMK_ARENA_ALIGNMENT - 1);
  *arena_end = offset + size;
  return offset;
}

gint
amk_program_add_buffer_at (AmkProgram    *self,
                           const char    *name,
                           AmkDType       dtype,
                           const gint64  *shape,
                           gsize          n_dims,
                           AmkBufferRole  role,
                           guint64        arena_offset,
                           GError       **error)
{
  AmkBufferInfo *info;
  guint64 n_elements = 1;
  guint block, block_bytes;

  if (name == NULL || *name == '\0')
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer %u has no name; give every buffer a unique name"),
                   self->buffers->len);
      return -1;
    }
  if (amk_program_find_buffer (self, name) >= 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("A buffer named “%s” already exists; buffer names must be unique"), name);
      return -1;
    }
  if (self->buffers->len >= AMK_MAX_ENTRIES)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Too many buffers (at most %u)"), AMK_MAX_ENTRIES);
      return -1;
    }
  if (!amk_dtype_is_valid (dtype))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s” has the unknown dtype %d"), name, (int) dtype);
      return -1;
    }
  if ((guint) role > AMK_BUFFER_ROLE_STATE)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s” has the unknown role %d"), name, (int) role);
      return -1;
    }
  if (n_dims < 1 || n_dims > AMK_MAX_DIMS || shape == NULL)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Buffer “%s” has %u dimensions; give between 1 and %u"),
                   name, (guint) n_dims, AMK_MAX_DIMS);
      return -1;
    }
  for (gsize i = 0; i < n_dims; i++)
    {
      if (shape[i] < 1 || (guint64) shape[i] > G_MAXINT32 ||
          n_elements > G_MAXINT32 / (guint64) shape[i])
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                       _("Buffer “%s”: dimension %u is %" PRId64
                         "; every dimension must be at least 1 and the buffer at most %d elements"),
                       name, (guint) i, shape[i], G_MAXINT32);
          return -1;
        }
      n_elements *= (guint64) shape[i];
    }
  if (amk_dtype_block (dtype, &block, &block_bytes) && shape[n_dims - 1] % block != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s”: a %s buffer holds blocks of %u values along its last dimension, "
                     "which is %" PRId64 ", not a multiple of %u"),
                   name, amk_dtype_name (dtype), block, shape[n_dims - 1], block);
      return -1;
    }

  info = g_new0 (AmkBufferInfo, 1);
  info->name = g_strdup (name);
  info->dtype = dtype;
  info->role = role;
  info->shape = g_memdup2 (shape, n_dims * sizeof (gint64));
  info->n_dims = n_dims;
  info->n_elements = n_elements;
  info->size_bytes = amk_dtype_bytes (dtype, n_elements);
  info->arena_offset = arena_offset;
  g_ptr_array_add (self->buffers, info);
  g_hash_table_insert (self->buffer_names, info->name, GUINT_TO_POINTER (self->buffers->len));
  amk_program_invalidate (self);
  return (gint) self->buffers->len - 1;
}

/**
 * amk_program_add_buffer:
 * @self: a program
 * @name: a unique name
 * @dtype: the element type
 * @shape: (array length=n_dims): the dimensions, each at least 1
 * @n_dims: the number of dimensions, 1 to 8
 * @role: what the buffer is for
 * @error: return location for a #GError
 *
 * Adds a buffer to the buffer table. Scratch buffers are placed in the scratch arena;
 * the others get their own device allocation.
 *
 * Returns: the buffer's index, or -1 with @error set
 */
gint
amk_program_add_buffer (AmkProgram    *self,
                        const char    *name,
                        AmkDType       dtype,
                        const gint64  *shape,
                        gsize          n_dims,
                        AmkBufferRole  role,
                        GError       **error)
{
  guint64 end = self->scratch_size;
  gint index;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);
  g_return_val_if_fail (error == NULL || *error == NULL, -1);

  index = amk_program_add_buffer_at (self, name, dtype, shape, n_dims, role, 0, error);
  if (index >= 0 && role == AMK_BUFFER_ROLE_SCRATCH)
    {
      AmkBufferInfo *info = g_ptr_array_index (self->buffers, index);
      info->arena_offset = amk_arena_place (&end, info->size_bytes);
      amk_program_set_scratch_size (self, end);
    }
  return index;
}

/**
 * amk_program_get_n_buffers:
 * @self: a program
 *
 * Gets the number of buffers.
 *
 * Returns: the number of buffers
 */
guint
amk_program_get_n_buffers (AmkProgram *self)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), 0);
  return self->buffers->len;
}

/**
 * amk_program_find_buffer:
 * @self: a program
 * @name: a buffer name
 *
 * Looks a buffer up by name.
 *
 * Returns: the index of the buffer called @name, or -1
 */
gint
amk_program_find_buffer (AmkProgram *self,
                         const char *name)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);
  g_return_val_if_fail (name != NULL, -1);

  return (gint) GPOINTER_TO_UINT (g_hash_table_lookup (self->buffer_names, name)) - 1;
}

AmkBufferInfo *
amk_program_get_buffer_info (AmkProgram *self,
                             guint       buffer)
{
  if (buffer >= self->buffers->len)
    return NULL;
  return g_ptr_array_index (self->buffers, buffer);
}

#define GET_BUFFER_OR_RETURN(val)                                          \
  AmkBufferInfo *info;                                                     \
  g_return_val_if_fail (AMK_IS_PROGRAM (self), val);                       \
  g_return_val_if_fail (buffer < self->buffers->len, val);                 \
  info = g_ptr_array_index (self->buffers, buffer)

/**
 * amk_program_get_buffer_name:
 * @self: a program
 * @buffer: a buffer index
 *
 * Gets the buffer's name.
 *
 * Returns: (transfer none): the buffer's name
 */
const char *
amk_program_get_buffer_name (AmkProgram *self,
                             guint       buffer)
{
  GET_BUFFER_OR_RETURN (NULL);
  return info->name;
}

/**
 * amk_program_get_buffer_dtype:
 * @self: a program
 * @buffer: a buffer index
 *
 * Gets the buffer's element type.
 *
 * Returns: the buffer's element type
 */
AmkDType
amk_program_get_buffer_dtype (AmkProgram *self,
                              guint       buffer)
{
  GET_BUFFER_OR_RETURN (AMK_DTYPE_F32);
  return info->dtype;
}

/**
 * amk_program_get_buffer_role:
 * @self: a program
 * @buffer: a buffer index
 *
 * Gets the buffer's role.
 *
 * Returns: the buffer's role
 */
AmkBufferRole
amk_program_get_buffer_role (AmkProgram *self,
                             guint       buffer)
{
  GET_BUFFER_OR_RETURN (AMK_BUFFER_ROLE_INPUT);
  return info->role;
}

/**
 * amk_program_get_buffer_shape:
 * @self: a program
 * @buffer: a buffer index
 * @n_dims: (out): the number of dimensions
 *
 * Gets the buffer's dimensions.
 *
 * Returns: (array length=n_dims) (transfer none): the buffer's dimensions
 */
const gint64 *
amk_program_get_buffer_shape (AmkProgram *self,
                              guint       buffer,
                              gsize      *n_dims)
{
  GET_BUFFER_OR_RETURN (NULL);
  if (n_dims != NULL)
    *n_dims = info->n_dims;
  return info->shape;
}

/**
 * amk_program_get_buffer_size:
 * @self: a program
 * @buffer: a buffer index
 *
 * Gets the buffer's size in bytes.
 *
 * Returns: the buffer's size in bytes
 */
guint64
amk_program_get_buffer_size (AmkProgram *self,
                             guint       buffer)
{
  GET_BUFFER_OR_RETURN (0);
  return info->size_bytes;
}

/**
 * amk_program_get_buffer_n_elements:
 * @self: a program
 * @buffer: a buffer index
 *
 * Gets the number of elements of the buffer.
 *
 * Returns: the number of elements of the buffer
 */
guint64
amk_program_get_buffer_n_elements (AmkProgram *self,
                                   guint       buffer)
{
  GET_BUFFER_OR_RETURN (0);
  return info->n_elements;
}

/**
 * amk_program_set_buffer_data:
 * @self: a program
 * @buffer: a buffer index
 * @data: the contents, exactly the buffer's size in bytes
 * @error: return location for a #GError
 *
 * Sets the buffer's default contents (weights, an initial state): executors and
 * launchers start from them. Buffers without data start as zeros. Scratch buffers have
 * no default contents. An executor copies the contents when it takes the program
 * ([ctor@Amk.CpuExecutor.new], [method@Amk.Executor.load]): data set later reaches it
 * only through [method@Amk.Executor.upload] or a new load.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_program_set_buffer_data (AmkProgram  *self,
                             guint        buffer,
                             GBytes      *data,
                             GError     **error)
{
  AmkBufferInfo *info;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (data != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  info = amk_program_get_buffer_info (self, buffer);
  if (info == NULL)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Buffer %u does not exist; the program has %u buffers"),
                   buffer, self->buffers->len);
      return FALSE;
    }
  if (info->role == AMK_BUFFER_ROLE_SCRATCH)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s” is a scratch buffer and cannot have contents"), info->name);
      return FALSE;
    }
  if (g_bytes_get_size (data) != info->size_bytes)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s” holds %" PRIu64 " bytes (%" PRIu64
                     " × %s) but the data has %zu bytes"),
                   info->name, info->size_bytes, info->n_elements,
                   amk_dtype_name (info->dtype), g_bytes_get_size (data));
      return FALSE;
    }
  g_clear_pointer (&info->data, g_bytes_unref);
  info->data = g_bytes_ref (data);
  return TRUE;
}

/**
 * amk_program_get_buffer_data:
 * @self: a program
 * @buffer: a buffer index
 *
 * Gets the buffer's default contents, or %NULL.
 *
 * Returns: (transfer full) (nullable): the buffer's default contents, or %NULL
 */
GBytes *
amk_program_get_buffer_data (AmkProgram *self,
                             guint       buffer)
{
  GET_BUFFER_OR_RETURN (NULL);
  return info->data != NULL ? g_bytes_ref (info->data) : NULL;
}

/**
 * amk_program_add_counter:
 * @self: a program
 * @name: (nullable): a name for messages, or %NULL
 *
 * Adds a counter. Every counter is zero when a launch starts.
 *
 * Returns: the counter's index
 */
gint
amk_program_add_counter (AmkProgram *self,
                         const char *name)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);
  g_return_val_if_fail (self->counter_names->len < AMK_MAX_ENTRIES, -1);

  g_ptr_array_add (self->counter_names, g_strdup (name));
  amk_program_invalidate (self);
  return (gint) self->counter_names->len - 1;
}

/**
 * amk_program_get_n_counters:
 * @self: a program
 *
 * Gets the number of counters.
 *
 * Returns: the number of counters
 */
guint
amk_program_get_n_counters (AmkProgram *self)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), 0);
  return self->counter_names->len;
}

gboolean
amk_program_append_raw (AmkProgram              *self,
                        guint                    queue,
                        const amk_instruction_t *instruction,
                        GError                 **error)
{
  gint32 index;

  if (queue >= self->num_queues)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u does not exist; the program has %u queues"),
                   queue, self->num_queues);
      return FALSE;
    }
  if (self->instructions->len >= AMK_MAX_ENTRIES)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Too many instructions (at most %u)"), AMK_MAX_ENTRIES);
      return FALSE;
    }
  index = (gint32) self->instructions->len;
  g_array_append_val (self->instructions, *instruction);
  g_array_append_val ((GArray *) g_ptr_array_index (self->queues, queue), index);
  amk_program_invalidate (self);
  return TRUE;
}

/**
 * amk_program_add_instruction:
 * @self: a program
 * @queue: the queue to append to
 * @opcode: the opcode
 * @buffers: (array length=n_buffers) (nullable): the buffer-table indices it uses; -1
 *   leaves an optional operand out (MATVEC's bias, residual and norm weight)
 * @n_buffers: the number of buffers, at most 8
 * @error: return location for a #GError
 *
 * Appends an instruction to the end of @queue. Its parameters, waits and signal are set
 * with [method@Amk.Program.set_param_int], [method@Amk.Program.set_param_float],
 * [method@Amk.Program.add_wait] and [method@Amk.Program.set_signal].
 *
 * Returns: the instruction's index, or -1 with @error set
 */
gint
amk_program_add_instruction (AmkProgram  *self,
                             guint        queue,
                             AmkOpcode    opcode,
                             const gint  *buffers,
                             gsize        n_buffers,
                             GError     **error)
{
  amk_instruction_t instruction = { 0 };
  const AmkOpClass *klass;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);
  g_return_val_if_fail (buffers != NULL || n_buffers == 0, -1);
  g_return_val_if_fail (error == NULL || *error == NULL, -1);

  if ((klass = amk_op_class ((guint) opcode)) == NULL)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Unknown opcode %d"), (int) opcode);
      return -1;
    }
  if (n_buffers > AMK_MAX_BUFFER_REFS)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("An instruction uses at most %d buffers, not %u"),
                   AMK_MAX_BUFFER_REFS, (guint) n_buffers);
      return -1;
    }
  for (gsize i = 0; i < n_buffers; i++)
    if ((buffers[i] < 0 && !(buffers[i] == AMK_NO_BUFFER && ((klass->optional_slots >> i) & 1u))) ||
        buffers[i] >= (gint) self->buffers->len)
      {
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                     _("Buffer %d does not exist; the program has %u buffers"),
                     buffers[i], self->buffers->len);
        return -1;
      }

  instruction.opcode = opcode;
  instruction.n_buffers = n_buffers;
  instruction.signal.counter = AMK_NO_COUNTER;
  for (guint i = 0; i < AMK_MAX_BUFFER_REFS; i++)
    instruction.buffers[i] = i < n_buffers ? buffers[i] : AMK_NO_BUFFER;

  if (!amk_program_append_raw (self, queue, &instruction, error))
    return -1;
  return (gint) self->instructions->len - 1;
}

/* The instruction, or NULL with @error set; a caller that changes it invalidates. */
static amk_instruction_t *
find_instruction (AmkProgram  *self,
                  guint        instruction,
                  GError     **error)
{
  if (instruction >= self->instructions->len)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Instruction %u does not exist; the program has %u instructions"),
                   instruction, self->instructions->len);
      return NULL;
    }
  return &g_array_index (self->instructions, amk_instruction_t, instruction);
}

/* The instruction about to be changed: the program must be verified again. */
static amk_instruction_t *
get_instruction (AmkProgram  *self,
                 guint        instruction,
                 GError     **error)
{
  amk_instruction_t *ins = find_instruction (self, instruction, error);

  if (ins != NULL)
    amk_program_invalidate (self);
  return ins;
}

/* The instruction and its named parameter, or NULL with @error set. */
static guint8 *
param_location (AmkProgram  *self,
                guint        instruction,
                const char  *name,
                gboolean     is_float,
                GError     **error)
{
  amk_instruction_t *ins = find_instruction (self, instruction, error);
  const AmkParamField *field;

  if (ins == NULL || (field = amk_op_find_param (ins->opcode, name, error)) == NULL)
    return NULL;
  if (field->is_float != is_float)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   is_float ? _("The %s parameter “%s” is an integer; set it with set_param_int")
                            : _("The %s parameter “%s” is a float; set it with set_param_float"),
                   amk_op_name (ins->opcode), name);
      return NULL;
    }
  return (guint8 *) &ins->params + field->offset;
}

/**
 * amk_program_set_param_int:
 * @self: a program
 * @instruction: an instruction index
 * @name: the parameter's name, as in the op's parameter struct in `amk-abi.h`
 *   (e.g. `count` of COPY, `rows` of MATVEC, `head_dim` of ROPE_KV)
 * @value: the value
 * @error: return location for a #GError
 *
 * Sets an integer parameter of an instruction by name. Set the opcode first
 * ([method@Amk.Program.add_instruction]): the names depend on it.
 *
 * Returns: %TRUE on success; %FALSE with %AMK_PROGRAM_ERROR_INVALID when the op has no
 *   integer parameter of that name
 */
gboolean
amk_program_set_param_int (AmkProgram  *self,
                           guint        instruction,
                           const char  *name,
                           gint         value,
                           GError     **error)
{
  const gint32 v = value;
  guint8 *at;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);

  if ((at = param_location (self, instruction, name, FALSE, error)) == NULL)
    return FALSE;
  memcpy (at, &v, sizeof v);
  amk_program_invalidate (self);
  return TRUE;
}

/**
 * amk_program_set_param_float:
 * @self: a program
 * @instruction: an instruction index
 * @name: the parameter's name, as in the op's parameter struct in `amk-abi.h`
 *   (e.g. `value` of FILL, `eps` of RMSNORM)
 * @value: the value
 * @error: return location for a #GError
 *
 * Sets a float parameter of an instruction by name. Set the opcode first
 * ([method@Amk.Program.add_instruction]): the names depend on it.
 *
 * Returns: %TRUE on success; %FALSE with %AMK_PROGRAM_ERROR_INVALID when the op has no
 *   float parameter of that name
 */
gboolean
amk_program_set_param_float (AmkProgram  *self,
                             guint        instruction,
                             const char  *name,
                             gfloat       value,
                             GError     **error)
{
  guint8 *at;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);

  if ((at = param_location (self, instruction, name, TRUE, error)) == NULL)
    return FALSE;
  memcpy (at, &value, sizeof value);
  amk_program_invalidate (self);
  return TRUE;
}

/**
 * amk_program_get_param_int:
 * @self: a program
 * @instruction: an instruction index
 * @name: the parameter's name (see [method@Amk.Program.set_param_int])
 * @value: (out): the value
 * @error: return location for a #GError
 *
 * Reads an integer parameter of an instruction by name, e.g. the rows a compiled
 * MATVEC tile covers.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_program_get_param_int (AmkProgram  *self,
                           guint        instruction,
                           const char  *name,
                           gint        *value,
                           GError     **error)
{
  guint8 *at;
  gint32 v;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (name != NULL && value != NULL, FALSE);

  if ((at = param_location (self, instruction, name, FALSE, error)) == NULL)
    return FALSE;
  memcpy (&v, at, sizeof v);
  *value = v;
  return TRUE;
}

/**
 * amk_program_get_param_float:
 * @self: a program
 * @instruction: an instruction index
 * @name: the parameter's name (see [method@Amk.Program.set_param_float])
 * @value: (out): the value
 * @error: return location for a #GError
 *
 * Reads a float parameter of an instruction by name.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_program_get_param_float (AmkProgram  *self,
                             guint        instruction,
                             const char  *name,
                             gfloat      *value,
                             GError     **error)
{
  guint8 *at;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (name != NULL && value != NULL, FALSE);

  if ((at = param_location (self, instruction, name, TRUE, error)) == NULL)
    return FALSE;
  memcpy (value, at, sizeof *value);
  return TRUE;
}

static gboolean
check_counter (AmkProgram  *self,
               guint        counter,
               GError     **error)
{
  if (counter >= self->counter_names->len)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Counter %u does not exist; the program has %u counters"),
                   counter, self->counter_names->len);
      return FALSE;
    }
  return TRUE;
}

/**
 * amk_program_add_wait:
 * @self: a program
 * @instruction: an instruction index
 * @counter: the counter to wait on
 * @target: the instruction starts once the counter is at least @target
 * @error: return location for a #GError
 *
 * Makes an instruction wait until @counter reaches @target. An instruction has at most
 * four waits.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_program_add_wait (AmkProgram  *self,
                      guint        instruction,
                      guint        counter,
                      guint        target,
                      GError     **error)
{
  amk_instruction_t *ins;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);

  if (!check_counter (self, counter, error))
    return FALSE;
  if (instruction < self->instructions->len &&
      g_array_index (self->instructions, amk_instruction_t, instruction).n_waits >= AMK_MAX_WAITS)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Instruction %u already has %d waits, the most it can have"),
                   instruction, AMK_MAX_WAITS);
      return FALSE;
    }
  ins = get_instruction (self, instruction, error);
  if (ins == NULL)
    return FALSE;
  ins->waits[ins->n_waits].counter = (gint32) counter;
  ins->waits[ins->n_waits].target = target;
  ins->n_waits++;
  return TRUE;
}

/**
 * amk_program_set_signal:
 * @self: a program
 * @instruction: an instruction index
 * @counter: the counter to signal
 * @amount: what to add to it once the whole block finished the instruction
 * @error: return location for a #GError
 *
 * Makes an instruction add @amount to @counter when it is done, after its writes are
 * visible to every other block.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_program_set_signal (AmkProgram  *self,
                        guint        instruction,
                        guint        counter,
                        guint        amount,
                        GError     **error)
{
  amk_instruction_t *ins;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);

  if (!check_counter (self, counter, error))
    return FALSE;
  ins = get_instruction (self, instruction, error);
  if (ins == NULL)
    return FALSE;
  ins->signal.counter = (gint32) counter;
  ins->signal.amount = amount;
  return TRUE;
}

/**
 * amk_program_get_n_instructions:
 * @self: a program
 *
 * Gets the number of instructions over all queues.
 *
 * Returns: the number of instructions over all queues
 */
guint
amk_program_get_n_instructions (AmkProgram *self)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), 0);
  return self->instructions->len;
}

/**
 * amk_program_get_queue_length:
 * @self: a program
 * @queue: a queue index
 *
 * Gets the number of instructions in @queue.
 *
 * Returns: the number of instructions in @queue
 */
guint
amk_program_get_queue_length (AmkProgram *self,
                              guint       queue)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), 0);
  g_return_val_if_fail (queue < self->num_queues, 0);
  return ((GArray *) g_ptr_array_index (self->queues, queue))->len;
}

void
amk_program_flatten_queues (AmkProgram  *self,
                            GArray     **flat,
                            GArray     **offsets,
                            GArray     **lengths)
{
  *flat = g_array_sized_new (FALSE, FALSE, sizeof (gint32), self->instructions->len);
  *offsets = g_array_sized_new (FALSE, FALSE, sizeof (gint32), self->num_queues);
  *lengths = g_array_sized_new (FALSE, FALSE, sizeof (gint32), self->num_queues);

  for (guint q = 0; q < self->num_queues; q++)
    {
      GArray *queue = g_ptr_array_index (self->queues, q);
      gint32 off = (gint32) (*flat)->len;
      gint32 len = (gint32) queue->len;

      g_array_append_vals (*flat, queue->data, queue->len);
      g_array_append_val (*offsets, off);
      g_array_append_val (*lengths, len);
    }
}

/**
 * amk_program_verify:
 * @self: a program
 * @error: return location for a #GError
 *
 * Checks every index, size, dtype and arena offset, and proves by an abstract run of the
 * queues that the program cannot deadlock. On failure the error (in the
 * %AMK_PROGRAM_ERROR domain) names the queue, instruction, counter or buffer at fault.
 *
 * Returns: %TRUE if the program is sound
 */
gboolean
amk_program_verify (AmkProgram  *self,
                    GError     **error)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (self->verified)
    return TRUE;
  if (!amk_verifier_check (self, error))
    return FALSE;
  self->verified = TRUE;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_VERIFIED]);
  return TRUE;
}
