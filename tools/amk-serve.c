/* amk-serve.c: `amk serve`, an HTTP server with the OpenAI API in front of one model:
 * GET /v1/models, POST /v1/completions and POST /v1/chat/completions, answered whole or
 * streamed as server-sent events.
 *
 * One generator serves every client: accepted requests wait in a queue and run one at a
 * time, each from a fresh session. A client that closes its connection cancels its
 * request, waiting or running. What a client sends is checked before it is queued: the
 * body's size (413 beyond 1 MiB), its JSON (400 for a syntax error, a wrong type or
 * value, with an OpenAI-style error object) and the prompt's length against the context.
 *
 * GET / is a chat page for a browser (tools/chat/, compiled in as a GResource) that
 * talks to /v1/chat/completions of the same server.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <glib/gi18n.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include <amk-glib/amk-glib.h>

#ifdef G_OS_UNIX
#include <signal.h>
#include <sys/socket.h>
#include <glib-unix.h>
#endif

#include "amk-chat.h"
#include "amk-cli.h"
#include "amk-serve-resources.h"

#define MAX_BODY_BYTES   (1u << 20)   /* a larger request body is refused (413) */
#define MAX_JSON_DEPTH   64           /* nesting of arrays and objects in a body */
#define MAX_WAITING      64           /* requests in the queue; more are refused (503) */
#define MAX_STOPS        4            /* stop strings per request, as OpenAI allows */
#define COMPLETION_TOKENS 16          /* /v1/completions' default max_tokens (OpenAI's) */
#define STATUS_CLIENT_GONE 499        /* nginx's "client closed request": never read */

typedef enum {
  ENDPOINT_COMPLETIONS,
  ENDPOINT_CHAT
} Endpoint;

typedef struct _Server Server;

/* One accepted generation: its message (paused until there is an answer), what to
 * generate, and while it runs the text so far, which a streamed request sends on as it
 * comes (all of it but what may turn out to be a stop string). */
typedef struct {
  Server            *server;
  SoupServerMessage *msg;
  Endpoint           endpoint;
  char              *id;
  gint64             created;
  char              *prompt;
  gint32             end_token;       /* chat: the token that ends an answer, or -1 */
  guint              max_tokens;
  gdouble            temperature;
  gdouble            top_p;
  guint              top_k;
  guint64            seed;
  GStrv              stops;           /* the request's, and the chat's end as text */
  gboolean           stream;
  gboolean           include_usage;
  GCancellable      *cancellable;
  GString           *text;
  gsize              sent;            /* streamed: the bytes of text sent */
  gboolean           streaming;       /* the 200 and the event-stream headers are out */
  gboolean           gone;            /* the client closed its connection */
  gboolean           finished;        /* libsoup is done with msg: no more I/O on it */
  gulong             finished_id;
  gulong             disconnected_id;
  GSource           *hangup;          /* watches the connection for the client closing it */
} Request;

struct _Server {
  SoupServer   *soup;
  AmkModel     *model;
  AmkGenerator *generator;
  char         *model_id;
  gint64        created;
  guint         context;
  GQueue        waiting;              /* Request *: accepted, not started */
  Request      *running;
  GMainLoop    *loop;
  gboolean      stopping;
  gboolean      answered_stopping;    /* a request was answered after the stop signal */
};

/* ---- JSON replies ---------------------------------------------------------------- */

static void
reply_json (SoupServerMessage *msg,
            guint              status,
            JsonNode          *node)
{
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  gsize length = 0;
  char *body;

  json_generator_set_root (generator, node);
  body = json_generator_to_data (generator, &length);
  soup_server_message_set_status (msg, status, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_TAKE, body, length);
}

static JsonNode *
error_node (const char *message,
            const char *type,
            const char *param,
            const char *code)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "error");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "message");
  json_builder_add_string_value (b, message);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, type);
  json_builder_set_member_name (b, "param");
  if (param != NULL)
    json_builder_add_string_value (b, param);
  else
    json_builder_add_null_value (b);
  json_builder_set_member_name (b, "code");
  if (code != NULL)
    json_builder_add_string_value (b, code);
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

static void reply_error (SoupServerMessage *msg, guint status, const char *param,
                         const char *code, const char *format, ...) G_GNUC_PRINTF (5, 6);

/* Answers @msg with @status and an OpenAI error object: {"error": {"message", "type",
 * "param", "code"}}, the type "invalid_request_error" for a 4xx status, else
 * "server_error". */
static void
reply_error (SoupServerMessage *msg,
             guint              status,
             const char        *param,
             const char        *code,
             const char        *format,
             ...)
{
  g_autoptr(JsonNode) node = NULL;
  g_autofree char *message = NULL;
  va_list args;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);
  node = error_node (message, status < 500 ? "invalid_request_error" : "server_error", param, code);
  reply_json (msg, status, node);
}

static const char *
json_type_name (JsonNode *node)
{
  GType type;

  if (JSON_NODE_HOLDS_OBJECT (node))
    return "an object";
  if (JSON_NODE_HOLDS_ARRAY (node))
    return "an array";
  if (JSON_NODE_HOLDS_NULL (node))
    return "null";
  type = json_node_get_value_type (node);
  if (type == G_TYPE_STRING)
    return "a string";
  if (type == G_TYPE_BOOLEAN)
    return "a boolean";
  if (type == G_TYPE_INT64)
    return "an integer";
  return "a decimal number";
}

static void
reply_bad_type (SoupServerMessage *msg,
                const char        *param,
                const char        *expected,
                JsonNode          *node)
{
  reply_error (msg, SOUP_STATUS_BAD_REQUEST, param, "invalid_type",
               "Invalid type for '%s': expected %s, but got %s instead.",
               param, expected, json_type_name (node));
}

/* ---- reading a request body ------------------------------------------------------ */

/* The deepest nesting of arrays and objects in JSON text, stopping beyond @limit:
 * json-glib's parser recurses once per level, so that a body of a million "[" would
 * overflow the stack. */
static guint
json_depth (const char *data,
            gsize       size,
            guint       limit)
{
  gboolean in_string = FALSE;
  guint depth = 0;

  for (gsize i = 0; i < size && depth <= limit; i++)
    {
      char c = data[i];

      if (in_string)
        {
          if (c == '\\')
            i++;
          else if (c == '"')
            in_string = FALSE;
        }
      else if (c == '"')
        in_string = TRUE;
      else if (c == '[' || c == '{')
        depth++;
      else if ((c == ']' || c == '}') && depth > 0)
        depth--;
    }
  return depth;
}

