/* builtins_text.c — text files: read_text, read_lines and write_text (atomic,
 * through write_file_atomic as every writer of tfe). Errors name the file and
 * the system's reason, at the call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "util/xalloc.h"

/* The whole of path into *buf (NUL-terminated; *len bytes), or -1 raised. */
static int slurp(Interp *I, const char *fn, const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return interp_raise(I, "%s: cannot open '%s': %s", fn, path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *b = try_malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return interp_raise(I, "%s: out of memory reading '%s'", fn, path);
        }
        n += fread(b + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        cap *= 2;
        char *more = try_realloc(b, cap);
        if (!more) free(b);
        b = more;
    }
    if (ferror(f)) { /* a folder opens, and fails here: EISDIR */
        int e = errno;
        free(b);
        fclose(f);
        return interp_raise(I, "%s: cannot read '%s': %s", fn, path, strerror(e));
    }
    fclose(f);
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

/* read_text(path): the file's bytes as a string */
BUILTIN(bi_read_text)
{
    Value a[1];
    bool p[1];
    if (args_parse(I, "read_text", "path", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    char *b;
    size_t n;
    if (arg_string(I, "read_text()", "path", a[0], &path) || slurp(I, "read_text()", path, &b, &n)) return -1;
    *out = v_str(b, n);
    free(b);
    return 0;
}

/* read_lines(path): a list of the file's lines without their line ends
 * ("\n" or "\r\n"); a last line with no newline counts, a final newline adds
 * no empty line (Python's str.splitlines for \n and \r\n files). */
BUILTIN(bi_read_lines)
{
    Value a[1];
    bool p[1];
    if (args_parse(I, "read_lines", "path", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    char *b;
    size_t n;
    if (arg_string(I, "read_lines()", "path", a[0], &path) || slurp(I, "read_lines()", path, &b, &n)) return -1;
    Seq *s = seq_new(16);
    size_t start = 0;
    while (start < n) {
        const char *nl = memchr(b + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - b) : n, stop = end;
        if (nl && stop > start && b[stop - 1] == '\r') stop--;
        seq_push_take(s, v_str(b + start, stop - start));
        start = end + 1;
    }
    free(b);
    *out = v_obj(V_LIST, s);
    return 0;
}

/* write_text(path, s): the string s as the file's whole content, atomically
 * (a temp file beside it, fsync, rename: a crash leaves the old file) */
BUILTIN(bi_write_text)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "write_text", "path, s", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path, *text;
    if (arg_string(I, "write_text()", "path", a[0], &path) || arg_string(I, "write_text()", "s", a[1], &text))
        return -1;
    const void *parts[1] = {text};
    size_t sizes[1] = {((Str *)a[1].u.o)->len};
    char err[512];
    if (write_file_atomic(path, parts, sizes, 1, err, sizeof err)) return interp_raise(I, "write_text(): %s", err);
    *out = v_nil();
    return 0;
}

void builtins_str_register(Interp *I); /* builtins_str.c */

void builtins_text_register(Interp *I)
{
    /* a string or a list is not a value staged code can take from the host */
    interp_define_builtin_flags(I, "read_text", bi_read_text, NULL, BF_NOT_STAGEABLE,
                                "read_text() returns a string, which a staged function cannot take from the host; "
                                "read the file outside it");
    interp_define_builtin_flags(I, "read_lines", bi_read_lines, NULL, BF_NOT_STAGEABLE,
                                "read_lines() returns a list, which a staged function cannot take from the host; "
                                "read the file outside it");
    interp_define_builtin_flags(I, "write_text", bi_write_text, NULL, BF_EFFECT, NULL);
    builtins_str_register(I); /* ord, chr (string methods are fields: interp/builtins_str.c) */
}
