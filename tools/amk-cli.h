/* amk-cli.h: what the `amk` commands share (amk-cli.c, amk-cli-model.c) and the commands
 * that live in files of their own.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <amk-glib/amk-glib.h>

G_BEGIN_DECLS

/* exit statuses: 0 done, 1 failed, 2 a bad argument */
#define EXIT_USAGE 2

/* "amk COMMAND: message" (the GError's domain and code too with AMK_DEBUG set). */
void         amk_cli_print_error     (const char     *command,
                                      const GError   *error);
/* Parses a command's options; on failure prints why and the usage hint. */
gboolean     amk_cli_parse_options   (GOptionContext *context,
                                      const char     *command,
                                      char         ***args);
/* Prints "amk COMMAND: message" and the usage hint; returns EXIT_USAGE. */
int          amk_cli_usage_error     (const char     *command,
                                      const char     *message);
/* The GPU unless @force_cpu or there is none (then a one-line note, and the reason in
 * *no_gpu_reason when asked), else a CPU executor: on worker threads when
 * @schedule_seed is negative, else on the scheduler seeded with it. */
AmkExecutor *amk_cli_choose_executor (const char     *command,
                                      gboolean        force_cpu,
                                      gint64          schedule_seed,
                                      char          **no_gpu_reason);

/* What is wrong with the sampling options that `amk generate` and `amk chat` share, as
 * a sentence for amk_cli_usage_error(), or NULL; a seed of G_MININT64 means none given. */
const char  *amk_cli_check_sampling  (gint            max_tokens,
                                      gdouble         temperature,
                                      gdouble         top_p,
                                      gint64          seed,
                                      gint            ctx_size);

/* A seed for sampling when none is given: 63 random bits (a --seed shows it as given). */
gint64       amk_cli_random_seed     (void);

/* The default model's file in the cache folder, which `amk fetch-model` downloads. */
#define AMK_CLI_DEFAULT_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"

/* The cache folder: $AMK_CACHE_DIR, else amk in the user's ($XDG_CACHE_HOME or ~/.cache). */
char        *amk_cli_cache_dir       (void);
/* The model file a command runs: @given, else $AMK_MODEL, else SmolLM2-135M-Instruct in
 * the cache folder; NULL (said on stderr, with how to get one) when that is missing. */
char        *amk_cli_model_path      (const char     *command,
                                      const char     *given);
/* Loads the model at @path for @executor (its preferred queues) while a progress line
 * counts the seconds on a terminal, then says how long it took unless @quiet. Ctrl-C
 * cancels. NULL with the error printed. */
AmkModel    *amk_cli_load_model      (const char     *command,
                                      const char     *path,
                                      AmkExecutor    *executor,
                                      guint           prefill_chunk,
                                      guint           context_length,
                                      gboolean        quiet);

/* The commands that live in files of their own, called as main() calls those of amk.c:
 * with the arguments after the command's name; they return the exit status. */
int          amk_cmd_chat            (char         ***args);   /* amk-cmd-chat.c */
int          amk_cmd_quantize        (char         ***args);   /* amk-cmd-quantize.c */
/* `amk info --model PATH` (amk-model-info.c): the exit status */
int          amk_cli_info_model      (const char      *path);
/* `amk fetch-model` (amk-cmd-fetch-model.c); without libsoup 3 it only finds a cached file */
int          amk_cmd_fetch_model     (char         ***args);
/* `amk serve` (amk-serve.c), built only with libsoup 3 (config.h's HAVE_AMK_SERVE) */
int          amk_cmd_serve           (char         ***args);

G_END_DECLS
