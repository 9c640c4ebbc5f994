/* pbr.c — the protobuf wire format, read side (pbr.h): bounds-checked. */
#include "util/pbr.h"

int pbr_varint(PbReader *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int s = 0; s < 64; s += 7) {
        if (r->p >= r->end) return -1;
        uint8_t c = *r->p++;
        x |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1; /* more than ten bytes */
}

static int fixed(PbReader *r, int nbytes, uint64_t *v)
{
    if (r->end - r->p < nbytes) return -1;
    uint64_t x = 0;
    for (int i = 0; i < nbytes; i++) x |= (uint64_t)r->p[i] << (8 * i);
    r->p += nbytes;
    *v = x;
    return 0;
}

int pbr_next(PbReader *r, PbField *f)
{
    if (r->p >= r->end) return 0;
    uint64_t tag;
    if (pbr_varint(r, &tag)) return -1;
    if (tag >> 3 == 0 || tag >> 3 > 536870911) return -1;
    f->field = (int)(tag >> 3);
    f->wire = (int)(tag & 7);
    f->p = NULL;
    f->n = 0;
    f->v = 0;
    switch (f->wire) {
    case 0: return pbr_varint(r, &f->v) ? -1 : 1;
    case 1: return fixed(r, 8, &f->v) ? -1 : 1;
    case 5: return fixed(r, 4, &f->v) ? -1 : 1;
    case 2: {
        uint64_t n;
        if (pbr_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return -1;
        f->p = r->p;
        f->n = (size_t)n;
        r->p += n;
        return 1;
    }
    default: return -1; /* groups (3, 4) and unknown types */
    }
}
