/* fuzz_onnx.c — libFuzzer target for the ONNX reader (stage/onnx_model.c,
 * util/pbr.c): the input bytes are a model file; ox_model_read must return
 * a model or an error message, never read outside the bytes or crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stage/onnx_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[300];
    err[0] = 0;
    OxModel *m = ox_model_read(data, size, err, sizeof err);
    if (!m && !err[0]) abort(); /* an error always says what */
    if (m) {
        /* every name and attribute reachable, every tensor of its dims */
        for (int i = 0; i < m->nnodes; i++)
            for (int j = 0; j < m->nodes[i].nat; j++) (void)ox_attr(&m->nodes[i], m->nodes[i].at[j].name);
        for (int i = 0; i < m->ninits; i++)
            if (!m->inits[i] || strlen(m->init_names[i]) > size) abort();
    }
    ox_model_free(m);
    return 0;
}
