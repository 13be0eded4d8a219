/* amk.c: the `amk` command-line tool: device information, image verification, running
 * images on the GPU or the CPU executor, and a self-checking demo.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <string.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>

#include <amk-glib/amk-glib.h>

#include "amk-chat.h"
#include "amk-cli.h"

#ifdef G_OS_UNIX
#include <signal.h>
#include <unistd.h>
#include <glib-unix.h>
#endif

#define MAX_PRINTED_VALUES 16

/* ------------------------------------------------------------------------------------ */
/* Shared helpers: errors, enum names, values                                            */
/* ------------------------------------------------------------------------------------ */

static const char *
enum_nick (GType type, gint value)
{
  g_autoptr(GEnumClass) klass = g_type_class_ref (type);
  GEnumValue *v = g_enum_get_value (klass, value);

  /* the nick strings are static: they outlive the class reference */
  return v != NULL ? v->value_nick : "?";
}

static const char *
dtype_name (AmkDType dtype)
{
  return enum_nick (amk_dtype_get_type (), dtype);
}

static const char *
role_name (AmkBufferRole role)
{
  return enum_nick (amk_buffer_role_get_type (), role);
}

static char *
format_shape (AmkProgram *program, guint buffer)
{
  gsize n_dims = 0;
  const gint64 *shape = amk_program_get_buffer_shape (program, buffer, &n_dims);
  GString *s = g_string_new ("[");

  for (gsize i = 0; i < n_dims; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i > 0 ? ", " : "", shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static gsize
dtype_size (AmkDType dtype)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32:
    case AMK_DTYPE_I32:
      return 4;
    case AMK_DTYPE_F16:
    case AMK_DTYPE_BF16:
      return 2;
    case AMK_DTYPE_U8:
    default:
      return 1;
    }
}

static float
bits_to_float (guint32 bits)
{
  float f;
  memcpy (&f, &bits, sizeof f);
  return f;
}

static float
half_to_float (guint16 h)
{
  guint32 sign = (guint32) (h & 0x8000) << 16;
  guint32 exp = (h >> 10) & 0x1f;
  guint32 mant = h & 0x3ff;

  if (exp == 0)
    {
      float f = ldexpf ((float) mant, -24);   /* zero or subnormal */
      return sign ? -f : f;
    }
  if (exp == 31)
    return bits_to_float (sign | 0x7f800000u | (mant << 13));
  return bits_to_float (sign | ((exp + 112) << 23) | (mant << 13));
}

static float
bfloat16_to_float (guint16 b)
{
  return bits_to_float ((guint32) b << 16);
}

/* Appends element @index of @data (of @dtype) to @s. */
static void
append_value (GString *s, AmkDType dtype, const guint8 *data, gsize index)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32:
      {
        float v;
        memcpy (&v, data + index * 4, 4);
        g_string_append_printf (s, "%g", v);
      }
      break;
    case AMK_DTYPE_F16:
    case AMK_DTYPE_BF16:
      {
        guint16 v;
        memcpy (&v, data + index * 2, 2);
        g_string_append_printf (s, "%g", dtype == AMK_DTYPE_F16 ? half_to_float (v) : bfloat16_to_float (v));
      }
      break;
    case AMK_DTYPE_I32:
      {
        gint32 v;
        memcpy (&v, data + index * 4, 4);
        g_string_append_printf (s, "%d", v);
      }
      break;
    case AMK_DTYPE_U8:
    default:
      g_string_append_printf (s, "%u", data[index]);
      break;
    }
}

/* Prints "name dtype shape" and the first values of a downloaded buffer. */
static void
print_buffer_values (AmkProgram *program, guint buffer, GBytes *contents)
{
  AmkDType dtype = amk_program_get_buffer_dtype (program, buffer);
  gsize size = 0;
  const guint8 *data = g_bytes_get_data (contents, &size);
  gsize n = size / dtype_size (dtype);
  gsize shown = MIN (n, MAX_PRINTED_VALUES);
  g_autofree char *shape = format_shape (program, buffer);
  g_autoptr(GString) values = g_string_new (NULL);

  if (dtype >= AMK_DTYPE_Q8_0)   /* Q8_0 and the types after it are block-quantized */
    {
      /* TRANSLATORS: a block-quantized buffer: its name, type, shape and size */
      g_print (_("%s %s %s\n  (%zu bytes of quantized blocks)\n"),
               amk_program_get_buffer_name (program, buffer), dtype_name (dtype), shape, size);
      return;
    }
  for (gsize i = 0; i < shown; i++)
    {
      if (i > 0)
        g_string_append_c (values, ' ');
      append_value (values, dtype, data, i);
    }
  g_print ("%s %s %s\n", amk_program_get_buffer_name (program, buffer), dtype_name (dtype), shape);
  if (shown < n)
    /* TRANSLATORS: the values, then how many are shown and how many there are */
    g_print (_("  %s … (first %zu of %zu)\n"), values->str, shown, n);
  else
    g_print ("  %s\n", values->str);
}

static char *
format_bytes (guint64 bytes)
{
  g_autofree char *human = NULL;

  if (bytes < 1024)
    return g_strdup_printf (_("%" PRIu64 " bytes"), bytes);
  human = g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
  /* TRANSLATORS: a byte count, then the same in KiB/MiB/GiB */
  return g_strdup_printf (_("%" PRIu64 " bytes (%s)"), bytes, human);
}

/* ------------------------------------------------------------------------------------ */
/* Runner: one program on the GPU (AmkLauncher) or on the CPU executor                   */
/* ------------------------------------------------------------------------------------ */

typedef struct {
  AmkProgram  *program;
  AmkExecutor *executor;
  char        *where;      /* "GPU megakernel (NVIDIA H200)" or "CPU executor" */
} Runner;

static void
runner_clear (Runner *runner)
{
  g_clear_object (&runner->executor);
  g_clear_object (&runner->program);
  g_clear_pointer (&runner->where, g_free);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Runner, runner_clear)

