/* amk-cmd-chat.c: `amk chat`, a conversation in the terminal. Each turn goes through the
 * model's chat format (amk-chat.c); the history stays in the generator's KV cache, so a
 * turn feeds only its own tokens. /reset and /system start over; Ctrl-C stops an answer,
 * not the program.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <glib/gi18n.h>
#include <gio/gio.h>

#ifdef G_OS_UNIX
#include <signal.h>
#include <unistd.h>
#include <glib-unix.h>
#include <gio/gunixinputstream.h>
#endif

#include "amk-chat.h"
#include "amk-cli.h"

typedef struct {
  GMainLoop          *loop;
  AmkGenerator       *generator;
  const AmkChatFormat   *format;
  GDataInputStream   *input;
  GCancellable       *answering;  /* the answer under way, or NULL at the prompt */
  char               *system;
  gint32              end_id;
  gint32              last_token;
  guint               max_tokens;
  gboolean            fresh;      /* no turn since the start or the last /reset */
  gboolean            tty;
  int                 status;
} Chat;

static void read_next (Chat *c);

static void
on_token (AmkGenerator *generator, gint token_id, const char *piece, gpointer data)
{
  Chat *c = data;

  c->last_token = token_id;
  if (token_id == c->end_id)
    return;
  fputs (piece, stdout);
  fflush (stdout);
}

