/* amk-version-macros.h: symbol visibility and availability annotations.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#if defined(_WIN32) && defined(AMK_GLIB_COMPILATION)
# define _AMK_EXTERN __declspec(dllexport) extern
#elif defined(AMK_GLIB_COMPILATION)
# define _AMK_EXTERN __attribute__((visibility ("default"))) extern
#else
# define _AMK_EXTERN extern
#endif

#define AMK_AVAILABLE_IN_1_0 _AMK_EXTERN