/* Prepares @program to run on @executor (which it takes). */
static gboolean
runner_init (Runner       *runner,
             AmkProgram   *program,
             AmkExecutor  *executor,
             GError      **error)
{
  runner->program = g_object_ref (program);
  runner->executor = executor;
  runner->where = amk_executor_get_description (executor);
  return amk_executor_load (executor, program, error);
}

/* Prints the abort record after a TIMEOUT or ABORTED error, if there is one. */
static void
runner_print_abort (Runner *runner, const GError *error)
{
  g_autoptr(AmkAbortRecord) record = NULL;
  g_autofree char *text = NULL;

  if (!g_error_matches (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_TIMEOUT) &&
      !g_error_matches (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED))
    return;
  if (runner->executor != NULL)
    record = amk_executor_get_last_abort (runner->executor);
  if (record == NULL)
    {
      g_printerr (_("  abort record: none\n"));
      return;
    }
  text = amk_abort_record_to_string (record);
  if (record->sm_id >= 0)
    g_printerr (_("  abort record: %s (on SM %d)\n"), text, record->sm_id);
  else
    g_printerr (_("  abort record: %s\n"), text);
}

/* ------------------------------------------------------------------------------------ */
/* The demo program                                                                      */
/* ------------------------------------------------------------------------------------ */

#define DEMO_N      64
#define DEMO_QUEUES 4
#define DEMO_FILL   1.5f

/* A dependency chain over four queues, ordered by three counters:
 *   queue 0: FILL a = 1.5                                signals fill
 *   queue 1: waits fill;  COPY b = a                     signals copy
 *   queue 2: waits copy;  ADD  s = b + in                signals add
 *   queue 3: waits add;   ADD  out = s + b  (= in + 3)
 * a, b and s are scratch buffers; `in` is the input and `out` the output. When
 * @defaults is not %NULL it becomes the default contents of `in`. */
static AmkProgram *
build_demo (const float *defaults, GError **error)
{
  g_autoptr(AmkProgram) p = amk_program_new (DEMO_QUEUES);
  const gint64 shape[] = { DEMO_N };
  gint a, b, s, in, out, c_fill, c_copy, c_add, i;

#define ADD_BUFFER(var, name, role)                                                \
  if ((var = amk_program_add_buffer (p, name, AMK_DTYPE_F32, shape, 1, role, error)) < 0) \
    return NULL

  ADD_BUFFER (a, "a", AMK_BUFFER_ROLE_SCRATCH);
  ADD_BUFFER (b, "b", AMK_BUFFER_ROLE_SCRATCH);
  ADD_BUFFER (s, "s", AMK_BUFFER_ROLE_SCRATCH);
  ADD_BUFFER (in, "in", AMK_BUFFER_ROLE_INPUT);
  ADD_BUFFER (out, "out", AMK_BUFFER_ROLE_OUTPUT);
#undef ADD_BUFFER

  c_fill = amk_program_add_counter (p, "fill");
  c_copy = amk_program_add_counter (p, "copy");
  c_add = amk_program_add_counter (p, "add");

  {
    const gint bufs[] = { a };
    if ((i = amk_program_add_instruction (p, 0, AMK_OPCODE_FILL, bufs, 1, error)) < 0 ||
        !amk_program_set_param_int (p, i, "count", DEMO_N, error) ||
        !amk_program_set_param_float (p, i, "value", DEMO_FILL, error) ||
        !amk_program_set_signal (p, i, c_fill, 1, error))
      return NULL;
  }
  {
    const gint bufs[] = { b, a };
    if ((i = amk_program_add_instruction (p, 1, AMK_OPCODE_COPY, bufs, 2, error)) < 0 ||
        !amk_program_set_param_int (p, i, "count", DEMO_N, error) ||
        !amk_program_add_wait (p, i, c_fill, 1, error) ||
        !amk_program_set_signal (p, i, c_copy, 1, error))
      return NULL;
  }
  {
    const gint bufs[] = { s, b, in };
    if ((i = amk_program_add_instruction (p, 2, AMK_OPCODE_ADD, bufs, 3, error)) < 0 ||
        !amk_program_set_param_int (p, i, "count", DEMO_N, error) ||
        !amk_program_add_wait (p, i, c_copy, 1, error) ||
        !amk_program_set_signal (p, i, c_add, 1, error))
      return NULL;
  }
  {
    const gint bufs[] = { out, s, b };
    if ((i = amk_program_add_instruction (p, 3, AMK_OPCODE_ADD, bufs, 3, error)) < 0 ||
        !amk_program_set_param_int (p, i, "count", DEMO_N, error) ||
        !amk_program_add_wait (p, i, c_add, 1, error))
      return NULL;
  }

  if (defaults != NULL)
    {
      g_autoptr(GBytes) data = g_bytes_new (defaults, DEMO_N * sizeof (float));
      if (!amk_program_set_buffer_data (p, in, data, error))
        return NULL;
    }
  if (!amk_program_verify (p, error))
    return NULL;
  return g_steal_pointer (&p);
}

/* What the demo must compute, in the same fp32 operations. */
static float
demo_expected (float in)
{
  float b = DEMO_FILL;
  float s = b + in;
  return s + b;
}

/* ------------------------------------------------------------------------------------ */
/* Subcommands                                                                           */
/* ------------------------------------------------------------------------------------ */

