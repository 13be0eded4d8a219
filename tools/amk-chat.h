/* amk-chat.h: the chat prompt of the `amk` tool (`amk generate --chat`, `amk serve`).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <amk-glib/amk-glib.h>

G_BEGIN_DECLS

/* A family of chat templates as the text around each message (printf formats with one
 * %s). */
typedef struct {
  const char *name;
  const char *marker;    /* what the template's text holds */
  const char *system;    /* around the system message; NULL: it opens the first user message */
  const char *user;      /* around the user's message, then the start of the answer */
  const char *end;       /* the token that ends an answer */
  const char *between;   /* after that token, before the next turn */
} AmkChatFormat;

/* The family named @name (chatml, llama3, gemma, mistral), or with @name NULL the one
 * the model's chat template (or, without one, its vocabulary) shows. */
const AmkChatFormat *amk_chat_find_format (AmkTokenizer  *tokenizer,
                                           const char    *name,
                                           GError       **error);

/* One turn of a conversation: its role ("system", "user", "assistant") and its text. */
typedef struct {
  const char *role;
  const char *content;
} AmkChatMessage;

/* The conversation as the model's chat format, ending where the answer starts;
 * *end_token: the id of the token that ends an answer, or -1 when it is a string. */
char *amk_chat_format (AmkTokenizer          *tokenizer,
                       const AmkChatMessage  *messages,
                       gsize                  n_messages,
                       gint32                *end_token,
                       GError               **error);
/* As amk_chat_format(), and the end of an answer made a stop of @generator. */
char *amk_chat_prompt (AmkGenerator          *generator,
                       const AmkChatMessage  *messages,
                       gsize                  n_messages,
                       GError               **error);

G_END_DECLS