/* The request's body as a JSON object, or NULL after answering 400 or 413. */
static JsonObject *
read_body (SoupServerMessage *msg)
{
  g_autoptr(GBytes) bytes = soup_message_body_flatten (soup_server_message_get_request_body (msg));
  g_autoptr(JsonParser) parser = json_parser_new_immutable ();
  g_autoptr(GError) error = NULL;
  const char *data;
  JsonNode *root;
  gsize size = 0;

  data = g_bytes_get_data (bytes, &size);
  if (size > MAX_BODY_BYTES)
    {
      reply_error (msg, SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE, NULL, "request_too_large",
                   "The request body is larger than %u bytes.", MAX_BODY_BYTES);
      return NULL;
    }
  if (size == 0)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, NULL, "invalid_json",
                   "The request has no body: send the parameters as a JSON object.");
      return NULL;
    }
  if (!g_utf8_validate_len (data, size, NULL))
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, NULL, "invalid_json",
                   "The request body is not valid UTF-8.");
      return NULL;
    }
  if (json_depth (data, size, MAX_JSON_DEPTH) > MAX_JSON_DEPTH)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, NULL, "invalid_json",
                   "The request body nests arrays and objects more than %u deep.",
                   MAX_JSON_DEPTH);
      return NULL;
    }
  if (!json_parser_load_from_data (parser, data, (gssize) size, &error))
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, NULL, "invalid_json",
                   "The request body is not valid JSON: %s", error->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, NULL, "invalid_json",
                   "The request body must be a JSON object.");
      return NULL;
    }
  return json_object_ref (json_node_get_object (root));
}

/* Member @name of @object, NULL when absent or null (a null parameter is a default). */
static JsonNode *
member (JsonObject *object,
        const char *name)
{
  JsonNode *node = json_object_get_member (object, name);

  return node != NULL && !JSON_NODE_HOLDS_NULL (node) ? node : NULL;
}

static gboolean
holds_type (JsonNode *node,
            GType     type)
{
  return JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == type;
}

/* A string member that json-glib unescaped to valid UTF-8 (a lone surrogate such as
 * "\ud800" does not come out so); NULL after answering 400. */
static const char *
get_string (SoupServerMessage *msg,
            JsonNode          *node,
            const char        *param)
{
  const char *text;

  if (!holds_type (node, G_TYPE_STRING))
    {
      reply_bad_type (msg, param, "a string", node);
      return NULL;
    }
  text = json_node_get_string (node);
  if (!g_utf8_validate (text, -1, NULL))
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, param, "invalid_value",
                   "Invalid '%s': the string is not valid Unicode.", param);
      return NULL;
    }
  return text;
}

/* A number member in [@min, @max] (above @min when @min_excluded); absent or null keeps
 * *value. FALSE after answering 400. */
static gboolean
get_number (SoupServerMessage *msg,
            JsonObject        *body,
            const char        *name,
            gdouble            min,
            gboolean           min_excluded,
            gdouble            max,
            gdouble           *value)
{
  JsonNode *node = member (body, name);
  gdouble v;

  if (node == NULL)
    return TRUE;
  if (!holds_type (node, G_TYPE_INT64) && !holds_type (node, G_TYPE_DOUBLE))
    {
      reply_bad_type (msg, name, "a number", node);
      return FALSE;
    }
  v = json_node_get_double (node);
  if (!isfinite (v) || v < min || (min_excluded && v == min) || v > max)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, name, "invalid_value",
                   "Invalid '%s': expected a number %s %g and at most %g, but got %g instead.",
                   name, min_excluded ? "above" : "of at least", min, max, v);
      return FALSE;
    }
  *value = v;
  return TRUE;
}

/* An integer member in [@min, @max] (a number such as 8.0 counts); absent or null keeps
 * *value. FALSE after answering 400. */
static gboolean
get_integer (SoupServerMessage *msg,
             JsonObject        *body,
             const char        *name,
             gint64             min,
             gint64             max,
             gint64            *value)
{
  JsonNode *node = member (body, name);
  gdouble d;
  gint64 v;

  if (node == NULL)
    return TRUE;
  d = holds_type (node, G_TYPE_DOUBLE) ? json_node_get_double (node) : NAN;
  if (holds_type (node, G_TYPE_INT64))
    v = json_node_get_int (node);
  else if (d == floor (d) && fabs (d) < 9e15)   /* NAN is never equal */
    v = (gint64) d;
  else
    {
      reply_bad_type (msg, name, "an integer", node);
      return FALSE;
    }
  if (v < min || v > max)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, name, "invalid_value",
                   "Invalid '%s': expected an integer from %" G_GINT64_FORMAT " to %"
                   G_GINT64_FORMAT ", but got %" G_GINT64_FORMAT " instead.", name, min, max, v);
      return FALSE;
    }
  *value = v;
  return TRUE;
}

static gboolean
get_boolean (SoupServerMessage *msg,
             JsonObject        *object,
             const char        *name,
             const char        *param,
             gboolean          *value)
{
  JsonNode *node = member (object, name);

  if (node == NULL)
    return TRUE;
  if (!holds_type (node, G_TYPE_BOOLEAN))
    {
      reply_bad_type (msg, param, "a boolean", node);
      return FALSE;
    }
  *value = json_node_get_boolean (node);
  return TRUE;
}

/* "stop": null, a string or an array of up to MAX_STOPS strings, none empty. */
static gboolean
get_stops (SoupServerMessage *msg,
           JsonObject        *body,
           GStrv             *stops)
{
  JsonNode *node = member (body, "stop");
  g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();
  JsonArray *array;

  if (node == NULL)
    return TRUE;
  if (holds_type (node, G_TYPE_STRING))
    {
      const char *stop = get_string (msg, node, "stop");

      if (stop == NULL)
        return FALSE;
      if (*stop != '\0')
        g_strv_builder_add (builder, stop);
    }
  else if (JSON_NODE_HOLDS_ARRAY (node))
    {
      array = json_node_get_array (node);
      if (json_array_get_length (array) > MAX_STOPS)
        {
          reply_error (msg, SOUP_STATUS_BAD_REQUEST, "stop", "invalid_value",
                       "Invalid 'stop': at most %u stop strings, but got %u.", MAX_STOPS,
                       json_array_get_length (array));
          return FALSE;
        }
      for (guint i = 0; i < json_array_get_length (array); i++)
        {
          const char *stop = get_string (msg, json_array_get_element (array, i), "stop");

          if (stop == NULL)
            return FALSE;
          if (*stop != '\0')
            g_strv_builder_add (builder, stop);
        }
    }
  else
    {
      reply_bad_type (msg, "stop", "a string or an array of strings", node);
      return FALSE;
    }
  *stops = g_strv_builder_end (builder);
  return TRUE;
}

/* /v1/completions' "prompt": a string, or an array of one string. */
static char *
completion_prompt (SoupServerMessage *msg,
                   JsonObject        *body)
{
  JsonNode *node = member (body, "prompt");
  const char *prompt;

  if (node == NULL)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "prompt", "missing_required_parameter",
                   "Missing required parameter: 'prompt'.");
      return NULL;
    }
  if (JSON_NODE_HOLDS_ARRAY (node) && json_array_get_length (json_node_get_array (node)) == 1)
    node = json_array_get_element (json_node_get_array (node), 0);
  if (!holds_type (node, G_TYPE_STRING))
    {
      reply_bad_type (msg, "prompt", "a string (one prompt per request; token arrays are "
                      "not supported)", node);
      return NULL;
    }
  prompt = get_string (msg, node, "prompt");
  if (prompt == NULL)
    return NULL;
  if (*prompt == '\0')
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "prompt", "invalid_value",
                   "Invalid 'prompt': the prompt is empty.");
      return NULL;
    }
  return g_strdup (prompt);
}