static void
info_device (gint device)
{
  g_autoptr(AmkLauncher) launcher = amk_launcher_new (device);
  g_autoptr(AmkKernelAttributes) attrs = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *name = NULL;
  guint64 free_bytes = 0, total_bytes = 0;
  gboolean coop;

  name = amk_launcher_get_device_name (launcher, &error);
  /* TRANSLATORS: a CUDA device index and its name */
  g_print (_("Device %d: %s\n"), device, name != NULL ? name : error->message);
  g_clear_error (&error);

  coop = amk_launcher_supports_cooperative (launcher, &error);
  if (error != NULL)
    g_print (_("  Cooperative launch: unknown (%s)\n"), error->message);
  else
    g_print (_("  Cooperative launch: %s\n"), coop ? _("yes") : _("no"));
  g_clear_error (&error);

  attrs = amk_launcher_kernel_attributes (launcher, 256, 0, &error);
  if (attrs == NULL)
    g_print (_("  Kernel attributes: unavailable (%s)\n"), error->message);
  else
    {
      g_print (_("  Kernel attributes at 256 threads, 0 bytes dynamic shared memory:\n"));
      g_print (_("    registers per thread:     %d\n"), attrs->num_regs);
      g_print (_("    static shared memory:     %d bytes\n"), attrs->static_smem_bytes);
      g_print (_("    local memory per thread:  %d bytes\n"), attrs->local_bytes);
      g_print (_("    max threads per block:    %d\n"), attrs->max_threads);
      g_print (_("    blocks per SM:            %d\n"), attrs->blocks_per_sm);
      g_print (_("    SMs:                      %d\n"), attrs->num_sms);
      g_print (_("    max cooperative grid:     %d blocks\n"), attrs->max_grid);
      g_print (_("    opt-in shared memory cap: %d bytes per block\n"), attrs->max_dynamic_smem_optin);
    }
  g_clear_error (&error);

  if (amk_launcher_memory_info (launcher, &free_bytes, &total_bytes, &error))
    {
      g_autofree char *f = format_bytes (free_bytes);
      g_autofree char *t = format_bytes (total_bytes);
      g_print (_("  Memory: %s free of %s\n"), f, t);
    }
  else
    g_print (_("  Memory: unavailable (%s)\n"), error->message);
}

static int
cmd_info (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (NULL);
  g_autoptr(AmkStructSizes) sizes = NULL;
  g_autofree char *model = NULL;
  gint count;
  const GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
      N_("Describe the model PATH instead (a GGUF file or a Hugging Face checkpoint folder): "
         "its architecture, its tensor types and their bytes, and the bytes of weights on "
         "the device, without loading it"), N_("PATH") },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Shows the library version, the CUDA devices and the ABI struct sizes, "
                                           "or with --model what a model file holds."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "info", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) > 1)
    return amk_cli_usage_error ("info", _("this command takes no arguments"));
  if (model != NULL)
    return amk_cli_info_model (model);

  g_print (_("amk-glib %s\n"), AMK_VERSION_S);
  g_print (_("Built with CUDA: %s\n"), amk_launcher_get_have_cuda () ? _("yes") : _("no"));
  count = amk_launcher_get_device_count ();
  g_print (_("CUDA devices: %d\n"), count);

  if (count == 0)
    {
      g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
      g_autoptr(GError) error = NULL;
      g_autofree char *name = amk_launcher_get_device_name (launcher, &error);

      if (name == NULL)
        g_print (_("No CUDA device: %s\n"), error->message);
    }
  for (gint d = 0; d < count; d++)
    info_device (d);

  sizes = amk_struct_sizes_get ();
  g_print (_("ABI version %u; struct sizes in bytes: params %u, buffer %u, instruction %u, "
             "abort record %u, trace event %u, device program %u\n"),
           sizes->abi_version, sizes->params, sizes->buffer, sizes->instruction,
           sizes->abort_record, sizes->trace_event, sizes->device_program);
  return 0;
}

static int
cmd_verify (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (_("FILE"));
  g_autoptr(AmkProgram) program = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *scratch = NULL;
  gboolean schedule = FALSE;
  guint n_queues, n_buffers;
  const GOptionEntry entries[] = {
    { "schedule", 's', 0, G_OPTION_ARG_NONE, &schedule,
      N_("Also print the estimated schedule: per queue the instructions and busy time, the makespan against its bound, the critical path"), NULL },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Loads an image, verifies it (indices, sizes, dtypes, "
                                           "arena, and that no schedule can deadlock) and describes it."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "verify", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 2)
    return amk_cli_usage_error ("verify", _("give exactly one image file"));

  program = amk_program_new_from_file ((*args)[1], &error);
  if (program == NULL)
    {
      amk_cli_print_error ("verify", error);
      return 1;
    }

  n_queues = amk_program_get_num_queues (program);
  n_buffers = amk_program_get_n_buffers (program);
  scratch = format_bytes (amk_program_get_scratch_size (program));
  g_print (_("%s: verified\n"), (*args)[1]);
  g_print (_("  Queues:       %u\n"), n_queues);
  g_print (_("  Instructions: %u\n"), amk_program_get_n_instructions (program));
  g_print (_("  Counters:     %u\n"), amk_program_get_n_counters (program));
  g_print (_("  Scratch:      %s\n"), scratch);
  g_print (_("  Buffers:      %u\n"), n_buffers);
  for (guint b = 0; b < n_buffers; b++)
    {
      g_autofree char *shape = format_shape (program, b);
      g_autofree char *size = format_bytes (amk_program_get_buffer_size (program, b));

      g_print ("    %-3u %-16s %-5s %-14s %-9s %s\n", b,
               amk_program_get_buffer_name (program, b),
               dtype_name (amk_program_get_buffer_dtype (program, b)), shape,
               role_name (amk_program_get_buffer_role (program, b)), size);
    }

  if (schedule)
    {
      g_autofree char *report = amk_program_get_schedule_report (program);
      g_print ("%s", report);
    }
  return 0;
}

/* Uploads each NAME=FILE of @inputs. */
static gboolean
upload_inputs (Runner *runner, char **inputs, GError **error)
{
  for (guint i = 0; inputs != NULL && inputs[i] != NULL; i++)
    {
      g_auto(GStrv) parts = g_strsplit (inputs[i], "=", 2);
      g_autoptr(GBytes) bytes = NULL;
      g_autofree char *contents = NULL;
      gsize length = 0;
      gint buffer;

      if (g_strv_length (parts) != 2 || *parts[0] == '\0' || *parts[1] == '\0')
        {
          g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                       _("“%s” is not NAME=FILE"), inputs[i]);
          return FALSE;
        }
      buffer = amk_program_find_buffer (runner->program, parts[0]);
      if (buffer < 0)
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("The image has no buffer named “%s”"), parts[0]);
          return FALSE;
        }
      if (!g_file_get_contents (parts[1], &contents, &length, error))
        return FALSE;
      bytes = g_bytes_new_take (g_steal_pointer (&contents), length);
      if (!amk_executor_upload (runner->executor, (guint) buffer, bytes, error))
        return FALSE;
    }
  return TRUE;
}

