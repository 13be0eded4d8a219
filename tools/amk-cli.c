/* amk-cli.c: what the `amk` commands share: errors as one sentence, option parsing and
 * usage errors, and the choice of the executor (the GPU, else the CPU executor).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <glib/gi18n.h>

#include "amk-cli.h"

/* The GEnum type whose values are the codes of @domain, or G_TYPE_INVALID. */
static GType
error_enum_type (GQuark domain)
{
  if (domain == AMK_PROGRAM_ERROR)
    return amk_program_error_get_type ();
  if (domain == AMK_LAUNCH_ERROR)
    return amk_launch_error_get_type ();
  if (domain == AMK_MODEL_ERROR)
    return amk_model_error_get_type ();
  if (domain == AMK_TOKENIZER_ERROR)
    return amk_tokenizer_error_get_type ();
  if (domain == AMK_GENERATOR_ERROR)
    return amk_generator_error_get_type ();
  if (domain == G_IO_ERROR)
    return G_TYPE_IO_ERROR_ENUM;
  return G_TYPE_INVALID;
}

/* "AMK_PROGRAM_ERROR_DEADLOCK (2)", or just the number for a domain without a GEnum. */
static char *
error_code_string (const GError *error)
{
  GType type = error_enum_type (error->domain);

  if (type != G_TYPE_INVALID)
    {
      g_autoptr(GEnumClass) klass = g_type_class_ref (type);
      GEnumValue *value = g_enum_get_value (klass, error->code);

      if (value != NULL)
        return g_strdup_printf ("%s (%d)", value->value_name, error->code);
    }
  return g_strdup_printf ("%d", error->code);
}

const char *
amk_cli_check_sampling (gint    max_tokens,
                        gdouble temperature,
                        gdouble top_p,
                        gint64  seed,
                        gint    ctx_size)
{
  if (max_tokens < 1 || max_tokens > 65536)
    return _("--max-tokens must be between 1 and 65536");
  if (!isfinite (temperature) || temperature < 0.0)
    return _("--temperature must be 0 (greedy) or more");
  if (!(top_p > 0.0 && top_p <= 1.0))
    return _("--top-p must be above 0 and at most 1");
  if (seed != G_MININT64 && seed < 0)
    return _("--seed must be 0 or more");
  if (ctx_size < 0 || ctx_size > (1 << 20))
    return _("--ctx-size must be between 0 and 1048576");
  return NULL;
}

gint64
amk_cli_random_seed (void)
{
  return (gint64) ((((guint64) g_random_int () << 32) | g_random_int ()) & G_MAXINT64);
}

void
amk_cli_print_error (const char   *command,
             const GError *error)
{
  /* one sentence for people; the domain and code (for bug reports) with AMK_DEBUG set */
  g_printerr ("amk %s: %s\n", command, error->message);
  if (g_getenv ("AMK_DEBUG") != NULL)
    {
      g_autofree char *code = error_code_string (error);
      g_printerr ("  (domain %s, code %s)\n", g_quark_to_string (error->domain), code);
    }
}

/* Parses a subcommand's options; on failure prints the message and the usage hint. */
gboolean
amk_cli_parse_options (GOptionContext *context, const char *command, char ***args)
{
  g_autoptr(GError) error = NULL;

  g_option_context_set_translation_domain (context, GETTEXT_PACKAGE);
  if (!g_option_context_parse_strv (context, args, &error))
    {
      g_printerr ("amk %s: %s\n", command, error->message);
      g_printerr (_("Run “amk %s --help” for the options.\n"), command);
      return FALSE;
    }
  return TRUE;
}

int
amk_cli_usage_error (const char *command, const char *message)
{
  g_printerr ("amk %s: %s\n", command, message);
  g_printerr (_("Run “amk %s --help” for the options.\n"), command);
  return EXIT_USAGE;
}

/* A launcher for device 0 if it can run programs; otherwise %NULL and why not. */
static AmkLauncher *
open_gpu (GError **error)
{
  g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
  g_autofree char *name = NULL;
  GError *local = NULL;

  name = amk_launcher_get_device_name (launcher, error);
  if (name == NULL)
    return NULL;
  if (!amk_launcher_supports_cooperative (launcher, &local))
    {
      if (local != NULL)
        g_propagate_error (error, local);
      else
        g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_UNSUPPORTED,
                     _("%s cannot launch cooperative kernels"), name);
      return NULL;
    }
  return g_steal_pointer (&launcher);
}

/* Chooses what runs: the GPU unless @force_cpu or there is none (then says so), else a
 * CPU executor: on worker threads when @schedule_seed is negative, else one
 * instruction at a time in the order of a scheduler seeded with it. */
AmkExecutor *
amk_cli_choose_executor (const char *command, gboolean force_cpu, gint64 schedule_seed, char **no_gpu_reason)
{
  g_autoptr(GError) error = NULL;
  AmkLauncher *launcher = NULL;
  AmkCpuExecutor *cpu;

  if (!force_cpu)
    {
      launcher = open_gpu (&error);
      if (launcher != NULL)
        return AMK_EXECUTOR (launcher);
      /* TRANSLATORS: said once when there is no usable GPU */
      g_printerr (_("amk %s: no GPU; running on the CPU (--cpu skips this check)\n"), command);
      g_debug ("no GPU: %s", error->message);
      if (no_gpu_reason != NULL)
        *no_gpu_reason = g_strdup (error->message);
    }
  cpu = amk_cpu_executor_new_empty ();
  if (schedule_seed >= 0)
    {
      amk_cpu_executor_set_threads (cpu, 1);
      amk_cpu_executor_set_seed (cpu, (guint64) schedule_seed);
    }
  return AMK_EXECUTOR (cpu);
}