/* A chat message's "content": a string, or an array of text parts, which are joined;
 * NULL after answering 400. */
static char *
message_content (SoupServerMessage *msg,
                 JsonNode          *node,
                 const char        *param)
{
  g_autoptr(GString) text = g_string_new (NULL);
  JsonArray *parts;

  if (holds_type (node, G_TYPE_STRING))
    {
      const char *content = get_string (msg, node, param);

      return content != NULL ? g_strdup (content) : NULL;
    }
  if (!JSON_NODE_HOLDS_ARRAY (node))
    {
      reply_bad_type (msg, param, "a string or an array of text parts", node);
      return NULL;
    }
  parts = json_node_get_array (node);
  for (guint i = 0; i < json_array_get_length (parts); i++)
    {
      g_autofree char *part_param = g_strdup_printf ("%s[%u]", param, i);
      JsonNode *part = json_array_get_element (parts, i);
      JsonNode *type, *part_text;
      const char *s;

      if (!JSON_NODE_HOLDS_OBJECT (part))
        {
          reply_bad_type (msg, part_param, "an object", part);
          return NULL;
        }
      type = member (json_node_get_object (part), "type");
      part_text = member (json_node_get_object (part), "text");
      if (type == NULL || !holds_type (type, G_TYPE_STRING) ||
          strcmp (json_node_get_string (type), "text") != 0 || part_text == NULL)
        {
          reply_error (msg, SOUP_STATUS_BAD_REQUEST, part_param, "invalid_value",
                       "Invalid '%s': only parts of type 'text' (with a 'text' string) "
                       "are supported.", part_param);
          return NULL;
        }
      g_free (part_param);
      part_param = g_strdup_printf ("%s[%u].text", param, i);
      s = get_string (msg, part_text, part_param);
      if (s == NULL)
        return NULL;
      g_string_append (text, s);
    }
  return g_string_free (g_steal_pointer (&text), FALSE);
}

/* /v1/chat/completions' "messages" as the model's chat prompt (the one `amk generate
 * --chat` asks), with what ends an answer in *end_token, or when that is no token,
 * added to @stops. */
static char *
chat_prompt (Server            *server,
             SoupServerMessage *msg,
             JsonObject        *body,
             gint32            *end_token,
             GStrv             *stops)
{
  AmkTokenizer *tokenizer = amk_model_get_tokenizer (server->model);
  JsonNode *node = member (body, "messages");
  g_autoptr(GPtrArray) contents = g_ptr_array_new_with_free_func (g_free);
  g_autofree AmkChatMessage *messages = NULL;
  g_autoptr(GError) error = NULL;
  const AmkChatFormat *format;
  JsonArray *array;
  char *prompt;
  guint n;

  if (node == NULL)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "messages", "missing_required_parameter",
                   "Missing required parameter: 'messages'.");
      return NULL;
    }
  if (!JSON_NODE_HOLDS_ARRAY (node))
    {
      reply_bad_type (msg, "messages", "an array", node);
      return NULL;
    }
  array = json_node_get_array (node);
  n = json_array_get_length (array);
  if (n == 0)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "messages", "invalid_value",
                   "Invalid 'messages': the array is empty.");
      return NULL;
    }
  messages = g_new0 (AmkChatMessage, n);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *param = g_strdup_printf ("messages[%u]", i);
      g_autofree char *role_param = g_strdup_printf ("messages[%u].role", i);
      g_autofree char *content_param = g_strdup_printf ("messages[%u].content", i);
      JsonNode *element = json_array_get_element (array, i);
      JsonNode *role, *content;
      const char *r;
      char *text;

      if (!JSON_NODE_HOLDS_OBJECT (element))
        {
          reply_bad_type (msg, param, "an object", element);
          return NULL;
        }
      role = member (json_node_get_object (element), "role");
      content = member (json_node_get_object (element), "content");
      if (role == NULL)
        {
          reply_error (msg, SOUP_STATUS_BAD_REQUEST, role_param, "missing_required_parameter",
                       "Missing required parameter: '%s'.", role_param);
          return NULL;
        }
      r = get_string (msg, role, role_param);
      if (r == NULL)
        return NULL;
      /* "developer" is what newer OpenAI models call the system message */
      if (strcmp (r, "developer") == 0)
        r = "system";
      if (strcmp (r, "system") != 0 && strcmp (r, "user") != 0 && strcmp (r, "assistant") != 0)
        {
          reply_error (msg, SOUP_STATUS_BAD_REQUEST, role_param, "invalid_value",
                       "Invalid '%s': the role must be 'system', 'developer', 'user' or "
                       "'assistant'.", role_param);
          return NULL;
        }
      if (content == NULL && strcmp (r, "assistant") != 0)
        {
          reply_error (msg, SOUP_STATUS_BAD_REQUEST, content_param, "missing_required_parameter",
                       "Missing required parameter: '%s'.", content_param);
          return NULL;
        }
      text = content != NULL ? message_content (msg, content, content_param) : g_strdup ("");
      if (text == NULL)
        return NULL;
      g_ptr_array_add (contents, text);
      messages[i].role = r;
      messages[i].content = text;
    }
  /* the model answers the last user message: a prompt ending elsewhere has no turn
   * of the assistant to continue */
  if (strcmp (messages[n - 1].role, "user") != 0)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "messages", "invalid_value",
                   "Invalid 'messages': the last message must be the user's.");
      return NULL;
    }
  format = amk_chat_find_format (tokenizer, NULL, &error);
  prompt = format != NULL ? amk_chat_format (tokenizer, messages, n, end_token, &error) : NULL;
  if (prompt == NULL)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "messages", "chat_not_supported",
                   "%s", error->message);
      return NULL;
    }
  if (*end_token < 0)
    {
      g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();

      g_strv_builder_addv (builder, (const char **) *stops);
      g_strv_builder_add (builder, format->end);
      g_strfreev (*stops);
      *stops = g_strv_builder_end (builder);
    }
  return prompt;
}

/* ---- requests ---------------------------------------------------------------------- */

