/* amk-chat.c: chat prompts of the `amk` tool (`amk generate --chat`, `amk chat`,
 * `amk serve`). The model's chat template is recognised by its family (ChatML, Llama 3,
 * Gemma, Mistral) and each message wrapped as that family does: the library keeps the
 * template's Jinja text but runs none of it.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>
#include <glib/gi18n.h>
#include <gio/gio.h>

#include "amk-chat.h"

static const AmkChatFormat formats[] = {
  { "chatml", "<|im_start|>", "<|im_start|>system\n%s<|im_end|>\n",
    "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>", "\n" },
  { "llama3", "<|start_header_id|>", "<|start_header_id|>system<|end_header_id|>\n\n%s<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|eot_id|>", "" },
  { "gemma", "<start_of_turn>", NULL, "<start_of_turn>user\n%s<end_of_turn>\n<start_of_turn>model\n",
    "<end_of_turn>", "\n" },
  { "mistral", "[INST]", NULL, "[INST] %s [/INST]", "</s>", "" },
};

/* The family named @name, or the one whose marker the model's template (or, without one,
 * its vocabulary) holds. */
const AmkChatFormat *
amk_chat_find_format (AmkTokenizer *tok, const char *name, GError **error)
{
  const char *text = amk_tokenizer_get_chat_template (tok);

  for (guint i = 0; i < G_N_ELEMENTS (formats); i++)
    if (name != NULL ? strcmp (name, formats[i].name) == 0
                     : text != NULL ? strstr (text, formats[i].marker) != NULL
                                    : amk_tokenizer_token_to_id (tok, formats[i].marker) >= 0)
      return &formats[i];
  if (name != NULL)
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 _("--template must be chatml, llama3, gemma or mistral, not “%s”"), name);
  else
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                         _("The model’s chat template is none of the families amk knows "
                           "(ChatML, Llama 3, Gemma, Mistral); name one with --template"));
  return NULL;
}

char *
amk_chat_format (AmkTokenizer          *tokenizer,
                 const AmkChatMessage  *messages,
                 gsize                  n_messages,
                 gint32                *end_token,
                 GError               **error)
{
  const AmkChatFormat *format = amk_chat_find_format (tokenizer, NULL, error);
  g_autoptr(GString) text = NULL;
  const char *system = NULL;

  if (format == NULL)
    return NULL;
  text = g_string_new (NULL);
  for (gsize i = 0; i < n_messages; i++)
    {
      const AmkChatMessage *m = &messages[i];

      if (strcmp (m->role, "system") == 0)
        {
          if (format->system != NULL)
            g_string_append_printf (text, format->system, m->content);
          else
            system = m->content;   /* opens the next user message */
        }
      else if (strcmp (m->role, "user") == 0)
        {
          g_autofree char *user = system != NULL ? g_strdup_printf ("%s\n\n%s", system, m->content) : NULL;

          g_string_append_printf (text, format->user, user != NULL ? user : m->content);
          system = NULL;
        }
      else if (strcmp (m->role, "assistant") == 0)
        {
          /* an earlier answer: its text, its end and what comes between turns; the
           * user format already opened it */
          g_string_append (text, m->content);
          g_string_append (text, format->end);
          g_string_append (text, format->between);
        }
      else
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       _("A chat message’s role must be system, user or assistant, not “%s”"), m->role);
          return NULL;
        }
    }
  if (end_token != NULL)
    *end_token = amk_tokenizer_token_to_id (tokenizer, format->end);
  return g_string_free (g_steal_pointer (&text), FALSE);
}

char *
amk_chat_prompt (AmkGenerator          *generator,
                 const AmkChatMessage  *messages,
                 gsize                  n_messages,
                 GError               **error)
{
  AmkTokenizer *tok = amk_model_get_tokenizer (amk_generator_get_model (generator));
  const AmkChatFormat *format = amk_chat_find_format (tok, NULL, error);
  gint32 end = -1;
  char *text;

  if (format == NULL)
    return NULL;
  text = amk_chat_format (tok, messages, n_messages, &end, error);
  if (text == NULL)
    return NULL;
  if (end >= 0)
    amk_generator_add_stop_token (generator, end);
  else
    amk_generator_add_stop_string (generator, format->end);
  return text;
}
