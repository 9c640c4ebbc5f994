/* atomic_file.h — writing a file atomically: a temp file beside it, fsync,
 * rename. Every writer of tfe's (save, save_npy, write_text, export, plot,
 * the profiler's trace) goes through it, so a crash or a full disk leaves
 * the old file whole, and the file keeps its mode and its symlinks. */
#ifndef TFE_UTIL_ATOMIC_FILE_H
#define TFE_UTIL_ATOMIC_FILE_H
#include <stddef.h>

/* Writes the parts to path atomically: 0, or -1 with a message naming path
 * in err (errno set). A symlink is followed to the file it names, and the
 * file written keeps the mode of the one it replaces (a new one gets
 * open()'s 0666 less the umask). */
int write_file_atomic(const char *path, const void *const *parts, const size_t *sizes, int nparts,
                      char *err, size_t errcap);

#endif