static void
request_free (Request *r)
{
  g_clear_signal_handler (&r->finished_id, r->msg);
  g_clear_signal_handler (&r->disconnected_id, r->msg);
  if (r->hangup != NULL)
    g_source_destroy (r->hangup);
  g_clear_pointer (&r->hangup, g_source_unref);
  g_clear_object (&r->msg);
  g_free (r->id);
  g_free (r->prompt);
  g_strfreev (r->stops);
  g_clear_object (&r->cancellable);
  if (r->text != NULL)
    g_string_free (r->text, TRUE);
  g_free (r);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (Request, request_free)

/* Hands @r's message back to libsoup with the answer set on it (or, for a client gone,
 * a status nobody reads and the connection closed), then frees @r. */
static void
request_release (Request *r)
{
  g_clear_signal_handler (&r->finished_id, r->msg);
  g_clear_signal_handler (&r->disconnected_id, r->msg);
  if (!r->finished)
    {
      if (r->streaming)
        soup_message_body_complete (soup_server_message_get_response_body (r->msg));
      else if (soup_server_message_get_status (r->msg) == 0)
        {
          soup_server_message_set_status (r->msg, STATUS_CLIENT_GONE, "Client Closed Request");
          soup_message_headers_replace (soup_server_message_get_response_headers (r->msg),
                                        "Connection", "close");
        }
      soup_server_message_unpause (r->msg);
    }
  request_free (r);
}

/* The client closed its connection (@finished: libsoup saw it and is done with the
 * message): a waiting request is dropped, a running one cancelled, and then dropped
 * when its generation ends. */
static void
request_gone (Request  *r,
              gboolean  finished)
{
  Server *server = r->server;

  r->finished = r->finished || finished;
  if (r->gone)
    return;
  r->gone = TRUE;
  g_debug ("%s: the client went away", r->id);
  g_cancellable_cancel (r->cancellable);
  if (r == server->running)
    return;
  g_queue_remove (&server->waiting, r);
  request_release (r);
}

static void
on_message_finished (SoupServerMessage *msg,
                     gpointer           data)
{
  request_gone (data, TRUE);
}

#ifdef G_OS_UNIX
/* Readable while the request waits for its answer: the client closed the connection
 * (a read would give 0 bytes, which MSG_PEEK tells without taking anything) or sent
 * more, such as a pipelined request, after which there is nothing to watch for. */
static gboolean
on_hangup (GSocket      *socket,
           GIOCondition  condition,
           gpointer      data)
{
  Request *r = data;
  char byte;
  gssize n = recv (g_socket_get_fd (socket), &byte, 1, MSG_PEEK | MSG_DONTWAIT);

  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) &&
      !(condition & (G_IO_HUP | G_IO_ERR)))
    return G_SOURCE_CONTINUE;
  g_clear_pointer (&r->hangup, g_source_unref);
  if (n <= 0)
    request_gone (r, FALSE);
  return G_SOURCE_REMOVE;
}
#endif

static void on_generated (GObject *source, GAsyncResult *result, gpointer data);
static void stream_begin (Request *r);

/* The next waiting request, if the generator is free: a fresh session with the
 * request's sampling and stops, then the generation in a worker thread. */
static void
server_next (Server *server)
{
  AmkGenerator *generator = server->generator;
  Request *r;

  if (server->running != NULL || server->stopping)
    return;
  r = g_queue_pop_head (&server->waiting);
  if (r == NULL)
    return;
  server->running = r;
  amk_generator_clear_stops (generator);
  g_object_set (generator, "temperature", r->temperature, "top-p", r->top_p,
                "top-k", r->top_k, "seed", r->seed, NULL);
  amk_generator_reset (generator);
  if (r->end_token >= 0)
    amk_generator_add_stop_token (generator, r->end_token);
  for (guint i = 0; r->stops[i] != NULL; i++)
    amk_generator_add_stop_string (generator, r->stops[i]);
  if (r->stream)
    stream_begin (r);
  amk_generator_generate_async (generator, r->prompt, r->max_tokens, r->cancellable,
                                on_generated, r);
}

/* ---- responses --------------------------------------------------------------------- */

/* Opens a response or a chunk of one: its id, object, time and model, then "choices";
 * response_end() closes it and frees the builder. */
static JsonBuilder *
response_begin (Request  *r,
                gboolean  chunk)
{
  JsonBuilder *b = json_builder_new ();
  const char *object = r->endpoint == ENDPOINT_COMPLETIONS ? "text_completion"
                       : chunk ? "chat.completion.chunk" : "chat.completion";

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "id");
  json_builder_add_string_value (b, r->id);
  json_builder_set_member_name (b, "object");
  json_builder_add_string_value (b, object);
  json_builder_set_member_name (b, "created");
  json_builder_add_int_value (b, r->created);
  json_builder_set_member_name (b, "model");
  json_builder_add_string_value (b, r->server->model_id);
  json_builder_set_member_name (b, "choices");
  json_builder_begin_array (b);
  return b;
}

/* The one choice: the text (a chat message, or with @chunk a delta of one, which the
 * first chunk opens with the role), and why it ended (NULL: not yet). */
static void
response_add_choice (JsonBuilder *b,
                     Request     *r,
                     gboolean     chunk,
                     const char  *role,
                     const char  *text,
                     const char  *finish_reason)
{
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "index");
  json_builder_add_int_value (b, 0);
  if (r->endpoint == ENDPOINT_COMPLETIONS)
    {
      json_builder_set_member_name (b, "text");
      json_builder_add_string_value (b, text != NULL ? text : "");
    }
  else
    {
      json_builder_set_member_name (b, chunk ? "delta" : "message");
      json_builder_begin_object (b);
      if (role != NULL)
        {
          json_builder_set_member_name (b, "role");
          json_builder_add_string_value (b, role);
        }
      if (text != NULL)
        {
          json_builder_set_member_name (b, "content");
          json_builder_add_string_value (b, text);
        }
      json_builder_end_object (b);
    }
  json_builder_set_member_name (b, "logprobs");
  json_builder_add_null_value (b);
  json_builder_set_member_name (b, "finish_reason");
  if (finish_reason != NULL)
    json_builder_add_string_value (b, finish_reason);
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);
}

/* Closes "choices", with "usage" when asked (the tokens of the generation just ended). */
static JsonNode *
response_end (JsonBuilder *b,
              Request     *r,
              gboolean     usage)
{
  JsonNode *root;

  json_builder_end_array (b);
  if (usage)
    {
      guint prompt = amk_generator_get_prompt_tokens (r->server->generator);
      guint completion = amk_generator_get_generated_tokens (r->server->generator);

      json_builder_set_member_name (b, "usage");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "prompt_tokens");
      json_builder_add_int_value (b, prompt);
      json_builder_set_member_name (b, "completion_tokens");
      json_builder_add_int_value (b, completion);
      json_builder_set_member_name (b, "total_tokens");
      json_builder_add_int_value (b, (gint64) prompt + completion);
      json_builder_end_object (b);
    }
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  g_object_unref (b);
  return root;
}

/* Sends one server-sent event, "data: TEXT\n\n", on a streamed response. */
static void
stream_send (Request    *r,
             const char *data)
{
  char *event;

  if (r->finished)
    return;
  event = g_strdup_printf ("data: %s\n\n", data);
  soup_message_body_append (soup_server_message_get_response_body (r->msg), SOUP_MEMORY_TAKE,
                            event, strlen (event));
  soup_server_message_unpause (r->msg);
}

