/* amk-launcher.c: AmkLauncher, the device side of amk: allocation, upload, the launch
 * contract of the seed launcher, and the mapping of CUDA outcomes to GErrors. All CUDA
 * calls go through kernels/amk-cuda.h so no CUDA type reaches this file.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>

#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-launcher.h"
#include "amk-version.h"
#include "amk-program-private.h"
#include "amk-executor-private.h"
#include "amk-launch-config-private.h"
#include "amk-error.h"
#include "amk-abi.h"
#include "amk-cuda.h"

G_STATIC_ASSERT (AMK_LAUNCHER_MATVEC_SHARED_MEMORY == AMK_MATVEC_SMEM_BYTES);

/**
 * AmkLauncher:
 *
 * Runs a verified [class@Amk.Program] on a CUDA device as one persistent cooperative
 * launch of the megakernel. A launcher is an [iface@Amk.Executor]: code written for the
 * interface runs on the CPU executor and on a GPU alike.
 *
 * [method@Amk.Launcher.load] allocates and uploads the buffer table, the instructions,
 * the queues, the counters and the scratch arena once; each
 * [method@Amk.Launcher.launch] then only clears the counters and launches. Buffers are
 * written and read between launches with [method@Amk.Launcher.upload] and
 * [method@Amk.Launcher.download], or bound to memory that another library owns (a
 * PyTorch or CuPy tensor's `data_ptr()`) with [method@Amk.Launcher.bind_buffer].
 *
 * The launcher chooses its configuration when it loads a program: the most threads per
 * block the kernel allows at which every queue's block is co-resident, and, when the
 * program has MATVEC instructions, the dynamic shared memory of MATVEC's shared-memory
 * ring (256 bytes per thread plus 4 bytes per column of the widest MATVEC) where it fits
 * under the device's cap. Setting
 * [property@Amk.Launcher:threads-per-block] or
 * [property@Amk.Launcher:dynamic-shared-memory] fixes that value instead.
 *
 * The launch contract: dynamic shared memory is opted into and never above the device's
 * per-block cap; a grid (one block per queue) larger than the co-resident blocks of the
 * compiled kernel is refused with %AMK_LAUNCH_ERROR_REJECTED; a wait that outlives
 * [property@Amk.Launcher:watchdog-ms] ends the launch with %AMK_LAUNCH_ERROR_TIMEOUT and
 * a device-side abort with %AMK_LAUNCH_ERROR_ABORTED, both with a record from
 * [method@Amk.Launcher.get_last_abort]; the launcher stays usable afterwards.
 *
 * Without a GPU every call that needs one fails with %AMK_LAUNCH_ERROR_NO_DEVICE; in a
 * library built without CUDA with %AMK_LAUNCH_ERROR_UNSUPPORTED.
 */

#define MSG_LEN 512

/* The per-launch state lives in one allocation so that clearing it before a launch is
 * a single memset: the abort record at 0, the abort flag at 32, the two grid-barrier
 * words at 36, the counters from 64 (amk-cuda.cu recognises this layout). */
#define CONTROL_RECORD   0
#define CONTROL_FLAG     32
#define CONTROL_BARRIER  36
#define CONTROL_COUNTERS 64

/* The device memory of one buffer that a launcher allocated. amk_executor_load_shared()
 * lets launchers share it, so it is reference-counted: it goes with the last launcher
 * that uses it, whichever loads another program or is finalized first. */
typedef struct {
  gint    device;
  guint64 addr;
} DeviceMemory;

static void
device_memory_clear (gpointer data)
{
  DeviceMemory *mem = data;

  if (mem->addr != 0)
    amk_cuda_free (mem->device, mem->addr);
}

static void
device_memory_release (gpointer mem)
{
  if (mem != NULL)
    g_atomic_rc_box_release_full (mem, device_memory_clear);
}

struct _AmkLauncher
{
  GObject parent_instance;

  gint        device;
  guint       threads_set;     /* threads-per-block as set; 0: chosen at load */
  guint       smem_set;        /* dynamic-shared-memory as set, when smem_fixed */
  gboolean    smem_fixed;
  gboolean    config_valid;    /* the two below were chosen for the loaded program */
  guint       threads_used, smem_used;
  guint       l2_prefetch;
  gboolean    paged;
  guint       watchdog_ms;
  gboolean    trace;

  AmkLoadedProgram loaded;   /* the program and its shape when it was loaded */
  guint64    *buffer_addr;   /* device address of each buffer */
  DeviceMemory **buffer_memory; /* allocated by a launcher (not bound, not in the arena) */
  amk_buffer_t *table;       /* host copy of the device buffer table */
  guint64     d_table, d_instructions, d_flat, d_off, d_len, d_scratch, d_trace;
  gboolean    checked;        /* the records behind d_instructions match the table */
  gboolean    many_tokens;    /* the program has many-token ops: the kernel's build with them */
  gboolean    has_matmul;     /* ... among them a MATMUL, which needs its configuration */
  guint64     d_control;     /* abort record, abort flag, grid barrier, counters: see CONTROL_* */
  gboolean    trace_valid;   /* the last launch ran with tracing */

  AmkAbortRecord last_abort;
  double      last_launch_ms; /* device time of the last successful launch */
};