static void
on_answered (GObject *source, GAsyncResult *result, gpointer data)
{
  Chat *c = data;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = amk_generator_generate_finish (c->generator, result, &error);

  g_clear_object (&c->answering);
  fputs ("\n", stdout);
  if (text == NULL && g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    /* TRANSLATORS: amk chat, after Ctrl-C stopped an answer */
    g_printerr (_("(stopped)\n"));
  else if (text == NULL)
    amk_cli_print_error ("chat", error);
  read_next (c);
}

/* The text of a turn: what closes the previous answer, the system message on the first
 * turn, the user's message and the start of the answer. */
static char *
turn_text (Chat *c, const char *message)
{
  GString *turn = g_string_new (NULL);
  g_autofree char *user = NULL;

  if (!c->fresh)
    {
      /* an answer that stopped early lacks its end token (one that ended has it fed
       * with this turn, as the generator's pending token) */
      if (c->last_token != c->end_id)
        g_string_append (turn, c->format->end);
      g_string_append (turn, c->format->between);
    }
  if (c->fresh && c->system != NULL && c->format->system != NULL)
    g_string_append_printf (turn, c->format->system, c->system);
  if (c->fresh && c->system != NULL && c->format->system == NULL)
    user = g_strdup_printf ("%s\n\n%s", c->system, message);
  g_string_append_printf (turn, c->format->user, user != NULL ? user : message);
  return g_string_free (turn, FALSE);
}

static void
start_over (Chat *c)
{
  amk_generator_reset (c->generator);
  c->fresh = TRUE;
  c->last_token = -1;
}

static void
on_line (GObject *source, GAsyncResult *result, gpointer data)
{
  Chat *c = data;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = g_data_input_stream_read_line_finish_utf8 (c->input, result, NULL, &error);
  g_autofree char *turn = NULL;

  if (line == NULL)
    {
      if (error != NULL)
        {
          amk_cli_print_error ("chat", error);
          c->status = 1;
        }
      else if (c->tty)
        fputs ("\n", stdout);
      g_main_loop_quit (c->loop);
      return;
    }
  g_strstrip (line);
  if (*line == '\0')
    {
      read_next (c);
      return;
    }
  if (strcmp (line, "/quit") == 0 || strcmp (line, "/exit") == 0)
    {
      g_main_loop_quit (c->loop);
      return;
    }
  if (strcmp (line, "/reset") == 0 || g_str_has_prefix (line, "/system"))
    {
      if (g_str_has_prefix (line, "/system"))
        {
          const char *text = line + strlen ("/system");
          g_free (c->system);
          c->system = *text != '\0' ? g_strdup (g_strchug ((char *) text)) : NULL;
        }
      start_over (c);
      /* TRANSLATORS: amk chat, after /reset or /system */
      g_printerr (_("(a new conversation)\n"));
      read_next (c);
      return;
    }
  if (line[0] == '/')
    {
      /* TRANSLATORS: amk chat's commands, for /help or an unknown one */
      g_printerr (_("Commands: /reset starts over, /system TEXT starts over with that system "
                    "message, /quit leaves (as does Ctrl-D); Ctrl-C stops an answer.\n"));
      read_next (c);
      return;
    }
  turn = turn_text (c, line);
  c->fresh = FALSE;
  c->last_token = -1;
  c->answering = g_cancellable_new ();
  amk_generator_generate_async (c->generator, turn, c->max_tokens, c->answering, on_answered, c);
}

static void
read_next (Chat *c)
{
  if (c->tty)
    {
      fputs ("> ", stdout);
      fflush (stdout);
    }
  g_data_input_stream_read_line_async (c->input, G_PRIORITY_DEFAULT, NULL, on_line, c);
}

#ifdef G_OS_UNIX
static gboolean
on_interrupt (gpointer data)
{
  Chat *c = data;

  if (c->answering != NULL)
    g_cancellable_cancel (c->answering);
  else
    /* TRANSLATORS: amk chat, Ctrl-C at the prompt */
    g_printerr (_("\n(/quit or Ctrl-D leaves)\n> "));
  return G_SOURCE_CONTINUE;
}
#endif

int
amk_cmd_chat (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (NULL);
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr(AmkExecutor) executor = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(AmkGenerator) generator = NULL;
  g_autoptr(GInputStream) in = NULL;
  g_autoptr(GDataInputStream) input = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *model_arg = NULL, *path = NULL, *template_name = NULL, *system = NULL;
  gboolean force_cpu = FALSE;
  gint max_tokens = 512, ctx_size = 0;
  gdouble temperature = 0.7, top_p = 0.9;
  gint64 seed = G_MININT64;
  guint sigint_id = 0;
  const char *why;
  Chat c = { 0 };
  const GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model_arg,
      N_("The model: a GGUF file or a Hugging Face checkpoint folder (default as amk generate)"),
      N_("PATH") },
    { "system", 0, 0, G_OPTION_ARG_STRING, &system,
      N_("The system message the conversation starts with"), N_("TEXT") },
    { "template", 0, 0, G_OPTION_ARG_STRING, &template_name,
      N_("The chat format: chatml, llama3, gemma or mistral (default: the model's)"), N_("NAME") },
    { "max-tokens", 'n', 0, G_OPTION_ARG_INT, &max_tokens,
      N_("The most tokens of one answer (default: 512)"), N_("N") },
    { "temperature", 't', 0, G_OPTION_ARG_DOUBLE, &temperature,
      N_("Sample at this temperature (default: 0.7); 0 is greedy"), N_("T") },
    { "top-p", 'p', 0, G_OPTION_ARG_DOUBLE, &top_p,
      N_("Sample from the most likely tokens that make up probability P (default: 0.9)"), N_("P") },
    { "seed", 's', 0, G_OPTION_ARG_INT64, &seed,
      N_("The seed of the sampling (default: a random one)"), N_("SEED") },
    { "ctx-size", 0, 0, G_OPTION_ARG_INT, &ctx_size,
      N_("The context in tokens, the whole conversation (default: as amk generate)"), N_("N") },
    { "cpu", 'c', 0, G_OPTION_ARG_NONE, &force_cpu,
      N_("Run on the CPU executor even if there is a GPU"), NULL },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Talks with a chat model in the terminal: each line "
                                           "you type is a message, the answer streams back. "
                                           "/reset starts over, /system TEXT sets the system "
                                           "message, /quit or Ctrl-D leaves, Ctrl-C stops an "
                                           "answer."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "chat", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 1)
    return amk_cli_usage_error ("chat", _("takes no arguments: type the messages"));
  if ((why = amk_cli_check_sampling (max_tokens, temperature, top_p, seed, ctx_size)) != NULL)
    return amk_cli_usage_error ("chat", why);
  if (system != NULL && !g_utf8_validate (system, -1, NULL))
    return amk_cli_usage_error ("chat", _("the --system text is not valid UTF-8"));
  if (seed == G_MININT64)
    seed = amk_cli_random_seed ();

  path = amk_cli_model_path ("chat", model_arg);
  if (path == NULL)
    return 1;
  executor = amk_cli_choose_executor ("chat", force_cpu, -1, NULL);
  model = amk_cli_load_model ("chat", path, executor, 0, (guint) ctx_size, FALSE);
  if (model == NULL)
    return 1;
  c.format = amk_chat_find_format (amk_model_get_tokenizer (model), template_name, &error);
  if (c.format == NULL)
    {
      amk_cli_print_error ("chat", error);
      return template_name != NULL ? EXIT_USAGE : 1;
    }

  generator = amk_generator_new (model, executor);
  g_object_set (generator, "temperature", temperature, "top-p", top_p, "seed", (guint64) seed, NULL);
  c.end_id = amk_tokenizer_token_to_id (amk_model_get_tokenizer (model), c.format->end);
  if (c.end_id >= 0)
    amk_generator_add_stop_token (generator, c.end_id);
  else
    amk_generator_add_stop_string (generator, c.format->end);
  g_signal_connect (generator, "token", G_CALLBACK (on_token), &c);

  c.loop = loop;
  c.generator = generator;
  c.system = g_steal_pointer (&system);
  c.max_tokens = (guint) max_tokens;
  c.fresh = TRUE;
  c.last_token = -1;
#ifdef G_OS_UNIX
  c.tty = isatty (STDIN_FILENO) && isatty (STDOUT_FILENO);
  in = g_unix_input_stream_new (STDIN_FILENO, FALSE);
  sigint_id = g_unix_signal_add (SIGINT, on_interrupt, &c);
#else
  return amk_cli_usage_error ("chat", _("needs a terminal of a Unix system"));
#endif
  input = g_data_input_stream_new (in);
  c.input = input;
  if (c.tty)
    /* TRANSLATORS: amk chat's greeting: the chat format's name */
    g_printerr (_("Chat format %s. /reset starts over, /system TEXT sets the system message, "
                  "/quit or Ctrl-D leaves, Ctrl-C stops an answer.\n"), c.format->name);
  read_next (&c);
  g_main_loop_run (loop);
  g_clear_handle_id (&sigint_id, g_source_remove);
  if (c.answering != NULL)
    g_cancellable_cancel (c.answering);
  g_clear_object (&c.answering);
  g_free (c.system);
  return c.status;
}
