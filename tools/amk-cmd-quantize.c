/* amk-cmd-quantize.c: `amk quantize IN OUT --type TYPE`: a GGUF file or a Hugging Face
 * checkpoint folder rewritten as a GGUF file of the mix TYPE (amk-quantize.c). The
 * conversion runs in a worker thread while the terminal shows the tensor it is at;
 * Ctrl-C cancels it between two tensors, and then nothing is left behind.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <glib/gi18n.h>

#ifdef G_OS_UNIX
#include <signal.h>
#include <unistd.h>
#include <glib-unix.h>
#endif

#include "amk-cli.h"
#include "amk-quantize.h"
#include "amk-gguf-private.h"

typedef struct {
  /* the job */
  const char         *in;
  const char         *out;
  AmkQuantizeMix      mix;
  GCancellable       *cancellable;
  GMainLoop          *loop;
  AmkQuantizeSummary  summary;
  gboolean            ok;
  GError             *error;
  /* where it is, for the progress line (under lock) */
  GMutex              lock;
  guint               index;
  guint               n;
  char               *name;
  const char         *type;
  guint               shown;         /* the index on the progress line, + 1 */
} Quantizing;

static void
on_progress (guint index, guint n, const char *name, const char *type, gpointer data)
{
  Quantizing *q = data;

  g_mutex_lock (&q->lock);
  q->index = index;
  q->n = n;
  g_free (q->name);
  q->name = g_strdup (name);
  q->type = type;
  g_mutex_unlock (&q->lock);
}

static gboolean
show_progress (gpointer data)
{
  Quantizing *q = data;

  g_mutex_lock (&q->lock);
  if (q->n > 0 && q->shown != q->index + 1)
    /* TRANSLATORS: a progress line: the tensor's number, the tensor count, its name and
     * the type it is written as */
    g_printerr (_("\r\033[KQuantizing tensor %u of %u: %s as %s"), q->index + 1, q->n,
                q->name, q->type);
  q->shown = q->index + 1;
  g_mutex_unlock (&q->lock);
  return G_SOURCE_CONTINUE;
}

static gboolean
quit_loop (gpointer data)
{
  g_main_loop_quit (((Quantizing *) data)->loop);
  return G_SOURCE_REMOVE;
}

static gpointer
run_worker (gpointer data)
{
  Quantizing *q = data;

  q->ok = amk_quantize_model (q->in, q->out, q->mix, on_progress, q, &q->summary,
                              q->cancellable, &q->error);
  g_idle_add (quit_loop, q);
  return NULL;
}

#ifdef G_OS_UNIX
static gboolean
on_interrupt (gpointer data)
{
  g_cancellable_cancel (((Quantizing *) data)->cancellable);
  return G_SOURCE_CONTINUE;
}
#endif

static char *
size_string (guint64 bytes)
{
  return g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
}

static void
print_summary (const Quantizing *q, double seconds)
{
  const AmkQuantizeSummary *s = &q->summary;
  g_autofree char *in_size = size_string (s->bytes_in);
  g_autofree char *out_size = size_string (s->bytes_out);
  g_autofree char *file_size = size_string (s->file_bytes);
  g_autofree char *out_display = g_filename_display_name (q->out);

  /* TRANSLATORS: the output file, the type mix and the seconds it took */
  g_print (_("Wrote %s (%s) in %.1f s\n"), out_display, amk_quantize_mix_name (q->mix), seconds);
  for (guint t = 0; t < AMK_QUANTIZE_MAX_TYPES; t++)
    if (s->count[t] > 0)
      {
        g_autofree char *bytes = size_string (s->bytes[t]);

        /* TRANSLATORS: a tensor type, how many tensors have it, and their bytes */
        g_print (g_dngettext (GETTEXT_PACKAGE, "  %-5s %5u tensor   %10s\n",
                              "  %-5s %5u tensors  %10s\n", s->count[t]),
                 amk_ggml_type_name (t), s->count[t], bytes);
      }
  /* TRANSLATORS: the tensor and weight counts, the tensors' bytes before and after, the
   * bits per weight after, and the size of the whole file */
  g_print (_("%u tensors, %" PRIu64 " weights: %s in, %s out (%.2f bits per weight); the file is %s\n"),
           s->n_tensors, s->n_elements, in_size, out_size,
           s->n_elements > 0 ? 8.0 * (double) s->bytes_out / (double) s->n_elements : 0.0,
           file_size);
}

