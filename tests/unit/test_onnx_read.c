/* test_onnx_read.c — the ONNX reader (stage/onnx_model.c) on malformed
 * models fuzz_onnx found: an error, and nothing it allocated left behind
 * (the allocator's live bytes are what they were before). */
#include <string.h>

#include "stage/onnx_model.h"
#include "tensor/tensor.h"
#include "tests/unit/check.h"

/* ModelProto { graph { node { attribute { t: a float 1.0, then a field
 * that claims 5 bytes where none are left } } } }: the attribute's tensor
 * was read before the bad bytes, and read_node dropped it on the error. */
static const unsigned char ATTR_TENSOR_THEN_BAD[] = {
    0x3a, 0x10,                   /* graph, 16 bytes */
    0x0a, 0x0e,                   /* node, 14 bytes */
    0x2a, 0x0c,                   /* attribute, 12 bytes */
    0x2a, 0x08, 0x10, 0x01, 0x4a, 0x04, 0x00, 0x00, 0x80, 0x3f, /* t: float32, raw 1.0f */
    0x0a, 0x05,                   /* name: 5 bytes claimed, none there */
};

int main(void)
{
    char err[300];
    size_t before = tfe_alloc_get_stats().live_bytes;
    for (int i = 0; i < 50; i++) {
        err[0] = 0;
        OxModel *m = ox_model_read(ATTR_TENSOR_THEN_BAD, sizeof ATTR_TENSOR_THEN_BAD, err, sizeof err);
        CHECK(!m, "a malformed attribute read as a model");
        CHECK(err[0], "no error message");
        ox_model_free(m);
    }
    size_t after = tfe_alloc_get_stats().live_bytes;
    CHECK(after == before, "%zu live bytes left by 50 reads of a malformed attribute", after - before);
    return check_failures ? 1 : 0;
}
