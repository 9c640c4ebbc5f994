/* plot_png.c — plot_write: a chart's SVG to an .svg file as it is, or to a
 * .png rendered by librsvg onto a cairo image surface. librsvg is loaded on
 * the first PNG (dlopen, as tensor/blas.c loads OpenBLAS): linking it would
 * cost every tfe start ~12 ms of relocations for a feature few runs use.
 * Built without it (configure found no librsvg2-dev), .png is an error that
 * says how to get it. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "config.h"
#include "interp/plot.h"
#include "util/xalloc.h"
#ifdef HAVE_RSVG
#include <cairo.h>
#include <librsvg/rsvg.h>
#endif

void plot_printf(Buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    buf_grow(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void plot_text(Buf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': buf_puts(b, "&amp;"); break;
        case '<': buf_puts(b, "&lt;"); break;
        case '>': buf_puts(b, "&gt;"); break;
        case '"': buf_puts(b, "&quot;"); break;
        default: buf_add(b, s, 1);
        }
    }
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

static int write_bytes(Interp *I, const char *fn, const char *path, const void *data, size_t len)
{
    const void *parts[1] = {data};
    size_t sizes[1] = {len};
    char err[512];
    if (write_file_atomic(path, parts, sizes, 1, err, sizeof err)) return interp_raise(I, "%s(): %s", fn, err);
    return 0;
}

#ifdef HAVE_RSVG
static struct {
    bool tried;
    char err[300]; /* why loading failed ("" when it worked) */
    __typeof__(rsvg_handle_new_from_data) *new_from_data;
    __typeof__(rsvg_handle_render_document) *render_document;
    __typeof__(g_object_unref) *object_unref;
    __typeof__(g_error_free) *error_free;
    __typeof__(cairo_image_surface_create) *surface_create;
    __typeof__(cairo_surface_destroy) *surface_destroy;
    __typeof__(cairo_surface_write_to_png_stream) *write_png;
    __typeof__(cairo_create) *create;
    __typeof__(cairo_destroy) *destroy;
    __typeof__(cairo_status) *status;
    __typeof__(cairo_status_to_string) *status_string;
} rs;

/* dlsym on librsvg's handle also finds cairo's and GLib's functions: they
 * are its dependencies, loaded with it. */
static void load_rsvg(void)
{
    if (rs.tried) return;
    rs.tried = true;
    void *h = dlopen("librsvg-2.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("librsvg-2.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(rs.err, sizeof rs.err, "cannot load librsvg (%s; apt-get install librsvg2-2)", dlerror());
        return;
    }
#define SYM(field, name)                                                                  \
    if (!(*(void **)&rs.field = dlsym(h, name))) {                                       \
        snprintf(rs.err, sizeof rs.err, "librsvg-2.so.2 has no %s (librsvg >= 2.46 needed)", name); \
        return;                                                                           \
    }
    SYM(new_from_data, "rsvg_handle_new_from_data")
    SYM(render_document, "rsvg_handle_render_document")
    SYM(object_unref, "g_object_unref")
    SYM(error_free, "g_error_free")
    SYM(surface_create, "cairo_image_surface_create")
    SYM(surface_destroy, "cairo_surface_destroy")
    SYM(write_png, "cairo_surface_write_to_png_stream")
    SYM(create, "cairo_create")
    SYM(destroy, "cairo_destroy")
    SYM(status, "cairo_status")
    SYM(status_string, "cairo_status_to_string")
#undef SYM
}

static cairo_status_t png_append(void *closure, const unsigned char *data, unsigned int len)
{
    buf_add((Buf *)closure, (const char *)data, len);
    return CAIRO_STATUS_SUCCESS;
}

/* The PNG bytes of the SVG in *png; -1 with a message in err. */
static int render_png(const Buf *svg, int width, int height, Buf *png, char *err, size_t errcap)
{
    load_rsvg();
    if (rs.err[0]) { snprintf(err, errcap, "%s", rs.err); return -1; }
    GError *gerr = NULL;
    RsvgHandle *h = rs.new_from_data((const guint8 *)svg->s, svg->len, &gerr);
    if (!h) {
        snprintf(err, errcap, "librsvg cannot read the chart: %s", gerr ? gerr->message : "?");
        if (gerr) rs.error_free(gerr);
        return -1;
    }
    cairo_surface_t *surf = rs.surface_create(CAIRO_FORMAT_ARGB32, width, height);
    cairo_t *cr = rs.create(surf);
    int rc = -1;
    RsvgRectangle vp = {0, 0, width, height};
    if (!rs.render_document(h, cr, &vp, &gerr)) {
        snprintf(err, errcap, "librsvg cannot render the chart: %s", gerr ? gerr->message : "?");
        if (gerr) rs.error_free(gerr);
    } else if (rs.status(cr) != CAIRO_STATUS_SUCCESS) {
        snprintf(err, errcap, "cairo: %s", rs.status_string(rs.status(cr)));
    } else {
        cairo_status_t st = rs.write_png(surf, png_append, png);
        if (st != CAIRO_STATUS_SUCCESS) snprintf(err, errcap, "cairo: %s", rs.status_string(st));
        else rc = 0;
    }
    rs.destroy(cr);
    rs.surface_destroy(surf);
    rs.object_unref(h);
    return rc;
}
#endif

int plot_write(Interp *I, const char *fn, const char *path, const Buf *svg, int width, int height)
{
    if (!path) {
        /* a notebook (tfe --kernel) shows the chart in the cell's output;
         * a PNG of it too where librsvg is, for front ends that show no
         * SVG (JupyterLab draws none in a notebook it does not trust) */
        if (interp_display_hook) {
            int rc = interp_display_hook("image/svg+xml", svg->s, svg->len);
#ifdef HAVE_RSVG
            Buf png = {0};
            char err[400];
            if (rc == 0 && render_png(svg, width, height, &png, err, sizeof err) == 0)
                rc = interp_display_hook("+image/png", png.s, png.len);
            free(png.s);
#endif
            return rc;
        }
        return interp_raise(I, "%s(): give a path to write the chart to (.svg or .png); "
                               "only a notebook (tfe --kernel) shows it without one", fn);
    }
    if (ends_with(path, ".svg")) return write_bytes(I, fn, path, svg->s, svg->len);
    if (!ends_with(path, ".png"))
        return interp_raise(I, "%s(): the path must end in .svg or .png (the format to write), got '%s'", fn, path);
#ifdef HAVE_RSVG
    Buf png = {0};
    char err[400];
    if (render_png(svg, width, height, &png, err, sizeof err)) {
        free(png.s);
        return interp_raise(I, "%s(): cannot write the PNG '%s': %s", fn, path, err);
    }
    int rc = write_bytes(I, fn, path, png.s, png.len);
    free(png.s);
    return rc;
#else
    (void)width;
    (void)height;
    return interp_raise(I, "%s(): cannot write the PNG '%s': this tfe was built without librsvg "
                           "(apt-get install librsvg2-dev, then configure and make again); write an .svg instead",
                        fn, path);
#endif
}
