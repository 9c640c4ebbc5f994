/* interp.c — the interpreter's lifetime and its entry points: run a program,
 * run one REPL entry, complete names for the REPL. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "interp/help.h"
#include "interp/internal.h"
#include "stage/staged.h"
#include "util/xalloc.h"

#ifdef HAVE_CUDA
void tfe_gpu_register(void); /* gpu/backend.c: the CUDA backend plugs into tensor/device.c */
#endif
void builtins_io_register(Interp *I);
void builtins_device_register(Interp *I);
void builtins_autodiff_register(Interp *I);
void builtins_random_register(Interp *I);
void builtins_dist_register(Interp *I); /* interp/builtins_dist.c */
/* interp/builtins_profile.c: profile(), and TFE_PROFILE's whole-run recording */
void builtins_profile_register(Interp *I);
void profile_env_start(void);
void profile_env_finish(void);
void builtins_summary_register(Interp *I); /* interp/builtins_summary.c: TensorBoard logs */
void builtins_breakpoint_register(Interp *I); /* interp/repl.c */

Interp *interp_new(const InterpOptions *opt)
{
    Interp *I = xcalloc(1, sizeof(Interp));
    I->opt = *opt;
    I->check_staged = opt->check_staged ? 1 : -1;
    I->tracked.next = I->tracked.prev = &I->tracked;
    tfe_current_interp = I;
    tfe_tape_stack_use(&I->tapes);
    I->global_scope = global_scope_new();
    I->globals = env_new(I, 0, NULL);
    I->modules = record_new();
    I->module_stamps = record_new();
    I->retval = v_nil();
#ifdef HAVE_CUDA
    tfe_gpu_register();
#endif
    builtins_register(I);
    builtins_io_register(I);
    builtins_device_register(I);
    builtins_autodiff_register(I);
    builtins_random_register(I);
    builtins_ckpt_register(I);
    builtins_tensor_register(I);
    builtins_lib_register(I);
    builtins_linalg_register(I);
    stage_builtins_register(I);
    builtins_progress_register(I);
    builtins_plot_register(I);
    builtins_imshow_register(I);
    builtins_help_register(I);
    builtins_dist_register(I);
    builtins_profile_register(I);
    profile_env_start();
    builtins_summary_register(I);
    builtins_breakpoint_register(I);
    return I;
}

void interp_free(Interp *I)
{
    profile_env_finish(); /* TFE_PROFILE: the program ran; write its trace */
    value_decref(I->retval);
    tracked_clear_all(I);
    /* (a global binding no tracked object holds can reach the globals
     * again: a persistent tape whose cached staged call's entry keeps what
     * a @host call read; cleared bindings break such a cycle) */
    for (int i = 0; i < I->globals->nslots; i++) {
        Value v = I->globals->slots[i];
        I->globals->slots[i] = v_nil();
        value_decref(v);
    }
    env_decref(I->globals);
    value_decref(v_obj(V_RECORD, I->modules));
    value_decref(v_obj(V_RECORD, I->module_stamps));
    for (int i = 0; i < I->nbuiltins; i++) {
        free(I->builtin_names[i]);
        value_decref(I->builtin_vals[i]);
    }
    free(I->builtin_names);
    free(I->builtin_vals);
    global_scope_free(I->global_scope);
    while (I->programs) {
        Program *p = I->programs;
        I->programs = p->next_all;
        program_decref(p);
    }
    free(I->frames);
    free(I->script_dir);
    for (int i = 0; i < I->n_fn_names; i++) free(I->fn_names[i]);
    free(I->fn_names);
    error_clear(I);
    if (tfe_current_interp == I) {
        tfe_current_interp = NULL;
        tfe_tape_stack_use(NULL);
    }
    free(I->tapes.active);
    free(I);
}

/* Parse, resolve and run text; report any error. The Program stays alive
 * (closures made from it may outlive this call). */
static int run_text(Interp *I, Source *src, bool echo, FILE *err)
{
    ParseError pe;
    memset(&pe, 0, sizeof pe);
    Node *root = parse_program(src, &pe);
    if (!root) {
        fflush(stdout);
        diag_print(err, pe.loc, pe.msg);
        return 1;
    }
    Program *p = xcalloc(1, sizeof(Program));
    p->refcount = 1;
    p->src = src;
    source_incref(src);
    p->root = root;
    p->next_all = I->programs;
    I->programs = p;
    I->nframes = 0;
    int rc = eval_program(I, p, echo);
    fflush(stdout);
    if (rc) {
        error_report(I, err);
        return 1;
    }
    return 0;
}

int interp_run_source(Interp *I, const char *name, const char *text, size_t len)
{
    Source *src = source_new(name, text, len);
    int rc = run_text(I, src, false, stderr);
    source_decref(src);
    return rc;
}

int interp_run_file(Interp *I, const char *path)
{
    Source *src = source_from_file(path);
    if (!src) {
        fprintf(stderr, "%stfe: cannot open '%s': %s\n", diag_rank_tag(), path, strerror(errno));
        return 1;
    }
    free(I->script_dir);
    I->script_dir = src->dir ? xstrdup(src->dir) : NULL;
    int rc = run_text(I, src, false, stderr);
    source_decref(src);
    return rc;
}

int interp_run_repl_entry(Interp *I, int number, const char *text, size_t len)
{
    I->repl = true;
    char name[32];
    snprintf(name, sizeof name, "<repl:%d>", number);
    Source *src = source_new(name, text, len);
    int rc = run_text(I, src, true, stderr);
    source_decref(src);
    return rc;
}

int interp_run_cell(Interp *I, int number, const char *text, size_t len, FILE *err)
{
    I->repl = true;
    char name[32];
    snprintf(name, sizeof name, "<cell:%d>", number);
    Source *src = source_new(name, text, len);
    int rc = run_text(I, src, true, err);
    source_decref(src);
    return rc;
}