/* A buffer name as a file name: no directory separators, not "." or "..". */
static char *
output_file_name (const char *dir, const char *buffer_name)
{
  g_autofree char *safe = g_strdup (buffer_name);
  g_autofree char *base = NULL;

  g_strdelimit (safe, "/\\", '_');
  if (g_str_equal (safe, ".") || g_str_equal (safe, ".."))
    g_strdelimit (safe, ".", '_');
  base = g_strconcat (safe, ".bin", NULL);
  return g_build_filename (dir, base, NULL);
}

static int
cmd_run (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (_("FILE"));
  g_autoptr(AmkProgram) program = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) inputs = NULL;
  g_auto(Runner) runner = { 0 };
  g_autofree char *output_dir = NULL;
  gboolean force_cpu = FALSE;
  gint64 seed = G_MININT64;
  const GOptionEntry entries[] = {
    { "cpu", 'c', 0, G_OPTION_ARG_NONE, &force_cpu,
      N_("Run on the CPU executor even if there is a GPU"), NULL },
    { "seed", 's', 0, G_OPTION_ARG_INT64, &seed,
      N_("On the CPU executor, run one instruction at a time in the order of a scheduler "
         "seeded with N (default: the queues on worker threads, one per core)"), N_("N") },
    { "input", 'i', 0, G_OPTION_ARG_STRING_ARRAY, &inputs,
      N_("Upload the raw bytes of FILE into buffer NAME before the run (repeatable)"), N_("NAME=FILE") },
    { "output-dir", 'o', 0, G_OPTION_ARG_FILENAME, &output_dir,
      N_("Write each output buffer to DIR/NAME.bin"), N_("DIR") },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Loads and verifies an image, runs it once on the GPU "
                                           "(device 0) or the CPU executor, and prints its output "
                                           "buffers. Buffers not given with --input keep the "
                                           "image's default contents (zeros where it has none)."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "run", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 2)
    return amk_cli_usage_error ("run", _("give exactly one image file"));
  if (seed != G_MININT64 && seed < 0)
    return amk_cli_usage_error ("run", _("the seed must not be negative"));

  program = amk_program_new_from_file ((*args)[1], &error);
  if (program == NULL)
    {
      amk_cli_print_error ("run", error);
      return 1;
    }

  if (!runner_init (&runner, program, amk_cli_choose_executor ("run", force_cpu, seed == G_MININT64 ? -1 : seed, NULL), &error) ||
      !upload_inputs (&runner, inputs, &error) ||
      !amk_executor_run (runner.executor, NULL, &error))
    {
      amk_cli_print_error ("run", error);
      runner_print_abort (&runner, error);
      return 1;
    }
  /* TRANSLATORS: %s is what ran the image: "CPU executor", "GPU megakernel (NVIDIA H200)" */
  g_printerr (_("amk run: ran on the %s\n"), runner.where);

  if (output_dir != NULL && g_mkdir_with_parents (output_dir, 0777) != 0)
    {
      int saved = errno;
      g_set_error (&error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   _("Cannot create the folder “%s”: %s"), output_dir, g_strerror (saved));
      amk_cli_print_error ("run", error);
      return 1;
    }

  for (guint b = 0; b < amk_program_get_n_buffers (program); b++)
    {
      g_autoptr(GBytes) contents = NULL;

      if (amk_program_get_buffer_role (program, b) != AMK_BUFFER_ROLE_OUTPUT)
        continue;
      contents = amk_executor_download (runner.executor, b, &error);
      if (contents == NULL)
        {
          amk_cli_print_error ("run", error);
          return 1;
        }
      print_buffer_values (program, b, contents);
      if (output_dir != NULL)
        {
          g_autofree char *path = output_file_name (output_dir, amk_program_get_buffer_name (program, b));

          if (!g_file_set_contents (path, g_bytes_get_data (contents, NULL),
                                    g_bytes_get_size (contents), &error))
            {
              amk_cli_print_error ("run", error);
              return 1;
            }
          g_print (_("  written to %s\n"), path);
        }
    }
  return 0;
}