enum {
  PROP_0,
  PROP_DEVICE,
  PROP_THREADS_PER_BLOCK,
  PROP_DYNAMIC_SHARED_MEMORY,
  PROP_L2_PREFETCH,
  PROP_PAGED,
  PROP_WATCHDOG_MS,
  PROP_TRACE,
  PROP_PROGRAM,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void amk_launcher_executor_iface_init (AmkExecutorInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (AmkLauncher, amk_launcher, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (AMK_TYPE_EXECUTOR,
                                                      amk_launcher_executor_iface_init))

static void release_device_state (AmkLauncher *self);
static gboolean ensure_config (AmkLauncher *self, GError **error);

static void
amk_launcher_finalize (GObject *object)
{
  AmkLauncher *self = AMK_LAUNCHER (object);

  release_device_state (self);
  G_OBJECT_CLASS (amk_launcher_parent_class)->finalize (object);
}

static void
amk_launcher_get_property (GObject    *object,
                           guint       prop_id,
                           GValue     *value,
                           GParamSpec *pspec)
{
  AmkLauncher *self = AMK_LAUNCHER (object);

  switch (prop_id)
    {
    case PROP_DEVICE:
      g_value_set_int (value, self->device);
      break;
    case PROP_THREADS_PER_BLOCK:
      g_value_set_uint (value, amk_launcher_get_threads_per_block (self));
      break;
    case PROP_DYNAMIC_SHARED_MEMORY:
      g_value_set_uint (value, amk_launcher_get_dynamic_shared_memory (self));
      break;
    case PROP_L2_PREFETCH:
      g_value_set_uint (value, self->l2_prefetch);
      break;
    case PROP_PAGED:
      g_value_set_boolean (value, self->paged);
      break;
    case PROP_WATCHDOG_MS:
      g_value_set_uint (value, self->watchdog_ms);
      break;
    case PROP_TRACE:
      g_value_set_boolean (value, self->trace);
      break;
    case PROP_PROGRAM:
      g_value_set_object (value, self->loaded.program);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_launcher_set_property (GObject      *object,
                           guint         prop_id,
                           const GValue *value,
                           GParamSpec   *pspec)
{
  AmkLauncher *self = AMK_LAUNCHER (object);

  switch (prop_id)
    {
    case PROP_DEVICE:
      self->device = g_value_get_int (value);
      break;
    case PROP_THREADS_PER_BLOCK:
      amk_launcher_set_threads_per_block (self, g_value_get_uint (value));
      break;
    case PROP_DYNAMIC_SHARED_MEMORY:
      amk_launcher_set_dynamic_shared_memory (self, g_value_get_uint (value));
      break;
    case PROP_L2_PREFETCH:
      amk_launcher_set_l2_prefetch (self, g_value_get_uint (value));
      break;
    case PROP_PAGED:
      amk_launcher_set_paged (self, g_value_get_boolean (value));
      break;
    case PROP_WATCHDOG_MS:
      amk_launcher_set_watchdog_ms (self, g_value_get_uint (value));
      break;
    case PROP_TRACE:
      amk_launcher_set_trace (self, g_value_get_boolean (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_launcher_class_init (AmkLauncherClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = amk_launcher_finalize;
  object_class->get_property = amk_launcher_get_property;
  object_class->set_property = amk_launcher_set_property;

  /**
   * AmkLauncher:device:
   *
   * The CUDA device index, from 0. An index that names no device (negative, or not
   * below [func@Amk.Launcher.get_device_count]) is kept as given: every call that needs
   * the device then fails with %AMK_LAUNCH_ERROR_NO_DEVICE.
   */
  properties[PROP_DEVICE] =
    g_param_spec_int ("device", NULL, NULL, G_MININT, G_MAXINT, 0,
                      G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                      G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkLauncher:threads-per-block:
   *
   * Threads of each block of the megakernel: a multiple of 32 from 32 to 1024, or 0 (the
   * default) for the launcher's choice when it loads a program: the most the kernel
   * allows at which every queue's block is co-resident. Reads back the count the
   * launches use: as set, or the launcher's choice once a program is loaded (0 before).
   * Another value is a programmer error, as for
   * [method@Amk.Launcher.set_threads_per_block]: a critical warning (above 1024, GObject's
   * warning), and the setting stays as it was.
   */
  properties[PROP_THREADS_PER_BLOCK] =
    g_param_spec_uint ("threads-per-block", NULL, NULL, 0, 1024, 0,
                       G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkLauncher:dynamic-shared-memory:
   *
   * Dynamic shared memory per block in bytes; above 48 KiB it is opted into, and never
   * above the device's per-block cap. Until it is set (0 included), the launcher chooses
   * it when it loads a program: what MATVEC's shared-memory ring needs at the chosen
   * threads per block (256 bytes per thread and 4 bytes per column of the widest
   * MATVEC) where that fits under the cap, else 0. Reads back
   * the size the launches use: as set, or the launcher's choice once a program is
   * loaded (0 before).
   */
  properties[PROP_DYNAMIC_SHARED_MEMORY] =
    g_param_spec_uint ("dynamic-shared-memory", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkLauncher:l2-prefetch:
   *
   * How far ahead the MATVEC weights stream from device memory into the L2 cache: 0 not
   * at all, 1 an instruction's own weights as soon as its block reaches it (before its
   * waits), 2 also the next instruction's while the current one runs. Prefetching never
   * changes a result, only when the bytes move. Off by default: the early traffic
   * competes with the loads of the instructions running meanwhile, and neither 1 nor 2
   * has made a decode step faster. Another value is out of the property's range (GObject
   * warns and keeps the setting).
   */
  properties[PROP_L2_PREFETCH] =
    g_param_spec_uint ("l2-prefetch", NULL, NULL, 0, AMK_L2_PREFETCH_MAX, 0,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkLauncher:paged:
   *
   * Whether a decode program (one without MATMUL or ATTN_ROWS) runs on the second VM's
   * paged build when the launch has 512 threads: a loader warp behind 448 op threads
   * walks the queue on its own and streams the bf16 weights of MATVEC tiles into 14 KiB
   * pages of shared memory, in queue order, while the op threads wait for counters or
   * compute (kernels/README.md). Results equal the other build's up to the order of the
   * fp32 additions. Where the paged build cannot run (other threads, too little shared
   * memory) the launch takes the decode build. Off by default: it is correct but still
   * slower than the decode build (bench/NOTES.md).
   */
  properties[PROP_PAGED] =
    g_param_spec_boolean ("paged", NULL, NULL, FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkLauncher:watchdog-ms:
   *
   * The longest a single wait may last on the device before the launch ends with
   * %AMK_LAUNCH_ERROR_TIMEOUT; 0 turns the watchdog off.
   */
  properties[PROP_WATCHDOG_MS] =
    g_param_spec_uint ("watchdog-ms", NULL, NULL, 0, G_MAXUINT, 10000,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkLauncher:trace:
   *
   * Whether launches record, for every instruction, its queue, multiprocessor, start and
   * end time (`%globaltimer`); read them with [method@Amk.Launcher.get_trace_json]. Off
   * by default; when off the kernel skips the recording entirely.
   */
  properties[PROP_TRACE] =
    g_param_spec_boolean ("trace", NULL, NULL, FALSE,
                          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkLauncher:program:
   *
   * The program loaded on the device, or %NULL.
   */
  properties[PROP_PROGRAM] =
    g_param_spec_object ("program", NULL, NULL, AMK_TYPE_PROGRAM,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
amk_launcher_init (AmkLauncher *self)
{
  self->watchdog_ms = 10000;
}

/**
 * amk_launcher_new:
 * @device: the CUDA device index, from 0
 *
 * Makes a launcher for @device. Nothing touches the device until a call needs it: an
 * index that names no device (negative, or not below
 * [func@Amk.Launcher.get_device_count]) makes those calls fail with
 * %AMK_LAUNCH_ERROR_NO_DEVICE.
 *
 * Returns: (transfer full): a new launcher
 */
AmkLauncher *
amk_launcher_new (gint device)
{
  return g_object_new (AMK_TYPE_LAUNCHER, "device", device, NULL);
}

/**
 * amk_launcher_get_have_cuda:
 *
 * Tells whether this library was built with the CUDA megakernel.
 *
 * Returns: whether this library was built with the CUDA megakernel
 */
gboolean
amk_launcher_get_have_cuda (void)
{
  return AMK_HAVE_CUDA;
}

/**
 * amk_launcher_get_device_count:
 *
 * Counts the CUDA devices.
 *
 * Returns: the number of CUDA devices; 0 without a driver, a GPU or CUDA support
 */
gint
amk_launcher_get_device_count (void)
{
  return amk_cuda_device_count ();
}

/**
 * amk_launcher_get_device:
 * @self: a launcher
 *
 * Gets the CUDA device index.
 *
 * Returns: the CUDA device index
 */
gint
amk_launcher_get_device (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), 0);
  return self->device;
}

/**
 * amk_launcher_get_threads_per_block:
 * @self: a launcher
 *
 * Gets the threads of each block the launches use (see
 * [property@Amk.Launcher:threads-per-block]).
 *
 * Returns: the threads of each block as set, else the launcher's choice for the loaded
 *   program, or 0 when it has not chosen yet
 */
guint
amk_launcher_get_threads_per_block (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), 0);
  return self->threads_set != 0 ? self->threads_set : self->threads_used;
}

/* A set value replaces the choice; the other value, if chosen, is chosen again for it
 * at the next launch. */
static void
config_changed (AmkLauncher *self, guint old_threads, guint old_smem)
{
  self->config_valid = FALSE;
  if (amk_launcher_get_threads_per_block (self) != old_threads)
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_THREADS_PER_BLOCK]);
  if (amk_launcher_get_dynamic_shared_memory (self) != old_smem)
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_DYNAMIC_SHARED_MEMORY]);
}

/**
 * amk_launcher_set_threads_per_block:
 * @self: a launcher
 * @threads: a multiple of 32 from 32 to 1024, or 0 for the launcher's choice
 *
 * Sets the threads of each block for the next launches. @threads must be 0 or a
 * multiple of 32 from 32 to 1024: another count is a programmer error (a critical
 * warning, and the setting stays as it was), also through
 * [property@Amk.Launcher:threads-per-block]; check a count that comes from outside
 * first.
 */
void
amk_launcher_set_threads_per_block (AmkLauncher *self,
                                    guint        threads)
{
  guint old_threads, old_smem;

  g_return_if_fail (AMK_IS_LAUNCHER (self));
  g_return_if_fail (threads == 0 || (threads >= 32 && threads <= 1024 && threads % 32 == 0));
  if (self->threads_set == threads)
    return;
  old_threads = amk_launcher_get_threads_per_block (self);
  old_smem = amk_launcher_get_dynamic_shared_memory (self);
  self->threads_set = threads;
  config_changed (self, old_threads, old_smem);
}

/**
 * amk_launcher_get_dynamic_shared_memory:
 * @self: a launcher
 *
 * Gets the dynamic shared memory per block the launches use (see
 * [property@Amk.Launcher:dynamic-shared-memory]).
 *
 * Returns: the dynamic shared memory per block in bytes as set, else the launcher's
 *   choice for the loaded program, or 0 when it has not chosen yet
 */
guint
amk_launcher_get_dynamic_shared_memory (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), 0);
  return self->smem_fixed ? self->smem_set : self->smem_used;
}

/**
 * amk_launcher_set_dynamic_shared_memory:
 * @self: a launcher
 * @bytes: dynamic shared memory per block
 *
 * Sets the dynamic shared memory of the next launches, 0 included: the launcher no
 * longer chooses it. A size above the device's cap makes them fail with
 * %AMK_LAUNCH_ERROR_REJECTED.
 */
void
amk_launcher_set_dynamic_shared_memory (AmkLauncher *self,
                                        guint        bytes)
{
  guint old_threads, old_smem;

  g_return_if_fail (AMK_IS_LAUNCHER (self));
  if (self->smem_fixed && self->smem_set == bytes)
    return;
  old_threads = amk_launcher_get_threads_per_block (self);
  old_smem = amk_launcher_get_dynamic_shared_memory (self);
  self->smem_fixed = TRUE;
  self->smem_set = bytes;
  config_changed (self, old_threads, old_smem);
}

/**
 * amk_launcher_get_l2_prefetch:
 * @self: a launcher
 *
 * Gets how far ahead MATVEC weights stream into L2 (see #AmkLauncher:l2-prefetch).
 *
 * Returns: 0, 1 or 2
 */
guint
amk_launcher_get_l2_prefetch (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), 0);
  return self->l2_prefetch;
}

/**
 * amk_launcher_set_l2_prefetch:
 * @self: a launcher
 * @ahead: 0, 1 or 2
 *
 * Sets how far ahead MATVEC weights stream into L2 in the next launches (see
 * #AmkLauncher:l2-prefetch). @ahead must be 0, 1 or 2: another value is a programmer
 * error (a critical warning, and the setting stays as it was; through the property,
 * GObject's warning for a value out of its range).
 */
void
amk_launcher_set_l2_prefetch (AmkLauncher *self,
                              guint        ahead)
{
  g_return_if_fail (AMK_IS_LAUNCHER (self));
  g_return_if_fail (ahead <= AMK_L2_PREFETCH_MAX);
  if (self->l2_prefetch == ahead)
    return;
  self->l2_prefetch = ahead;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_L2_PREFETCH]);
}

/**
 * amk_launcher_get_paged:
 * @self: a launcher
 *
 * Gets whether decode programs run on the paged build (see #AmkLauncher:paged).
 *
 * Returns: %TRUE when they do
 */
gboolean
amk_launcher_get_paged (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);
  return self->paged;
}

