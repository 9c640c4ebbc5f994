/* fuzz_onnx.c — libFuzzer target for the ONNX reader (stage/onnx_model.c,
 * util/pbr.c): the input bytes are a model file; ox_model_read must return
 * a model or an error message, never read outside the bytes or crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stage/onnx_model.h"

/* every name and attribute reachable, every tensor of its dims, in g and
 * its subgraphs (If's branches, Loop's body) */
static void walk(const OxModel *g, size_t size)
{
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].nat; j++) {
            (void)ox_attr(&g->nodes[i], g->nodes[i].at[j].name);
            if (g->nodes[i].at[j].g) walk(g->nodes[i].at[j].g, size);
        }
    for (int i = 0; i < g->ninits; i++)
        if (!g->inits[i] || strlen(g->init_names[i]) > size) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[300];
    err[0] = 0;
    OxModel *m = ox_model_read(data, size, err, sizeof err);
    if (!m && !err[0]) abort(); /* an error always says what */
    if (m) walk(m, size);
    ox_model_free(m);
    return 0;
}