static int
cmd_demo (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (NULL);
  g_autoptr(AmkProgram) program = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) input = NULL;
  g_autoptr(GBytes) result = NULL;
  g_autoptr(GRand) rand = g_rand_new ();
  g_auto(Runner) runner = { 0 };
  g_autofree char *no_gpu_reason = NULL;
  float in[DEMO_N], expected[DEMO_N];
  const float *got;
  gboolean force_cpu = FALSE;
  guint mismatches = 0;
  const GOptionEntry entries[] = {
    { "cpu", 'c', 0, G_OPTION_ARG_NONE, &force_cpu,
      N_("Run on the CPU executor even if there is a GPU"), NULL },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Builds a small program (FILL, COPY and two ADDs on four "
                                           "queues, ordered by counters), verifies it, runs it on "
                                           "random input and checks the result."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "demo", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) > 1)
    return amk_cli_usage_error ("demo", _("this command takes no arguments"));

  program = build_demo (NULL, &error);
  if (program == NULL)
    {
      amk_cli_print_error ("demo", error);
      return 1;
    }
  g_print (_("Program: %u queues, %u instructions, %u counters, %u buffers; verified\n"),
           amk_program_get_num_queues (program), amk_program_get_n_instructions (program),
           amk_program_get_n_counters (program), amk_program_get_n_buffers (program));
  g_print (_("  queue 0: FILL a = %g                 signals “fill”\n"), DEMO_FILL);
  g_print (_("  queue 1: waits “fill”, COPY b = a     signals “copy”\n"));
  g_print (_("  queue 2: waits “copy”, ADD s = b + in signals “add”\n"));
  g_print (_("  queue 3: waits “add”,  ADD out = s + b\n"));

  for (guint k = 0; k < DEMO_N; k++)
    {
      in[k] = (float) g_rand_double_range (rand, -4.0, 4.0);
      expected[k] = demo_expected (in[k]);
    }
  input = g_bytes_new (in, sizeof in);

  if (!runner_init (&runner, program, amk_cli_choose_executor ("demo", force_cpu, -1, &no_gpu_reason),
                    &error) ||
      !amk_executor_upload (runner.executor, (guint) amk_program_find_buffer (program, "in"), input, &error) ||
      !amk_executor_run (runner.executor, NULL, &error) ||
      (result = amk_executor_download (runner.executor, (guint) amk_program_find_buffer (program, "out"),
                                       &error)) == NULL)
    {
      amk_cli_print_error ("demo", error);
      runner_print_abort (&runner, error);
      return 1;
    }

  got = g_bytes_get_data (result, NULL);
  g_print (_("  k          in    expected         out\n"));
  for (guint k = 0; k < DEMO_N; k++)
    {
      gboolean ok = fabsf (got[k] - expected[k]) <= 1e-6f * MAX (1.0f, fabsf (expected[k]));

      if (!ok)
        mismatches++;
      if (k < 8 || !ok)
        g_print ("  %-3u %11.6f %11.6f %11.6f%s\n", k, in[k], expected[k], got[k],
                 ok ? "" : _("  MISMATCH"));
    }
  if (mismatches > 0)
    {
      g_printerr (_("amk demo: FAILED on the %s: %u of %d values differ\n"), runner.where, mismatches, DEMO_N);
      return 1;
    }
  g_print (_("  (all %d values match)\n"), DEMO_N);
  if (no_gpu_reason != NULL)
    /* TRANSLATORS: the first %s is what ran the demo, the second why there is no GPU */
    g_print (_("amk demo: OK on the %s (no GPU: %s)\n"), runner.where, no_gpu_reason);
  else if (force_cpu)
    g_print (_("amk demo: OK on the %s (--cpu)\n"), runner.where);
  else
    g_print (_("amk demo: OK on the %s\n"), runner.where);
  return 0;
}