/**
 * amk_launcher_set_paged:
 * @self: a launcher
 * @paged: whether decode programs run on the paged build
 *
 * Sets whether the next launches of a decode program run on the paged build (see
 * #AmkLauncher:paged).
 */
void
amk_launcher_set_paged (AmkLauncher *self,
                        gboolean     paged)
{
  g_return_if_fail (AMK_IS_LAUNCHER (self));
  paged = paged != FALSE;
  if (self->paged == paged)
    return;
  self->paged = paged;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_PAGED]);
}

/**
 * amk_launcher_get_watchdog_ms:
 * @self: a launcher
 *
 * Gets the watchdog budget of one wait in milliseconds, 0 when off.
 *
 * Returns: the watchdog budget of one wait in milliseconds, 0 when off
 */
guint
amk_launcher_get_watchdog_ms (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), 0);
  return self->watchdog_ms;
}

/**
 * amk_launcher_set_watchdog_ms:
 * @self: a launcher
 * @ms: the budget of one wait in milliseconds, 0 for none
 *
 * Sets the device watchdog of the next launches.
 */
void
amk_launcher_set_watchdog_ms (AmkLauncher *self,
                              guint        ms)
{
  g_return_if_fail (AMK_IS_LAUNCHER (self));
  if (self->watchdog_ms == ms)
    return;
  self->watchdog_ms = ms;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_WATCHDOG_MS]);
}

/**
 * amk_launcher_get_trace:
 * @self: a launcher
 *
 * Tells whether launches record a trace.
 *
 * Returns: whether launches record a trace
 */
gboolean
amk_launcher_get_trace (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);
  return self->trace;
}

/**
 * amk_launcher_set_trace:
 * @self: a launcher
 * @trace: whether the next launches record a trace
 *
 * Turns the per-instruction trace on or off.
 */
void
amk_launcher_set_trace (AmkLauncher *self,
                        gboolean     trace)
{
  g_return_if_fail (AMK_IS_LAUNCHER (self));
  trace = !!trace;
  if (self->trace == trace)
    return;
  self->trace = trace;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_TRACE]);
}

/**
 * amk_launcher_get_program:
 * @self: a launcher
 *
 * Gets the loaded program.
 *
 * Returns: (transfer none) (nullable): the loaded program
 */
AmkProgram *
amk_launcher_get_program (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), NULL);
  return self->loaded.program;
}

/**
 * amk_launcher_struct_sizes:
 * @self: a launcher
 *
 * The same as [func@Amk.StructSizes.get]: the ABI as this library was compiled.
 *
 * Returns: (transfer full): the sizes
 */
AmkStructSizes *
amk_launcher_struct_sizes (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), NULL);
  return amk_struct_sizes_get ();
}

/**
 * amk_launcher_get_last_abort:
 * @self: a launcher
 *
 * Gets the device's abort record of the last failed launch.
 *
 * Returns: (transfer full) (nullable): the device's abort record of the last launch
 *   that ended with %AMK_LAUNCH_ERROR_TIMEOUT or %AMK_LAUNCH_ERROR_ABORTED, or %NULL
 *   if the last launch was not aborted
 */
AmkAbortRecord *
amk_launcher_get_last_abort (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), NULL);
  if (self->last_abort.code == AMK_ABORT_CODE_NONE)
    return NULL;
  return amk_abort_record_copy (&self->last_abort);
}

/**
 * amk_launcher_get_last_launch_time:
 * @self: a launcher
 *
 * Gets the device time of the last launch: from the clearing of its counters to the end
 * of the megakernel, measured with CUDA events in the launch stream. It leaves out what
 * the host does around a launch (the wait for the kernel's end, copies to and from the
 * device), so it is the figure to compare with a CUDA graph replayed on the device.
 *
 * Returns: the device time of the last launch in milliseconds, or 0 when there was no
 *   launch yet or the last one failed
 */
double
amk_launcher_get_last_launch_time (AmkLauncher *self)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), 0.0);
  return self->last_launch_ms;
}

