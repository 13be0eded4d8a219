/* amk-cli-model.c: the model a command runs (`amk generate`, `amk chat`): where it is,
 * and loading it in a worker thread while the terminal shows the seconds.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>
#include <glib/gi18n.h>

#ifdef G_OS_UNIX
#include <signal.h>
#include <unistd.h>
#include <glib-unix.h>
#endif

#include "amk-cli.h"

char *
amk_cli_cache_dir (void)
{
  const char *dir = g_getenv ("AMK_CACHE_DIR");

  if (dir != NULL && *dir != '\0')
    return g_strdup (dir);
  return g_build_filename (g_get_user_cache_dir (), "amk", NULL);
}

char *
amk_cli_model_path (const char *command,
                    const char *given)
{
  g_autofree char *path = NULL;
  g_autofree char *display = NULL;
  g_autofree char *cache_dir = NULL;

  if (given != NULL)
    return g_strdup (given);
  if (g_getenv ("AMK_MODEL") != NULL && *g_getenv ("AMK_MODEL") != '\0')
    return g_strdup (g_getenv ("AMK_MODEL"));
  cache_dir = amk_cli_cache_dir ();
  path = g_build_filename (cache_dir, AMK_CLI_DEFAULT_MODEL, NULL);
  if (g_file_test (path, G_FILE_TEST_EXISTS))
    return g_steal_pointer (&path);
  display = g_filename_display_name (path);
  g_printerr (_("amk %s: there is no model at %s: run “amk fetch-model” to download "
                "SmolLM2-135M-Instruct (98 MB) there, or give a model with --model PATH\n"),
              command, display);
  return NULL;
}

typedef struct {
  GMainLoop    *loop;
  GCancellable *cancellable;
  AmkModel     *model;
  GError       *error;
  const char   *name;         /* the model's name in the progress line */
  gint64        start;
} Loading;

static gboolean
show_progress (gpointer data)
{
  Loading *l = data;

  g_printerr ("\r");
  /* TRANSLATORS: a progress line while the model loads: its name, then seconds */
  g_printerr (_("Loading %s… %.1f s"), l->name, (g_get_monotonic_time () - l->start) / 1e6);
  return G_SOURCE_CONTINUE;
}

static void
on_loaded (GObject *source, GAsyncResult *result, gpointer data)
{
  Loading *l = data;

  l->model = amk_model_new_from_file_finish (result, &l->error);
  g_main_loop_quit (l->loop);
}

#ifdef G_OS_UNIX
static gboolean
on_interrupt (gpointer data)
{
  g_cancellable_cancel (((Loading *) data)->cancellable);
  return G_SOURCE_CONTINUE;
}
#endif

AmkModel *
amk_cli_load_model (const char  *command,
                    const char  *path,
                    AmkExecutor *executor,
                    guint        prefill_chunk,
                    guint        context_length,
                    gboolean     quiet)
{
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *name = g_path_get_basename (path);
  Loading l = { loop, cancellable, NULL, NULL, name, g_get_monotonic_time () };
  gboolean progress = FALSE;
  guint progress_id = 0, sigint_id = 0;
  guint queues;

  /* the model is built with the queue count the executor prefers; the launcher chooses
   * its threads and shared memory when the model's program is loaded on it */
  queues = amk_executor_get_preferred_queues (executor, &error);
  if (queues == 0)
    {
      amk_cli_print_error (command, error);
      return NULL;
    }
  if (g_str_has_suffix (name, ".gguf"))
    name[strlen (name) - strlen (".gguf")] = '\0';
#ifdef G_OS_UNIX
  progress = !quiet && isatty (STDERR_FILENO);
  sigint_id = g_unix_signal_add (SIGINT, on_interrupt, &l);
#endif
  if (progress)
    {
      show_progress (&l);
      progress_id = g_timeout_add (100, show_progress, &l);
    }
  g_async_initable_new_async (AMK_TYPE_MODEL, G_PRIORITY_DEFAULT, cancellable, on_loaded, &l,
                              "path", path, "n-queues", queues, "prefill-chunk", prefill_chunk,
                              "context-length", context_length, NULL);
  g_main_loop_run (loop);
  g_clear_handle_id (&progress_id, g_source_remove);
  g_clear_handle_id (&sigint_id, g_source_remove);
  if (progress)
    g_printerr ("\r\033[K");   /* clears the progress line */
  if (l.model == NULL)
    {
      amk_cli_print_error (command, l.error);
      g_clear_error (&l.error);
      return NULL;
    }
  if (!quiet)
    {
      /* TRANSLATORS: after loading: the model's name, the seconds it took and the MiB of
       * its weights on the executor */
      g_printerr (_("Loaded %s in %.1f s: %.1f MiB of weights\n"),
                  name, (g_get_monotonic_time () - l.start) / 1e6,
                  amk_model_get_weight_bytes (l.model) / 1048576.0);
    }
  return l.model;
}
