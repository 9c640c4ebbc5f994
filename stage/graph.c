/* graph.c — building and freeing graphs (the IR of stage/graph.h). */
#include <stdlib.h>
#include <string.h>
#include "stage/graph.h"

Graph *graph_new(const char *name)
{
    Graph *g = calloc(1, sizeof *g);
    g->refcount = 1;
    g->name = strdup(name ? name : "<fn>");
    graph_add_region(g, -1); /* the top region */
    return g;
}

bool graph_region_visible(const Graph *g, int def, int use)
{
    for (int r = use; r >= 0; r = g->regions[r].parent)
        if (r == def) return true;
    return false;
}

int graph_add_region(Graph *g, int parent)
{
    if (g->nregions == g->capregions) {
        g->capregions = g->capregions ? g->capregions * 2 : 4;
        g->regions = realloc(g->regions, sizeof *g->regions * (size_t)g->capregions);
    }
    g->regions[g->nregions] = (GRegion){0};
    g->regions[g->nregions].parent = parent;
    return g->nregions++;
}

int graph_add(Graph *g, int r, GKind k, int nin, int nout)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 32;
        g->nodes = realloc(g->nodes, sizeof *g->nodes * (size_t)g->cap);
    }
    int id = g->n++;
    GNode *n = &g->nodes[id];
    *n = (GNode){0};
    n->kind = k;
    n->nin = nin;
    n->in = nin ? calloc((size_t)nin, sizeof *n->in) : NULL;
    n->nout = nout;
    n->meta = nout ? calloc((size_t)nout, sizeof *n->meta) : NULL;
    n->region = r;
    n->effect_dep = -1;
    n->regions[0] = n->regions[1] = -1;
    n->obj = v_nil();
    n->vbase = g->nvals;
    g->nvals += nout;
    GRegion *reg = &g->regions[r];
    if (reg->n == reg->cap) {
        reg->cap = reg->cap ? reg->cap * 2 : 16;
        reg->nodes = realloc(reg->nodes, sizeof *reg->nodes * (size_t)reg->cap);
    }
    reg->nodes[reg->n++] = id;
    return id;
}

void graph_decref(Graph *g)
{
    if (!g || --g->refcount > 0) return;
    for (int i = 0; i < g->n; i++) {
        GNode *n = &g->nodes[i];
        free(n->in);
        free(n->meta);
        free(n->at);
        free(n->label);
        if (n->value) tensor_decref(n->value);
        value_decref(n->obj);
        for (int a = 0; a < n->nhargs; a++) value_decref(n->hargs[a].v);
        free(n->hargs);
        for (int a = 0; a < n->nhkw; a++) value_decref(v_obj(V_STR, n->hkwnames[a]));
        free(n->hkwnames);
    }
    for (int r = 0; r < g->nregions; r++) {
        free(g->regions[r].nodes);
        free(g->regions[r].outs);
        free(g->regions[r].params);
    }
    for (GFrames *f = g->frames_all, *next; f; f = next) {
        next = f->next_all;
        for (int i = 0; i < f->n; i++)
            if (f->f[i].call_loc.src) source_decref(f->f[i].call_loc.src);
        free(f->f);
        free(f);
    }
    free(g->regions);
    free(g->nodes);
    free(g->inputs);
    free(g->name);
    free(g);
}
