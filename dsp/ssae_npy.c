#include "ssae_npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_outfile.h"

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static int little_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

int ssae_npy_write_f32(const char *path, const float *data, const size_t *shape, int ndim,
                       ssae_err *err) {
  if (ndim < 1 || ndim > 8) return ssae_err_set(err, "%s: %d dimensions not supported", path, ndim);
  if (!little_endian())
    return ssae_err_set(err, "%s: .npy writing needs a little-endian host", path);
  char dict[256];
  int len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  size_t count = 1;
  for (int i = 0; i < ndim; i++) {
    len += snprintf(dict + len, sizeof dict - (size_t)len, "%zu,%s", shape[i],
                    i + 1 < ndim ? " " : "");
    count *= shape[i];
  }
  /* numpy writes (n,) for one dimension and (a, b) for more. */
  if (ndim > 1) len--;
  len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
  if (len < 0 || (size_t)len >= sizeof dict)
    return ssae_err_set(err, "%s: array shape too long for a .npy header", path);
  /* Header (magic, version, length, dict, padding, newline) is a multiple
   * of 64 bytes, as numpy writes it. */
  size_t total = 10 + (size_t)len + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)len + pad + 1;
  unsigned char head[10 + sizeof dict + 64];
  memcpy(head, magic, 6);
  head[6] = 1;
  head[7] = 0;
  head[8] = (unsigned char)(hlen & 0xff);
  head[9] = (unsigned char)(hlen >> 8);
  memcpy(head + 10, dict, (size_t)len);
  memset(head + 10 + len, ' ', pad);
  head[10 + hlen - 1] = '\n';
  /* The output discipline (temporary, checked, fsync, rename): a failed
   * write names the file and the reason and leaves no partial array. */
  ssae_outfile *f = ssae_outfile_open(path, err);
  if (!f) return -1;
  ssae_outfile_write(f, head, 10 + hlen);
  ssae_outfile_write(f, data, count * sizeof *data);
  return ssae_outfile_commit(f, err);
}

int ssae_npy_read_f32(const char *path, float **data, size_t *shape, int *ndim, ssae_err *err) {
  *data = NULL;
  *ndim = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return ssae_err_set(err, "%s: cannot open: %s", path, strerror(errno));
  unsigned char head[12];
  char *dict = NULL;
  float *d = NULL;
  size_t hlen = 0, count = 1;
  int nd = 0;
  if (fread(head, 1, 10, f) != 10 || memcmp(head, magic, 6)) goto bad;
  if (head[6] == 1) {
    hlen = head[8] | (size_t)head[9] << 8;
  } else if (head[6] == 2 || head[6] == 3) {
    if (fread(head + 10, 1, 2, f) != 2) goto bad;
    hlen = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
  } else {
    goto bad;
  }
  if (hlen > 1 << 20 || !(dict = malloc(hlen + 1))) goto bad;
  if (fread(dict, 1, hlen, f) != hlen) goto bad;
  dict[hlen] = '\0';
  if (!strstr(dict, "'descr': '<f4'") || !strstr(dict, "'fortran_order': False")) {
    free(dict);
    fclose(f);
    return ssae_err_set(err, "%s: not a C-order little-endian float32 array", path);
  }
  const char *p = strstr(dict, "'shape': (");
  if (!p) goto bad;
  p += 10;
  while (*p != ')') {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno || nd == 8) goto bad;
    shape[nd++] = (size_t)v;
    count *= (size_t)v;
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  if (count && !(d = malloc(sizeof *d * count))) goto bad;
  if (count && fread(d, sizeof *d, count, f) != count) goto bad;
  free(dict);
  fclose(f);
  *data = d;
  *ndim = nd;
  return 0;
bad:
  free(dict);
  free(d);
  fclose(f);
  return ssae_err_set(err, "%s: not a readable .npy file", path);
}