/* Maps a failed amk-cuda.h call to the launcher's error domain. */
static gboolean
cuda_error (amk_cuda_status status, const char *msg, GError **error)
{
  static const AmkLaunchError codes[] = {
    [AMK_CUDA_NO_DEVICE] = AMK_LAUNCH_ERROR_NO_DEVICE,
    [AMK_CUDA_REJECTED] = AMK_LAUNCH_ERROR_REJECTED,
    [AMK_CUDA_TIMEOUT] = AMK_LAUNCH_ERROR_TIMEOUT,
    [AMK_CUDA_ABORTED] = AMK_LAUNCH_ERROR_ABORTED,
    [AMK_CUDA_FAILED] = AMK_LAUNCH_ERROR_FAILED,
  };

  if (status == AMK_CUDA_OK)
    return TRUE;
  if (status == AMK_CUDA_CANCELLED)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED, _("The launch was cancelled: %s"), msg);
      return FALSE;
    }
  switch (codes[status])
    {
    case AMK_LAUNCH_ERROR_NO_DEVICE:
      g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_NO_DEVICE,
                   _("No usable CUDA device: %s. Use the CPU executor (Amk.CpuExecutor) on this machine."), msg);
      break;
    case AMK_LAUNCH_ERROR_REJECTED:
      g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_REJECTED,
                   _("The launch was refused: %s. Use fewer queues, fewer threads or less shared memory."), msg);
      break;
    case AMK_LAUNCH_ERROR_TIMEOUT:
      g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_TIMEOUT,
                   _("The launch timed out: %s"), msg);
      break;
    case AMK_LAUNCH_ERROR_ABORTED:
      g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED,
                   _("The device aborted the launch: %s"), msg);
      break;
    default:
      g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_FAILED,
                   _("CUDA failed: %s"), msg);
      break;
    }
  return FALSE;
}

/* Every call that needs the GPU starts here. */
static gboolean
require_device (AmkLauncher *self, GError **error)
{
  gint count;

  if (!amk_launcher_get_have_cuda ())
    {
      g_set_error_literal (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_UNSUPPORTED,
                           _("This amk-glib was built without CUDA; rebuild it with nvcc (meson -Dcuda=enabled) or use the CPU executor"));
      return FALSE;
    }
  count = amk_cuda_device_count ();
  if (self->device < 0 || self->device >= count)
    {
      if (count == 0)
        g_set_error_literal (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_NO_DEVICE,
                             _("No CUDA device is present (no GPU or no driver); use the CPU executor (Amk.CpuExecutor) on this machine"));
      else
        g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_NO_DEVICE,
                     _("CUDA device %d does not exist; this machine has %d"), self->device, count);
      return FALSE;
    }
  return TRUE;
}

static gboolean
require_program (AmkLauncher *self, GError **error)
{
  return require_device (self, error) && amk_loaded_program_require (&self->loaded, error);
}

/**
 * amk_launcher_get_device_name:
 * @self: a launcher
 * @error: return location for a #GError
 *
 * Asks the driver for the device's name.
 *
 * Returns: (transfer full): the device's name, e.g. "NVIDIA H200", or %NULL with @error set
 */
char *
amk_launcher_get_device_name (AmkLauncher  *self,
                              GError      **error)
{
  char name[256] = "", msg[MSG_LEN] = "";

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), NULL);

  if (!require_device (self, error) ||
      !cuda_error (amk_cuda_device_name (self->device, name, sizeof name, msg, sizeof msg), msg, error))
    return NULL;
  return g_strdup (name);
}

/**
 * amk_launcher_supports_cooperative:
 * @self: a launcher
 * @error: return location for a #GError
 *
 * Asks the driver whether the device can launch cooperative kernels, which the
 * megakernel needs.
 *
 * Returns: whether cooperative launches are supported; %FALSE with @error set on failure
 */
gboolean
amk_launcher_supports_cooperative (AmkLauncher  *self,
                                   GError      **error)
{
  char msg[MSG_LEN] = "";
  int supported = 0;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);

  if (!require_device (self, error) ||
      !cuda_error (amk_cuda_supports_cooperative (self->device, &supported, msg, sizeof msg), msg, error))
    return FALSE;
  return supported != 0;
}

/**
 * amk_launcher_kernel_attributes:
 * @self: a launcher
 * @threads: threads per block
 * @dynamic_shared_memory: dynamic shared memory per block in bytes
 * @error: return location for a #GError
 *
 * Reports the compiled megakernel's resources and its occupancy at (@threads,
 * @dynamic_shared_memory), straight from the driver.
 *
 * Returns: (transfer full): the attributes, or %NULL with @error set
 */
AmkKernelAttributes *
amk_launcher_kernel_attributes (AmkLauncher  *self,
                                guint         threads,
                                guint         dynamic_shared_memory,
                                GError      **error)
{
  char msg[MSG_LEN] = "";
  amk_cuda_attributes_t a = { 0 };
  AmkKernelAttributes *out;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), NULL);

  if (!require_device (self, error) ||
      !cuda_error (amk_cuda_kernel_attributes (self->device, (int) threads, (int) dynamic_shared_memory,
                                               &a, msg, sizeof msg), msg, error))
    return NULL;
  out = g_new0 (AmkKernelAttributes, 1);
  *out = (AmkKernelAttributes) { a.num_regs, a.static_smem_bytes, a.local_bytes, a.max_threads,
                                 a.const_bytes, a.blocks_per_sm, a.num_sms, a.max_grid,
                                 a.max_dynamic_smem_optin };
  return out;
}

/**
 * amk_launcher_max_coresident_blocks:
 * @self: a launcher
 * @threads: threads per block
 * @dynamic_shared_memory: dynamic shared memory per block in bytes
 * @error: return location for a #GError
 *
 * The largest cooperative grid of the megakernel at (@threads, @dynamic_shared_memory):
 * co-resident blocks per multiprocessor times multiprocessors. A program with more
 * queues than this is refused.
 *
 * Returns: the number of blocks, or -1 with @error set
 */
gint64
amk_launcher_max_coresident_blocks (AmkLauncher  *self,
                                    guint         threads,
                                    guint         dynamic_shared_memory,
                                    GError      **error)
{
  g_autoptr(AmkKernelAttributes) a = amk_launcher_kernel_attributes (self, threads, dynamic_shared_memory, error);
  return a != NULL ? (gint64) a->max_grid : -1;
}

/**
 * amk_launcher_memory_info:
 * @self: a launcher
 * @free_bytes: (out) (optional): free device memory
 * @total_bytes: (out) (optional): total device memory
 * @error: return location for a #GError
 *
 * Asks the driver for the device's free and total memory.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_launcher_memory_info (AmkLauncher  *self,
                          guint64      *free_bytes,
                          guint64      *total_bytes,
                          GError      **error)
{
  char msg[MSG_LEN] = "";
  uint64_t f = 0, t = 0;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);

  if (!require_device (self, error) ||
      !cuda_error (amk_cuda_mem_info (self->device, &f, &t, msg, sizeof msg), msg, error))
    return FALSE;
  if (free_bytes != NULL)
    *free_bytes = f;
  if (total_bytes != NULL)
    *total_bytes = t;
  return TRUE;
}

static void
release_device_state (AmkLauncher *self)
{
  guint64 *singles[] = { &self->d_table, &self->d_instructions, &self->d_flat, &self->d_off,
                         &self->d_len, &self->d_scratch, &self->d_control, &self->d_trace };

  for (guint b = 0; b < self->loaded.n_buffers && self->buffer_memory != NULL; b++)
    device_memory_release (self->buffer_memory[b]);
  for (guint i = 0; i < G_N_ELEMENTS (singles); i++)
    {
      if (*singles[i] != 0)
        amk_cuda_free (self->device, *singles[i]);
      *singles[i] = 0;
    }
  g_clear_pointer (&self->buffer_addr, g_free);
  g_clear_pointer (&self->buffer_memory, g_free);
  g_clear_pointer (&self->table, g_free);
  self->trace_valid = FALSE;
  self->config_valid = FALSE;
  amk_loaded_program_clear (&self->loaded);
}

/* Allocates `size` bytes (at least one) and fills them with `data` or zeros. The
 * allocation is whole 16-byte chunks: MATVEC copies a quantized matrix's blocks in the
 * chunks that cover them, past its last byte when its size is no multiple of 16. */