static int
cmd_save_demo (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (_("FILE"));
  g_autoptr(AmkProgram) program = NULL;
  g_autoptr(GError) error = NULL;
  float defaults[DEMO_N];

  g_option_context_set_summary (context, _("Writes the demo program's image to FILE, with the "
                                           "input's default contents set to -4, -3.75, … so that "
                                           "“amk run FILE” prints out = in + 3."));
  if (!amk_cli_parse_options (context, "save-demo", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 2)
    return amk_cli_usage_error ("save-demo", _("give exactly one file to write"));

  for (guint k = 0; k < DEMO_N; k++)
    defaults[k] = -4.0f + 0.25f * (float) k;
  program = build_demo (defaults, &error);
  if (program == NULL || !amk_program_save (program, (*args)[1], &error))
    {
      amk_cli_print_error ("save-demo", error);
      return 1;
    }
  g_print (_("Wrote the demo image to %s\n"), (*args)[1]);
  return 0;
}

/* ------------------------------------------------------------------------------------ */
/* main                                                                                   */
/* ------------------------------------------------------------------------------------ */

typedef struct {
  const char *name;
  int       (*run) (char ***args);
  const char *summary;
} Command;

static int
cmd_trace (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (_("FILE"));
  g_autoptr(AmkProgram) program = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *output = NULL;
  g_autofree char *json = NULL;
  const GOptionEntry entries[] = {
    { "output", 'o', 0, G_OPTION_ARG_FILENAME, &output,
      N_("Where to write the trace (default: trace.json)"), N_("FILE") },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Runs an image once on the GPU with tracing on and writes "
                                           "when and on which SM every instruction ran, in the "
                                           "Chrome / Perfetto trace-event JSON format. "
                                           "tools/amk-trace-to-png.py draws it as a timeline."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "trace", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 2)
    return amk_cli_usage_error ("trace", _("give exactly one image file"));

  program = amk_program_new_from_file ((*args)[1], &error);
  if (program == NULL)
    {
      amk_cli_print_error ("trace", error);
      return 1;
    }
  launcher = amk_launcher_new (0);
  amk_launcher_set_trace (launcher, TRUE);
  if (!amk_launcher_load (launcher, program, &error) ||
      !amk_launcher_launch (launcher, NULL, &error) ||
      (json = amk_launcher_get_trace_json (launcher, &error)) == NULL ||
      !g_file_set_contents (output != NULL ? output : "trace.json", json, -1, &error))
    {
      amk_cli_print_error ("trace", error);
      return 1;
    }
  g_print (_("%s: %u instructions traced into %s\n"), (*args)[1],
           amk_program_get_n_instructions (program), output != NULL ? output : "trace.json");
  return 0;
}

/* ------------------------------------------------------------------------------------ */
/* generate: AmkModel and AmkGenerator                                                   */
/* ------------------------------------------------------------------------------------ */

/* What `amk generate` waits for in its main loop: the generation. */
typedef struct {
  GMainLoop     *loop;
  GCancellable  *cancellable;
  char          *text;
  GError        *error;
} GenerateState;

static void
on_generated (GObject *source, GAsyncResult *result, gpointer data)
{
  GenerateState *s = data;

  s->text = amk_generator_generate_finish (AMK_GENERATOR (source), result, &s->error);
  g_main_loop_quit (s->loop);
}

/* The generated text is data, written as it is (UTF-8), not a message for g_print. */
static void
on_token_print (AmkGenerator *generator, gint token_id, const char *piece, gpointer data)
{
  fputs (piece, stdout);
  fflush (stdout);
}

#ifdef G_OS_UNIX
static gboolean
on_interrupt (gpointer data)
{
  GenerateState *s = data;

  g_cancellable_cancel (s->cancellable);
  return G_SOURCE_CONTINUE;
}
#endif

#define MAX_PROMPT_BYTES (16u << 20)

/* The prompt argument: the text itself, or with "-" standard input (one trailing newline
 * dropped, as `echo` adds it). NULL with a one-sentence reason in *why. */
static char *
read_prompt (const char *arg, char **why)
{
  g_autoptr(GString) text = NULL;
  char buffer[65536];
  size_t got;

  if (strcmp (arg, "-") != 0)
    return g_strdup (arg);
  text = g_string_new (NULL);
  while ((got = fread (buffer, 1, sizeof buffer, stdin)) > 0)
    {
      if (text->len + got > MAX_PROMPT_BYTES)
        {
          *why = g_strdup_printf (_("the prompt on standard input is longer than %u MiB"),
                                  MAX_PROMPT_BYTES >> 20);
          return NULL;
        }
      g_string_append_len (text, buffer, (gssize) got);
    }
  if (ferror (stdin))
    {
      *why = g_strdup (_("standard input could not be read"));
      return NULL;
    }
  if (text->len > 0 && text->str[text->len - 1] == '\n')
    g_string_truncate (text, text->len - 1);
  return g_string_free (g_steal_pointer (&text), FALSE);
}

static int
cmd_generate (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (_("PROMPT"));
  g_autoptr(AmkExecutor) executor = NULL;
  g_autoptr(AmkGenerator) generator = NULL;
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *model = NULL;
  g_autofree char *path = NULL;
  g_autoptr(AmkModel) loaded = NULL;
  g_autofree char *prompt = NULL;
  g_autofree char *where = NULL;
  g_autofree char *system = NULL;
  g_autofree char *why = NULL;
  const char *why_const;
  g_autofree char *no_gpu = NULL;
  g_auto(GStrv) stops = NULL;
  g_autofree gint32 *prompt_ids = NULL;
  GenerateState s = { 0 };
  gboolean force_cpu = FALSE, chat = FALSE, quiet = FALSE, verbose = FALSE;
  gint max_tokens = 32, top_k = 0, prefill_chunk = 0, ctx_size = 0;
  gdouble temperature = 0.0, top_p = 1.0;
  gint64 seed = G_MININT64, generate_start;
  gsize n_prompt_ids = 0;
  guint sigint_id = 0, n_generated, n_prompt;
  gdouble prefill_rate, rate, first_token;
  g_autofree char *generated_part = NULL;
  g_autofree char *prompt_part = NULL;
  const GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
      N_("The model: a GGUF file or a Hugging Face checkpoint folder (default: $AMK_MODEL, "
         "else SmolLM2-135M-Instruct.Q4_1.gguf in ~/.cache/amk or $AMK_CACHE_DIR, which "
         "“amk fetch-model” downloads)"), N_("PATH") },
    { "max-tokens", 'n', 0, G_OPTION_ARG_INT, &max_tokens,
      N_("The most tokens to generate (default: 32)"), N_("N") },
    { "temperature", 't', 0, G_OPTION_ARG_DOUBLE, &temperature,
      N_("Sample at this temperature; 0, the default, is greedy"), N_("T") },
    { "top-k", 'k', 0, G_OPTION_ARG_INT, &top_k,
      N_("Sample from the K most likely tokens only (default: 0, all)"), N_("K") },
    { "top-p", 'p', 0, G_OPTION_ARG_DOUBLE, &top_p,
      N_("Sample from the most likely tokens that make up probability P (default: 1, all)"),
      N_("P") },
    { "seed", 's', 0, G_OPTION_ARG_INT64, &seed,
      N_("The seed of the sampling (default: a random one, shown with --verbose); the same "
         "seed gives the same text"), N_("SEED") },
    { "chat", 0, 0, G_OPTION_ARG_NONE, &chat,
      N_("Ask the prompt as a chat message in the model's chat format and stop at the end "
         "of the answer"), NULL },
    { "system", 0, 0, G_OPTION_ARG_STRING, &system,
      N_("With --chat, the system message before the prompt"), N_("TEXT") },
    { "stop", 0, 0, G_OPTION_ARG_STRING_ARRAY, &stops,
      N_("Stop when the text generated so far ends with TEXT (may be given more than once)"),
      N_("TEXT") },
    { "ctx-size", 0, 0, G_OPTION_ARG_INT, &ctx_size,
      N_("The context in tokens, prompt and generated text together (default: 0, 2048 or "
         "less if the model was trained for less)"), N_("N") },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet,
      N_("Print only the generated text: no prompt, no loading or speed lines"), NULL },
    { "verbose", 'v', 0, G_OPTION_ARG_NONE, &verbose,
      N_("Also print the seed, the context and why there is no GPU"), NULL },
    { "cpu", 'c', 0, G_OPTION_ARG_NONE, &force_cpu,
      N_("Run on the CPU executor even if there is a GPU"), NULL },
    { "prefill-chunk", 0, 0, G_OPTION_ARG_INT, &prefill_chunk,
      N_("Feed the prompt in chunks of N tokens, one launch each (default: 0, the model "
         "chooses); 1 feeds it one decode step per token"), N_("N") },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Generates text from a prompt with a Llama or Qwen3 "
                                           "model (a GGUF file or a Hugging Face checkpoint folder) "
                                           "and streams it as it comes: one megakernel launch per "
                                           "token on the GPU, or the CPU executor where there is "
                                           "none."));
  g_option_context_set_description (context, _("PROMPT “-” reads the prompt from standard input.\n"
                                               "Exit status: 0 when the text was generated, 1 when "
                                               "something failed (no model, a bad model file, a "
                                               "prompt longer than the context, an interrupt), 2 "
                                               "for a bad argument."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "generate", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 2)
    return amk_cli_usage_error ("generate", _("give exactly one prompt"));
  if ((why_const = amk_cli_check_sampling (max_tokens, temperature, top_p, seed, ctx_size)) != NULL)
    return amk_cli_usage_error ("generate", why_const);
  if (top_k < 0)
    return amk_cli_usage_error ("generate", _("--top-k must be 0 or more"));
  if (system != NULL && !chat)
    return amk_cli_usage_error ("generate", _("--system needs --chat"));
  for (guint k = 0; stops != NULL && stops[k] != NULL; k++)
    if (*stops[k] == '\0' || !g_utf8_validate (stops[k], -1, NULL))
      return amk_cli_usage_error ("generate", _("a --stop text must be non-empty UTF-8"));
  if (system != NULL && !g_utf8_validate (system, -1, NULL))
    return amk_cli_usage_error ("generate", _("the --system text is not valid UTF-8"));
  prompt = read_prompt ((*args)[1], &why);
  if (prompt == NULL)
    return amk_cli_usage_error ("generate", why);
  if (!g_utf8_validate (prompt, -1, NULL))
    return amk_cli_usage_error ("generate", _("the prompt is not valid UTF-8"));
  if (*prompt == '\0')
    return amk_cli_usage_error ("generate", _("the prompt is empty"));
  if (seed == G_MININT64)
    seed = amk_cli_random_seed ();
  if (prefill_chunk < 0 || prefill_chunk > 65536)
    return amk_cli_usage_error ("generate", _("--prefill-chunk must be between 0 and 65536"));
  path = amk_cli_model_path ("generate", model);
  if (path == NULL)
    return 1;

  executor = amk_cli_choose_executor ("generate", force_cpu, -1, verbose ? &no_gpu : NULL);
  if (no_gpu != NULL)
    /* TRANSLATORS: --verbose: why the GPU could not be used */
    g_printerr (_("No GPU because: %s\n"), no_gpu);
  where = amk_executor_get_description (executor);
  loaded = amk_cli_load_model ("generate", path, executor, (guint) prefill_chunk, (guint) ctx_size, quiet);
  if (loaded == NULL)
    return 1;
  s.loop = loop;
  s.cancellable = cancellable;
#ifdef G_OS_UNIX
  sigint_id = g_unix_signal_add (SIGINT, on_interrupt, &s);
#endif
  if (verbose)
    /* TRANSLATORS: --verbose: the sampling seed and the context in tokens */
    g_printerr (_("Seed %" G_GINT64_FORMAT ", context %u tokens\n"), seed,
                amk_model_get_context_length (loaded));

  generator = amk_generator_new (loaded, executor);
  g_object_set (generator, "temperature", temperature, "top-k", (guint) top_k, "top-p", top_p,
                "seed", (guint64) seed, NULL);
  for (guint k = 0; stops != NULL && stops[k] != NULL; k++)
    amk_generator_add_stop_string (generator, stops[k]);
  if (chat)
    {
      const AmkChatMessage messages[2] = { { "system", system }, { "user", prompt } };
      g_autofree char *turn = amk_chat_prompt (generator, messages + (system == NULL), 2 - (system == NULL), &error);
      if (turn == NULL)
        {
          g_clear_handle_id (&sigint_id, g_source_remove);
          amk_cli_print_error ("generate", error);
          g_clear_object (&loaded);
          return 1;
        }
      g_free (prompt);
      prompt = g_steal_pointer (&turn);
    }
  /* the prompt must fit before any of it is printed */
  prompt_ids = amk_tokenizer_encode (amk_model_get_tokenizer (loaded), prompt, TRUE, &n_prompt_ids, &error);
  if (prompt_ids != NULL && n_prompt_ids >= amk_model_get_context_length (loaded))
    g_set_error (&error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_CONTEXT_FULL,
                 _("The prompt is %zu tokens, which does not fit in the context of %u tokens "
                   "with room for an answer: shorten it or give a longer --ctx-size"),
                 n_prompt_ids, amk_model_get_context_length (loaded));
  if (error != NULL)
    {
      g_clear_handle_id (&sigint_id, g_source_remove);
      amk_cli_print_error ("generate", error);
      g_clear_object (&loaded);
      return 1;
    }
  if (!chat && !quiet)
    {
      fputs (prompt, stdout);   /* the text goes on where the prompt ends */
      fflush (stdout);
    }
  g_signal_connect (generator, "token", G_CALLBACK (on_token_print), NULL);
  generate_start = g_get_monotonic_time ();
  amk_generator_generate_async (generator, prompt, (guint) max_tokens, cancellable, on_generated, &s);
  g_main_loop_run (loop);
  g_clear_handle_id (&sigint_id, g_source_remove);
  fputs ("\n", stdout);
  fflush (stdout);
  if (s.text == NULL)
    {
      g_clear_object (&loaded);
      amk_cli_print_error ("generate", s.error);
      g_clear_error (&s.error);
      return 1;
    }
  g_free (s.text);
  if (amk_generator_get_position (generator) >= amk_model_get_context_length (loaded) &&
      amk_generator_get_generated_tokens (generator) < (guint) max_tokens)
    /* TRANSLATORS: the generation stopped because the KV cache is full */
    g_printerr (_("amk generate: the context of %u tokens is full; --ctx-size gives a longer one\n"),
                amk_model_get_context_length (loaded));
  g_clear_object (&loaded);
  if (quiet)
    return 0;

  /* the last line: the tokens and the time of the whole call, then the prefill's speed
   * (prefill chunks and the last prompt token's decode step), the time to the first
   * token and the generation's speed (one decode step per token), then what ran it */
  n_generated = amk_generator_get_generated_tokens (generator);
  n_prompt = amk_generator_get_prompt_tokens (generator);
  prefill_rate = amk_generator_get_prefill_tokens_per_second (generator);
  rate = amk_generator_get_tokens_per_second (generator);
  first_token = amk_generator_get_time_to_first_token (generator);
  /* TRANSLATORS: the start of the last line of amk generate: the tokens generated and
   * the seconds the whole generation took (e.g. "16 tokens in 0.42 s") */
  generated_part = g_strdup_printf (g_dngettext (GETTEXT_PACKAGE, "%u token in %.2f s",
                                                 "%u tokens in %.2f s", n_generated),
                                    n_generated, (g_get_monotonic_time () - generate_start) / 1e6);
  /* TRANSLATORS: the prompt's tokens and how fast they were fed in (the prefill), e.g.
   * "prompt 6 tokens at 410.2 tokens/s" */
  prompt_part = g_strdup_printf (g_dngettext (GETTEXT_PACKAGE, "prompt %u token at %.1f tokens/s",
                                              "prompt %u tokens at %.1f tokens/s", n_prompt),
                                 n_prompt, prefill_rate);
  if (rate > 0.0)
    /* TRANSLATORS: the last line of amk generate: the two parts above, the seconds from
     * the start to the first generated token, the speed of the generation after the
     * prompt and the time of one generated token, then what ran it ("CPU executor" or
     * "GPU megakernel (NVIDIA H200)") */
    g_printerr (_("%s: %s, first token after %.3f s, generation at %.1f tokens/s (%.2f ms per token), %s\n"),
                generated_part, prompt_part, first_token, rate, 1000.0 / rate, where);
  else
    /* TRANSLATORS: the last line of amk generate when it ran no step after the prompt
     * (one token or none generated): the two parts above, the seconds from the start to
     * the first generated token, then what ran it */
    g_printerr (_("%s: %s, first token after %.3f s, %s\n"), generated_part, prompt_part,
                first_token, where);
  return 0;
}