int
amk_cmd_quantize (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (_("IN OUT"));
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *type = NULL;
  Quantizing q = { 0 };
  GThread *worker;
  gboolean quiet = FALSE, progress = FALSE;
  guint progress_id = 0, sigint_id = 0;
  gint64 start;
  int status;
  const GOptionEntry entries[] = {
    { "type", 't', 0, G_OPTION_ARG_STRING, &type,
      N_("The tensor types to write: q8_0, q4_k_m, q5_k_m, q6_k, f16 or bf16"), N_("TYPE") },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet,
      N_("Print nothing but errors"), NULL },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Writes the model IN (a GGUF file or a Hugging Face "
                                           "checkpoint folder) as the GGUF file OUT with its "
                                           "weights in the types of TYPE."));
  g_option_context_set_description (context, _(
    "Types: q8_0 (every matrix Q8_0), q4_k_m and q5_k_m (matrices Q4_K or Q5_K; the output "
    "matrix Q6_K, and attn_v and ffn_down in about half the layers, as llama.cpp chooses "
    "them), q6_k (every matrix Q6_K), "
    "f16, bf16. Vectors stay F32; a matrix whose rows are not whole blocks of its type falls "
    "back to Q8_0, else F16.\n"
    "Exit status: 0 when OUT was written, 1 when something failed (OUT is then left as it "
    "was), 2 for a bad argument."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "quantize", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 3)
    return amk_cli_usage_error ("quantize", _("give the input model and the output file"));
  if (type == NULL)
    return amk_cli_usage_error ("quantize", _("give the types to write with --type"));
  if (!amk_quantize_mix_from_name (type, &q.mix, &error))
    return amk_cli_usage_error ("quantize", error->message);

  q.in = (*args)[1];
  q.out = (*args)[2];
  q.cancellable = cancellable;
  q.loop = loop;
  g_mutex_init (&q.lock);
#ifdef G_OS_UNIX
  progress = !quiet && isatty (STDERR_FILENO);
  sigint_id = g_unix_signal_add (SIGINT, on_interrupt, &q);
#endif
  if (progress)
    progress_id = g_timeout_add (100, show_progress, &q);
  start = g_get_monotonic_time ();
  /* where no thread can start, the work runs here (no progress line while it does) */
  if ((worker = g_thread_try_new ("amk-quantize", run_worker, &q, NULL)) != NULL)
    {
      g_main_loop_run (loop);
      g_thread_join (worker);
    }
  else
    run_worker (&q);
  g_clear_handle_id (&progress_id, g_source_remove);
  g_clear_handle_id (&sigint_id, g_source_remove);
  if (progress)
    g_printerr ("\r\033[K");   /* clears the progress line */
  if (q.ok)
    {
      if (!quiet)
        print_summary (&q, (g_get_monotonic_time () - start) / 1e6);
      status = 0;
    }
  else
    {
      if (g_error_matches (q.error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        {
          g_autofree char *display = g_filename_display_name (q.out);

          g_clear_error (&q.error);
          g_set_error (&q.error, G_IO_ERROR, G_IO_ERROR_CANCELLED,
                       _("Interrupted: “%s” was not written"), display);
        }
      if (q.error == NULL)   /* a failure that set no error is still one sentence */
        g_set_error (&q.error, G_IO_ERROR, G_IO_ERROR_FAILED,
                     _("Quantizing “%s” failed"), q.in);
      amk_cli_print_error ("quantize", q.error);
      g_clear_error (&q.error);
      status = 1;
    }
  g_free (q.name);
  g_mutex_clear (&q.lock);
  return status;
}