/* An entry typed at a breakpoint's prompt (interp/repl.c): as a REPL entry,
 * named <breakpoint:N>, while the program's call stack is kept aside (the
 * entry runs at the top level, from frame 0). */
int interp_run_breakpoint_entry(Interp *I, int number, const char *text, size_t len)
{
    bool repl = I->repl;
    int nframes = I->nframes;
    Frame *frames = nframes ? xmalloc(sizeof *frames * (size_t)nframes) : NULL;
    if (nframes) memcpy(frames, I->frames, sizeof *frames * (size_t)nframes);
    Loc loc = I->cur_loc;
    I->repl = true;
    char name[40];
    snprintf(name, sizeof name, "<breakpoint:%d>", number);
    Source *src = source_new(name, text, len);
    int rc = run_text(I, src, true, stderr);
    source_decref(src);
    if (nframes) memcpy(I->frames, frames, sizeof *frames * (size_t)nframes);
    free(frames);
    I->nframes = nframes;
    I->cur_loc = loc;
    I->repl = repl;
    return rc;
}

static const char *keywords[] = {
    "let", "fn", "return", "if", "else", "while", "for", "in", "break", "continue",
    "with", "as", "import", "and", "or", "not", "true", "false", "nil", NULL
};

void interp_complete(Interp *I, const char *prefix, void (*add)(const char *, void *), void *ctx)
{
    const char *dot = strrchr(prefix, '.');
    if (dot) {
        /* fields of a record or module ("model.la" -> "model.layers", also
         * "a.b.c"), the attributes of a tensor or variable ("x.sh" -> "x.shape") */
        char base[256];
        size_t bl = (size_t)(dot - prefix);
        if (bl >= sizeof base) return;
        memcpy(base, prefix, bl);
        base[bl] = 0;
        Value v;
        if (!help_lookup_value(I, base, &v)) return;
        size_t pl = strlen(dot + 1);
        const char *const *names = NULL;
        if (v.kind == V_SCALAR || v.kind == V_TENSOR ||
            (v.kind == V_OBJECT && ((Object *)v.u.o)->cls->to_tensor)) {
            names = interp_tensor_attr_names();
            if (v.kind == V_OBJECT) {
                /* a variable: its own fields, then its value's */
                static const char *const var_names[] = {"value", "name", "trainable", "assign",
                                                        "assign_add", "assign_sub", NULL};
                for (int i = 0; var_names[i]; i++)
                    if (strncmp(var_names[i], dot + 1, pl) == 0) {
                        char *full;
                        if (asprintf(&full, "%s.%s", base, var_names[i]) >= 0) { add(full, ctx); free(full); }
                    }
            }
            for (int i = 0; names[i]; i++)
                if (strncmp(names[i], dot + 1, pl) == 0) {
                    char *full;
                    if (asprintf(&full, "%s.%s", base, names[i]) >= 0) { add(full, ctx); free(full); }
                }
            return;
        }
        if (v.kind == V_STR) /* a string's methods ("line.sp" -> "line.split") */
            for (const char *const *m = interp_string_method_names(); *m; m++)
                if (strncmp(*m, dot + 1, pl) == 0) {
                    char *full;
                    if (asprintf(&full, "%s.%s", base, *m) >= 0) { add(full, ctx); free(full); }
                }
        if (v.kind != V_RECORD && v.kind != V_MODULE) return;
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++)
            if (strncmp(r->keys[i]->s, dot + 1, pl) == 0) {
                char *full;
                if (asprintf(&full, "%s.%s", base, r->keys[i]->s) >= 0) { add(full, ctx); free(full); }
            }
        return;
    }
    size_t pl = strlen(prefix);
    Scope *g = I->global_scope;
    for (int i = 0; i < g->n; i++)
        if (strncmp(g->names[i], prefix, pl) == 0) add(g->names[i], ctx);
    for (int i = 0; i < I->nbuiltins; i++)
        if (strncmp(I->builtin_names[i], prefix, pl) == 0) add(I->builtin_names[i], ctx);
    for (int i = 0; keywords[i]; i++)
        if (strncmp(keywords[i], prefix, pl) == 0) add(keywords[i], ctx);
}

char *interp_reload_code(Interp *I, const char *name)
{
    Value v;
    if (!*name) {
        printf(":reload needs the name a module is bound to (:reload mymod)\n");
        return NULL;
    }
    if (!help_lookup_value(I, name, &v) || v.kind != V_MODULE || strchr(name, '.')) {
        printf("no module is bound to '%s' (import it first)\n", name);
        return NULL;
    }
    /* the file the module came from (kept on the module: after a reload
     * that failed, the name is still bound to it and the cache has
     * forgotten it), then its cached module forgotten (its key is that
     * path), as a failed import is forgotten, and the file imported again */
    const char *path = ((Record *)v.u.o)->module_path;
    if (!path) {
        printf("'%s' is a module not imported from a file\n", name);
        return NULL;
    }
    size_t cap = 2 * strlen(path) + strlen(name) + 32, n = 0;
    char *code = xmalloc(cap);
    n += (size_t)snprintf(code, cap, "import \"");
    for (const char *p = path; *p; p++) {
        if (*p == '"' || *p == '\\') code[n++] = '\\';
        code[n++] = *p;
    }
    snprintf(code + n, cap - n, "\" as %s", name);
    for (int i = 0; i < I->modules->n; i++) {
        Value *m = &I->modules->vals[i];
        if (strcmp(I->modules->keys[i]->s, path) != 0) continue;
        value_decref(*m);
        m->kind = V_SCALAR;
        m->dtype = TFE_BOOL;
        m->u.i = 0;
    }
    return code;
}