static void
stream_send_node (Request  *r,
                  JsonNode *node)
{
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autofree char *json = NULL;

  json_generator_set_root (generator, node);
  json = json_generator_to_data (generator, NULL);
  stream_send (r, json);
  json_node_unref (node);
}

static void
stream_send_delta (Request    *r,
                   const char *role,
                   const char *text,
                   const char *finish_reason)
{
  JsonBuilder *b = response_begin (r, TRUE);

  response_add_choice (b, r, TRUE, role, text, finish_reason);
  stream_send_node (r, response_end (b, r, FALSE));
}

/* The 200 with the event-stream headers, sent when the generation starts, so that a
 * request refused before (400, 413) still gets a plain JSON error; then the chunks as
 * the tokens come, each written at once (the body is not kept). */
static void
stream_begin (Request *r)
{
  SoupMessageHeaders *headers = soup_server_message_get_response_headers (r->msg);

  if (r->finished)
    return;
  soup_server_message_set_status (r->msg, SOUP_STATUS_OK, NULL);
  soup_message_headers_set_content_type (headers, "text/event-stream", NULL);
  soup_message_headers_replace (headers, "Cache-Control", "no-cache");
  /* HTTP/1.0 has no chunks: the stream ends when the connection closes */
  if (soup_server_message_get_http_version (r->msg) == SOUP_HTTP_1_0)
    soup_message_headers_set_encoding (headers, SOUP_ENCODING_EOF);
  else
    soup_message_headers_set_encoding (headers, SOUP_ENCODING_CHUNKED);
  soup_message_body_set_accumulate (soup_server_message_get_response_body (r->msg), FALSE);
  r->streaming = TRUE;
  if (r->endpoint == ENDPOINT_CHAT)
    stream_send_delta (r, "assistant", "", NULL);
  else
    soup_server_message_unpause (r->msg);
}

/* How much of the text so far can go out: not a stop string found in it nor what
 * follows, and not an end that may be the start of one (the next tokens tell), as the
 * generator cuts its text before the first stop string. */
static gsize
sendable_length (Request *r)
{
  const char *text = r->text->str;
  gsize length = r->text->len, safe = length;

  for (guint i = 0; r->stops[i] != NULL; i++)
    {
      const char *stop = r->stops[i];
      gsize n = strlen (stop);
      const char *hit = strstr (text, stop);

      if (hit != NULL)
        safe = MIN (safe, (gsize) (hit - text));
      else
        for (gsize k = MIN (n - 1, length); k > 0; k--)
          if (memcmp (text + length - k, stop, k) == 0)
            {
              safe = MIN (safe, length - k);
              break;
            }
    }
  return MAX (safe, r->sent);
}

static void
on_token (AmkGenerator *generator,
          gint          token_id,
          const char   *piece,
          gpointer      data)
{
  Server *server = data;
  Request *r = server->running;
  gsize sendable;

  if (r == NULL || r->gone)
    return;
  g_string_append (r->text, piece);
  if (!r->streaming)
    return;
  sendable = sendable_length (r);
  if (sendable > r->sent)
    {
      g_autofree char *delta = g_strndup (r->text->str + r->sent, sendable - r->sent);

      r->sent = sendable;
      stream_send_delta (r, NULL, delta, NULL);
    }
}

/* "stop" for an end token or stop string, "length" for max_tokens or a full context. */
static const char *
finish_reason (Request *r)
{
  AmkGenerator *generator = r->server->generator;

  for (guint i = 0; r->stops[i] != NULL; i++)
    if (strstr (r->text->str, r->stops[i]) != NULL)
      return "stop";
  if (amk_generator_get_generated_tokens (generator) >= r->max_tokens ||
      amk_generator_get_position (generator) >= r->server->context)
    return "length";
  return "stop";
}

static void
reply_generated (Request    *r,
                 const char *text)
{
  const char *reason = finish_reason (r);
  JsonBuilder *b;
  g_autoptr(JsonNode) node = NULL;

  if (r->streaming)
    {
      gsize length = strlen (text);

      /* the rest: what was held back as a possible stop string that was none */
      if (length > r->sent)
        stream_send_delta (r, NULL, text + r->sent, NULL);
      stream_send_delta (r, NULL, r->endpoint == ENDPOINT_CHAT ? NULL : "", reason);
      if (r->include_usage)
        {
          b = response_begin (r, TRUE);
          stream_send_node (r, response_end (b, r, TRUE));
        }
      stream_send (r, "[DONE]");
      return;
    }
  b = response_begin (r, FALSE);
  response_add_choice (b, r, FALSE, "assistant", text, reason);
  node = response_end (b, r, TRUE);
  reply_json (r->msg, SOUP_STATUS_OK, node);
}

/* A generation that failed: its error as the answer, or as the last event of a stream. */
static void
reply_failed (Request      *r,
              const GError *error)
{
  guint status = SOUP_STATUS_INTERNAL_SERVER_ERROR;
  const char *message = error->message;

  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    {
      /* cancelled with the client still there: Ctrl-C or SIGTERM */
      status = SOUP_STATUS_SERVICE_UNAVAILABLE;
      message = "The server is stopping: the generation was cancelled.";
    }
  else if (error->domain == AMK_GENERATOR_ERROR &&
           error->code != AMK_GENERATOR_ERROR_NO_TOKEN && error->code != AMK_GENERATOR_ERROR_BUSY)
    status = SOUP_STATUS_BAD_REQUEST;
  else if (error->domain == AMK_TOKENIZER_ERROR)
    status = SOUP_STATUS_BAD_REQUEST;
  if (status == SOUP_STATUS_INTERNAL_SERVER_ERROR)
    amk_cli_print_error ("serve", error);   /* the server's fault: say it where it runs */
  if (r->streaming)
    {
      g_autoptr(JsonGenerator) generator = json_generator_new ();
      g_autoptr(JsonNode) node = error_node (message,
                                             status < 500 ? "invalid_request_error" : "server_error",
                                             NULL, NULL);
      g_autofree char *json = NULL;

      json_generator_set_root (generator, node);
      json = json_generator_to_data (generator, NULL);
      stream_send (r, json);
      return;
    }
  reply_error (r->msg, status, NULL, NULL, "%s", message);
}

static void
on_generated (GObject      *source,
              GAsyncResult *result,
              gpointer      data)
{
  Request *r = data;
  Server *server = r->server;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = amk_generator_generate_finish (AMK_GENERATOR (source), result, &error);

  server->running = NULL;
  if (r->gone)
    ;   /* nobody to answer */
  else if (text == NULL)
    reply_failed (r, error);
  else
    reply_generated (r, text);
  request_release (r);
  if (server->stopping)
    {
      server->answered_stopping = TRUE;
      g_main_loop_quit (server->loop);
    }
  else
    server_next (server);
}

/* ---- the endpoints ------------------------------------------------------------------ */

static JsonNode *
model_node (Server *server)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "id");
  json_builder_add_string_value (b, server->model_id);
  json_builder_set_member_name (b, "object");
  json_builder_add_string_value (b, "model");
  json_builder_set_member_name (b, "created");
  json_builder_add_int_value (b, server->created);
  json_builder_set_member_name (b, "owned_by");
  json_builder_add_string_value (b, "amk");
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

