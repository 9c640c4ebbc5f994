/* error.c — the one error road: raising a located error with a snapshot of
 * the call stack, and the one function that prints every diagnostic. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/comm.h"
#include "interp/internal.h"
#include "util/xalloc.h"

/* The rank prefix; a job of one rank (or no mpirun) has none, so its
 * messages are those of a plain run, byte for byte. */
const char *diag_rank_tag(void)
{
    static char tag[32];
    if (dist_size() <= 1) return "";
    snprintf(tag, sizeof tag, "[rank %d] ", dist_rank());
    return tag;
}

/* A diagnostic leaves in one write: mpirun merges the ranks' stderr pipes
 * chunk by chunk as they arrive, and a message written in pieces (stderr is
 * unbuffered: one write per fprintf) could be cut by another rank's lines.
 * When no memory stream can be opened the caller writes straight to f. */
static FILE *gather_open(char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    return open_memstream(buf, len);
}

static void gather_close(FILE *m, char **buf, size_t *len, FILE *f)
{
    fclose(m); /* sets *buf and *len */
    fwrite(*buf, 1, *len, f);
    fflush(f);
    free(*buf);
}

static void diag_write(FILE *f, Loc loc, const char *msg)
{
    const char *name = loc.src ? loc.src->name : "<unknown>";
    fprintf(f, "%s%s:%d:%d: error: %s\n", diag_rank_tag(), name, loc.line, loc.col, msg);
    if (!loc.src || loc.line <= 0) return;
    const char *text = loc.src->text;
    size_t len = loc.src->len;
    /* find the start of the line from the byte offset */
    size_t off = (size_t)loc.off <= len ? (size_t)loc.off : len;
    size_t start = off;
    while (start > 0 && text[start - 1] != '\n') start--;
    size_t end = off;
    while (end < len && text[end] != '\n') end++;
    char num[32];
    int w = snprintf(num, sizeof num, "%d", loc.line);
    fprintf(f, " %s | %.*s\n", num, (int)(end - start), text + start);
    fprintf(f, " %*s | ", w, "");
    for (size_t i = start; i < off; i++) fputc(text[i] == '\t' ? '\t' : ' ', f);
    fputc('^', f);
    size_t span = loc.len > 1 ? (size_t)loc.len : 1;
    for (size_t i = off + 1; i < off + span && i < end; i++) fputc('~', f);
    fputc('\n', f);
}

/* Print `file:line:col: error: msg`, the source line and a caret under the
 * span (clipped to that line); in a job of several ranks the first line
 * starts with `[rank N] `. Every diagnostic goes through here. */
void diag_print(FILE *f, Loc loc, const char *msg)
{
    char *buf;
    size_t len;
    FILE *m = gather_open(&buf, &len);
    diag_write(m ? m : f, loc, msg);
    if (m) gather_close(m, &buf, &len, f);
}

void error_clear(Interp *I)
{
    if (I->has_error) {
        if (I->err_loc.src) source_decref(I->err_loc.src);
        for (int i = 0; i < I->err_nframes; i++)
            if (I->err_frames[i].call_loc.src) source_decref(I->err_frames[i].call_loc.src);
    }
    I->err_loc.src = NULL;
    free(I->err_msg);
    I->err_msg = NULL;
    free(I->err_frames);
    I->err_frames = NULL;
    I->err_nframes = 0;
    I->has_error = false;
}

int raise_msg_at(Interp *I, Loc loc, const char *msg)
{
    if (I->has_error) return -1; /* keep the first (innermost) error */
    I->has_error = true;
    I->err_msg = xstrdup(msg);
    I->err_loc = loc;
    if (loc.src) source_incref(loc.src);
    I->err_nframes = I->nframes;
    if (I->nframes) {
        I->err_frames = xmalloc(sizeof(Frame) * (size_t)I->nframes);
        memcpy(I->err_frames, I->frames, sizeof(Frame) * (size_t)I->nframes);
        for (int i = 0; i < I->nframes; i++)
            if (I->err_frames[i].call_loc.src) source_incref(I->err_frames[i].call_loc.src);
    }
    return -1;
}

int frames_push_at(Interp *I, int base, const Frame *f, int n)
{
    int saved = I->nframes;
    int need = base + n;
    if (need > I->cap_frames) {
        I->cap_frames = need * 2;
        I->frames = xrealloc(I->frames, sizeof(Frame) * (size_t)I->cap_frames);
    }
    I->nframes = base;
    for (int i = 0; i < n; i++) I->frames[I->nframes++] = f[i];
    return saved;
}

void frames_pop_to(Interp *I, int depth) { I->nframes = depth; }

int raise_at(Interp *I, Loc loc, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return raise_msg_at(I, loc, buf);
}

int interp_raise(Interp *I, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return raise_msg_at(I, I->cur_loc, buf);
}

int interp_raise_tensor_error(Interp *I)
{
    const char *m = tfe_error_msg();
    return raise_msg_at(I, I->cur_loc, m && *m ? m : "tensor operation failed");
}

/* Print the pending error and its traceback (innermost call first), then clear it. */
void error_report(Interp *I, FILE *f)
{
    if (!I->has_error) return;
    fflush(stdout);
    char *buf;
    size_t len;
    FILE *out = f, *m = gather_open(&buf, &len);
    if (m) f = m;
    diag_write(f, I->err_loc, I->err_msg);
    /* a run of identical frames (deep recursion) is shown three times, then counted */
    int same = 0;
    for (int i = I->err_nframes - 1; i >= 0; i--) {
        Frame *fr = &I->err_frames[i];
        Frame *prev = i + 1 < I->err_nframes ? &I->err_frames[i + 1] : NULL;
        if (prev && prev->fname == fr->fname && prev->call_loc.src == fr->call_loc.src &&
            prev->call_loc.off == fr->call_loc.off) same++;
        else {
            if (same > 2) fprintf(f, "  [the call above repeats %d more times]\n", same - 2);
            same = 0;
        }
        if (same > 2) continue;
        fprintf(f, "  in %s called from %s:%d:%d\n", fr->fname,
                fr->call_loc.src ? fr->call_loc.src->name : "<unknown>",
                fr->call_loc.line, fr->call_loc.col);
    }
    if (same > 2) fprintf(f, "  [the call above repeats %d more times]\n", same - 2);
    if (m) gather_close(m, &buf, &len, out);
    fflush(out);
    error_clear(I);
}
