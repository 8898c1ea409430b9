/* A small strict JSON parser (RFC 8259) for safetensors headers: a whole
 * document into a tree of nodes, with a message naming the byte where it
 * stops being JSON. Internal to libssae. */
#ifndef SSAE_JSON_H
#define SSAE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"

typedef enum {
  SSAE_JSON_NULL,
  SSAE_JSON_FALSE,
  SSAE_JSON_TRUE,
  SSAE_JSON_NUMBER,
  SSAE_JSON_STRING,
  SSAE_JSON_ARRAY,
  SSAE_JSON_OBJECT
} ssae_json_type;

typedef struct ssae_json_node {
  ssae_json_type type;
  /* Object members: the member's name (decoded, NUL-terminated). */
  const char *key;
  size_t key_len;
  /* Strings: decoded UTF-8, NUL-terminated (may hold embedded NULs: use
   * str_len). */
  const char *str;
  size_t str_len;
  /* Numbers: is_uint when the text is a non-negative integer that fits. */
  int is_uint;
  uint64_t uint_val;
  /* Arrays and objects: children, in document order. */
  size_t first, count;
  /* Next sibling (index into the tree's nodes), or 0 for none. */
  size_t next;
} ssae_json_node;

typedef struct ssae_json {
  ssae_json_node *nodes; /* nodes[0] is the root */
  size_t n_nodes;
  char *strbuf;
} ssae_json;

/* Parses text[0..len): exactly one value, whitespace around it allowed.
 * Duplicate object member names are refused. */
int ssae_json_parse(const char *text, size_t len, ssae_json *out, ssae_err *err);
void ssae_json_free(ssae_json *j);

#endif