static void
handle_models (Server            *server,
               SoupServerMessage *msg,
               const char        *id)
{
  g_autoptr(JsonNode) node = NULL;
  g_autoptr(JsonArray) data = NULL;
  g_autoptr(JsonObject) list = NULL;

  if (id != NULL)
    {
      if (strcmp (id, server->model_id) != 0)
        {
          reply_error (msg, SOUP_STATUS_NOT_FOUND, "model", "model_not_found",
                       "The model '%s' does not exist; this server has '%s'.", id,
                       server->model_id);
          return;
        }
      node = model_node (server);
      reply_json (msg, SOUP_STATUS_OK, node);
      return;
    }
  data = json_array_new ();
  json_array_add_element (data, model_node (server));
  list = json_object_new ();
  json_object_set_string_member (list, "object", "list");
  json_object_set_array_member (list, "data", g_steal_pointer (&data));
  node = json_node_init_object (json_node_alloc (), list);
  reply_json (msg, SOUP_STATUS_OK, node);
}

/* POST /v1/completions and /v1/chat/completions: checks the parameters, counts the
 * prompt's tokens against the context and queues the request, or answers the error. */
static void
handle_generation (Server            *server,
                   SoupServerMessage *msg,
                   Endpoint           endpoint)
{
  g_autoptr(JsonObject) body = NULL;
  g_autoptr(Request) r = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *ids = NULL;
  JsonNode *node;
  gint64 max_tokens = 0, top_k = 0, n = 1, seed = 0;
  gsize n_ids = 0;

  if (server->stopping)
    {
      reply_error (msg, SOUP_STATUS_SERVICE_UNAVAILABLE, NULL, "server_stopping",
                   "The server is stopping.");
      return;
    }
  body = read_body (msg);
  if (body == NULL)
    return;

  r = g_new0 (Request, 1);
  r->server = server;
  r->msg = g_object_ref (msg);
  r->endpoint = endpoint;
  r->end_token = -1;
  r->temperature = 1.0;
  r->top_p = 1.0;
  r->seed = (guint64) amk_cli_random_seed ();

  node = member (body, "model");
  if (node != NULL && get_string (msg, node, "model") == NULL)
    return;
  if (!get_integer (msg, body, "n", 1, 1, &n) ||
      !get_integer (msg, body, "max_tokens", 1, G_MAXINT32, &max_tokens) ||
      (endpoint == ENDPOINT_CHAT &&
       !get_integer (msg, body, "max_completion_tokens", 1, G_MAXINT32, &max_tokens)) ||
      !get_number (msg, body, "temperature", 0.0, FALSE, 2.0, &r->temperature) ||
      !get_number (msg, body, "top_p", 0.0, TRUE, 1.0, &r->top_p) ||
      !get_integer (msg, body, "top_k", 0, G_MAXINT32, &top_k) ||
      !get_integer (msg, body, "seed", G_MININT64, G_MAXINT64, &seed) ||
      !get_boolean (msg, body, "stream", "stream", &r->stream) ||
      !get_stops (msg, body, &r->stops))
    return;
  if (member (body, "seed") != NULL)
    r->seed = (guint64) seed;
  r->top_k = (guint) top_k;
  if (r->stops == NULL)
    r->stops = g_new0 (char *, 1);
  node = member (body, "stream_options");
  if (node != NULL && !JSON_NODE_HOLDS_OBJECT (node))
    {
      reply_bad_type (msg, "stream_options", "an object", node);
      return;
    }
  if (node != NULL && !get_boolean (msg, json_node_get_object (node), "include_usage",
                                    "stream_options.include_usage", &r->include_usage))
    return;

  if (endpoint == ENDPOINT_CHAT)
    r->prompt = chat_prompt (server, msg, body, &r->end_token, &r->stops);
  else
    r->prompt = completion_prompt (msg, body);
  if (r->prompt == NULL)
    return;

  /* the prompt and at least one generated token must fit in the context */
  ids = amk_tokenizer_encode (amk_model_get_tokenizer (server->model), r->prompt, TRUE, &n_ids, &error);
  if (ids == NULL)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, endpoint == ENDPOINT_CHAT ? "messages" : "prompt",
                   "invalid_value", "%s", error->message);
      return;
    }
  if (n_ids >= server->context)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, endpoint == ENDPOINT_CHAT ? "messages" : "prompt",
                   "context_length_exceeded",
                   "This model's maximum context length is %u tokens, but the prompt is %"
                   G_GSIZE_FORMAT " tokens, which leaves no room for an answer: shorten it, "
                   "or start the server with a larger --ctx-size.", server->context, n_ids);
      return;
    }
  if (max_tokens > 0)
    r->max_tokens = (guint) max_tokens;
  else
    r->max_tokens = endpoint == ENDPOINT_CHAT ? server->context - (guint) n_ids : COMPLETION_TOKENS;

  if (g_queue_get_length (&server->waiting) >= MAX_WAITING)
    {
      soup_message_headers_replace (soup_server_message_get_response_headers (msg),
                                    "Retry-After", "10");
      reply_error (msg, SOUP_STATUS_SERVICE_UNAVAILABLE, NULL, "server_busy",
                   "%u requests are already waiting; try again later.", MAX_WAITING);
      return;
    }

  /* accepted: the message waits, paused, for the answer; libsoup tells when the
   * connection closes while it writes a stream, the socket while nothing is written */
  r->id = g_strdup_printf ("%s-%08x%08x", endpoint == ENDPOINT_CHAT ? "chatcmpl" : "cmpl",
                           g_random_int (), g_random_int ());
  r->created = g_get_real_time () / G_USEC_PER_SEC;
  r->cancellable = g_cancellable_new ();
  r->text = g_string_new (NULL);
  soup_server_message_pause (msg);
  r->finished_id = g_signal_connect (msg, "finished", G_CALLBACK (on_message_finished), r);
  r->disconnected_id = g_signal_connect (msg, "disconnected", G_CALLBACK (on_message_finished), r);
#ifdef G_OS_UNIX
  if (soup_server_message_get_socket (msg) != NULL)
    {
      r->hangup = g_socket_create_source (soup_server_message_get_socket (msg),
                                          G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
      g_source_set_callback (r->hangup, G_SOURCE_FUNC (on_hangup), r, NULL);
      g_source_attach (r->hangup, NULL);
    }
#endif
  g_debug ("%s: queued (%" G_GSIZE_FORMAT " prompt tokens, at most %u more)", r->id, n_ids,
           r->max_tokens);
  g_queue_push_tail (&server->waiting, g_steal_pointer (&r));
  server_next (server);
}

/* ---- the chat page ------------------------------------------------------------------ */

