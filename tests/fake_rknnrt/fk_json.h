/*
 * fk_json.h -- a small JSON reader for the fake librknnrt (tests only).
 *
 * Parses a complete JSON text into a tree of fk_json values.  Strings are decoded (the usual
 * escapes, \uXXXX as UTF-8); numbers are doubles.  Nesting is limited so that a hostile file
 * cannot exhaust the stack.  Everything is freed with fk_json_free().
 */
#ifndef FK_JSON_H
#define FK_JSON_H

#include <stddef.h>

typedef enum { FK_J_NULL, FK_J_BOOL, FK_J_NUM, FK_J_STR, FK_J_ARR, FK_J_OBJ } fk_json_type;

typedef struct fk_json {
    fk_json_type type;
    double num;             /* FK_J_NUM, FK_J_BOOL (0/1) */
    int is_int;             /* FK_J_NUM written without fraction or exponent */
    char* str;              /* FK_J_STR (NUL-terminated) */
    int n;                  /* FK_J_ARR / FK_J_OBJ: number of items */
    struct fk_json** items; /* FK_J_ARR / FK_J_OBJ values */
    char** keys;            /* FK_J_OBJ keys */
} fk_json;

/* Parses len bytes; NULL on a syntax error (err gets a short description). */
fk_json* fk_json_parse(const char* text, size_t len, char* err, size_t err_size);
void fk_json_free(fk_json* v);
/* Member of an object, or NULL (also when v is not an object). */
const fk_json* fk_json_get(const fk_json* v, const char* key);
/* Item of an array, or NULL. */
const fk_json* fk_json_at(const fk_json* v, int i);

#endif