static gboolean
alloc_upload (AmkLauncher *self, guint64 *addr, const void *data, gsize size, GError **error)
{
  char msg[MSG_LEN] = "";
  gsize alloc = MAX ((size + 15) / 16 * 16, 16);

  if (!cuda_error (amk_cuda_malloc (self->device, alloc, addr, msg, sizeof msg), msg, error))
    return FALSE;
  if (data != NULL && size > 0)
    return cuda_error (amk_cuda_upload (self->device, *addr, data, size, msg, sizeof msg), msg, error);
  return cuda_error (amk_cuda_memset (self->device, *addr, 0, alloc, msg, sizeof msg), msg, error);
}

static gboolean
upload_table (AmkLauncher *self, GError **error)
{
  char msg[MSG_LEN] = "";

  self->checked = FALSE; /* the operands resolved at the last check may have moved */
  return cuda_error (amk_cuda_upload (self->device, self->d_table, self->table,
                                      self->loaded.n_buffers * sizeof (amk_buffer_t), msg, sizeof msg),
                     msg, error);
}

/* The instruction table, followed by room for the check kernel's records
 * (AMK_PROGRAM_CHECKED) and the tensor maps (AMK_PROGRAM_TENSOR_MAPS), which the check
 * fills before the first launch. */
static gboolean
alloc_instructions (AmkLauncher *self, AmkProgram *program, GError **error)
{
  char msg[MSG_LEN] = "";
  const gsize n = program->instructions->len;
  const gsize bytes = n * sizeof (amk_instruction_t);
  const gsize maps = 2 * (gsize) program->buffers->len * sizeof (amk_tensor_map_t);

  self->checked = FALSE;
  return alloc_upload (self, &self->d_instructions, NULL, AMK_TENSOR_MAPS_OFFSET (n) + maps, error) &&
         (n == 0 || cuda_error (amk_cuda_upload (self->device, self->d_instructions,
                                                 program->instructions->data, bytes, msg, sizeof msg),
                                msg, error));
}

/* Allocates and uploads program; the buffers that shared names (see
 * amk_loaded_program_match()) use owner's memory instead, uploading nothing. */
static gboolean
upload_program (AmkLauncher  *self,
                AmkProgram   *program,
                AmkLauncher  *owner,
                const gint   *shared,
                GError      **error)
{
  g_autoptr(GArray) flat = NULL;
  g_autoptr(GArray) offsets = NULL;
  g_autoptr(GArray) lengths = NULL;
  guint n_buffers = program->buffers->len;
  g_autofree gboolean *written = NULL;

  amk_loaded_program_set (&self->loaded, program);
  self->buffer_addr = g_new0 (guint64, MAX (n_buffers, 1));
  self->buffer_memory = g_new0 (DeviceMemory *, MAX (n_buffers, 1));
  self->table = g_new0 (amk_buffer_t, MAX (n_buffers, 1));

  if (!alloc_upload (self, &self->d_scratch, NULL, program->scratch_size, error))
    return FALSE;
  /* A buffer that no instruction writes (the position, say) is as constant during the
   * launch as the weights: its loads may go out before an instruction's waits. */
  written = g_new0 (gboolean, MAX (n_buffers, 1));
  self->many_tokens = FALSE;
  self->has_matmul = FALSE;
  for (guint i = 0; i < program->instructions->len; i++)
    {
      const amk_instruction_t *ins = &g_array_index (program->instructions, amk_instruction_t, i);
      const guint slots = amk_abi_written_slots (ins->opcode, ins->n_buffers);

      if (ins->opcode == AMK_ABI_OP_MATMUL || ins->opcode == AMK_ABI_OP_ATTN_ROWS)
        self->many_tokens = TRUE;
      if (ins->opcode == AMK_ABI_OP_MATMUL)
        self->has_matmul = TRUE;

      for (guint s = 0; s < AMK_MAX_BUFFER_REFS; s++)
        if ((slots >> s) & 1u && ins->buffers[s] >= 0 && (guint) ins->buffers[s] < n_buffers)
          written[ins->buffers[s]] = TRUE;
    }
  for (guint b = 0; b < n_buffers; b++)
    {
      AmkBufferInfo *info = g_ptr_array_index (program->buffers, b);

      if (info->role == AMK_BUFFER_ROLE_SCRATCH)
        self->buffer_addr[b] = self->d_scratch + info->arena_offset;
      else if (shared != NULL && shared[b] >= 0)
        {
          /* memory owner bound (no DeviceMemory) stays the binder's to keep alive */
          DeviceMemory *mem = owner->buffer_memory[shared[b]];

          self->buffer_memory[b] = mem != NULL ? g_atomic_rc_box_acquire (mem) : NULL;
          self->buffer_addr[b] = owner->buffer_addr[shared[b]];
        }
      else
        {
          self->buffer_memory[b] = g_atomic_rc_box_new0 (DeviceMemory);
          self->buffer_memory[b]->device = self->device;
          if (!alloc_upload (self, &self->buffer_memory[b]->addr,
                             info->data != NULL ? g_bytes_get_data (info->data, NULL) : NULL,
                             info->size_bytes, error))
            return FALSE;
          self->buffer_addr[b] = self->buffer_memory[b]->addr;
        }
      self->table[b] = (amk_buffer_t) {
        self->buffer_addr[b], info->size_bytes, info->dtype,
        (info->role == AMK_BUFFER_ROLE_CONSTANT ||
         (info->role != AMK_BUFFER_ROLE_SCRATCH && !written[b]) ? AMK_BUFFER_FLAG_CONSTANT : 0) |
        (info->role == AMK_BUFFER_ROLE_SCRATCH ? AMK_BUFFER_FLAG_SCRATCH : 0)
      };
    }

  amk_program_flatten_queues (program, &flat, &offsets, &lengths);
  return alloc_upload (self, &self->d_table, self->table, n_buffers * sizeof (amk_buffer_t), error) &&
         alloc_upload (self, &self->d_control, NULL,
                       CONTROL_COUNTERS + program->counter_names->len * sizeof (amk_counter_t), error) &&
         alloc_instructions (self, program, error) &&
         alloc_upload (self, &self->d_flat, flat->data, flat->len * sizeof (gint32), error) &&
         alloc_upload (self, &self->d_off, offsets->data, offsets->len * sizeof (gint32), error) &&
         alloc_upload (self, &self->d_len, lengths->data, lengths->len * sizeof (gint32), error);
}

/* Replaces the loaded program with program, sharing owner's buffers of the same names
 * when owner is not NULL (amk_executor_load_shared()). */
static gboolean
load_program (AmkLauncher  *self,
              AmkProgram   *program,
              AmkLauncher  *owner,
              GError      **error)
{
  g_autofree gint *shared = NULL;

  if (!amk_executor_check_dtypes (AMK_EXECUTOR (self), program, error) ||
      !require_device (self, error))
    return FALSE;
  if (owner != NULL && owner->device != self->device)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("A launcher on CUDA device %d cannot share the buffers of a launcher on "
                     "device %d; share buffers only between launchers of one device"),
                   self->device, owner->device);
      return FALSE;
    }
  if (owner != NULL && (shared = amk_loaded_program_match (&owner->loaded, program, error)) == NULL)
    return FALSE;
  release_device_state (self);
  if (!upload_program (self, program, owner, shared, error) || !ensure_config (self, error))
    {
      release_device_state (self);
      g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_PROGRAM]);
      return FALSE;
    }
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_PROGRAM]);
  return TRUE;
}