/* The page's files: the paths they are served at, in the GResource of tools/chat/. */
static const struct {
  const char *path;
  const char *resource;
  const char *content_type;
} page_files[] = {
  { "/",            "/org/amk/serve/index.html",  "text/html; charset=utf-8" },
  { "/chat.css",    "/org/amk/serve/chat.css",    "text/css; charset=utf-8" },
  { "/chat.js",     "/org/amk/serve/chat.js",     "text/javascript; charset=utf-8" },
  { "/favicon.svg", "/org/amk/serve/favicon.svg", "image/svg+xml" },
};

static gint
find_page_file (const char *path)
{
  for (guint i = 0; i < G_N_ELEMENTS (page_files); i++)
    if (strcmp (path, page_files[i].path) == 0)
      return (gint) i;
  return -1;
}

/* The page loads nothing but its own files and talks only to this server; the policy
 * tells the browser so, which keeps scripts out even if a model's text ever reached the
 * page as markup. */
static void
handle_page_file (SoupServerMessage *msg,
                  guint              i)
{
  SoupMessageHeaders *headers = soup_server_message_get_response_headers (msg);
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(GError) error = NULL;

  bytes = g_resource_lookup_data (amk_serve_get_resource (), page_files[i].resource,
                                  G_RESOURCE_LOOKUP_FLAGS_NONE, &error);
  if (bytes == NULL)
    {
      reply_error (msg, SOUP_STATUS_INTERNAL_SERVER_ERROR, NULL, NULL, "%s", error->message);
      return;
    }
  soup_message_headers_replace (headers, "Content-Security-Policy",
                                "default-src 'self'; frame-ancestors 'none'");
  soup_message_headers_replace (headers, "X-Content-Type-Options", "nosniff");
  soup_message_headers_replace (headers, "Cache-Control", "no-cache");
  soup_message_headers_set_content_type (headers, page_files[i].content_type, NULL);
  soup_message_body_append_bytes (soup_server_message_get_response_body (msg), bytes);
  soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
}

static void
reply_method_not_allowed (SoupServerMessage *msg,
                          const char        *path,
                          const char        *allowed)
{
  soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Allow", allowed);
  reply_error (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL, "method_not_allowed",
               "%s %s is not allowed: use %s.", soup_server_message_get_method (msg),
               path, allowed);
}

static void
on_request (SoupServer        *soup,
            SoupServerMessage *msg,
            const char        *path,
            GHashTable        *query,
            gpointer           data)
{
  Server *server = data;
  const char *method = soup_server_message_get_method (msg);
  gboolean get = strcmp (method, "GET") == 0 || strcmp (method, "HEAD") == 0;
  gboolean post = strcmp (method, "POST") == 0;
  gint page_file = find_page_file (path);

  if (page_file >= 0)
    {
      if (get)
        handle_page_file (msg, (guint) page_file);
      else
        reply_method_not_allowed (msg, path, "GET");
    }
  else if (strcmp (path, "/v1/models") == 0 || g_str_has_prefix (path, "/v1/models/"))
    {
      if (get)
        handle_models (server, msg, path[strlen ("/v1/models")] == '/'
                                    ? path + strlen ("/v1/models/") : NULL);
      else
        reply_method_not_allowed (msg, path, "GET");
    }
  else if (strcmp (path, "/v1/completions") == 0 || strcmp (path, "/v1/chat/completions") == 0)
    {
      if (post)
        handle_generation (server, msg, strcmp (path, "/v1/chat/completions") == 0
                                        ? ENDPOINT_CHAT : ENDPOINT_COMPLETIONS);
      else
        reply_method_not_allowed (msg, path, "POST");
    }
  else
    reply_error (msg, SOUP_STATUS_NOT_FOUND, NULL, "unknown_url", "Invalid URL (%s %s).",
                 method, path);
}

/* ---- the request body's size ------------------------------------------------------- */

/* Refuses a body beyond MAX_BODY_BYTES as soon as that is known: the rest is still read
 * (HTTP/1.1 offers no other way to the next request) but not kept, and the connection
 * closes after the 413. */
static void
refuse_large_body (SoupServerMessage *msg)
{
  SoupMessageBody *body = soup_server_message_get_request_body (msg);

  soup_message_body_set_accumulate (body, FALSE);
  soup_message_body_truncate (body);
  soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Connection", "close");
  reply_error (msg, SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE, NULL, "request_too_large",
               "The request body is larger than %u bytes.", MAX_BODY_BYTES);
}

static void
on_got_headers (SoupServerMessage *msg,
                gpointer           data)
{
  SoupMessageHeaders *headers = soup_server_message_get_request_headers (msg);

  if (soup_server_message_get_status (msg) == 0 &&
      soup_message_headers_get_encoding (headers) == SOUP_ENCODING_CONTENT_LENGTH &&
      soup_message_headers_get_content_length (headers) > MAX_BODY_BYTES)
    refuse_large_body (msg);
}

static void
on_got_chunk (SoupServerMessage *msg,
              GBytes            *chunk,
              gpointer           data)
{
  if (soup_server_message_get_status (msg) == 0 &&
      soup_server_message_get_request_body (msg)->length > MAX_BODY_BYTES)
    refuse_large_body (msg);
}

static void
on_request_started (SoupServer        *soup,
                    SoupServerMessage *msg,
                    gpointer           data)
{
  g_signal_connect (msg, "got-headers", G_CALLBACK (on_got_headers), NULL);
  g_signal_connect (msg, "got-chunk", G_CALLBACK (on_got_chunk), NULL);
}

/* ---- the command ----------------------------------------------------------------- */

#ifdef G_OS_UNIX
/* Ctrl-C or SIGTERM: no new requests; the one running is cancelled, and the main loop
 * ends when it has (the worker thread is done with the generator then). */
static gboolean
on_stop_signal (gpointer data)
{
  Server *server = data;

  if (!server->stopping)
    g_printerr (_("amk serve: stopping\n"));
  server->stopping = TRUE;
  if (server->running != NULL)
    g_cancellable_cancel (server->running->cancellable);
  else
    g_main_loop_quit (server->loop);
  return G_SOURCE_CONTINUE;
}
#endif

/* The address to listen on: @host as a numeric address, else resolved. */
static GSocketAddress *
listen_address (const char  *host,
                guint        port,
                GError     **error)
{
  g_autoptr(GInetAddress) address = g_inet_address_new_from_string (host);

  if (address == NULL)
    {
      g_autoptr(GResolver) resolver = g_resolver_get_default ();
      GList *addresses = g_resolver_lookup_by_name (resolver, host, NULL, error);

      if (addresses == NULL)
        return NULL;
      address = g_object_ref (addresses->data);
      g_resolver_free_addresses (addresses);
    }
  return g_inet_socket_address_new (address, (guint16) port);
}

/* "http://ADDRESS:PORT/" of the socket @soup listens on, with the port the system chose
 * for --port 0. (From the socket: soup_server_get_uris() leaks an address in libsoup
 * before 3.4.3.) */