static const Command commands[] = {
  { "info", cmd_info, N_("Show the library version, the CUDA devices and the ABI struct sizes, or a model's tensors") },
  { "verify", cmd_verify, N_("Load and verify an image file and describe it") },
  { "run", cmd_run, N_("Run an image on the GPU or the CPU executor and print its outputs") },
  { "demo", cmd_demo, N_("Build, verify, run and check a small sample program") },
  { "save-demo", cmd_save_demo, N_("Write the sample program's image to a file") },
  { "trace", cmd_trace, N_("Run an image on the GPU with tracing and write a Perfetto trace") },
  { "fetch-model", amk_cmd_fetch_model, N_("Download the default model, SmolLM2-135M-Instruct (98 MB), once and print its path") },
  { "generate", cmd_generate, N_("Generate text with a GGUF model, streamed (GPU, or the CPU executor)") },
  { "chat", amk_cmd_chat, N_("Talk with a chat model in the terminal") },
  { "quantize", amk_cmd_quantize, N_("Write a model as a GGUF file of other tensor types (q8_0, q4_k_m, ...)") },
#if HAVE_AMK_SERVE
  { "serve", amk_cmd_serve, N_("Serve a model over HTTP with the OpenAI API (completions, chat)") },
#endif
};

static char *
commands_description (void)
{
  GString *s = g_string_new (_("Commands:"));

  g_string_append_c (s, '\n');
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    g_string_append_printf (s, "  %-11s %s\n", commands[i].name, _(commands[i].summary));
  g_string_append_printf (s, "\n%s", _("Run “amk COMMAND --help” for the options of a command."));
  return g_string_free (s, FALSE);
}

