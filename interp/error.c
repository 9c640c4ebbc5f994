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

/* The code point of the UTF-8 sequence at s[*i] (advancing *i past it; a
 * stray byte is one code point of its own). */
static unsigned utf8_next(const char *s, size_t end, size_t *i)
{
    unsigned char c = (unsigned char)s[(*i)++];
    int more = c >= 0xF0 && c < 0xF8 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    unsigned cp = more == 3 ? c & 7u : more == 2 ? c & 15u : more == 1 ? c & 31u : c;
    if (c >= 0xF8) more = 0;
    while (more-- > 0 && *i < end && ((unsigned char)s[*i] & 0xC0) == 0x80)
        cp = cp << 6 | ((unsigned char)s[(*i)++] & 0x3Fu);
    return cp;
}

/* Terminal columns of a code point: 0 for combining marks, 2 for East
 * Asian wide and full-width characters and emoji (the main blocks of
 * Unicode's EastAsianWidth W and F), else 1. */
static int cp_width(unsigned cp)
{
    if ((cp >= 0x300 && cp <= 0x36F) || (cp >= 0x200B && cp <= 0x200F)) return 0;
    static const unsigned wide[][2] = {
        {0x1100, 0x115F}, {0x2E80, 0x303E}, {0x3041, 0x33FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF},
        {0xA000, 0xA4CF}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0xFE30, 0xFE4F}, {0xFF00, 0xFF60},
        {0xFFE0, 0xFFE6}, {0x1F300, 0x1F64F}, {0x1F900, 0x1F9FF}, {0x20000, 0x3FFFD},
    };
    for (size_t k = 0; k < sizeof wide / sizeof *wide; k++)
        if (cp >= wide[k][0] && cp <= wide[k][1]) return 2;
    return 1;
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
    /* the caret goes under the text as a terminal shows it: one column per
     * code point (two for wide characters), not per byte */
    for (size_t i = start; i < off;) {
        if (text[i] == '\t') { fputc('\t', f); i++; continue; }
        for (int k = cp_width(utf8_next(text, off, &i)); k > 0; k--) fputc(' ', f);
    }
    fputc('^', f);
    size_t span = loc.len > 1 ? (size_t)loc.len : 1, stop = off + span < end ? off + span : end;
    int cols = 0;
    for (size_t i = off; i < stop;) cols += cp_width(utf8_next(text, stop, &i)); /* a tab: one '~' */
    for (int k = 1; k < cols; k++) fputc('~', f);
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