/**
 * amk_launcher_load_unverified:
 * @self: a launcher
 * @program: a program
 * @error: return location for a #GError
 *
 * Like [method@Amk.Launcher.load] but without verifying @program: for tests of the
 * device watchdog and of device-side checks only. An unverified program may wait
 * forever; the watchdog then ends the launch with %AMK_LAUNCH_ERROR_TIMEOUT.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_launcher_load_unverified (AmkLauncher  *self,
                              AmkProgram   *program,
                              GError      **error)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);
  g_return_val_if_fail (AMK_IS_PROGRAM (program), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return load_program (self, program, NULL, error);
}

static guint
occupancy_at (guint threads, guint dynamic_shared_memory, gpointer data)
{
  AmkLauncher *self = data;
  char msg[MSG_LEN] = "";
  amk_cuda_attributes_t a = { 0 };

  if (amk_cuda_kernel_attributes (self->device, (int) threads, (int) dynamic_shared_memory,
                                  &a, msg, sizeof msg) != AMK_CUDA_OK)
    return 0;
  return (guint) MAX (a.blocks_per_sm, 0);
}

/* The configuration of the launches of the loaded program: what is set, the launcher's
 * choice for the rest (amk-launch-config.c). */
static gboolean
ensure_config (AmkLauncher *self, GError **error)
{
  g_autoptr(AmkKernelAttributes) attr = NULL;
  AmkLaunchNeeds needs;
  guint old_threads, old_smem, threads, smem;

  if (self->config_valid)
    return TRUE;
  old_threads = amk_launcher_get_threads_per_block (self);
  old_smem = amk_launcher_get_dynamic_shared_memory (self);
  if (self->threads_set == 0 || !self->smem_fixed)
    {
      /* 32 threads and no dynamic shared memory: a query every kernel accepts */
      attr = amk_launcher_kernel_attributes (self, 32, 0, error);
      if (attr == NULL)
        return FALSE;
      amk_launch_needs_from_program (self->loaded.program, &needs);
      amk_launch_config_choose (attr, &needs, self->threads_set, self->smem_fixed, self->smem_set,
                                occupancy_at, self, &threads, &smem);
      self->threads_used = threads;
      self->smem_used = smem;
    }
  self->config_valid = TRUE;
  if (amk_launcher_get_threads_per_block (self) != old_threads)
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_THREADS_PER_BLOCK]);
  if (amk_launcher_get_dynamic_shared_memory (self) != old_smem)
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_DYNAMIC_SHARED_MEMORY]);
  return TRUE;
}

/* A configuration set by hand may not suit MATMUL's tiles (kernels/amk-abi.h): say so
 * before the launch rather than let each MATMUL abort it. */
static gboolean
config_runs_program (AmkLauncher *self, GError **error)
{
  const guint threads = amk_launcher_get_threads_per_block (self);
  const guint smem = amk_launcher_get_dynamic_shared_memory (self);

  if (!self->has_matmul || (threads % 128 == 0 && smem >= AMK_MATMUL_SMEM_BYTES ((guint64) threads)))
    return TRUE;
  g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_REJECTED,
               _("The program’s MATMUL needs a multiple of 128 threads per block and %u bytes of "
                 "dynamic shared memory at %u threads; the launcher is set to %u threads and %u "
                 "bytes: leave threads-per-block and dynamic-shared-memory at 0 to let it choose"),
               (guint) AMK_MATMUL_SMEM_BYTES ((guint64) threads), threads, threads, smem);
  return FALSE;
}

static AmkBufferInfo *
get_buffer (AmkLauncher *self, guint buffer, GError **error)
{
  if (!require_program (self, error))
    return NULL;
  if (buffer >= self->loaded.n_buffers)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Buffer %u does not exist; the program has %u buffers"),
                   buffer, self->loaded.n_buffers);
      return NULL;
    }
  return g_ptr_array_index (self->loaded.program->buffers, buffer);
}

/**
 * amk_launcher_upload:
 * @self: a launcher
 * @buffer: a buffer index of the loaded program
 * @data: the new contents, exactly the buffer's size
 * @error: return location for a #GError
 *
 * Copies @data into a buffer on the device before the next launch.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_launcher_upload (AmkLauncher  *self,
                     guint         buffer,
                     GBytes       *data,
                     GError      **error)
{
  char msg[MSG_LEN] = "";
  AmkBufferInfo *info;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);
  g_return_val_if_fail (data != NULL, FALSE);

  info = get_buffer (self, buffer, error);
  if (info == NULL)
    return FALSE;
  if (g_bytes_get_size (data) != info->size_bytes)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s” holds %" PRIu64 " bytes but the data has %zu bytes"),
                   info->name, info->size_bytes, g_bytes_get_size (data));
      return FALSE;
    }
  return cuda_error (amk_cuda_upload (self->device, self->buffer_addr[buffer],
                                      g_bytes_get_data (data, NULL), info->size_bytes, msg, sizeof msg),
                     msg, error);
}

/**
 * amk_launcher_download:
 * @self: a launcher
 * @buffer: a buffer index of the loaded program
 * @error: return location for a #GError
 *
 * Copies a buffer from the device.
 *
 * Returns: (transfer full): the contents, or %NULL with @error set
 */
GBytes *
amk_launcher_download (AmkLauncher  *self,
                       guint         buffer,
                       GError      **error)
{
  char msg[MSG_LEN] = "";
  AmkBufferInfo *info;
  g_autofree guint8 *host = NULL;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), NULL);

  info = get_buffer (self, buffer, error);
  if (info == NULL)
    return NULL;
  host = g_malloc (MAX (info->size_bytes, 1));
  if (!cuda_error (amk_cuda_download (self->device, host, self->buffer_addr[buffer],
                                      info->size_bytes, msg, sizeof msg), msg, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&host), info->size_bytes);
}

/**
 * amk_launcher_bind_buffer:
 * @self: a launcher
 * @buffer: a buffer index of the loaded program (not a scratch buffer)
 * @device_address: the device address of memory another library owns, e.g. a PyTorch
 *   tensor's `data_ptr()`
 * @size: the size of that memory in bytes; at least the buffer's size
 * @error: return location for a #GError
 *
 * Makes the buffer use memory that the caller owns and keeps alive while the program
 * is loaded; the launcher's own allocation of it is freed, unless another launcher
 * shares it ([method@Amk.Executor.load_shared]): that one keeps it, and the two stop
 * sharing the buffer.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_launcher_bind_buffer (AmkLauncher  *self,
                          guint         buffer,
                          guint64       device_address,
                          guint64       size,
                          GError      **error)
{
  AmkBufferInfo *info;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);

  info = get_buffer (self, buffer, error);
  if (info == NULL)
    return FALSE;
  if (info->role == AMK_BUFFER_ROLE_SCRATCH)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s” lives in the scratch arena and cannot be bound"), info->name);
      return FALSE;
    }
  if (device_address == 0 || size < info->size_bytes)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Buffer “%s” needs %" PRIu64 " bytes at a non-null address; got %" PRIu64 " bytes at 0x%" PRIx64),
                   info->name, info->size_bytes, size, device_address);
      return FALSE;
    }
  /* memory shared with another launcher stays that launcher's; this one stops sharing */
  g_clear_pointer (&self->buffer_memory[buffer], device_memory_release);
  self->buffer_addr[buffer] = device_address;
  self->table[buffer].addr = device_address;
  return upload_table (self, error);
}

