/* fuzz_parse.c — libFuzzer target for the lexer and parser: the input bytes
 * are a program's source; parse_program must return a tree or report a
 * located error, never crash. The tree is also printed (ast_dump) so every
 * node is visited, and the REPL's "needs more lines?" check is run. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/internal.h"
#include "parser/ast.h"

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    devnull = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Source *src = source_new("<fuzz>", (const char *)data, size);
    ParseError pe;
    memset(&pe, 0, sizeof pe);
    Node *root = parse_program(src, &pe);
    if (root) {
        ast_dump(root, devnull);
        ast_free(root);
    } else {
        /* the error must be located inside the text (or at its end) */
        if (pe.loc.src && (pe.loc.off < 0 || (size_t)pe.loc.off > src->len)) abort();
        diag_print(devnull, pe.loc, pe.msg);
    }
    source_decref(src);
    /* parse_needs_more reads a NUL-terminated string: src->text is one, but
     * stop at an embedded NUL like the REPL's line reader does */
    char *z = malloc(size + 1);
    memcpy(z, data, size);
    z[size] = 0;
    (void)parse_needs_more(z);
    free(z);
    return 0;
}