static char *
listening_url (SoupServer *soup)
{
  GSList *listeners = soup_server_get_listeners (soup);
  g_autoptr(GSocketAddress) local = NULL;
  g_autofree char *address = NULL;
  GInetSocketAddress *inet;
  guint port;

  if (listeners != NULL)
    local = g_socket_get_local_address (listeners->data, NULL);
  g_slist_free (listeners);
  if (local == NULL || !G_IS_INET_SOCKET_ADDRESS (local))
    return g_strdup ("http://?/");
  inet = G_INET_SOCKET_ADDRESS (local);
  address = g_inet_address_to_string (g_inet_socket_address_get_address (inet));
  port = g_inet_socket_address_get_port (inet);
  if (strchr (address, ':') != NULL)
    return g_strdup_printf ("http://[%s]:%u/", address, port);
  return g_strdup_printf ("http://%s:%u/", address, port);
}

int
amk_cmd_serve (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (NULL);
  g_autoptr(AmkExecutor) executor = NULL;
  g_autoptr(GSocketAddress) address = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *model = NULL;
  g_autofree char *path = NULL;
  g_autofree char *host = NULL;
  g_autofree char *where = NULL;
  g_autofree char *url = NULL;
  Server server = { 0 };
  Request *r;
  gboolean force_cpu = FALSE;
  gint port = 8080, ctx_size = 0;
  guint sigint_id = 0, sigterm_id = 0;
  gboolean answered;
  const GOptionEntry entries[] = {
    { "model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
      N_("The model: a GGUF file or a Hugging Face checkpoint folder (default: $AMK_MODEL, "
         "else SmolLM2-135M-Instruct.Q4_1.gguf in ~/.cache/amk or $AMK_CACHE_DIR, which "
         "“amk fetch-model” downloads)"), N_("PATH") },
    { "host", 0, 0, G_OPTION_ARG_STRING, &host,
      N_("The address to listen on (default: 127.0.0.1, this machine only)"), N_("HOST") },
    { "port", 0, 0, G_OPTION_ARG_INT, &port,
      N_("The port to listen on (default: 8080; 0 picks a free one, shown in the "
         "listening line)"), N_("PORT") },
    { "cpu", 'c', 0, G_OPTION_ARG_NONE, &force_cpu,
      N_("Run on the CPU executor even if there is a GPU"), NULL },
    { "ctx-size", 0, 0, G_OPTION_ARG_INT, &ctx_size,
      N_("The context in tokens, prompt and generated text together (default: 0, 2048 or "
         "less if the model was trained for less)"), N_("N") },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Serves a model over HTTP with the OpenAI API: "
                                           "GET /v1/models, POST /v1/completions and POST "
                                           "/v1/chat/completions (\"stream\": true streams "
                                           "server-sent events), and a chat page for a "
                                           "browser at GET /. Requests wait in a queue "
                                           "and run one at a time."));
  g_option_context_set_description (context, _("Prints one line “amk serve: listening on URL "
                                               "(model NAME, EXECUTOR)” when it is ready; "
                                               "Ctrl-C or SIGTERM stops it.\n"
                                               "Exit status: 0 when stopped, 1 when the model "
                                               "or the address failed, 2 for a bad argument."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "serve", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 1)
    return amk_cli_usage_error ("serve", _("give no arguments besides the options"));
  if (port < 0 || port > 65535)
    return amk_cli_usage_error ("serve", _("--port must be between 0 and 65535"));
  if (ctx_size < 0 || ctx_size > (1 << 20))
    return amk_cli_usage_error ("serve", _("--ctx-size must be between 0 and 1048576"));
  if (host == NULL)
    host = g_strdup ("127.0.0.1");
  address = listen_address (host, (guint) port, &error);
  if (address == NULL)
    {
      amk_cli_print_error ("serve", error);
      return 1;
    }

  path = amk_cli_model_path ("serve", model);
  if (path == NULL)
    return 1;
  executor = amk_cli_choose_executor ("serve", force_cpu, -1, NULL);
  server.model = amk_cli_load_model ("serve", path, executor, 0, (guint) ctx_size, FALSE);
  if (server.model == NULL)
    return 1;
  server.model_id = g_path_get_basename (path);
  if (g_str_has_suffix (server.model_id, ".gguf"))
    server.model_id[strlen (server.model_id) - strlen (".gguf")] = '\0';
  server.created = g_get_real_time () / G_USEC_PER_SEC;
  server.context = amk_model_get_context_length (server.model);
  server.generator = amk_generator_new (server.model, executor);
  server.loop = g_main_loop_new (NULL, FALSE);
  g_queue_init (&server.waiting);
  g_signal_connect (server.generator, "token", G_CALLBACK (on_token), &server);
  where = amk_executor_get_description (executor);

  server.soup = soup_server_new ("server-header", "amk/" PACKAGE_VERSION, NULL);
  soup_server_add_handler (server.soup, NULL, on_request, &server, NULL);
  g_signal_connect (server.soup, "request-started", G_CALLBACK (on_request_started), NULL);
  if (!soup_server_listen (server.soup, address, 0, &error))
    {
      amk_cli_print_error ("serve", error);
      g_clear_object (&server.soup);
      g_clear_object (&server.generator);
      g_clear_object (&server.model);
      g_clear_pointer (&server.loop, g_main_loop_unref);
      g_free (server.model_id);
      return 1;
    }
  url = listening_url (server.soup);

#ifdef G_OS_UNIX
  /* a client gone while its answer is written is an error of that write, not a signal */
  signal (SIGPIPE, SIG_IGN);
  sigint_id = g_unix_signal_add (SIGINT, on_stop_signal, &server);
  sigterm_id = g_unix_signal_add (SIGTERM, on_stop_signal, &server);
#endif
  /* TRANSLATORS: once the server is ready: its URL, the model's name and what runs it
   * ("CPU executor" or "GPU megakernel (NVIDIA H200)"); scripts read the URL */
  g_print (_("amk serve: listening on %s (model %s, %s)\n"), url, server.model_id, where);
  fflush (stdout);
  g_main_loop_run (server.loop);

  g_clear_handle_id (&sigint_id, g_source_remove);
  g_clear_handle_id (&sigterm_id, g_source_remove);
  answered = server.answered_stopping || !g_queue_is_empty (&server.waiting);
  while ((r = g_queue_pop_head (&server.waiting)) != NULL)
    {
      reply_error (r->msg, SOUP_STATUS_SERVICE_UNAVAILABLE, NULL, "server_stopping",
                   "The server is stopping.");
      request_release (r);
    }
  /* a moment for the last answers (the 503s, the end of a cancelled stream) to go out
   * before the connections close */
  if (answered)
    {
      g_timeout_add_once (200, (GSourceOnceFunc) g_main_loop_quit, server.loop);
      g_main_loop_run (server.loop);
    }
  soup_server_disconnect (server.soup);
  g_clear_object (&server.soup);
  g_clear_object (&server.generator);
  g_clear_object (&server.model);
  g_clear_pointer (&server.loop, g_main_loop_unref);
  g_free (server.model_id);
  g_printerr (_("amk serve: stopped\n"));
  return 0;
}