/**
 * amk_launcher_get_buffer_address:
 * @self: a launcher
 * @buffer: a buffer index of the loaded program
 * @error: return location for a #GError
 *
 * Gets the device address of a buffer, for interop with other libraries.
 *
 * Returns: the device address of the buffer, for interop; 0 with @error set
 */
guint64
amk_launcher_get_buffer_address (AmkLauncher  *self,
                                 guint         buffer,
                                 GError      **error)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), 0);

  if (get_buffer (self, buffer, error) == NULL)
    return 0;
  return self->buffer_addr[buffer];
}

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  g_atomic_int_set ((gint *) data, 1);
}

/**
 * amk_launcher_launch:
 * @self: a launcher
 * @cancellable: (nullable): a #GCancellable; cancelling it raises the device's abort flag
 * @error: return location for a #GError
 *
 * Clears the counters and runs the loaded program as one cooperative launch of
 * one block per queue, then waits for it.
 *
 * Returns: %TRUE if every instruction ran; on failure @error is in the
 *   %AMK_LAUNCH_ERROR domain (or %G_IO_ERROR_CANCELLED)
 */
gboolean
amk_launcher_launch (AmkLauncher   *self,
                     GCancellable  *cancellable,
                     GError       **error)
{
  char msg[MSG_LEN] = "";
  amk_device_program prog = { 0 };
  amk_abort_record_t record = { 0 };
  gint cancel = 0;
  gulong handler = 0;
  float device_ms = 0.0f;
  amk_cuda_status status;
  AmkProgram *program;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!require_device (self, error) || !amk_loaded_program_check (&self->loaded, error))
    return FALSE;
  if (g_cancellable_set_error_if_cancelled (cancellable, error) ||
      !ensure_config (self, error) || !config_runs_program (self, error))
    return FALSE;

  program = self->loaded.program;
  prog.buffers = (const amk_buffer_t *) (guintptr) self->d_table;
  prog.counters = (amk_counter_t *) (guintptr) (self->d_control + CONTROL_COUNTERS);
  prog.instructions = (const amk_instruction_t *) (guintptr) self->d_instructions;
  prog.sm_queue_flat = (const int32_t *) (guintptr) self->d_flat;
  prog.sm_queue_off = (const int32_t *) (guintptr) self->d_off;
  prog.sm_queue_len = (const int32_t *) (guintptr) self->d_len;
  prog.scratch = (unsigned char *) (guintptr) self->d_scratch;
  prog.abort_flag = (int32_t *) (guintptr) (self->d_control + CONTROL_FLAG);
  prog.abort_record = (amk_abort_record_t *) (guintptr) (self->d_control + CONTROL_RECORD);
  prog.grid_barrier = (uint32_t *) (guintptr) (self->d_control + CONTROL_BARRIER);
  self->trace_valid = FALSE;
  if (self->trace)
    {
      gsize trace_size = MAX (self->loaded.n_instructions, 1) * sizeof (amk_trace_event_t);
      if (self->d_trace == 0 && !alloc_upload (self, &self->d_trace, NULL, trace_size, error))
        return FALSE;
      if (!cuda_error (amk_cuda_memset (self->device, self->d_trace, 0, trace_size, msg, sizeof msg), msg, error))
        return FALSE;
      prog.trace = (amk_trace_event_t *) (guintptr) self->d_trace;
    }
  prog.scratch_bytes = self->loaded.scratch_size;
  prog.watchdog_ns = (uint64_t) self->watchdog_ms * G_GUINT64_CONSTANT (1000000);
  prog.n_buffers = (int32_t) self->loaded.n_buffers;
  prog.n_counters = (int32_t) self->loaded.n_counters;
  prog.n_instructions = (int32_t) self->loaded.n_instructions;
  prog.num_sms = (int32_t) program->num_queues;
  prog.l2_prefetch = self->l2_prefetch;
  prog.flags = AMK_PROGRAM_TENSOR_MAPS | (self->many_tokens ? AMK_PROGRAM_MANY_TOKENS : 0u) |
               (self->paged ? AMK_PROGRAM_PAGED : 0u);
  if (!self->checked)
    {
      /* the device-side checks and the tensor maps, once for this image and buffer table */
      if (!cuda_error (amk_cuda_check_program (self->device, &prog, self->table,
                                               (const amk_instruction_t *) (gconstpointer) program->instructions->data,
                                               msg, sizeof msg),
                       msg, error))
        return FALSE;
      self->checked = TRUE;
    }
  prog.flags |= AMK_PROGRAM_CHECKED;

  memset (&self->last_abort, 0, sizeof self->last_abort);
  if (cancellable != NULL)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), &cancel, NULL);
  status = amk_cuda_launch (self->device, &prog, (int) program->num_queues,
                            (int) amk_launcher_get_threads_per_block (self),
                            (int) amk_launcher_get_dynamic_shared_memory (self),
                            cancellable != NULL ? &cancel : NULL, &record, &device_ms,
                            msg, sizeof msg);
  self->last_launch_ms = status == AMK_CUDA_OK ? device_ms : 0.0;
  if (cancellable != NULL)
    g_cancellable_disconnect (cancellable, handler);

  self->trace_valid = self->trace && status == AMK_CUDA_OK;
  if (status == AMK_CUDA_TIMEOUT || status == AMK_CUDA_ABORTED || status == AMK_CUDA_CANCELLED)
    {
      G_STATIC_ASSERT (sizeof (AmkAbortRecord) == sizeof (amk_abort_record_t));
      memcpy (&self->last_abort, &record, sizeof record);
    }
  return cuda_error (status, msg, error);
}

/**
 * amk_launcher_load:
 * @self: a launcher
 * @program: a program
 * @error: return location for a #GError
 *
 * Verifies @program, then allocates and uploads it: the buffer table, the instructions,
 * the queues, the counters, the scratch arena and every buffer with its default
 * contents. A program loaded before is released first.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_launcher_load (AmkLauncher  *self,
                   AmkProgram   *program,
                   GError      **error)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);
  g_return_val_if_fail (AMK_IS_PROGRAM (program), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!amk_program_verify (program, error))
    return FALSE;
  return amk_launcher_load_unverified (self, program, error);
}

static void
launch_thread (GTask        *task,
               gpointer      source_object,
               gpointer      task_data,
               GCancellable *cancellable)
{
  GError *error = NULL;

  if (amk_launcher_launch (AMK_LAUNCHER (source_object), cancellable, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
}

/**
 * amk_launcher_launch_async:
 * @self: a launcher
 * @cancellable: (nullable): a #GCancellable
 * @callback: (scope async): called when the launch ended
 * @user_data: data for @callback
 *
 * Runs [method@Amk.Launcher.launch] in a worker thread. Cancelling @cancellable raises
 * the device's abort flag: the blocks leave their queues and the launch ends with
 * %G_IO_ERROR_CANCELLED.
 */
void
amk_launcher_launch_async (AmkLauncher         *self,
                           GCancellable        *cancellable,
                           GAsyncReadyCallback  callback,
                           gpointer             user_data)
{
  g_autoptr(GTask) task = NULL;

  g_return_if_fail (AMK_IS_LAUNCHER (self));

  task = g_task_new (self, cancellable, callback, user_data);
  g_task_set_source_tag (task, amk_launcher_launch_async);
  g_task_set_return_on_cancel (task, FALSE);
  g_task_run_in_thread (task, launch_thread);
}

/**
 * amk_launcher_launch_finish:
 * @self: a launcher
 * @result: the #GAsyncResult passed to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Amk.Launcher.launch_async].
 * Call it once for each @result: a second call is a programmer error (a critical
 * warning, and no result).
 *
 * Returns: %TRUE if the launch succeeded
 */