static void
setup_i18n (void)
{
  const char *dir = g_getenv ("AMK_LOCALEDIR");

  setlocale (LC_ALL, "");
  bindtextdomain (GETTEXT_PACKAGE, dir != NULL && *dir != '\0' ? dir : LOCALEDIR);
  bind_textdomain_codeset (GETTEXT_PACKAGE, "UTF-8");
  textdomain (GETTEXT_PACKAGE);
}

int
main (int argc, char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *description = NULL;
  g_auto(GStrv) args = NULL;
  gboolean version = FALSE;
  const GOptionEntry entries[] = {
    { "version", 0, 0, G_OPTION_ARG_NONE, &version, N_("Print the version and exit"), NULL },
    G_OPTION_ENTRY_NULL
  };

  setup_i18n ();

  if (argc >= 2)
    for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
      if (g_str_equal (argv[1], commands[i].name))
        {
          g_autofree char *prgname = g_strdup_printf ("amk %s", commands[i].name);

          g_set_prgname (prgname);
          args = g_new0 (char *, argc);
          args[0] = g_strdup (prgname);
          for (int a = 2; a < argc; a++)
            args[a - 1] = g_strdup (argv[a]);
          return commands[i].run (&args);
        }

  context = g_option_context_new (_("COMMAND [ARGUMENTS…]"));
  description = commands_description ();
  g_option_context_set_summary (context, _("Runs amk-glib megakernel images and inspects devices."));
  g_option_context_set_description (context, description);
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  g_option_context_set_translation_domain (context, GETTEXT_PACKAGE);
  args = g_strdupv (argv);
  if (!g_option_context_parse_strv (context, &args, &error))
    {
      g_printerr ("amk: %s\n", error->message);
      return EXIT_USAGE;
    }
  if (version)
    {
      g_print ("amk %s\n", AMK_VERSION_S);
      return 0;
    }
  if (g_strv_length (args) < 2)
    g_printerr (_("amk: give a command\n"));
  else
    g_printerr (_("amk: unknown command “%s”\n"), args[1]);
  g_printerr ("%s\n", description);
  return EXIT_USAGE;
}
