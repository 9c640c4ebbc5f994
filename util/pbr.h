/* pbr.h — a protobuf wire-format reader over a byte range: each call checks
 * that what it reads lies inside the range, so malformed or truncated input
 * is an error (-1), never a read past the end (fuzz/fuzz_onnx.c). Used to
 * read ONNX models (stage/import.c); pb.h is the write side. */
#ifndef TFE_PBR_H
#define TFE_PBR_H

#include <stddef.h>
#include <stdint.h>

typedef struct PbReader { const uint8_t *p, *end; } PbReader;

/* One field: its number and wire type; a varint's value in v, a fixed32 or
 * fixed64's bits in v; a length-delimited field's bytes in (p, n). */
typedef struct PbField {
    int field, wire;
    uint64_t v;
    const uint8_t *p;
    size_t n;
} PbField;

static inline PbReader pbr_init(const void *p, size_t n) { return (PbReader){(const uint8_t *)p, (const uint8_t *)p + n}; }
/* 1: a field read into f; 0: the end; -1: malformed (a bad tag, wire type or length) */
int pbr_next(PbReader *r, PbField *f);
/* a bare varint (packed repeated ints): 0, or -1 when malformed or at the end */
int pbr_varint(PbReader *r, uint64_t *v);

#endif