gboolean
amk_launcher_launch_finish (AmkLauncher   *self,
                            GAsyncResult  *result,
                            GError       **error)
{
  g_return_val_if_fail (AMK_IS_LAUNCHER (self), FALSE);
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  g_return_val_if_fail (g_async_result_is_tagged (result, amk_launcher_launch_async), FALSE);

  return g_task_propagate_boolean (G_TASK (result), error);
}

/**
 * amk_launcher_get_trace_json:
 * @self: a launcher
 * @error: return location for a #GError
 *
 * The trace of the last launch, made with [property@Amk.Launcher:trace] on, in the
 * Chrome / Perfetto trace-event JSON format: one complete event per instruction, one
 * row (`tid`) per multiprocessor, times in microseconds from the first instruction's
 * start.
 *
 * Returns: (transfer full): the JSON text, or %NULL with @error set
 */
char *
amk_launcher_get_trace_json (AmkLauncher  *self,
                             GError      **error)
{
  char msg[MSG_LEN] = "";
  g_autofree amk_trace_event_t *events = NULL;
  g_autoptr(GString) json = NULL;
  guint n, first = TRUE;
  guint64 t0 = G_MAXUINT64;

  g_return_val_if_fail (AMK_IS_LAUNCHER (self), NULL);

  if (!require_program (self, error))
    return NULL;
  if (!self->trace_valid)
    {
      g_set_error_literal (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_FAILED,
                           _("There is no trace: set the launcher's trace property, then launch successfully"));
      return NULL;
    }
  n = self->loaded.n_instructions;
  events = g_new0 (amk_trace_event_t, MAX (n, 1));
  if (!cuda_error (amk_cuda_download (self->device, events, self->d_trace, n * sizeof *events, msg, sizeof msg),
                   msg, error))
    return NULL;

  for (guint i = 0; i < n; i++)
    if (events[i].end_ns != 0)
      t0 = MIN (t0, events[i].start_ns);

  json = g_string_new ("{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n");
  for (guint i = 0; i < n; i++)
    {
      const amk_trace_event_t *e = &events[i];
      if (e->end_ns == 0)
        continue;
      g_string_append_printf (json,
                              "%s  {\"name\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %u, "
                              "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"queue\": %d, \"instruction\": %d}}",
                              first ? "" : ",\n", amk_opcode_nick (e->opcode), e->sm_id,
                              (e->start_ns - t0) / 1000.0, (e->end_ns - e->start_ns) / 1000.0,
                              e->queue, e->instruction);
      first = FALSE;
    }
  g_string_append (json, "\n]}\n");
  return g_string_free (g_steal_pointer (&json), FALSE);
}

/* ---- AmkExecutor ---------------------------------------------------------------------- */

static gboolean
executor_load (AmkExecutor *executor, AmkProgram *program, GError **error)
{
  return amk_launcher_load (AMK_LAUNCHER (executor), program, error);
}

static gboolean
executor_load_shared (AmkExecutor *executor, AmkProgram *program, AmkExecutor *owner,
                      GError **error)
{
  return amk_program_verify (program, error) &&
         load_program (AMK_LAUNCHER (executor), program, AMK_LAUNCHER (owner), error);
}

static AmkProgram *
executor_get_program (AmkExecutor *executor)
{
  return amk_launcher_get_program (AMK_LAUNCHER (executor));
}

static gboolean
executor_upload (AmkExecutor *executor, guint buffer, GBytes *data, GError **error)
{
  return amk_launcher_upload (AMK_LAUNCHER (executor), buffer, data, error);
}

static GBytes *
executor_download (AmkExecutor *executor, guint buffer, GError **error)
{
  return amk_launcher_download (AMK_LAUNCHER (executor), buffer, error);
}

static gboolean
executor_run (AmkExecutor *executor, GCancellable *cancellable, GError **error)
{
  return amk_launcher_launch (AMK_LAUNCHER (executor), cancellable, error);
}

static void
executor_run_async (AmkExecutor         *executor,
                    GCancellable        *cancellable,
                    GAsyncReadyCallback  callback,
                    gpointer             user_data)
{
  amk_launcher_launch_async (AMK_LAUNCHER (executor), cancellable, callback, user_data);
}

static gboolean
executor_run_finish (AmkExecutor *executor, GAsyncResult *result, GError **error)
{
  return amk_launcher_launch_finish (AMK_LAUNCHER (executor), result, error);
}

static AmkAbortRecord *
executor_get_last_abort (AmkExecutor *executor)
{
  return amk_launcher_get_last_abort (AMK_LAUNCHER (executor));
}

/* One block per multiprocessor: all of them work, and every block is co-resident at
 * the configuration the launcher chooses. */
static guint
executor_get_preferred_queues (AmkExecutor *executor, GError **error)
{
  AmkLauncher *self = AMK_LAUNCHER (executor);
  g_autoptr(AmkKernelAttributes) attr = NULL;
  GError *local = NULL;

  if (!amk_launcher_supports_cooperative (self, &local))
    {
      if (local != NULL)
        g_propagate_error (error, local);
      else
        g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_UNSUPPORTED,
                     _("CUDA device %d cannot launch cooperative kernels, which the megakernel "
                       "needs; use the CPU executor (Amk.CpuExecutor)"), self->device);
      return 0;
    }
  attr = amk_launcher_kernel_attributes (self, 32, 0, error);
  if (attr == NULL)
    return 0;
  return (guint) MAX (attr->num_sms, 1);
}

/* MATMUL reaches the tensor cores' pace only with thousands of rows per weight read; the
 * chunk's activations stay a few hundred megabytes for 8B-sized models. */
static guint
executor_get_preferred_rows (AmkExecutor *executor)
{
  return 2048;
}

/* MATMUL's tensor cores read 16-bit inputs: F32 ones are converted in every tile. */
static AmkDType
executor_get_activation_dtype (AmkExecutor *executor)
{
  return AMK_DTYPE_BF16;
}

/* MATVEC, MATMUL and EMBED decode every block type the ABI has (kernels/quant-blocks.cuh). */
static gboolean
executor_supports_dtype (AmkExecutor *executor, AmkDType dtype)
{
  return TRUE;
}

static AmkExecutor *
executor_new_sibling (AmkExecutor *executor)
{
  AmkLauncher *self = AMK_LAUNCHER (executor);
  AmkLauncher *sibling = amk_launcher_new (self->device);

  amk_launcher_set_watchdog_ms (sibling, amk_launcher_get_watchdog_ms (self));
  return AMK_EXECUTOR (sibling);
}

static char *
executor_get_description (AmkExecutor *executor)
{
  AmkLauncher *self = AMK_LAUNCHER (executor);
  g_autofree char *name = amk_launcher_get_device_name (self, NULL);

  /* TRANSLATORS: what runs the programs; %s is the device name */
  if (name != NULL)
    return g_strdup_printf (_("GPU megakernel (%s)"), name);
  /* TRANSLATORS: what runs the programs when the device has no name; %d is its index */
  return g_strdup_printf (_("GPU megakernel (CUDA device %d)"), self->device);
}

static void
amk_launcher_executor_iface_init (AmkExecutorInterface *iface)
{
  iface->load = executor_load;
  iface->get_program = executor_get_program;
  iface->upload = executor_upload;
  iface->download = executor_download;
  iface->run = executor_run;
  iface->run_async = executor_run_async;
  iface->run_finish = executor_run_finish;
  iface->get_last_abort = executor_get_last_abort;
  iface->get_preferred_queues = executor_get_preferred_queues;
  iface->get_preferred_rows = executor_get_preferred_rows;
  iface->new_sibling = executor_new_sibling;
  iface->get_activation_dtype = executor_get_activation_dtype;
  iface->supports_dtype = executor_supports_dtype;
  iface->get_description = executor_get_description;
  iface->load_shared = executor_load_shared;
}
